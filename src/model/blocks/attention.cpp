// GQA attention block.
#include "model/blocks/attention.h"

#include <cmath>
#include <numeric>
#include <string_view>

#include "base/check.h"

namespace sy {

namespace {
// This file's buffers in the scratch the model's blocks share.
constexpr std::string_view kArea = "gqa_attention";
enum ScratchId : int { kQ, kK, kV, kAttn, kQkv };
// Up to this many tokens q, k and v come from one product over the stacked weights, split after (one launch
// and one input conversion instead of three: decode batches); above it three products, no [T, q + 2 kv] copy.
constexpr int64_t kStackedQkvMaxTokens = 256;
}  // namespace

GqaShard shard_gqa(const GqaAttentionConfig& c, int tp_rank, int tp) {
  SY_CHECK(c.n_heads % tp == 0 && (c.kv_heads % tp == 0 || tp % c.kv_heads == 0),
           "--tp {} does not split {} attention heads and {} KV heads (tp must divide the heads, and divide or be a "
           "multiple of the KV heads)",
           tp, c.n_heads, c.kv_heads);
  GqaShard s;
  s.local = c;
  s.local.n_heads = c.n_heads / tp;
  s.head0 = s.local.n_heads * tp_rank;
  if (c.kv_heads % tp == 0) {
    s.local.kv_heads = c.kv_heads / tp;
    s.kv_head0 = s.local.kv_heads * tp_rank;
  } else {
    s.local.kv_heads = 1;
    s.kv_head0 = tp_rank / (tp / c.kv_heads);
  }
  return s;
}

GqaAttentionConfig gqa_attention_config(const ModelDesc& d) {
  const AttentionDesc& a = d.attn;
  return {.hidden = d.hidden,
          .n_heads = a.n_heads,
          .kv_heads = a.kv_heads,
          .head_dim = a.head_dim,
          .rotary_dim = a.rotary_dim,
          .qkv_bias = a.qkv_bias,
          .o_bias = a.o_bias,
          .qk_norm = a.qk_norm,
          .qk_norm_eps = static_cast<float>(d.norm_eps),
          .sliding_window = a.sliding_window};
}

GqaAttentionWeights bind_gqa_attention(WeightLoader& loader, const std::string& prefix, const GqaAttentionConfig& c) {
  const ShardPlan& plan = loader.plan();
  const GqaShard sh = shard_gqa(c, plan.tp_rank, plan.tp);
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.kv_heads * c.head_dim, d = c.head_dim;
  const bool split = plan.tp > 1;
  const Slice q_rows = split ? Slice{.dim = 0, .start = sh.head0 * d, .count = sh.local.n_heads * d} : Slice{};
  const Slice kv_rows = split ? Slice{.dim = 0, .start = sh.kv_head0 * d, .count = sh.local.kv_heads * d} : Slice{};
  const Slice o_cols = split ? Slice{.dim = 1, .start = sh.head0 * d, .count = sh.local.n_heads * d} : Slice{};
  const int64_t lq = sh.local.n_heads * d, lkv = sh.local.kv_heads * d;
  GqaAttentionWeights w;
  // Parts of gcd(lq, lkv) rows: kept block FP8 only when q, k and v each start on a block row.
  const MatrixArray qkv = loader.allocate_matrices(prefix + "q_proj.weight", {q_dim, c.hidden}, 1, lq + 2 * lkv,
                                                   c.hidden, std::gcd(lq, lkv), q_rows);
  loader.load_matrix_into(prefix + "q_proj.weight", {q_dim, c.hidden}, qkv, 0, 0, q_rows);
  loader.load_matrix_into(prefix + "k_proj.weight", {kv_dim, c.hidden}, qkv, 0, lq, kv_rows);
  loader.load_matrix_into(prefix + "v_proj.weight", {kv_dim, c.hidden}, qkv, 0, lq + lkv, kv_rows);
  w.qkv = qkv.first;
  w.q_proj = qkv.first;
  w.k_proj = loader.matrix_at(qkv, 0, lq);
  w.v_proj = loader.matrix_at(qkv, 0, lq + lkv);
  w.o_proj = loader.bind_matrix(prefix + "o_proj.weight", {c.hidden, q_dim}, o_cols);
  if (c.qkv_bias) {
    void* bias = loader.allocate(lq + 2 * lkv);
    loader.load_into(prefix + "q_proj.bias", {q_dim}, bias, WeightInit::zeros, q_rows);
    loader.load_into(prefix + "k_proj.bias", {kv_dim}, loader.at(bias, lq), WeightInit::zeros, kv_rows);
    loader.load_into(prefix + "v_proj.bias", {kv_dim}, loader.at(bias, lq + lkv), WeightInit::zeros, kv_rows);
    w.qkv_bias = bias;
    w.q_bias = bias;
    w.k_bias = loader.at(bias, lq);
    w.v_bias = loader.at(bias, lq + lkv);
  }
  if (c.o_bias) {
    w.o_bias = loader.bind(prefix + "o_proj.bias", {c.hidden}, WeightInit::zeros);
    if (plan.tp_rank != 0) w.o_bias = nullptr;  // added once, before the sum over the tp group
  }
  if (c.qk_norm) {
    w.q_norm = loader.bind(prefix + "q_norm.weight", {c.head_dim}, WeightInit::ones);
    w.k_norm = loader.bind(prefix + "k_norm.weight", {c.head_dim}, WeightInit::ones);
  }
  return w;
}

void gqa_attention_forward(const StepContext& step, Scratch& scratch, const GqaAttentionConfig& c,
                           const GqaAttentionWeights& w, const RopeView& rope, const float* x, float* out,
                           void* k_cache, void* v_cache) {
  Backend& be = *step.backend;
  be.mark(Phase::attention);
  const int64_t T = step.tokens, q_dim = c.n_heads * c.head_dim, kv_dim = c.kv_heads * c.head_dim;
  // One token: q, k and v are the segments of one product over the stacked weights.
  float* q = scratch.area(kArea).get<float>(kQ, T == 1 ? q_dim + 2 * kv_dim : T * q_dim);
  float* k = T == 1 ? q + q_dim : scratch.area(kArea).get<float>(kK, T * kv_dim);
  float* v = T == 1 ? k + kv_dim : scratch.area(kArea).get<float>(kV, T * kv_dim);
  float* attn = scratch.area(kArea).get<float>(kAttn, T * q_dim);
  if (T == 1) {
    be.linear(x, w.qkv, w.qkv_bias, q, 1, q_dim + 2 * kv_dim, c.hidden);
  } else if (T <= kStackedQkvMaxTokens) {
    float* qkv = scratch.area(kArea).get<float>(kQkv, T * (q_dim + 2 * kv_dim));
    be.linear(x, w.qkv, w.qkv_bias, qkv, T, q_dim + 2 * kv_dim, c.hidden);
    be.split_columns({.src = qkv, .rows = T, .dst = {q, k, v}, .width = {q_dim, kv_dim, kv_dim}});
  } else {
    be.linear(x, w.q_proj, w.q_bias, q, T, q_dim, c.hidden);
    be.linear(x, w.k_proj, w.k_bias, k, T, kv_dim, c.hidden);
    be.linear(x, w.v_proj, w.v_bias, v, T, kv_dim, c.hidden);
  }
  be.qk_norm_rope_kv_write({.q = q,
                            .k = k,
                            .v = v,
                            .q_norm = c.qk_norm ? w.q_norm : nullptr,
                            .k_norm = c.qk_norm ? w.k_norm : nullptr,
                            .norm_eps = c.qk_norm_eps,
                            .positions = step.positions,
                            .inv_freq = rope.inv_freq,
                            .rotary_dim = c.rotary_dim,
                            .attention_scale = rope.attention_scale,
                            .interleaved = c.rope_interleaved,
                            .slots = step.slots,
                            .k_cache = k_cache,
                            .v_cache = v_cache,
                            .tokens = T,
                            .n_heads = c.n_heads,
                            .kv_heads = c.kv_heads,
                            .head_dim = c.head_dim,
                            .kv_quant = w.kv_quant});
  be.paged_attention({.q = q,
                      .k_cache = k_cache,
                      .v_cache = v_cache,
                      .block_tables = step.block_tables,
                      .token_seq = step.token_seq,
                      .positions = step.positions,
                      .out = attn,
                      .tokens = T,
                      .n_seqs = step.n_seqs,
                      .n_heads = c.n_heads,
                      .kv_heads = c.kv_heads,
                      .head_dim = c.head_dim,
                      .v_head_dim = c.head_dim,
                      .block_size = step.block_size,
                      .max_blocks = step.max_blocks,
                      .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                      .sliding_window = c.sliding_window,
                      .kv_quant = w.kv_quant});
  be.linear(attn, w.o_proj, w.o_bias, out, T, c.hidden, q_dim);
}

}  // namespace sy
