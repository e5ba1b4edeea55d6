// GLM-5 (GlmMoeDsaForCausalLM): DeepSeek-V3.2's MLA with the sparse-attention indexer, its rope interleaved,
// and cross-layer sharing: layers whose indexer_types entry is "shared" reuse the top-k keys chosen by the
// previous "full" layer and carry no indexer weights.
#include "arch/deepseek_family.h"

namespace sy {

ModelDesc describe_glm_moe_dsa(const ConfigJson& cfg) {
  // Defaults are those of transformers' GlmMoeDsaConfig.
  return describe_mla_model(cfg, {.architecture = "GlmMoeDsaForCausalLM",
                                  .family = "GLM-5",
                                  .moe = {.n_routed_experts = 256,
                                          .moe_intermediate_size = 2048,
                                          .intermediate_size = 12288,
                                          .first_k_dense_replace = 3,
                                          .n_group = 1,
                                          .topk_group = 1,
                                          .routed_scaling_factor = 2.5},
                                  .q_lora_rank = 2048,
                                  .qk_nope_head_dim = 192,
                                  .v_head_dim = 256,
                                  .rms_norm_eps = 1e-5,
                                  .max_position_embeddings = 202752,
                                  .rope_interleave_default = true,
                                  .reads_rope_interleave = false,
                                  .sparse_indexer = true,
                                  .index_n_heads = 32,
                                  .indexer_rope_interleaved = true,
                                  .indexer_sharing = true});
}

}  // namespace sy
