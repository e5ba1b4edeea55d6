// DeepSeek-V3 and Kimi K2 (DeepseekV3ForCausalLM; Kimi K2 says model_type "kimi_k2"): multi-head latent
// attention with or without q_lora_rank, rope interleaved unless rope_interleave is false, yarn with its
// mscale² on the softmax scale; noaux_tc routing with groups, shared experts, first_k_dense_replace dense
// layers; multi-token-prediction layers stored but not used.
#include "arch/deepseek_family.h"

namespace sy {

ModelDesc describe_deepseek_v3(const ConfigJson& cfg) {
  // Defaults are those of transformers' DeepseekV3Config.
  return describe_mla_model(cfg, {.architecture = "DeepseekV3ForCausalLM",
                                  .family = "DeepSeek-V3",
                                  .moe = {.n_routed_experts = 256,
                                          .moe_intermediate_size = 2048,
                                          .intermediate_size = 18432,
                                          .first_k_dense_replace = 3,
                                          .n_group = 8,
                                          .topk_group = 4,
                                          .routed_scaling_factor = 2.5},
                                  .q_lora_rank = 1536,
                                  .qk_nope_head_dim = 128,
                                  .v_head_dim = 128,
                                  .rms_norm_eps = 1e-6,
                                  .max_position_embeddings = 4096,
                                  .rope_interleave_default = true,
                                  .reads_rope_interleave = true});
}

}  // namespace sy
