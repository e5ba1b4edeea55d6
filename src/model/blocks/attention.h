// Grouped-query attention with rotary embeddings over the paged KV cache (Mixtral, Qwen3-MoE,
// GLM-4.5): q/k/v projections (optional bias), optional per-head q/k RMSNorm before rope, o projection.
#pragma once

#include <cstdint>
#include <string>

#include "arch/model_desc.h"
#include "model/blocks/step.h"
#include "model/weights.h"

namespace sy {

struct GqaAttentionConfig {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // <= head_dim (partial rotary)
  bool rope_interleaved = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over each head's q and k before rope
  float qk_norm_eps = 1e-6f;
  int64_t sliding_window = 0;  // 0: full causal attention
};

struct GqaAttentionWeights {
  // q, k and v projections stacked in one allocation, [(n_heads + 2 kv_heads) * head_dim, hidden] (and
  // their biases likewise), so that a one-token step reads them with a single matrix-vector product.
  Matrix qkv;
  WeightPtr qkv_bias = nullptr;
  Matrix q_proj;               // [n_heads * head_dim, hidden], inside qkv
  Matrix k_proj;               // [kv_heads * head_dim, hidden]
  Matrix v_proj;               // [kv_heads * head_dim, hidden]
  Matrix o_proj;               // [hidden, n_heads * head_dim]
  WeightPtr q_bias = nullptr;  // [n_heads * head_dim] or null
  WeightPtr k_bias = nullptr;  // [kv_heads * head_dim] or null
  WeightPtr v_bias = nullptr;  // [kv_heads * head_dim] or null
  WeightPtr o_bias = nullptr;  // [hidden] or null
  WeightPtr q_norm = nullptr;  // [head_dim] or null
  WeightPtr k_norm = nullptr;  // [head_dim] or null
  KvQuant kv_quant;            // how the layer's KV cache holds K and V (model/kv_scales.h)
};

// This rank's part under tensor parallelism: n_heads / tp query heads, and kv_heads / tp KV heads, or, when
// tp exceeds kv_heads, the one KV head its query heads read (replicated on tp / kv_heads ranks).
struct GqaShard {
  int64_t head0 = 0;         // first query head
  int64_t kv_head0 = 0;      // first KV head
  GqaAttentionConfig local;  // the config with this rank's head counts
};
GqaShard shard_gqa(const GqaAttentionConfig& c, int tp_rank, int tp);

// Binds `prefix` + {q,k,v,o}_proj.weight (and .bias, q_norm/k_norm as the config says): c is the whole
// model's config; the rank's heads (loader.plan()) are read, and the o_proj bias only on tp rank 0 (the
// partial outputs are summed across the tp group).
GqaAttentionWeights bind_gqa_attention(WeightLoader& loader, const std::string& prefix, const GqaAttentionConfig& c);
// The attention of the GQA model `d` describes (the whole model's heads).
GqaAttentionConfig gqa_attention_config(const ModelDesc& d);

struct RopeView {
  const float* inv_freq = nullptr;  // device [rotary_dim / 2], fp32
  float attention_scale = 1.0f;
};

// out[T, hidden] = attention(x[T, hidden]); writes this step's K/V into (k_cache, v_cache) first.
void gqa_attention_forward(const StepContext& step, Scratch& scratch, const GqaAttentionConfig& c,
                           const GqaAttentionWeights& w, const RopeView& rope, const float* x, float* out,
                           void* k_cache, void* v_cache);

}  // namespace sy
