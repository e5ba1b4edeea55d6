// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2, DeepSeek-V3.2, GLM-5) and its KV layout.
//
// The cache holds, per token and layer, one row [kv_lora_rank | qk_rope_head_dim]: the compressed latent
// after kv_a_layernorm and the rotated rope key shared by all heads. It is never expanded per head. The
// attention runs in the absorbed form: each head's q_nope goes through kv_b_proj's K part into latent
// space, scores are q_latent·latent + q_rope·k_rope, the output is a mix of latents taken back through
// kv_b_proj's V part. With the sparse indexer (DSA), each query attends only to the keys it selected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/blocks/attention.h"
#include "model/blocks/indexer.h"
#include "model/blocks/step.h"
#include "model/model.h"
#include "model/weights.h"

namespace sy {

struct MlaConfig {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (DeepSeek-V2-Lite form)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleaved = true;          // DeepSeek's rope_interleave: pairs (2i, 2i+1) of the rope dims
  bool attention_bias = false;           // biases on q_a_proj, kv_a_proj_with_mqa and o_proj
  float softmax_scale = 1.0f;            // qk_head_dim^-0.5, times mscale² under yarn with mscale_all_dim
  float latent_norm_eps = 1e-6f;         // q_a_layernorm and kv_a_layernorm
  std::optional<IndexerConfig> indexer;  // DeepSeek-V3.2 / GLM-5 sparse attention
};

struct MlaWeights {
  Matrix q_proj;                  // [n_heads * (nope + rope), hidden], without q_lora
  Matrix q_a_proj;                // [q_lora_rank, hidden]
  WeightPtr q_a_bias = nullptr;   // [q_lora_rank] or null
  WeightPtr q_a_norm = nullptr;   // [q_lora_rank]
  Matrix q_b_proj;                // [n_heads * (nope + rope), q_lora_rank]
  Matrix kv_a_proj;               // [kv_lora_rank + rope, hidden]
  WeightPtr kv_a_bias = nullptr;  // [kv_lora_rank + rope] or null
  WeightPtr kv_a_norm = nullptr;  // [kv_lora_rank]
  WeightPtr kv_b_proj = nullptr;  // [n_heads, nope + v_head_dim, kv_lora_rank]: per head K rows, then V rows
  Matrix o_proj;                  // [hidden, n_heads * v_head_dim]
  WeightPtr o_bias = nullptr;     // [hidden] or null
  IndexerWeights indexer;
  KvQuant kv_quant;  // how the layer's cache holds its rows (model/kv_scales.h)
};

// Binds the published names under `prefix` (e.g. "model.layers.3.self_attn."): q_a_proj, q_a_layernorm,
// q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj, and indexer.* with DSA.
MlaWeights bind_mla(WeightLoader& loader, const std::string& prefix, const MlaConfig& c);
// The attention of the MLA model `d` describes, for layer `layer` (whether its indexer is its own).
MlaConfig mla_config(const ModelDesc& d, int64_t layer);

// The cache rows MLA needs: one head of kv_lora_rank + rope dims as "K", no V, and the indexer's keys.
KvGeometry mla_kv_geometry(const MlaConfig& c, int64_t n_layers);

// What one MLA layer costs a forward pass (the basis of ReadCost): weight elements read, norms included;
// cache elements per token; Σ over heads of the dims each cached key is multiplied with (scores and values).
struct MlaCost {
  double weight_elems = 0;
  double kv_elems_per_token = 0;     // the latent row, in the KV dtype
  double index_elems_per_token = 0;  // the indexer's key, in the weight dtype
  int64_t heads_x_dims = 0;
};
MlaCost mla_cost(const MlaConfig& c);

// out[T, hidden] = MLA(x[T, hidden]); writes this step's latent rows to `cache` ([n_slots, kv_lora + rope])
// and, with DSA, the indexer keys to `index_cache` first.
void mla_attention_forward(const StepContext& step, Scratch& scratch, const MlaConfig& c, const MlaWeights& w,
                           const RopeView& rope, const float* x, float* out, void* cache, void* index_cache);

}  // namespace sy
