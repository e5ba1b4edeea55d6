// quantization_config as the formats define it (../shared/quant-formats.md): which forms are read, and
// which modules their targets and ignore lists cover, with the matching rules of the formats' own code
// (compressed-tensors: "re:" patterns matched from the start of the module name, exact names, the class
// "Linear"; transformers' FP8: patterns from the start, parent modules, name ends), on Kimi K2.6's and
// Qwen3-FP8-style lists.
#include <gtest/gtest.h>

#include <string>

#include "arch/quant.h"
#include "base/check.h"

namespace sy {
namespace {

WeightQuant quant_of(const std::string& quantization_config) {
  return read_quant(ConfigJson::parse(R"({"quantization_config": )" + quantization_config + "}", "config.json"));
}

std::string kimi(const std::string& weights, const std::string& extra = "") {
  return R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
      "weights": )" +
         weights + R"(}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
               "re:.*lm_head.*", "re:.*vision_tower.*"])" +
         extra + "}";
}

const std::string kInt4Group32 = R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
    "group_size": 32, "dynamic": false, "actorder": null, "observer": "minmax"})";

TEST(Quant, KimiK2IgnoreListLeavesOnlyTheRoutedExpertsInt4) {
  const WeightQuant q = quant_of(kimi(kInt4Group32));
  ASSERT_TRUE(q.int4_group);
  EXPECT_FALSE(q.block_fp8);
  EXPECT_EQ(q.group_size, 32);
  EXPECT_TRUE(q.quantises("model.layers.3.mlp.experts.17.down_proj.weight"));
  EXPECT_TRUE(q.quantises("model.layers.60.mlp.experts.383.gate_proj.weight"));
  EXPECT_FALSE(q.quantises("model.layers.3.mlp.shared_experts.down_proj.weight"));
  EXPECT_FALSE(q.quantises("model.layers.0.mlp.down_proj.weight"));  // the dense layer
  EXPECT_FALSE(q.quantises("model.layers.3.self_attn.kv_b_proj.weight"));
  EXPECT_FALSE(q.quantises("lm_head.weight"));
  // Bytes: packed words of eight values, bf16 scales per group of 32.
  EXPECT_EQ(q.stored_bytes("model.layers.3.mlp.experts.0.down_proj.weight", 7168, 2048, 2),
            7168 * 256 * 4 + 7168 * 64 * 2);
  EXPECT_EQ(q.stored_bytes("lm_head.weight", 163840, 7168, 2), int64_t{163840} * 7168 * 2);
}

TEST(Quant, PatternsMatchFromTheStartAndNamesExactly) {
  const WeightQuant q =
      quant_of(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["re:model\\.layers\\.1\\..*"], "weights": )" +
               kInt4Group32 + R"(}}, "ignore": ["model.layers.1.mlp.experts.0.up_proj", "re:experts"]})");
  ASSERT_TRUE(q.int4_group);
  EXPECT_TRUE(q.quantises("model.layers.1.mlp.experts.1.up_proj.weight"));
  EXPECT_FALSE(q.quantises("model.layers.2.mlp.experts.1.up_proj.weight"));  // not a target
  EXPECT_FALSE(q.quantises("model.layers.1.mlp.experts.0.up_proj.weight"));  // ignored by name
  // "re:experts" is matched from the start of the name (Python's re.match), so it ignores nothing here.
  EXPECT_TRUE(q.quantises("model.layers.1.mlp.experts.0.down_proj.weight"));
}

TEST(Quant, Fp8IgnoreListsMatchAsTransformersAppliesThem) {
  const WeightQuant q = quant_of(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
    "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "mlp.gate"],
    "ignored_layers": ["model.layers.0.self_attn"]})");
  ASSERT_TRUE(q.block_fp8);
  EXPECT_TRUE(q.quantises("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_FALSE(q.quantises("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(q.quantises("lm_head.weight"));
  EXPECT_FALSE(q.quantises("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(q.quantises("model.layers.1.mlp.gate_proj.weight"));  // "mlp.gate" is inside, not at the end
  // Matched from the start only up to a module boundary, as transformers 5.24's should_convert_module.
  const WeightQuant b = quant_of(R"({"quant_method": "fp8", "weight_block_size": [128, 128],
    "modules_to_not_convert": ["model.layers.1", "model.layers.2.mlp.gate", "model.layers.3.*experts"]})");
  EXPECT_FALSE(b.quantises("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_TRUE(b.quantises("model.layers.11.self_attn.q_proj.weight"));
  EXPECT_FALSE(b.quantises("model.layers.2.mlp.gate.weight"));
  EXPECT_TRUE(b.quantises("model.layers.2.mlp.gate_proj.weight"));
  EXPECT_FALSE(b.quantises("model.layers.3.mlp.experts.7.up_proj.weight"));
  EXPECT_TRUE(b.quantises("model.layers.3.mlp.shared_experts_x.up_proj.weight"));
  EXPECT_EQ(q.stored_bytes("model.layers.1.self_attn.q_proj.weight", 300, 200, 2), 300 * 200 + 3 * 2 * 4);
  EXPECT_EQ(q.stored_bytes("lm_head.weight", 300, 200, 2), 300 * 200 * 2);
}

TEST(Quant, OtherSchemesAreRecordedByNameOnly) {
  // 8-bit, asymmetric, activation-ordered, channel-wise, and activation-quantised schemes.
  for (const std::string& weights :
       {std::string(R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32})"),
        std::string(R"({"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 32})"),
        std::string(R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32,
                        "actorder": "group"})"),
        std::string(R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"})")}) {
    const WeightQuant q = quant_of(kimi(weights));
    EXPECT_EQ(q.method, "compressed-tensors") << weights;
    EXPECT_FALSE(q.int4_group) << weights;
    EXPECT_FALSE(q.quantises("model.layers.3.mlp.experts.0.down_proj.weight")) << weights;
  }
  const WeightQuant w4a8 = quant_of(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": )" +
                                    kInt4Group32 + R"(, "input_activations": {"num_bits": 8}}}})");
  EXPECT_FALSE(w4a8.int4_group);
  EXPECT_FALSE(quant_of(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"})").int4_group);
}

TEST(Quant, MalformedConfigsSayWhat) {
  const auto error = [](const std::string& cfg) {
    try {
      quant_of(cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(kimi(kInt4Group32, R"(, "ignore": ["re:(unclosed"])")).find("re:(unclosed"), std::string::npos);
  EXPECT_NE(error(R"({"quant_method": "compressed-tensors", "format": "pack-quantized"})").find("config_groups"),
            std::string::npos);
  EXPECT_NE(error(R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status":
    "frozen", "config_groups": {"g": {"targets": ["Linear"], "weights": )" +
                  kInt4Group32 + "}}}")
                .find("frozen"),
            std::string::npos);
  EXPECT_NE(error(kimi(R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 0})"))
                .find("group_size"),
            std::string::npos);
}

}  // namespace
}  // namespace sy
