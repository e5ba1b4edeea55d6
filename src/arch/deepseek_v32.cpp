// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3 with the sparse-attention indexer in every layer
// (index_n_heads heads of index_head_dim, rotate-half rope on their first qk_rope_head_dim dims, a
// LayerNorm'd key cached per token), each query attending only to its top index_topk keys.
#include "arch/deepseek_family.h"

namespace sy {

ModelDesc describe_deepseek_v32(const ConfigJson& cfg) {
  // Defaults are those of transformers' DeepseekV32Config.
  return describe_mla_model(cfg, {.architecture = "DeepseekV32ForCausalLM",
                                  .family = "DeepSeek-V3.2",
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
                                  .max_position_embeddings = 163840,
                                  .rope_interleave_default = true,
                                  .reads_rope_interleave = false,
                                  .sparse_indexer = true,
                                  .index_n_heads = 64,
                                  .indexer_rope_interleaved = false,
                                  .indexer_sharing = false});
}

}  // namespace sy
