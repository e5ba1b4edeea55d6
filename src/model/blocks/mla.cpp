// Multi-head latent attention block: projections, rope on the rope slices, the latent cache write, the
// absorbed attention over the latent cache (optionally restricted by the sparse indexer), output projection.
#include "model/blocks/mla.h"

#include <string_view>

#include "base/check.h"

namespace sy {

namespace {
// This file's buffers in the scratch the model's blocks share.
constexpr std::string_view kArea = "mla_attention";
enum ScratchId : int { kQa, kQ, kKv, kQLatent, kOutLatent, kOutHeads };
}  // namespace

MlaConfig mla_config(const ModelDesc& d, int64_t layer) {
  const AttentionDesc& a = d.attn;
  MlaConfig c{.hidden = d.hidden,
              .n_heads = a.n_heads,
              .q_lora_rank = a.q_lora_rank,
              .kv_lora_rank = a.kv_lora_rank,
              .qk_nope_head_dim = a.qk_nope_head_dim,
              .qk_rope_head_dim = a.qk_rope_head_dim,
              .v_head_dim = a.v_head_dim,
              .rope_interleaved = a.rope_interleaved,
              .attention_bias = a.qkv_bias,
              .softmax_scale = static_cast<float>(a.softmax_scale)};
  if (d.has_indexer()) {
    c.indexer = IndexerConfig{.hidden = d.hidden,
                              .q_lora_rank = a.q_lora_rank,
                              .n_heads = a.index_n_heads,
                              .head_dim = a.index_head_dim,
                              .rope_dim = a.qk_rope_head_dim,
                              .top_k = a.index_topk,
                              .rope_interleaved = a.index_rope_interleaved,
                              .shared = !d.layer_own_indexer[static_cast<size_t>(layer)]};
  }
  return c;
}

MlaWeights bind_mla(WeightLoader& loader, const std::string& prefix, const MlaConfig& c) {
  // Tensor parallelism splits the heads (q_b_proj / q_proj rows, kv_b_proj rows, o_proj columns); the
  // latent path (q_a, kv_a, their norms) and the indexer are replicated, so every tp rank caches the
  // same latent rows.
  const ShardPlan& plan = loader.plan();
  const int64_t nh = even_share(c.n_heads, plan.tp_rank, plan.tp, "attention heads").count;
  const int64_t h0 = nh * plan.tp_rank;
  const bool split = plan.tp > 1;
  const auto rows = [&](int64_t per_head) {
    return split ? Slice{.dim = 0, .start = h0 * per_head, .count = nh * per_head} : Slice{};
  };
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  MlaWeights w;
  if (c.q_lora_rank > 0) {
    w.q_a_proj = loader.bind_matrix(prefix + "q_a_proj.weight", {c.q_lora_rank, c.hidden});
    if (c.attention_bias) w.q_a_bias = loader.bind(prefix + "q_a_proj.bias", {c.q_lora_rank}, WeightInit::zeros);
    w.q_a_norm = loader.bind(prefix + "q_a_layernorm.weight", {c.q_lora_rank}, WeightInit::ones);
    w.q_b_proj = loader.bind_matrix(prefix + "q_b_proj.weight", {c.n_heads * qk, c.q_lora_rank}, rows(qk));
  } else {
    w.q_proj = loader.bind_matrix(prefix + "q_proj.weight", {c.n_heads * qk, c.hidden}, rows(qk));
  }
  const int64_t kv_a = c.kv_lora_rank + c.qk_rope_head_dim;
  w.kv_a_proj = loader.bind_matrix(prefix + "kv_a_proj_with_mqa.weight", {kv_a, c.hidden});
  if (c.attention_bias) w.kv_a_bias = loader.bind(prefix + "kv_a_proj_with_mqa.bias", {kv_a}, WeightInit::zeros);
  w.kv_a_norm = loader.bind(prefix + "kv_a_layernorm.weight", {c.kv_lora_rank}, WeightInit::ones);
  const int64_t b_rows = c.qk_nope_head_dim + c.v_head_dim;
  w.kv_b_proj =
      loader.bind(prefix + "kv_b_proj.weight", {c.n_heads * b_rows, c.kv_lora_rank}, WeightInit::normal, rows(b_rows));
  w.o_proj =
      loader.bind_matrix(prefix + "o_proj.weight", {c.hidden, c.n_heads * c.v_head_dim},
                         split ? Slice{.dim = 1, .start = h0 * c.v_head_dim, .count = nh * c.v_head_dim} : Slice{});
  if (c.attention_bias) {
    w.o_bias = loader.bind(prefix + "o_proj.bias", {c.hidden}, WeightInit::zeros);
    if (plan.tp_rank != 0) w.o_bias = nullptr;  // added once, before the sum over the tp group
  }
  if (c.indexer) w.indexer = bind_indexer(loader, prefix + "indexer.", *c.indexer);
  return w;
}

KvGeometry mla_kv_geometry(const MlaConfig& c, int64_t n_layers) {
  return {.n_layers = n_layers,
          .kv_heads = 1,
          .head_dim = c.kv_lora_rank + c.qk_rope_head_dim,
          .v_head_dim = 0,
          .index_head_dim = c.indexer ? c.indexer->head_dim : 0};
}

MlaCost mla_cost(const MlaConfig& c) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double H = d(c.hidden), nh = d(c.n_heads), qk = d(c.qk_nope_head_dim + c.qk_rope_head_dim);
  const double lora = d(c.kv_lora_rank), r = d(c.qk_rope_head_dim), bias = c.attention_bias ? 1.0 : 0.0;
  MlaCost cost;
  const double ql = d(c.q_lora_rank);
  cost.weight_elems = c.q_lora_rank > 0 ? H * ql + ql * (1 + bias) + ql * nh * qk : H * nh * qk;
  cost.weight_elems += (H + bias) * (lora + r) + lora + nh * d(c.qk_nope_head_dim + c.v_head_dim) * lora;
  cost.weight_elems += nh * d(c.v_head_dim) * H + bias * H;
  cost.kv_elems_per_token = lora + r;
  cost.heads_x_dims = c.n_heads * (2 * c.kv_lora_rank + c.qk_rope_head_dim);
  if (c.indexer && !c.indexer->shared) {
    const IndexerConfig& i = *c.indexer;
    cost.weight_elems += d(i.n_heads * i.head_dim) * ql + d(i.head_dim) * H + 2 * d(i.head_dim) + d(i.n_heads) * H;
    cost.index_elems_per_token = d(i.head_dim);
    cost.heads_x_dims += i.n_heads * i.head_dim;
  }
  return cost;
}

void mla_attention_forward(const StepContext& step, Scratch& scratch, const MlaConfig& c, const MlaWeights& w,
                           const RopeView& rope, const float* x, float* out, void* cache, void* index_cache) {
  Backend& be = *step.backend;
  be.mark(Phase::attention);
  const int64_t T = step.tokens, H = c.n_heads, nope = c.qk_nope_head_dim, r = c.qk_rope_head_dim;
  const int64_t qk = nope + r, lora = c.kv_lora_rank, kv_row = lora + r;
  const int64_t b_head = (nope + c.v_head_dim) * lora;  // elements of one head's kv_b_proj rows

  // Queries [T, H, nope | rope].
  float* q = scratch.area(kArea).get<float>(kQ, T * H * qk);
  const float* q_resid = nullptr;
  if (c.q_lora_rank > 0) {
    float* qa = scratch.area(kArea).get<float>(kQa, T * c.q_lora_rank);
    be.linear(x, w.q_a_proj, w.q_a_bias, qa, T, c.q_lora_rank, c.hidden);
    be.rms_norm(qa, w.q_a_norm, qa, T, c.q_lora_rank, c.latent_norm_eps);
    be.linear(qa, w.q_b_proj, nullptr, q, T, H * qk, c.q_lora_rank);
    q_resid = qa;
  } else {
    be.linear(x, w.q_proj, nullptr, q, T, H * qk, c.hidden);
  }
  // The latent and the shared rope key [T, kv_lora | rope].
  float* kv = scratch.area(kArea).get<float>(kKv, T * kv_row);
  be.linear(x, w.kv_a_proj, w.kv_a_bias, kv, T, kv_row, c.hidden);

  // Rope on the rope slices only: each head's last r dims of q (head stride qk), the last r of each kv row.
  RopeArgs ra{.x = q + nope,
              .positions = step.positions,
              .inv_freq = rope.inv_freq,
              .tokens = T,
              .heads = H,
              .head_dim = qk,
              .rotary_dim = r,
              .attention_scale = rope.attention_scale,
              .interleaved = c.rope_interleaved};
  be.rope(ra);
  ra.x = kv + lora;
  ra.heads = 1;
  ra.head_dim = kv_row;
  be.rope(ra);
  be.mla_kv_write({.kv = kv,
                   .norm_weight = w.kv_a_norm,
                   .slots = step.slots,
                   .cache = cache,
                   .tokens = T,
                   .kv_lora_rank = lora,
                   .rope_dim = r,
                   .eps = c.latent_norm_eps,
                   .kv_quant = w.kv_quant});

  const int32_t* selected = nullptr;
  if (c.indexer) {
    SY_CHECK(q_resid != nullptr, "the sparse-attention indexer needs q_lora_rank > 0");
    selected = indexer_select(step, scratch, *c.indexer, w.indexer, rope, x, q_resid, index_cache);
    be.mark(Phase::attention);
  }

  // q_nope through each head's K rows of kv_b_proj ([nope, lora], read transposed) into latent space.
  float* q_latent = scratch.area(kArea).get<float>(kQLatent, T * H * lora);
  be.head_linear({.x = q,
                  .w = w.kv_b_proj,
                  .y = q_latent,
                  .tokens = T,
                  .heads = H,
                  .in = nope,
                  .out = lora,
                  .x_stride = qk,
                  .y_stride = lora,
                  .w_head_stride = b_head,
                  .w_transposed = true});
  float* out_latent = scratch.area(kArea).get<float>(kOutLatent, T * H * lora);
  be.mla_attention({.q_latent = q_latent,
                    .q_rope = q + nope,
                    .cache = cache,
                    .block_tables = step.block_tables,
                    .token_seq = step.token_seq,
                    .positions = step.positions,
                    .key_positions = selected,
                    .out = out_latent,
                    .tokens = T,
                    .n_heads = H,
                    .kv_lora_rank = lora,
                    .rope_dim = r,
                    .q_rope_stride = qk,
                    .n_selected = c.indexer ? c.indexer->top_k : 0,
                    .block_size = step.block_size,
                    .max_blocks = step.max_blocks,
                    .scale = c.softmax_scale,
                    .kv_quant = w.kv_quant});
  // Back out through each head's V rows of kv_b_proj ([v, lora]), then o_proj.
  float* heads_out = scratch.area(kArea).get<float>(kOutHeads, T * H * c.v_head_dim);
  be.head_linear({.x = out_latent,
                  .w = weight_at(be, w.kv_b_proj, nope * lora),
                  .y = heads_out,
                  .tokens = T,
                  .heads = H,
                  .in = lora,
                  .out = c.v_head_dim,
                  .x_stride = lora,
                  .y_stride = c.v_head_dim,
                  .w_head_stride = b_head});
  be.linear(heads_out, w.o_proj, w.o_bias, out, T, c.hidden, H * c.v_head_dim);
}

}  // namespace sy
