// GLM-4.5 (Glm4MoeForCausalLM): GQA with q/k/v biases (attention_bias; o_proj never has one), optional
// per-head q/k RMSNorm (use_qk_norm), rotate-half rope over the first partial_rotary_factor of each head;
// DeepSeek-V3's MoE block (sigmoid noaux_tc routing, shared experts, first_k_dense_replace dense layers);
// multi-token-prediction layers stored but not used.
#include "arch/deepseek_family.h"
#include "base/check.h"

namespace sy {

ModelDesc describe_glm4_moe(const ConfigJson& cfg) {
  // Defaults are those of transformers' Glm4MoeConfig.
  ModelDesc d;
  d.family = "GLM-4.5";
  read_common(cfg, d, 131072, 1e-5);
  read_gqa(cfg, d, 8, 10000.0);
  // Glm4MoeConfig defaults partial_rotary_factor to 0.5 when a config does not say (an explicit 1.0 inside
  // rope_parameters cannot be told from absent here; no released GLM-4.5 config has it).
  if (!cfg.has("partial_rotary_factor") && d.rope.partial_rotary_factor == 1.0) {
    d.rope.partial_rotary_factor = 0.5;
    d.attn.rotary_dim = d.attn.head_dim / 2;
    SY_CHECK(d.attn.rotary_dim > 0 && d.attn.rotary_dim % 2 == 0,
             "{}: head_dim {} x partial_rotary_factor 0.5 gives rotary dim {}; it must be even and positive",
             cfg.source(), d.attn.head_dim, d.attn.rotary_dim);
  }
  d.attn.qkv_bias = cfg.get_bool("attention_bias", false);
  d.attn.o_bias = false;
  d.attn.qk_norm = cfg.get_bool("use_qk_norm", false);
  read_deepseek_moe(cfg, d,
                    {.n_routed_experts = 128,
                     .moe_intermediate_size = 1408,
                     .intermediate_size = 10944,
                     .first_k_dense_replace = 1,
                     .n_group = 1,
                     .topk_group = 1,
                     .routed_scaling_factor = 1.0});
  return d;
}

}  // namespace sy
