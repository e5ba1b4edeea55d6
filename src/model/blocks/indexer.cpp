// Sparse-attention indexer block, as transformers' DeepseekV32Indexer / GlmMoeDsaIndexer compute it (the
// reference's Hadamard rotation and fp8 scoring leave q·k unchanged up to rounding and are not applied).
#include "model/blocks/indexer.h"

#include <cmath>
#include <string_view>

#include "base/check.h"

namespace sy {

namespace {
// This file's buffers in the scratch the model's blocks share.
constexpr std::string_view kArea = "indexer";
enum ScratchId : int { kIndexQ, kIndexK, kIndexWeights, kSelected };
constexpr float kKeyNormEps = 1e-6f;  // nn.LayerNorm(index_head_dim, eps=1e-6)
}  // namespace

IndexerWeights bind_indexer(WeightLoader& loader, const std::string& prefix, const IndexerConfig& c) {
  IndexerWeights w;
  if (c.shared) return w;
  w.wq_b = loader.bind(prefix + "wq_b.weight", {c.n_heads * c.head_dim, c.q_lora_rank});
  w.wk = loader.bind(prefix + "wk.weight", {c.head_dim, c.hidden});
  w.k_norm = loader.bind(prefix + "k_norm.weight", {c.head_dim}, WeightInit::ones);
  w.k_norm_bias = loader.bind(prefix + "k_norm.bias", {c.head_dim}, WeightInit::zeros);
  w.weights_proj = loader.bind(prefix + "weights_proj.weight", {c.n_heads, c.hidden});
  return w;
}

int32_t* indexer_selection(Scratch& scratch, int64_t tokens, int64_t top_k) {
  return scratch.area(kArea).get<int32_t>(kSelected, tokens * top_k);
}

const int32_t* indexer_select(const StepContext& step, Scratch& scratch, const IndexerConfig& c,
                              const IndexerWeights& w, const RopeView& rope, const float* x, const float* q_resid,
                              void* index_cache) {
  const int64_t T = step.tokens;
  // Same id and size in every layer of a step, so a shared layer finds the last full layer's choice here.
  int32_t* selected = indexer_selection(scratch, T, c.top_k);
  if (c.shared) return selected;
  SY_CHECK(index_cache != nullptr, "the KV cache has no indexer keys, but this layer has a sparse-attention indexer");
  Backend& be = *step.backend;
  float* q = scratch.area(kArea).get<float>(kIndexQ, T * c.n_heads * c.head_dim);
  float* k = scratch.area(kArea).get<float>(kIndexK, T * c.head_dim);
  float* weights = scratch.area(kArea).get<float>(kIndexWeights, T * c.n_heads);
  be.linear(q_resid, w.wq_b, nullptr, q, T, c.n_heads * c.head_dim, c.q_lora_rank);
  be.linear(x, w.wk, nullptr, k, T, c.head_dim, c.hidden);
  be.layer_norm(k, w.k_norm, w.k_norm_bias, k, T, c.head_dim, kKeyNormEps);
  RopeArgs ra{.x = q,
              .positions = step.positions,
              .inv_freq = rope.inv_freq,
              .tokens = T,
              .heads = c.n_heads,
              .head_dim = c.head_dim,
              .rotary_dim = c.rope_dim,
              .attention_scale = rope.attention_scale,
              .interleaved = c.rope_interleaved};
  be.rope(ra);
  ra.x = k;
  ra.heads = 1;
  be.rope(ra);
  // One key row per token: the KV write with a single head and no V.
  be.kv_write({.k = k,
               .v = k,
               .slots = step.slots,
               .k_cache = index_cache,
               .v_cache = index_cache,
               .tokens = T,
               .kv_heads = 1,
               .head_dim = c.head_dim,
               .v_head_dim = 0});
  be.linear(x, w.weights_proj, nullptr, weights, T, c.n_heads, c.hidden);
  be.indexer_topk({.q = q,
                   .head_weights = weights,
                   .k_cache = index_cache,
                   .block_tables = step.block_tables,
                   .token_seq = step.token_seq,
                   .positions = step.positions,
                   .key_positions = selected,
                   .tokens = T,
                   .n_heads = c.n_heads,
                   .head_dim = c.head_dim,
                   .top_k = c.top_k,
                   .block_size = step.block_size,
                   .max_blocks = step.max_blocks,
                   .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                   .weight_scale = 1.0f / std::sqrt(static_cast<float>(c.n_heads))});
  return selected;
}

}  // namespace sy
