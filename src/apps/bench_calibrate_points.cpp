// `bench calibrate`'s points: each op's inputs set up in backend memory (random data, uniformly random routing, a
// filled KV cache, weights read from memory for the cold ops) as the model's blocks call the op.
//
// Dims of the ops that README's table leaves to the Args structs:
//   head_linear [tokens, heads, in, out]: HeadLinearArgs with x_stride = in, y_stride = out, one [in, out] matrix per
//     head, read transposed when in < out as MLA's query absorption does (in qk_nope, out kv_lora_rank) and
//     untransposed otherwise (its output: in kv_lora_rank, out v_head_dim).
//   mla_kv_write [tokens, kv_lora_rank, rope_dim]: MlaKvWriteArgs, rows to slots 0..tokens-1.
//   mla_attention [seqs, q_len, context, n_heads, kv_lora_rank, rope_dim]: MlaAttentionArgs as paged_attention's
//     points (q_rope_stride = rope_dim, no sparse selection).
// split_columns [rows, width] splits q = width − 2·(width/6), k = v = width/6. embedding reads a table of 151,936
// rows. sample_tokens* draw from logits N(0, 4²) (a top-p 0.9 nucleus of about a thousand tokens at vocab 151,936).
#include "apps/bench_calibrate_points.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/bench_timing.h"
#include "base/check.h"

namespace sy {

namespace {

constexpr int64_t kBlockSize = 16;  // the engine's KV block size (EngineConfig, --block-size)
constexpr int64_t kEmbeddingVocab = 151936;

// Rope's inverse frequencies (base 10,000) over rotary_dim, in backend memory.
const float* inv_freq(PointMemory& mem, Backend& be, int64_t rotary_dim) {
  std::vector<float> f(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim)));
  }
  float* dev = mem.floats(static_cast<int64_t>(f.size()));
  be.copy_to_device(dev, f.data(), f.size() * sizeof(float));
  return dev;
}

std::vector<int32_t> iota(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

// A paged KV cache of `seqs` sequences of `context` tokens, with the `q_len` last tokens of each the queries:
// block tables over a shuffled pool (as a running server's are), the queries' sequences and positions.
struct PagedBatch {
  int64_t tokens = 0, max_blocks = 0, slots = 0;
  const int32_t* block_tables = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* positions = nullptr;
};

PagedBatch paged_batch(PointMemory& mem, int64_t seqs, int64_t q_len, int64_t context) {
  SY_CHECK(q_len >= 1 && q_len <= context, "q_len {} must be in 1..context {}", q_len, context);
  PagedBatch b{.tokens = seqs * q_len, .max_blocks = (context + kBlockSize - 1) / kBlockSize};
  const int64_t blocks = seqs * b.max_blocks;
  b.slots = blocks * kBlockSize;
  std::vector<int32_t> table = iota(blocks);
  std::shuffle(table.begin(), table.end(), mem.rng());
  std::vector<int32_t> token_seq(static_cast<size_t>(b.tokens)), positions(static_cast<size_t>(b.tokens));
  for (int64_t t = 0; t < b.tokens; ++t) {
    token_seq[static_cast<size_t>(t)] = static_cast<int32_t>(t / q_len);
    positions[static_cast<size_t>(t)] = static_cast<int32_t>(context - q_len + t % q_len);
  }
  b.block_tables = mem.ints(table);
  b.token_seq = mem.ints(token_seq);
  b.positions = mem.ints(positions);
  return b;
}

// cold: each call reads the next copy of the weights (PointMemory::cold_weights), else the same one.
Prepared prepare_linear_at(PointMemory& mem, Backend& be, const CalibPoint& d, bool cold) {
  const int64_t m = d[0], n = d[1], k = d[2];
  const float* x = mem.random(m * k);
  const WeightCopies w = cold ? mem.cold_weights(n * k, "w")
                              : WeightCopies{.base = static_cast<const char*>(mem.weights(n * k, 0.02f, "w"))};
  float* y = mem.floats(m * n);
  return {.issue = [&be, x, w, y, m, n, k, i = size_t{0}]() mutable { be.linear(x, w.at(i++), nullptr, y, m, n, k); }};
}
Prepared prepare_linear(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_linear_at(mem, be, d, false);
}
Prepared prepare_linear_cold(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_linear_at(mem, be, d, true);
}

// linear_pool [m, n, k, pool_mb]: the product with its weights rotating through pool_mb MiB of copies (each copy
// read again after pool_mb MiB of the others): how fast weights are read back as a step's working set grows past
// the caches (MachineProfile's cache curve).
Prepared prepare_linear_pool(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t m = d[0], n = d[1], k = d[2];
  const float* x = mem.random(m * k);
  const WeightCopies w = mem.pool_weights(n * k, static_cast<size_t>(d[3]) << 20);
  float* y = mem.floats(m * n);
  // One pass over the copies first, so that every timed call re-reads a copy (else the first pass reads weights
  // no call has read yet, from memory whatever the pool's size).
  for (size_t i = 0; i < w.count; ++i) be.linear(x, w.at(i), nullptr, y, m, n, k);
  be.synchronize();
  return {.issue = [&be, x, w, y, m, n, k, i = size_t{0}]() mutable { be.linear(x, w.at(i++), nullptr, y, m, n, k); },
          .capturable = false};
}

Prepared prepare_linear_f32(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t m = d[0], n = d[1], k = d[2];
  const float* x = mem.random(m * k);
  const float* w = mem.random(n * k, 0.02f);
  float* y = mem.floats(m * n);
  return {.issue = [&be, x, w, y, m, n, k] { be.linear_f32(x, w, y, m, n, k); }};
}

// Routing uniformly at random: top_k distinct experts per token; the weights 1/top_k. cold: each call reads the
// next copy of every expert's matrices (PointMemory::cold_weights), gate_up and down side by side in one, and
// once through the copies, the next rotation of the routing (every expert id plus top_k, modulo the experts): a
// call reads only the experts it touches, so with one routing the same few experts of the same two or three
// copies came back every few calls (at 1 token, top 4 of 32: 25 MB apart on the medium config, well inside a
// server's last-level cache; docs/perf-notes.md item 44), where with the rotations an expert's weights are read
// again about a pool's length of reads later, as a decode step's layers each read theirs once.
Prepared prepare_moe(PointMemory& mem, Backend& be, const CalibPoint& d, bool cold) {
  const int64_t T = d[0], K = d[1], E = d[2], H = d[3], I = d[4];
  SY_CHECK(K <= E, "top_k {} exceeds the {} experts", K, E);
  std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(E - 1));
  std::vector<int32_t> ids;
  std::vector<uint8_t> touched(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const size_t first = ids.size();
    while (ids.size() - first < static_cast<size_t>(K)) {
      const int32_t e = expert(mem.rng());
      if (std::find(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end(), e) == ids.end()) ids.push_back(e);
    }
  }
  for (int32_t e : ids) touched[static_cast<size_t>(e)] = 1;
  const std::vector<float> weights(ids.size(), 1.0f / static_cast<float>(K));
  MoeExpertsArgs a{.x = mem.random(T * H),
                   .expert_ids = mem.ints(ids),
                   .gate_up = cold ? nullptr : mem.weights(E * 2 * I * H, 0.02f, "gate_up"),
                   .down = cold ? nullptr : mem.weights(E * H * I, 0.02f, "down"),
                   .out = mem.floats(T * H),
                   .tokens = T,
                   .hidden = H,
                   .inter = I,
                   .n_experts = E,
                   .top_k = K};
  float* w = mem.floats(static_cast<int64_t>(weights.size()));
  be.copy_to_device(w, weights.data(), weights.size() * sizeof(float));
  a.weights = w;
  CalibPoint recorded = d;
  recorded.push_back(std::count(touched.begin(), touched.end(), uint8_t{1}));
  if (!cold) {
    return {.issue = [&be, a] { be.moe_experts(a); }, .capturable = be.moe_experts_async(a), .recorded = recorded};
  }
  const WeightCopies copies = mem.cold_weights(E * 3 * I * H, "experts");
  const size_t gate_up_bytes = static_cast<size_t>(E * 2 * I * H) * dtype_size(be.weight_dtype());
  std::vector<const int32_t*> routings;
  for (const std::vector<int32_t>& rotated : expert_rotations(ids, E, K)) {
    routings.push_back(routings.empty() ? a.expert_ids : mem.ints(rotated));
  }
  return {.issue =
              [&be, a, copies, gate_up_bytes, routings, i = size_t{0}]() mutable {
                MoeExpertsArgs c = a;
                c.gate_up = copies.at(i);
                c.down = static_cast<const char*>(copies.at(i)) + gate_up_bytes;
                c.expert_ids = routings[(i / copies.count) % routings.size()];
                ++i;
                be.moe_experts(c);
              },
          .capturable = false,
          .recorded = recorded};
}

Prepared prepare_moe_experts(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_moe(mem, be, d, false);
}
Prepared prepare_moe_experts_cold(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_moe(mem, be, d, true);
}

// cold: each call reads the next copy of the K and V caches (PointMemory::cold_weights, side by side in one), as
// a step's layers each read their own; else the same one.
Prepared prepare_paged_attention_at(PointMemory& mem, Backend& be, const CalibPoint& d, bool cold) {
  const int64_t seqs = d[0], q_len = d[1], context = d[2], nh = d[3], kvh = d[4], hd = d[5];
  const PagedBatch b = paged_batch(mem, seqs, q_len, context);
  const int64_t cache = b.slots * kvh * hd;
  const WeightCopies kv = cold ? mem.cold_weights(2 * cache, "kv")
                               : WeightCopies{.base = static_cast<const char*>(mem.weights(2 * cache, 1.0f))};
  const size_t v_offset = static_cast<size_t>(cache) * dtype_size(be.weight_dtype());
  PagedAttentionArgs a{.q = mem.random(b.tokens * nh * hd),
                       .k_cache = kv.at(0),
                       .v_cache = static_cast<const char*>(kv.at(0)) + v_offset,
                       .block_tables = b.block_tables,
                       .token_seq = b.token_seq,
                       .positions = b.positions,
                       .out = mem.floats(b.tokens * nh * hd),
                       .tokens = b.tokens,
                       .n_seqs = seqs,
                       .n_heads = nh,
                       .kv_heads = kvh,
                       .head_dim = hd,
                       .v_head_dim = hd,
                       .block_size = kBlockSize,
                       .max_blocks = b.max_blocks,
                       .scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  if (!cold) return {.issue = [&be, a] { be.paged_attention(a); }};
  return {.issue =
              [&be, a, kv, v_offset, i = size_t{0}]() mutable {
                PagedAttentionArgs c = a;
                c.k_cache = kv.at(i);
                c.v_cache = static_cast<const char*>(kv.at(i++)) + v_offset;
                be.paged_attention(c);
              },
          .capturable = false};
}
Prepared prepare_paged_attention(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_paged_attention_at(mem, be, d, false);
}
Prepared prepare_paged_attention_cold(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_paged_attention_at(mem, be, d, true);
}

Prepared prepare_qk_norm_rope_kv_write(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], nh = d[1], kvh = d[2], hd = d[3];
  QkRopeKvArgs a{.q = mem.random(T * nh * hd),
                 .k = mem.random(T * kvh * hd),
                 .v = mem.random(T * kvh * hd),
                 .q_norm = mem.weights(hd, 1.0f),
                 .k_norm = mem.weights(hd, 1.0f),
                 .positions = mem.ints(iota(T)),
                 .inv_freq = inv_freq(mem, be, hd),
                 .rotary_dim = hd,
                 .slots = mem.ints(iota(T)),
                 .k_cache = mem.weights(T * kvh * hd, 1.0f),
                 .v_cache = mem.weights(T * kvh * hd, 1.0f),
                 .tokens = T,
                 .n_heads = nh,
                 .kv_heads = kvh,
                 .head_dim = hd};
  return {.issue = [&be, a] { be.qk_norm_rope_kv_write(a); }};
}

Prepared prepare_mla_attention(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t seqs = d[0], q_len = d[1], context = d[2], nh = d[3], lora = d[4], rope = d[5];
  const PagedBatch b = paged_batch(mem, seqs, q_len, context);
  MlaAttentionArgs a{.q_latent = mem.random(b.tokens * nh * lora),
                     .q_rope = mem.random(b.tokens * nh * rope),
                     .cache = mem.weights(b.slots * (lora + rope), 1.0f),
                     .block_tables = b.block_tables,
                     .token_seq = b.token_seq,
                     .positions = b.positions,
                     .out = mem.floats(b.tokens * nh * lora),
                     .tokens = b.tokens,
                     .n_heads = nh,
                     .kv_lora_rank = lora,
                     .rope_dim = rope,
                     .q_rope_stride = rope,
                     .block_size = kBlockSize,
                     .max_blocks = b.max_blocks,
                     .scale = 1.0f / std::sqrt(static_cast<float>(lora + rope))};
  return {.issue = [&be, a] { be.mla_attention(a); }};
}

Prepared prepare_head_linear(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], heads = d[1], in = d[2], out = d[3];
  HeadLinearArgs a{.x = mem.random(T * heads * in),
                   .w = mem.weights(heads * in * out, 0.02f, "w"),
                   .y = mem.floats(T * heads * out),
                   .tokens = T,
                   .heads = heads,
                   .in = in,
                   .out = out,
                   .x_stride = in,
                   .y_stride = out,
                   .w_head_stride = in * out,
                   .w_transposed = in < out};
  return {.issue = [&be, a] { be.head_linear(a); }};
}

Prepared prepare_mla_kv_write(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], lora = d[1], rope = d[2];
  MlaKvWriteArgs a{.kv = mem.random(T * (lora + rope)),
                   .norm_weight = mem.weights(lora, 1.0f),
                   .slots = mem.ints(iota(T)),
                   .cache = mem.weights(T * (lora + rope), 1.0f),
                   .tokens = T,
                   .kv_lora_rank = lora,
                   .rope_dim = rope};
  return {.issue = [&be, a] { be.mla_kv_write(a); }};
}

Prepared prepare_rope(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], nh = d[1], hd = d[2];
  const RopeArgs a{.x = mem.random(T * nh * hd),
                   .positions = mem.ints(iota(T)),
                   .inv_freq = inv_freq(mem, be, hd),
                   .tokens = T,
                   .heads = nh,
                   .head_dim = hd,
                   .rotary_dim = hd};
  return {.issue = [&be, a] { be.rope(a); }};
}

Prepared prepare_rms_norm(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t rows = d[0], dim = d[1];
  const float* x = mem.random(rows * dim);
  const void* w = mem.weights(dim, 1.0f);
  float* y = mem.floats(rows * dim);
  return {.issue = [&be, x, w, y, rows, dim] { be.rms_norm(x, w, y, rows, dim, 1e-6f); }};
}

Prepared prepare_add_rms_norm(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t rows = d[0], dim = d[1];
  float* residual = mem.random(rows * dim);
  const float* x = mem.random(rows * dim);
  const void* w = mem.weights(dim, 1.0f);
  float* y = mem.floats(rows * dim);
  return {.issue = [&be, residual, x, w, y, rows, dim] { be.add_rms_norm(residual, x, w, y, rows, dim, 1e-6f); }};
}

Prepared prepare_silu_mul(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t rows = d[0], inter = d[1];
  const float* gate_up = mem.random(rows * 2 * inter);
  float* out = mem.floats(rows * inter);
  return {.issue = [&be, gate_up, out, rows, inter] { be.silu_mul(gate_up, out, rows, inter); }};
}

Prepared prepare_add(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t n = d[0];
  float* y = mem.random(n);
  const float* x = mem.random(n);
  return {.issue = [&be, y, x, n] { be.add(y, x, n); }};
}

Prepared prepare_split_columns(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t rows = d[0], width = d[1], kv = width / 6, q = width - 2 * kv;
  ColumnSplit a{.src = mem.random(rows * width), .rows = rows, .width = {q, kv, kv}};
  for (size_t i = 0; i < 3; ++i) a.dst[i] = mem.floats(rows * a.width[i]);
  return {.issue = [&be, a] { be.split_columns(a); }};
}

Prepared prepare_embedding(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], dim = d[1];
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(kEmbeddingVocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = token(mem.rng());
  const void* table = mem.weights(kEmbeddingVocab * dim, 0.02f, "table");
  const int32_t* dev_ids = mem.ints(ids);
  float* out = mem.floats(T * dim);
  return {.issue = [&be, table, dev_ids, out, T, dim] { be.embedding(table, dev_ids, out, T, dim); }};
}

Prepared prepare_softmax_topk(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], E = d[1], K = d[2];
  const SoftmaxTopkArgs a{.logits = mem.random(T * E),
                          .expert_ids = mem.ints(T * K),
                          .weights = mem.floats(T * K),
                          .tokens = T,
                          .n_experts = E,
                          .top_k = K,
                          .renormalize = true};
  return {.issue = [&be, a] { be.softmax_topk(a); }};
}

Prepared prepare_grouped_topk(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t T = d[0], E = d[1], K = d[2], groups = d[3], topk_groups = d[4];
  const GroupedTopkArgs a{.logits = mem.random(T * E),
                          .score_bias = mem.random(E, 0.1f),
                          .expert_ids = mem.ints(T * K),
                          .weights = mem.floats(T * K),
                          .tokens = T,
                          .n_experts = E,
                          .top_k = K,
                          .n_group = groups,
                          .topk_group = topk_groups,
                          .renormalize = true,
                          .scaling = 2.5f};
  return {.issue = [&be, a] { be.grouped_topk(a); }};
}

// Rows greedy (temperature 0) or drawn with temperature 1 and top-p 0.9 from fixed uniform draws.
Prepared prepare_sampling(PointMemory& mem, Backend& be, const CalibPoint& d, bool random) {
  const int64_t rows = d[0], vocab = d[1];
  const float* logits = mem.random(rows * vocab, 4.0f);
  auto params = std::make_shared<std::vector<SampleRow>>(static_cast<size_t>(rows));
  auto tokens = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(rows));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    SampleRow& p = (*params)[static_cast<size_t>(r)];
    p.row = r;
    if (random) p.temperature = 1.0f, p.top_p = 0.9f, p.u = u(mem.rng());
  }
  return {.issue = [&be, logits, vocab, params, tokens,
                    rows] { be.sample_tokens(logits, vocab, params->data(), rows, tokens->data()); },
          .capturable = false};
}

Prepared prepare_sample_tokens(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_sampling(mem, be, d, false);
}

Prepared prepare_sample_tokens_random(PointMemory& mem, Backend& be, const CalibPoint& d) {
  return prepare_sampling(mem, be, d, true);
}

Prepared prepare_copy_to_host(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const auto bytes = static_cast<size_t>(d[0]);
  const float* src = mem.random((d[0] + 3) / 4);
  void* dst = mem.host(bytes);
  return {.issue = [&be, dst, src, bytes] { be.copy_to_host(dst, src, bytes); }, .capturable = false};
}

Prepared prepare_copy_to_device(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const auto bytes = static_cast<size_t>(d[0]);
  void* src = mem.host(bytes);
  std::mt19937 bits(static_cast<uint32_t>(mem.rng()()));
  for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(src)[i] = static_cast<uint8_t>(bits());
  float* dst = mem.floats((d[0] + 3) / 4);
  return {.issue = [&be, dst, src, bytes] { be.copy_to_device(dst, src, bytes); }, .capturable = false};
}

}  // namespace

WeightCopies ColdPool::copies(Backend& be, size_t bytes, std::mt19937_64& rng) {
  const size_t stride = (bytes + 4095) / 4096 * 4096;
  if (2 * stride > bytes_) return {.count = 0};
  return copies_within(be, bytes, bytes_, rng);
}

WeightCopies ColdPool::copies_within(Backend& be, size_t bytes, size_t pool_bytes, std::mt19937_64& rng) {
  const size_t stride = (bytes + 4095) / 4096 * 4096;
  SY_CHECK(stride <= bytes_ && pool_bytes <= bytes_, "copies of {} bytes within {} bytes: the cold pool holds {}",
           bytes, pool_bytes, bytes_);
  if (!buf_) {
    buf_ = be.alloc(bytes_);
    fill_random_weights(be, buf_->data(), static_cast<int64_t>(bytes_ / dtype_size(be.weight_dtype())), rng(), 0.02f);
  }
  return {.base = buf_->as<char>(), .stride = stride, .count = std::max<size_t>(1, pool_bytes / stride)};
}

const std::vector<OpEntry>& op_entries() {
  static const std::vector<OpEntry> entries = {
      {{"linear", {"m", "n", "k"}}, prepare_linear},
      {{"linear_f32", {"m", "n", "k"}}, prepare_linear_f32},
      {{"moe_experts", {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"}}, prepare_moe_experts},
      // CPU only: the two above with their weights read from memory (ColdPool), at the rows of a decode step.
      {{"linear_cold", {"m", "n", "k"}}, prepare_linear_cold},
      {{"linear_pool", {"m", "n", "k", "pool_mb"}}, prepare_linear_pool},
      {{"moe_experts_cold", {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"}}, prepare_moe_experts_cold},
      {{"paged_attention", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"}}, prepare_paged_attention},
      // CPU only: decode attention with the KV caches read from memory (ColdPool), at a decode step's sequences.
      {{"paged_attention_cold", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"}},
       prepare_paged_attention_cold},
      {{"qk_norm_rope_kv_write", {"tokens", "n_heads", "kv_heads", "head_dim"}}, prepare_qk_norm_rope_kv_write},
      {{"mla_attention", {"seqs", "q_len", "context", "n_heads", "kv_lora_rank", "rope_dim"}}, prepare_mla_attention},
      {{"head_linear", {"tokens", "heads", "in", "out"}}, prepare_head_linear},
      {{"mla_kv_write", {"tokens", "kv_lora_rank", "rope_dim"}}, prepare_mla_kv_write},
      {{"rope", {"tokens", "n_heads", "head_dim"}}, prepare_rope},
      {{"rms_norm", {"rows", "dim"}}, prepare_rms_norm},
      {{"add_rms_norm", {"rows", "dim"}}, prepare_add_rms_norm},
      {{"silu_mul", {"rows", "inter"}}, prepare_silu_mul},
      {{"add", {"n"}}, prepare_add},
      {{"split_columns", {"rows", "width"}}, prepare_split_columns},
      {{"embedding", {"tokens", "dim"}}, prepare_embedding},
      {{"softmax_topk", {"tokens", "n_experts", "top_k"}}, prepare_softmax_topk},
      {{"grouped_topk", {"tokens", "n_experts", "top_k", "n_group", "topk_group"}}, prepare_grouped_topk},
      {{"sample_tokens", {"rows", "vocab"}}, prepare_sample_tokens},
      {{"sample_tokens_random", {"rows", "vocab"}}, prepare_sample_tokens_random},
      {{"copy_to_host", {"bytes"}}, prepare_copy_to_host},
      {{"copy_to_device", {"bytes"}}, prepare_copy_to_device},
  };
  return entries;
}

const OpEntry& find_op(const std::string& op) {
  for (const OpEntry& e : op_entries()) {
    if (e.spec.op == op) return e;
  }
  SY_FAIL("bench calibrate has no op {}", op);
}

}  // namespace sy
