// bench_kernels: times each CPU kernel against its scalar reference on random inputs of model-like sizes
// and prints a table (median of runs after a warm-up, with the cpu kernel's achieved GFLOP/s and GB/s).
// A benchmark, not a test: it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace sy {
namespace {

std::mt19937 g_rng(2024);

std::vector<float> random_normal(int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = dist(g_rng);
  }
  return v;
}

// Median wall time in ms of `run` after one warm-up call; repeats until ~0.3 s spent (3 to 25 runs).
double median_ms(const std::function<void()>& run) {
  run();
  std::vector<double> times;
  double total = 0.0;
  while (times.size() < 3 || (times.size() < 25 && total < 300.0)) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    times.push_back(ms);
    total += ms;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Case {
  std::string op, shape;
  double flops, bytes;  // of one call: arithmetic, and the minimum bytes read plus written
  std::function<void(bool use_cpu)> run;
};

void report(const Case& c) {
  const double ref_ms = median_ms([&] { c.run(false); });
  const double cpu_ms = median_ms([&] { c.run(true); });
  std::printf("| %-15s | %-34s | %10.3f | %9.3f | %8.1fx | %8.2f | %8.2f |\n", c.op.c_str(), c.shape.c_str(), ref_ms,
              cpu_ms, ref_ms / cpu_ms, c.flops / cpu_ms * 1e-6, c.bytes / cpu_ms * 1e-6);
  std::fflush(stdout);
}

Case linear_case(int64_t m, int64_t n, int64_t k) {
  auto x = std::make_shared<std::vector<float>>(random_normal(m * k));
  auto w = std::make_shared<std::vector<float>>(random_normal(n * k));
  auto b = std::make_shared<std::vector<float>>(random_normal(n));
  auto y = std::make_shared<std::vector<float>>(size_t(m * n));
  return {"linear", "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k),
          2.0 * double(m * n * k), 4.0 * double(m * k + n * k + n + m * n), [=](bool use_cpu) {
            (use_cpu ? cpu::linear : ref::linear)(x->data(), w->data(), b->data(), y->data(), m, n, k);
          }};
}

Case rms_norm_case(int64_t rows, int64_t dim) {
  auto x = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto w = std::make_shared<std::vector<float>>(random_normal(dim));
  auto y = std::make_shared<std::vector<float>>(size_t(rows * dim));
  return {"rms_norm", "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim), 4.0 * double(rows * dim),
          4.0 * double(2 * rows * dim + dim), [=](bool use_cpu) {
            (use_cpu ? cpu::rms_norm : ref::rms_norm)(x->data(), w->data(), y->data(), rows, dim, 1e-6f);
          }};
}

Case add_rms_norm_case(int64_t rows, int64_t dim) {
  auto res = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto x = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto w = std::make_shared<std::vector<float>>(random_normal(dim));
  auto y = std::make_shared<std::vector<float>>(size_t(rows * dim));
  // The residual grows by x on every call; after a few dozen calls it is still far from overflow.
  return {"add_rms_norm", "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim), 5.0 * double(rows * dim),
          4.0 * double(4 * rows * dim + dim), [=](bool use_cpu) {
            (use_cpu ? cpu::add_rms_norm : ref::add_rms_norm)(res->data(), x->data(), w->data(), y->data(), rows, dim,
                                                              1e-6f);
          }};
}

Case embedding_case(int64_t vocab, int64_t dim, int64_t tokens) {
  auto table = std::make_shared<std::vector<float>>(random_normal(vocab * dim));
  auto ids = std::make_shared<std::vector<int32_t>>(size_t(tokens));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (int32_t& id : *ids) {
    id = pick(g_rng);
  }
  auto out = std::make_shared<std::vector<float>>(size_t(tokens * dim));
  return {"embedding",
          "vocab=" + std::to_string(vocab) + " dim=" + std::to_string(dim) + " t=" + std::to_string(tokens), 0.0,
          4.0 * double(2 * tokens * dim), [=](bool use_cpu) {
            (use_cpu ? cpu::embedding : ref::embedding)(table->data(), ids->data(), out->data(), tokens, dim);
          }};
}

Case silu_mul_case(int64_t rows, int64_t inter) {
  auto gate_up = std::make_shared<std::vector<float>>(random_normal(rows * 2 * inter));
  auto out = std::make_shared<std::vector<float>>(size_t(rows * inter));
  return {"silu_mul", "rows=" + std::to_string(rows) + " inter=" + std::to_string(inter), 5.0 * double(rows * inter),
          4.0 * double(3 * rows * inter),
          [=](bool use_cpu) { (use_cpu ? cpu::silu_mul : ref::silu_mul)(gate_up->data(), out->data(), rows, inter); }};
}

Case rope_case(int64_t tokens, int64_t heads, int64_t head_dim) {
  auto x = std::make_shared<std::vector<float>>(random_normal(tokens * heads * head_dim));
  auto inv_freq = std::make_shared<std::vector<float>>(size_t(head_dim / 2));
  for (size_t i = 0; i < inv_freq->size(); ++i) {
    (*inv_freq)[i] = std::pow(10000.0f, -float(2 * i) / float(head_dim));
  }
  auto positions = std::make_shared<std::vector<int32_t>>(size_t(tokens));
  std::iota(positions->begin(), positions->end(), 1000);
  const RopeArgs args{.x = x->data(),
                      .positions = positions->data(),
                      .inv_freq = inv_freq->data(),
                      .tokens = tokens,
                      .heads = heads,
                      .head_dim = head_dim,
                      .rotary_dim = head_dim};
  return {"rope", "t=" + std::to_string(tokens) + " heads=" + std::to_string(heads) + " hd=" + std::to_string(head_dim),
          3.0 * double(tokens * heads * head_dim), 4.0 * double(2 * tokens * heads * head_dim),
          [x, inv_freq, positions, args](bool use_cpu) { (use_cpu ? cpu::rope : ref::rope)(args); }};
}

Case kv_write_case(int64_t tokens, int64_t kv_heads, int64_t head_dim, int64_t n_slots) {
  auto k = std::make_shared<std::vector<float>>(random_normal(tokens * kv_heads * head_dim));
  auto v = std::make_shared<std::vector<float>>(random_normal(tokens * kv_heads * head_dim));
  auto k_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto v_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto slots = std::make_shared<std::vector<int32_t>>(size_t(n_slots));
  std::iota(slots->begin(), slots->end(), 0);
  std::shuffle(slots->begin(), slots->end(), g_rng);
  const KvWriteArgs args{.k = k->data(),
                         .v = v->data(),
                         .slots = slots->data(),
                         .k_cache = k_cache->data(),
                         .v_cache = v_cache->data(),
                         .tokens = tokens,
                         .kv_heads = kv_heads,
                         .head_dim = head_dim,
                         .v_head_dim = head_dim};
  return {"kv_write",
          "t=" + std::to_string(tokens) + " kv_heads=" + std::to_string(kv_heads) + " hd=" + std::to_string(head_dim),
          0.0, 4.0 * double(4 * tokens * kv_heads * head_dim),
          [k, v, k_cache, v_cache, slots, args](bool use_cpu) { (use_cpu ? cpu::kv_write : ref::kv_write)(args); }};
}

// n_seqs sequences of `length` tokens in shuffled blocks of 16; the last `queries` positions of each query.
Case attention_case(int64_t n_seqs, int64_t length, int64_t queries, int64_t n_heads, int64_t kv_heads,
                    int64_t head_dim) {
  const int64_t block_size = 16, max_blocks = (length + block_size - 1) / block_size;
  const int64_t n_slots = n_seqs * max_blocks * block_size, tokens = n_seqs * queries;
  auto block_tables = std::make_shared<std::vector<int32_t>>(size_t(n_seqs * max_blocks));
  std::iota(block_tables->begin(), block_tables->end(), 0);
  std::shuffle(block_tables->begin(), block_tables->end(), g_rng);
  auto token_seq = std::make_shared<std::vector<int32_t>>();
  auto positions = std::make_shared<std::vector<int32_t>>();
  double visible_keys = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t p = length - queries; p < length; ++p) {
      token_seq->push_back(int32_t(s));
      positions->push_back(int32_t(p));
      visible_keys += double(p + 1);
    }
  }
  auto q = std::make_shared<std::vector<float>>(random_normal(tokens * n_heads * head_dim));
  auto k_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto v_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto out = std::make_shared<std::vector<float>>(size_t(tokens * n_heads * head_dim));
  const PagedAttentionArgs args{.q = q->data(),
                                .k_cache = k_cache->data(),
                                .v_cache = v_cache->data(),
                                .block_tables = block_tables->data(),
                                .token_seq = token_seq->data(),
                                .positions = positions->data(),
                                .out = out->data(),
                                .tokens = tokens,
                                .n_heads = n_heads,
                                .kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .v_head_dim = head_dim,
                                .block_size = block_size,
                                .max_blocks = max_blocks,
                                .scale = 1.0f / std::sqrt(float(head_dim))};
  return {"paged_attention",
          "seqs=" + std::to_string(n_seqs) + " len=" + std::to_string(length) + " q=" + std::to_string(queries) +
              " h=" + std::to_string(n_heads) + "/" + std::to_string(kv_heads) + " hd=" + std::to_string(head_dim),
          4.0 * visible_keys * double(n_heads * head_dim),
          4.0 * double(2 * n_seqs * length * kv_heads * head_dim + 2 * tokens * n_heads * head_dim),
          [q, k_cache, v_cache, block_tables, token_seq, positions, out, args](bool use_cpu) {
            (use_cpu ? cpu::paged_attention : ref::paged_attention)(args);
          }};
}

Case softmax_topk_case(int64_t tokens, int64_t n_experts, int64_t top_k) {
  auto logits = std::make_shared<std::vector<float>>(random_normal(tokens * n_experts));
  auto ids = std::make_shared<std::vector<int32_t>>(size_t(tokens * top_k));
  auto weights = std::make_shared<std::vector<float>>(size_t(tokens * top_k));
  const SoftmaxTopkArgs args{.logits = logits->data(),
                             .expert_ids = ids->data(),
                             .weights = weights->data(),
                             .tokens = tokens,
                             .n_experts = n_experts,
                             .top_k = top_k,
                             .renormalize = true};
  return {"softmax_topk",
          "t=" + std::to_string(tokens) + " experts=" + std::to_string(n_experts) + " k=" + std::to_string(top_k),
          3.0 * double(tokens * n_experts), 4.0 * double(tokens * n_experts + 2 * tokens * top_k),
          [logits, ids, weights, args](bool use_cpu) { (use_cpu ? cpu::softmax_topk : ref::softmax_topk)(args); }};
}

}  // namespace
}  // namespace sy

int main() {
  using namespace sy;
  std::printf("| %-15s | %-34s | %10s | %9s | %9s | %8s | %8s |\n", "op", "shape", "ref ms", "cpu ms", "speedup",
              "cpu GF/s", "cpu GB/s");
  std::printf(
      "|-----------------|------------------------------------|------------|-----------|-----------|----------|--------"
      "--|\n");
  const std::vector<std::function<Case()>> cases = {
      [] { return linear_case(1, 2048, 2048); },
      [] { return linear_case(64, 2048, 2048); },
      [] { return linear_case(37, 129, 1000); },
      [] { return rms_norm_case(64, 4096); },
      [] { return add_rms_norm_case(64, 4096); },
      [] { return embedding_case(8192, 2048, 64); },
      [] { return silu_mul_case(64, 1408); },
      [] { return rope_case(64, 32, 128); },
      [] { return kv_write_case(64, 8, 128, 4096); },
      [] { return attention_case(16, 1024, 1, 32, 8, 128); },
      [] { return attention_case(1, 512, 512, 16, 4, 128); },
      [] { return softmax_topk_case(256, 128, 8); },
  };
  for (const auto& make : cases) {
    report(make());
  }
  return 0;
}
