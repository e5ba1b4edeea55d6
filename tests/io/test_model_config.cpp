// ConfigJson: typed access with errors naming the key, and rope settings in both spellings.
#include <gtest/gtest.h>

#include <functional>

#include "base/check.h"
#include "io/model_config.h"

namespace sy {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, PublishedRopeForm) {
  const auto c = ConfigJson::parse(R"({"architectures": ["MixtralForCausalLM"], "rope_theta": 1000000.0,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 16}})",
                                   "c.json");
  const RopeConfig r = c.rope(10000.0);
  EXPECT_EQ(r.type, "yarn");
  EXPECT_EQ(r.theta, 1e6);
  EXPECT_EQ(r.factor, 4.0);
  EXPECT_EQ(r.original_max_position, 32);
  EXPECT_EQ(r.beta_fast, 16.0);
  EXPECT_EQ(c.architecture(), "MixtralForCausalLM");
}

TEST(ModelConfig, Transformers5RopeParametersForm) {
  const auto c = ConfigJson::parse(R"({"rope_parameters": {"rope_type": "linear", "rope_theta": 50000.0,
      "factor": 2.0, "partial_rotary_factor": 0.5}})",
                                   "c.json");
  const RopeConfig r = c.rope(10000.0);
  EXPECT_EQ(r.type, "linear");
  EXPECT_EQ(r.theta, 50000.0);
  EXPECT_EQ(r.factor, 2.0);
  EXPECT_EQ(r.partial_rotary_factor, 0.5);
}

TEST(ModelConfig, DefaultsWhenAbsentOrNull) {
  const auto c = ConfigJson::parse(R"({"rope_scaling": null, "sliding_window": null})", "c.json");
  EXPECT_EQ(c.rope(1e6).type, "default");
  EXPECT_EQ(c.rope(1e6).theta, 1e6);
  EXPECT_EQ(c.get_optional_int("sliding_window"), 0);
  EXPECT_EQ(c.get_int("num_experts", 128, 0), 128);
  EXPECT_TRUE(c.get_int_list("mlp_only_layers").empty());
}

TEST(ModelConfig, ErrorsNameFileKeyAndValue) {
  const auto c = ConfigJson::parse(R"({"hidden_size": -3, "num_experts": "many", "norm_topk_prob": 1,
      "mlp_only_layers": [1, "x"]})",
                                   "dir/config.json");
  std::string e = error_of([&] { c.get_int("hidden_size", 1); });
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
  EXPECT_NE(e.find("-3"), std::string::npos) << e;
  e = error_of([&] { c.get_int("num_experts", 8, 0); });
  EXPECT_NE(e.find("\"many\""), std::string::npos) << e;
  e = error_of([&] { c.get_bool("norm_topk_prob", false); });
  EXPECT_NE(e.find("norm_topk_prob"), std::string::npos) << e;
  e = error_of([&] { c.get_int_list("mlp_only_layers"); });
  EXPECT_NE(e.find("mlp_only_layers"), std::string::npos) << e;
  e = error_of([&] { c.get_int("vocab_size"); });
  EXPECT_NE(e.find("required key 'vocab_size'"), std::string::npos) << e;
  e = error_of([&] { c.architecture(); });
  EXPECT_NE(e.find("architectures"), std::string::npos) << e;
}

TEST(ModelConfig, MalformedJsonIsNamed) {
  const std::string e = error_of([] { ConfigJson::parse("{\"a\": ", "m/config.json"); });
  EXPECT_NE(e.find("m/config.json is not valid JSON"), std::string::npos) << e;
  EXPECT_NE(error_of([] { ConfigJson::parse("[1]", "x.json"); }), "");
}

}  // namespace
}  // namespace sy
