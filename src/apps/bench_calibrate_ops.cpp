// `bench calibrate`'s ops: each point's inputs set up in backend memory (random data, uniformly random routing, a
// filled KV cache) and the op timed through the Backend as the model's blocks call it; the per-step fixed costs.
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
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <string_view>

#include "apps/bench_calibrate.h"
#include "apps/bench_timing.h"
#include "base/check.h"
#include "base/log.h"

namespace sy {

namespace {

constexpr int64_t kBlockSize = 16;  // the engine's KV block size (EngineConfig, --block-size)
constexpr int64_t kEmbeddingVocab = 151936;

// A point that cannot be timed here: why.
struct PointSkip {
  std::string why;
};

// Weights kept for the points of one series (same shapes, growing rows), by name.
using SeriesWeights = std::map<std::string, std::unique_ptr<DeviceBuffer>>;

// The backend memory of one point, freed with it; allocations beyond `limit` bytes skip the point.
class PointMemory {
 public:
  PointMemory(Backend& be, SeriesWeights& series, double limit, std::mt19937_64& rng)
      : be_(be), series_(series), limit_(limit), rng_(rng) {}

  float* floats(int64_t n) { return take(static_cast<size_t>(n) * sizeof(float))->as<float>(); }
  // N(0, stddev²) f32 values (the activations every backend takes).
  float* random(int64_t n, float stddev = 1.0f) {
    check_fits(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
    owned_.push_back(random_floats(be_, n, rng_(), stddev));
    return owned_.back()->as<float>();
  }
  // N(0, stddev²) values in the backend's weight dtype; `key` keeps them for the rest of the series.
  void* weights(int64_t n, float stddev, const std::string& key = "") {
    if (!key.empty()) {
      const std::string k = fmt::format("{}:{}", key, n);
      if (auto it = series_.find(k); it != series_.end()) return it->second->data();
      check_fits(weight_bytes(n));
      auto buf = be_.alloc(weight_bytes(n));
      fill_random_weights(be_, buf->data(), n, rng_(), stddev);
      return series_.emplace(k, std::move(buf)).first->second->data();
    }
    DeviceBuffer* buf = take(weight_bytes(n));
    fill_random_weights(be_, buf->data(), n, rng_(), stddev);
    return buf->data();
  }
  int32_t* ints(const std::vector<int32_t>& host) {
    DeviceBuffer* buf = take(std::max<size_t>(host.size(), 1) * sizeof(int32_t));
    be_.copy_to_device(buf->data(), host.data(), host.size() * sizeof(int32_t));
    return buf->as<int32_t>();
  }
  int32_t* ints(int64_t n) { return take(static_cast<size_t>(n) * sizeof(int32_t))->as<int32_t>(); }
  void* host(size_t bytes) {
    owned_.push_back(be_.alloc_host(bytes));
    return owned_.back()->data();
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  size_t weight_bytes(int64_t n) const {
    return static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(be_.weight_dtype());
  }
  void check_fits(size_t bytes) {
    used_ += static_cast<double>(bytes);
    if (used_ > limit_) {
      throw PointSkip{fmt::format("needs more than the {:.2f} GB of device memory free for it", limit_ / 1e9)};
    }
  }
  DeviceBuffer* take(size_t bytes) {
    check_fits(std::max<size_t>(bytes, 1));
    owned_.push_back(be_.alloc(std::max<size_t>(bytes, 1)));
    return owned_.back().get();
  }

  Backend& be_;
  SeriesWeights& series_;
  double limit_;
  std::mt19937_64& rng_;
  double used_ = 0;
  std::vector<std::unique_ptr<DeviceBuffer>> owned_;
};

// One point ready to time: the call that issues the op once.
struct Prepared {
  std::function<void()> issue;
  bool capturable = true;  // false: the op waits for the device itself (host copies, sampling)
  CalibPoint recorded;     // the dims as written (moe_experts adds the experts its routing touched)
};

using PrepareFn = Prepared (*)(PointMemory&, Backend&, const CalibPoint&);

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

Prepared prepare_linear(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t m = d[0], n = d[1], k = d[2];
  const float* x = mem.random(m * k);
  const void* w = mem.weights(n * k, 0.02f, "w");
  float* y = mem.floats(m * n);
  return {.issue = [&be, x, w, y, m, n, k] { be.linear(x, w, nullptr, y, m, n, k); }};
}

Prepared prepare_linear_f32(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t m = d[0], n = d[1], k = d[2];
  const float* x = mem.random(m * k);
  const float* w = mem.random(n * k, 0.02f);
  float* y = mem.floats(m * n);
  return {.issue = [&be, x, w, y, m, n, k] { be.linear_f32(x, w, y, m, n, k); }};
}

// Routing uniformly at random: top_k distinct experts per token; the weights 1/top_k.
Prepared prepare_moe_experts(PointMemory& mem, Backend& be, const CalibPoint& d) {
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
                   .gate_up = mem.weights(E * 2 * I * H, 0.02f, "gate_up"),
                   .down = mem.weights(E * H * I, 0.02f, "down"),
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
  return {.issue = [&be, a] { be.moe_experts(a); }, .capturable = be.moe_experts_async(a), .recorded = recorded};
}

Prepared prepare_paged_attention(PointMemory& mem, Backend& be, const CalibPoint& d) {
  const int64_t seqs = d[0], q_len = d[1], context = d[2], nh = d[3], kvh = d[4], hd = d[5];
  const PagedBatch b = paged_batch(mem, seqs, q_len, context);
  PagedAttentionArgs a{.q = mem.random(b.tokens * nh * hd),
                       .k_cache = mem.weights(b.slots * kvh * hd, 1.0f),
                       .v_cache = mem.weights(b.slots * kvh * hd, 1.0f),
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
  return {.issue = [&be, a] { be.paged_attention(a); }};
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

struct OpEntry {
  OpSpec spec;
  PrepareFn prepare;
};

// Every op of the profile: its name (the Backend method's), its dims, and how a point is set up.
const std::vector<OpEntry>& op_entries() {
  static const std::vector<OpEntry> entries = {
      {{"linear", {"m", "n", "k"}}, prepare_linear},
      {{"linear_f32", {"m", "n", "k"}}, prepare_linear_f32},
      {{"moe_experts", {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"}}, prepare_moe_experts},
      {{"paged_attention", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"}}, prepare_paged_attention},
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

// Replays `calls` captured calls as one graph: the median of `repeats` replays per call. Once, a batch shorter than
// half the target is captured again with more calls.
double time_captured(Backend& be, const Prepared& p, const TimingPolicy& t, int calls) {
  struct DropCaptures {
    Backend& be;
    ~DropCaptures() { be.drop_captures(); }
  } drop{be};
  for (int attempt = 0;; ++attempt) {
    const int64_t id = be.capture([&] {
      for (int i = 0; i < calls; ++i) p.issue();
    });
    be.replay(id);  // the first launch uploads the graph
    be.synchronize();
    auto t0 = BenchClock::now();
    be.replay(id);
    be.synchronize();
    const double batch = us_since(t0);
    if (attempt == 0 && batch < t.batch_us / 2 && calls < t.max_calls) {
      calls = static_cast<int>(std::min<double>(t.max_calls, std::ceil(calls * t.batch_us / std::max(batch, 1.0))));
      be.drop_captures();
      continue;
    }
    std::vector<double> per_call{batch / calls};
    while (static_cast<int>(per_call.size()) < t.repeats) {
      t0 = BenchClock::now();
      be.replay(id);
      be.synchronize();
      per_call.push_back(us_since(t0) / calls);
    }
    return median(per_call);
  }
}

// µs per call of the prepared op, as TimingPolicy says.
double time_prepared(Backend& be, const Prepared& p, const TimingPolicy& t) {
  // The first call sizes the backend's scratch memory (a capture must not allocate); the second is timed alone.
  p.issue();
  be.synchronize();
  auto t0 = BenchClock::now();
  p.issue();
  be.synchronize();
  const double once = us_since(t0);
  std::vector<double> per_call;
  int calls = 1, repeats = t.repeats;
  if (once >= t.batch_us) {
    // One call fills a batch: launch costs are small against it, and three of them agree closely.
    per_call.push_back(once);
    repeats = std::min(repeats, 3);
  } else {
    calls = static_cast<int>(std::clamp(std::ceil(t.batch_us / std::max(once, 0.01)), 1.0, double(t.max_calls)));
    if (t.graphs && p.capturable && be.can_capture()) {
      try {
        return time_captured(be, p, t, calls);
      } catch (const Error& e) {
        log_warn("bench calibrate: capturing the op failed ({}); timing it eagerly", e.what());
      }
    }
  }
  while (static_cast<int>(per_call.size()) < repeats) {
    t0 = BenchClock::now();
    for (int i = 0; i < calls; ++i) p.issue();
    be.synchronize();
    per_call.push_back(us_since(t0) / calls);
  }
  return median(per_call);
}

std::string point_text(const CalibPoint& p) { return fmt::format("[{}]", fmt::join(p, ", ")); }

// The time left to an op: what is left of the whole budget, in proportion to its weight among the ops left.
struct Budget {
  BenchClock::time_point start = BenchClock::now();
  double seconds = 0;
  double weight_left = 0;

  double share(double weight) const {
    const double left = std::max(0.0, seconds - ms_since(start) / 1e3);
    return weight_left > 0 ? left * weight / weight_left : left;
  }
};

// Ranks that share the host's cores and memory (CPU ranks) time each point together: they start it after a
// barrier, every decision to skip is taken by all of them, and the time kept is the slowest rank's. In a step the
// ranks stream and compute at the same moments and wait for the slowest at the next collective; ranks timing
// the grid each at its own pace would share the memory with whatever the others happen to run. Without a
// communicator (one rank, or GPUs of their own) each call is the identity.
// A point this many times slower a row than its series' previous point is timed again (Lockstep's loop).
constexpr double kOutlierFactor = 4.0;

struct Lockstep {
  Communicator* world = nullptr;

  bool any(bool mine) const {
    if (world == nullptr) return mine;
    float f = mine ? 1.0f : 0.0f;
    world->all_reduce_sum(&f, 1);
    return f > 0;
  }
  void start() const {
    if (world != nullptr) world->barrier();
  }
  double slowest(double us) const { return world == nullptr ? us : slowest_rank(*world, us); }
  // Rank 0 times the point again while the others wait at the barrier, as the idle ranks of a step wait in a
  // collective (a pipeline's other stages at batch 1, attention replicas without a sequence); 0 on the other
  // ranks, without a communicator, or when that second timing fails.
  double alone(const std::function<double()>& time) const {
    if (world == nullptr) return 0;
    double us = 0;
    if (world->rank() == 0) {
      // On failure the point keeps its lockstep time only (us stays 0).
      try {
        us = time();
      } catch (const Error&) {
      } catch (const std::bad_alloc&) {
      }
    }
    world->barrier();
    return us;
  }
};

}  // namespace

const std::vector<OpSpec>& calibrated_ops() {
  static const std::vector<OpSpec> specs = [] {
    std::vector<OpSpec> v;
    for (const OpEntry& e : op_entries()) v.push_back(e.spec);
    return v;
  }();
  return specs;
}

std::vector<MeasuredOp> time_ops(const OpsRun& run, const std::vector<OpGrid>& grid,
                                 std::vector<SkippedPoint>& skipped) {
  Backend& be = run.be;
  SY_CHECK(be.kv_storage_dtype() == be.weight_dtype(), "bench calibrate fills the KV cache in the weight dtype");
  const Lockstep lock{.world = run.lockstep};
  Budget budget{.seconds = run.seconds};
  for (const OpGrid& g : grid) budget.weight_left += g.weight;
  std::mt19937_64 rng(20240519);
  std::vector<MeasuredOp> tables;
  // Memory kept back for the backend's own (scratch, libraries' workspaces).
  const double reserve = be.device() == Device::cpu ? 1e9 : 2e9;
  for (const OpGrid& g : grid) {
    const OpEntry& entry = find_op(g.op);
    MeasuredOp table{.op = g.op, .dims = entry.spec.dims};
    const auto op_start = BenchClock::now();
    const double share = budget.share(g.weight);
    budget.weight_left -= g.weight;
    size_t n_skipped = 0;
    const auto skip = [&](const CalibPoint& p, std::string why) {
      skipped.push_back({.op = g.op, .point = p, .why = std::move(why)});
      ++n_skipped;
    };
    // Each series (one shape, growing rows) has an equal part of what is left of the op's share, so that a
    // bound too short for the whole grid still reaches every shape, the later models' as well as the first's.
    size_t series_left = g.series.size();
    for (const std::vector<CalibPoint>& series : g.series) {
      SeriesWeights weights;
      const double series_share = std::max(0.0, share - ms_since(op_start) / 1e3) / static_cast<double>(series_left--);
      const auto series_start = BenchClock::now();
      double prev_us = 0, prev_rows = 1;  // the series' last timed point: its time and its first dim
      for (size_t i = 0; i < series.size(); ++i) {
        const CalibPoint& point = series[i];
        const size_t later = series.size() - i - 1;
        // A series' first point is timed whatever the budget, so that no op or shape is left without points (the
        // planner would fall back to the preset's efficiencies, or to another shape's ratio).
        if (i > 0 && lock.any(ms_since(series_start) / 1e3 > series_share)) {
          skip(point, fmt::format("the series' part ({:.2f} s) of the op's share of the time budget ({:.1f} s of "
                                  "--max-seconds) was spent; {} larger point(s) of this series not timed either",
                                  series_share, share, later));
          break;
        }
        if (std::any_of(point.begin(), point.end(), [](int64_t v) { return v <= 0; })) {
          skip(point, "a dim is 0 (a slice finer than the shape, e.g. 4 kv heads over tp 8)");
          continue;
        }
        std::optional<PointMemory> mem;
        std::optional<Prepared> prepared;
        std::string why;
        double us = 0;
        bool failed = false;
        // Preparing, then timing; a rank that fails either says so to the others before any of them goes on.
        // The backend's own scratch for the op (outside the limit above) may not fit, or a library may refuse the
        // shape: the point is recorded as skipped with the reason, and the run goes on.
        for (const bool timing : {false, true}) {
          bool mine = true;  // this rank failed, until its step returns
          try {
            if (timing) {
              us = time_prepared(be, *prepared, run.timing);
            } else {
              const double free = static_cast<double>(be.memory_info().free_bytes) * run.memory_share - reserve;
              mem.emplace(be, weights, free, rng);
              prepared.emplace(entry.prepare(*mem, be, point));
            }
            mine = false;
          } catch (const PointSkip& s) {
            why = s.why;
          } catch (const std::bad_alloc&) {
            why = "the allocation failed (out of memory)";
          } catch (const Error& e) {
            why = e.what();
          }
          failed = lock.any(mine);
          if (failed) {
            if (!mine) why = "another rank could not time this point";
            break;
          }
          if (!timing) lock.start();
        }
        if (failed) {
          skip(point, why);
          continue;
        }
        us = lock.slowest(us);
        // A point far slower a row than the series' previous one (time grows at most in proportion to the rows)
        // met a rank descheduled for milliseconds (CPU ranks sharing a host: 6 ms for 128 rows of add_rms_norm
        // where 64 rows took 12 µs); timed again, up to twice, and the fastest kept. A series' first point has
        // nothing to compare with (752 µs for one row of a 2,048 × 256 product whose 4,096-row sibling took 181):
        // with ranks sharing a host it is always timed twice. Every rank sees the same slowest time, so all of
        // them retime together.
        const double bound = kOutlierFactor * prev_us * static_cast<double>(point[0]) / prev_rows;
        const bool first_shared = i == 0 && lock.world != nullptr;
        for (int again = 0; again < 2 && ((first_shared && again == 0) || (prev_us > 0 && us > bound)); ++again) {
          lock.start();
          double retimed = 0;
          try {
            retimed = time_prepared(be, *prepared, run.timing);
          } catch (const Error&) {
            retimed = us;
          }
          us = std::min(us, lock.slowest(retimed));
        }
        prev_us = us;
        prev_rows = static_cast<double>(point[0]);
        const double alone = lock.alone([&] { return time_prepared(be, *prepared, run.timing); });
        const CalibPoint recorded = prepared->recorded.empty() ? point : prepared->recorded;
        table.points.push_back({.dims = recorded, .us = us, .alone_us = alone});
        if (us > run.timing.cut_us && later > 0) {
          skip(series[i + 1], fmt::format("one call at {} took {:.1f} ms, over the {:.0f} ms cut; this and {} larger "
                                          "point(s) of the series not timed",
                                          point_text(point), us / 1e3, run.timing.cut_us / 1e3, later - 1));
          break;
        }
      }
    }
    if (run.log) {
      std::printf("calibrate: %-22s %5zu points, %4zu skipped, %6.1f s\n", g.op.c_str(), table.points.size(), n_skipped,
                  ms_since(op_start) / 1e3);
      std::fflush(stdout);
    }
    // An op none of whose points could be timed is left out (its points are in "skipped"); the profile reader
    // refuses an empty table.
    if (!table.points.empty()) tables.push_back(std::move(table));
  }
  return tables;
}

StepSection time_step_costs(Backend& be, const TimingPolicy& timing) {
  constexpr int64_t kTiny = 256;
  auto y = random_floats(be, kTiny, 1), x = random_floats(be, kTiny, 2);
  const auto tiny = [&] { be.add(y->as<float>(), x->as<float>(), kTiny); };
  StepSection s;
  constexpr int kSamples = 200;
  std::vector<double> launch, sync, read_back;
  tiny();
  be.synchronize();
  for (int r = 0; r < 5; ++r) {
    const auto t0 = BenchClock::now();
    for (int i = 0; i < kSamples; ++i) tiny();
    launch.push_back(us_since(t0) / kSamples);  // issue time only: the device may still be running them
    be.synchronize();
  }
  s.launch_us = median(launch);
  int32_t word = 0;
  auto dev_word = be.alloc(sizeof(word));
  be.copy_on_device(dev_word->data(), x->data(), sizeof(word));
  for (int i = 0; i < kSamples; ++i) {
    be.synchronize();
    auto t0 = BenchClock::now();
    be.synchronize();
    sync.push_back(us_since(t0));
    t0 = BenchClock::now();
    be.copy_to_host(&word, dev_word->data(), sizeof(word));
    read_back.push_back(us_since(t0));
  }
  s.sync_us = median(sync);
  s.copy_to_host_us = median(read_back);
  if (timing.graphs && be.can_capture()) {
    // The op's own time inside a graph of many, then one graph of it replayed and waited for, less the wait.
    const double op_us = time_captured(be, {.issue = tiny}, timing, timing.max_calls);
    struct DropCaptures {
      Backend& be;
      ~DropCaptures() { be.drop_captures(); }
    } drop{be};
    const int64_t id = be.capture(tiny);
    be.replay(id);
    be.synchronize();
    std::vector<double> one;
    for (int i = 0; i < kSamples; ++i) {
      const auto t0 = BenchClock::now();
      be.replay(id);
      be.synchronize();
      one.push_back(us_since(t0));
    }
    s.graph_launch_us = std::max(0.0, median(one) - s.sync_us - op_us);
  }
  return s;
}

double time_matrix_rate(Backend& be, const TimingPolicy& timing) {
  const int64_t n = be.device() == Device::cpu ? 1024 : 8192;
  SeriesWeights weights;
  std::mt19937_64 rng(7);
  PointMemory mem(be, weights, 1e18, rng);
  const Prepared p = prepare_linear(mem, be, {n, n, n});
  return 2.0 * std::pow(static_cast<double>(n), 3) / (time_prepared(be, p, timing) * 1e-6);
}

}  // namespace sy
