// Model descriptions from config.json for every architecture, checked against the published parameter
// counts of the real models and against the defaults of transformers' config classes (5.24) where a
// config leaves a key out.
#include <gtest/gtest.h>

#include "base/check.h"
#include "planner/planner_test_util.h"

namespace sy {
namespace {

using test::planner_config;

// The message describe_model throws for this config text; empty when it accepts it.
std::string error_of(const std::string& text) {
  try {
    describe_model(ConfigJson::parse(text, "c.json"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

double params_of(const std::string& name, bool active) {
  const ModelDesc s = load_model_desc(planner_config(name));
  const WeightTable w = weights_from_config(s);
  return static_cast<double>(active ? w.active_per_token(s).params : w.total().params - w.nextn.params);
}

TEST(ModelDesc, KimiK2) {
  const ModelDesc s = load_model_desc(planner_config("kimi_k2"));
  EXPECT_EQ(s.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(s.model_type, "kimi_k2");
  EXPECT_EQ(s.n_layers, 61);
  EXPECT_EQ(s.hidden, 7168);
  EXPECT_EQ(s.vocab, 163840);
  EXPECT_FALSE(s.tie_embeddings);
  EXPECT_EQ(s.attn.kind, AttentionKind::mla);
  EXPECT_EQ(s.attn.n_heads, 64);
  EXPECT_EQ(s.attn.q_lora_rank, 1536);
  EXPECT_EQ(s.attn.kv_lora_rank, 512);
  EXPECT_EQ(s.attn.qk_rope_head_dim, 64);
  EXPECT_EQ(s.attn.qk_nope_head_dim, 128);
  EXPECT_EQ(s.attn.v_head_dim, 128);
  EXPECT_EQ(s.moe.n_experts, 384);
  EXPECT_EQ(s.moe.top_k, 8);
  EXPECT_EQ(s.moe.inter, 2048);
  EXPECT_EQ(s.moe.shared_inter, 2048);
  EXPECT_EQ(s.dense_inter, 18432);
  EXPECT_EQ(s.dense_layer_count(), 1);
  EXPECT_EQ(s.layer_ffn[0], FfnKind::dense);
  EXPECT_EQ(s.moe_layer_count(), 60);
  EXPECT_TRUE(s.quant.block_fp8);
  EXPECT_EQ(s.quant.block_rows, 128);
  // MLA caches the latent and the rope key once per token, whatever tp is.
  EXPECT_EQ(s.kv_bytes_per_token_layer(1, 2), (512 + 64) * 2);
  EXPECT_EQ(s.kv_bytes_per_token_layer(8, 2), (512 + 64) * 2);
  // Published: 1.04 T total, 32 B activated.
  EXPECT_NEAR(params_of("kimi_k2", false) / 1e12, 1.03, 0.015);
  EXPECT_NEAR(params_of("kimi_k2", true) / 1e9, 32.9, 1.0);
}

TEST(ModelDesc, Qwen3_30B_A3B) {
  const ModelDesc s = load_model_desc(planner_config("qwen3_30b_a3b"));
  EXPECT_EQ(s.attn.kind, AttentionKind::gqa);
  EXPECT_EQ(s.attn.n_heads, 32);
  EXPECT_EQ(s.attn.kv_heads, 4);
  EXPECT_EQ(s.attn.head_dim, 128);
  EXPECT_TRUE(s.attn.qk_norm);
  EXPECT_EQ(s.moe_layer_count(), 48);
  EXPECT_EQ(s.moe.n_experts, 128);
  EXPECT_EQ(s.moe.inter, 768);
  EXPECT_EQ(s.moe.shared_inter, 0);
  // GQA: 2·ceil(kv_heads/tp)·head_dim·bytes; tp 8 replicates each of the 4 KV heads on 2 ranks.
  EXPECT_EQ(s.kv_bytes_per_token_layer(1, 2), 2 * 4 * 128 * 2);
  EXPECT_EQ(s.kv_bytes_per_token_layer(8, 2), 2 * 1 * 128 * 2);
  EXPECT_NEAR(params_of("qwen3_30b_a3b", false) / 1e9, 30.5, 0.1);  // published 30.5 B
  EXPECT_NEAR(params_of("qwen3_30b_a3b", true) / 1e9, 3.3, 0.1);    // published 3.3 B
}

TEST(ModelDesc, Mixtral8x7B) {
  const ModelDesc s = load_model_desc(planner_config("mixtral_8x7b"));
  EXPECT_EQ(s.moe.n_experts, 8);
  EXPECT_EQ(s.moe.top_k, 2);
  EXPECT_EQ(s.moe.inter, 14336);
  EXPECT_EQ(s.attn.head_dim, 128);
  EXPECT_EQ(s.attn.kv_heads, 8);
  EXPECT_NEAR(params_of("mixtral_8x7b", false) / 1e9, 46.7, 0.1);  // published 46.7 B
  EXPECT_NEAR(params_of("mixtral_8x7b", true) / 1e9, 12.9, 0.1);   // published 12.9 B
}

TEST(ModelDesc, Glm45) {
  const ModelDesc s = load_model_desc(planner_config("glm4_5"));
  EXPECT_EQ(s.attn.kind, AttentionKind::gqa);
  EXPECT_TRUE(s.attn.qkv_bias);
  EXPECT_FALSE(s.attn.o_bias);
  EXPECT_EQ(s.dense_layer_count(), 3);
  EXPECT_EQ(s.moe_layer_count(), 89);
  EXPECT_EQ(s.nextn_layers, 1);
  // Published: 355 B total (with the MTP layer), 32 B active.
  EXPECT_NEAR(params_of("glm4_5", false) / 1e9, 353, 4);
  EXPECT_NEAR(params_of("glm4_5", true) / 1e9, 33, 1.5);
}

TEST(ModelDesc, DeepSeekV32) {
  const ModelDesc s = load_model_desc(planner_config("deepseek_v32"));
  EXPECT_EQ(s.family, "DeepSeek-V3.2");
  EXPECT_EQ(s.attn.index_n_heads, 64);
  EXPECT_EQ(s.attn.index_head_dim, 128);
  EXPECT_EQ(s.dense_layer_count(), 3);
  EXPECT_EQ(s.kv_bytes_per_token_layer(4, 2), (512 + 64 + 128) * 2);
  // DeepSeek-V3: 671 B without the MTP module, 37 B activated.
  EXPECT_NEAR(params_of("deepseek_v32", false) / 1e9, 671, 6);
  EXPECT_NEAR(params_of("deepseek_v32", true) / 1e9, 37.5, 1.5);
}

TEST(ModelDesc, GlmMoeDsaAndDefaults) {
  const ConfigJson cfg = ConfigJson::parse(R"({"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
      "hidden_size": 256, "num_hidden_layers": 4, "vocab_size": 1000, "num_attention_heads": 8,
      "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
      "index_n_heads": 4, "index_head_dim": 16, "index_topk": 64, "n_routed_experts": 16, "num_experts_per_tok": 4,
      "moe_intermediate_size": 64, "n_shared_experts": 2, "intermediate_size": 512, "first_k_dense_replace": 1,
      "dtype": "float16"})",
                                           "glm5.json");
  const ModelDesc s = describe_model(cfg);
  EXPECT_EQ(s.family, "GLM-5");
  EXPECT_EQ(s.attn.kind, AttentionKind::mla);
  EXPECT_EQ(s.attn.index_n_heads, 4);
  EXPECT_EQ(s.moe.shared_inter, 128);  // two shared experts fused
  EXPECT_EQ(s.dtype, DType::f16);
  EXPECT_EQ(s.layer_ffn, (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::moe, FfnKind::moe}));
  const ModelDesc three = s.truncated(3);
  EXPECT_EQ(three.n_layers, 3);
  EXPECT_EQ(three.layer_ffn.size(), 3u);
}

TEST(ModelDesc, Qwen3SparseStepAndMlpOnlyLayers) {
  const ConfigJson cfg = ConfigJson::parse(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 6, "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2,
      "num_local_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3]})",
                                           "q.json");
  const ModelDesc s = describe_model(cfg);
  EXPECT_EQ(s.moe.n_experts, 4);  // transformers 5 spelling
  // Sparse where (i + 1) % 2 == 0 and i is not in mlp_only_layers: 1 and 5.
  EXPECT_EQ(s.layer_ffn, (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::dense, FfnKind::dense,
                                               FfnKind::dense, FfnKind::moe}));
}

// Keys a config leaves out take transformers' defaults, the same for the loader and the planner (they
// read this one description): GLM-4.5's head_dim is hidden / heads (Glm4MoeAttention's getattr fallback;
// the planner once said 128), GLM-5's MLA sizes are GlmMoeDsaConfig's, an absent q_lora_rank is the
// class default and a null one a plain q_proj, and mlp_layer_types decides the dense layers when given.
TEST(ModelDesc, AbsentKeysTakeTransformersDefaults) {
  const ModelDesc glm45 = describe_model(ConfigJson::parse(R"({"architectures": ["Glm4MoeForCausalLM"],
      "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4,
      "num_key_value_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2})",
                                                           "glm45.json"));
  EXPECT_EQ(glm45.attn.head_dim, 64);
  EXPECT_EQ(glm45.attn.rotary_dim, 32);                                              // partial_rotary_factor 0.5
  EXPECT_EQ(glm45.layer_ffn, (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe}));  // first_k_dense_replace 1

  const std::string glm5 = R"({"architectures": ["GlmMoeDsaForCausalLM"], "hidden_size": 256,
      "num_hidden_layers": 4, "vocab_size": 100, "num_attention_heads": 4, "n_routed_experts": 4,
      "num_experts_per_tok": 2, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "index_head_dim": 16)";
  const ModelDesc g = describe_model(ConfigJson::parse(glm5 + "}", "glm5.json"));
  EXPECT_EQ(g.attn.qk_nope_head_dim, 192);
  EXPECT_EQ(g.attn.v_head_dim, 256);
  EXPECT_EQ(g.attn.q_lora_rank, 2048);
  EXPECT_EQ(g.attn.index_n_heads, 32);
  EXPECT_EQ(g.norm_eps, 1e-5);
  EXPECT_EQ(g.layer_ffn, (std::vector<FfnKind>{FfnKind::dense, FfnKind::dense, FfnKind::dense, FfnKind::moe}));
  // GlmMoeDsaConfig's own form lists the layer kinds; first_k_dense_replace is then not read.
  const ModelDesc listed = describe_model(ConfigJson::parse(
      glm5 + R"(, "first_k_dense_replace": 3, "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]})",
      "glm5.json"));
  EXPECT_EQ(listed.layer_ffn, (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::moe, FfnKind::moe}));
  EXPECT_EQ(listed.dense_layer_count(), 1);

  const std::string v3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 256,
      "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4, "n_routed_experts": 8, "n_group": 2,
      "topk_group": 1, "num_experts_per_tok": 2)";
  EXPECT_EQ(describe_model(ConfigJson::parse(v3 + "}", "v3.json")).attn.q_lora_rank, 1536);
  EXPECT_EQ(describe_model(ConfigJson::parse(v3 + R"(, "q_lora_rank": null})", "v3.json")).attn.q_lora_rank, 0);
}

// What the loader refuses, the description refuses, so inspect and plan refuse it too.
TEST(ModelDesc, UnsupportedVariantsAreRefusedWithTheKey) {
  const std::string qwen = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4)";
  EXPECT_EQ(error_of(qwen + "}"), "");
  EXPECT_NE(error_of(qwen + R"(, "hidden_act": "gelu"})").find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_NE(error_of(qwen + R"(, "use_sliding_window": true})").find("use_sliding_window"), std::string::npos);
  EXPECT_NE(error_of(qwen + R"(, "num_key_value_heads": 3})").find("multiple of num_key_value_heads 3"),
            std::string::npos);
  const std::string v3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 256,
      "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4, "n_routed_experts": 16, "n_group": 2,
      "topk_group": 1)";
  EXPECT_EQ(error_of(v3 + "}"), "");  // the default num_experts_per_tok 8 fills the one group allowed
  EXPECT_NE(error_of(v3 + R"(, "scoring_func": "softmax"})").find("scoring_func 'softmax'"), std::string::npos);
  EXPECT_NE(error_of(v3 + R"(, "num_experts_per_tok": 9})").find("exceeds the 8 experts of topk_group 1"),
            std::string::npos);
}

TEST(ModelDesc, UnknownArchitectureOrDtypeIsAnError) {
  EXPECT_NE(error_of(R"({"architectures": ["LlamaForCausalLM"]})").find("is not supported; supported:"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
      "vocab_size": 8, "num_attention_heads": 2, "torch_dtype": "int4"})")
                .find("dtype 'int4'"),
            std::string::npos);
  EXPECT_THROW(weights_from_config(ModelDesc{.quant = {.method = "awq"}}), Error);
}

}  // namespace
}  // namespace sy
