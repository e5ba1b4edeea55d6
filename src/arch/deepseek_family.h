// What the DeepSeek-V3-derived architectures share (DeepSeek-V3 / Kimi K2, GLM-4.5, DeepSeek-V3.2, GLM-5):
// the MoE block (sigmoid noaux_tc routing, groups, shared experts, which layers are dense) and the MLA
// description that DeepSeek-V3, V3.2 and GLM-5 configure with their own defaults and indexer traits.
#pragma once

#include "arch/archs.h"

namespace sy {

// transformers' config defaults of one family, where they differ.
struct DeepseekMoeDefaults {
  int64_t n_routed_experts = 256;
  int64_t moe_intermediate_size = 2048;
  int64_t intermediate_size = 18432;
  int64_t first_k_dense_replace = 3;
  int64_t n_group = 8;
  int64_t topk_group = 4;
  double routed_scaling_factor = 2.5;
};

// Reads n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts, norm_topk_prob,
// n_group, topk_group, routed_scaling_factor, intermediate_size, num_nextn_predict_layers, and the dense
// layers from mlp_layer_types when present (DeepSeek-V3.2, GLM-5 in transformers' form) or else
// first_k_dense_replace and moe_layer_freq. Needs d.n_layers.
void read_deepseek_moe(const ConfigJson& cfg, ModelDesc& d, const DeepseekMoeDefaults& defaults);

// An MLA architecture as data: its HF class, transformers' defaults, and whether it has the indexer.
struct MlaFamily {
  const char* architecture = "";
  const char* family = "";
  DeepseekMoeDefaults moe;
  int64_t q_lora_rank = 1536;
  int64_t qk_nope_head_dim = 128;
  int64_t v_head_dim = 128;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 4096;
  bool rope_interleave_default = true;  // DeepSeek-V3's rope_interleave; V3.2 and GLM-5 always interleave
  bool reads_rope_interleave = true;    // the config key exists for the class (DeepSeek-V3 only)
  bool sparse_indexer = false;
  int64_t index_n_heads = 64;
  bool indexer_rope_interleaved = false;  // GLM-5: interleaved; DeepSeek-V3.2: rotate-half
  bool indexer_sharing = false;           // GLM-5: indexer_types "shared" layers reuse the previous choice
};

ModelDesc describe_mla_model(const ConfigJson& cfg, const MlaFamily& family);

}  // namespace sy
