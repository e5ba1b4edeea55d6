// The CUDA backend against the CPU backend, op by op, on fresh random inputs of awkward shapes.
// Weights are drawn as bf16-representable values so both backends hold identical weights; the
// tolerance covers the CUDA backend rounding activations to bf16 at matrix-product inputs and
// keeping the KV cache in bf16 (relative rounding 2^-9 per element).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "common/backend_data.h"

namespace sy {
namespace {

constexpr double kTol = 2e-2;

std::vector<float> randn(size_t n, std::mt19937& rng, bool bf16_exact = false) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_exact ? bf16_to_f32(f32_to_bf16(d(rng))) : d(rng);
  return v;
}

using test::Dev;
using test::rel_err;

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> cpu_, gpu_;
  std::mt19937 rng_{123};
};

TEST_F(CudaVsCpu, LinearWithAndWithoutBias) {
  // m <= 16 with k % 8 == 0 takes the GEMV kernel; the rest cuBLAS.
  for (auto [m, n, k] : {std::tuple{1, 7, 13},
                         {5, 129, 64},
                         {37, 300, 257},
                         {128, 64, 2048},
                         {1, 4096, 2048},
                         {3, 37, 200},
                         {10, 512, 768},
                         {16, 129, 1024}}) {
    const auto x = randn(size_t(m * k), rng_), w = randn(size_t(n * k), rng_, true), b = randn(size_t(n), rng_, true);
    for (bool bias : {false, true}) {
      std::vector<float> r[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        float* y = d.out(size_t(m * n));
        be->linear(d.f32(x), d.weight(w), bias ? d.weight(b) : nullptr, y, m, n, k);
        r[i++] = d.host(y, size_t(m * n));
      }
      EXPECT_LE(rel_err(r[1], r[0]), kTol) << m << "x" << n << "x" << k << " bias " << bias;
    }
  }
}

TEST_F(CudaVsCpu, NormsEmbeddingSiluRope) {
  const int64_t rows = 13, dim = 200, vocab = 50, heads = 3, hd = 20;
  const auto x = randn(size_t(rows * dim), rng_), res = randn(size_t(rows * dim), rng_);
  const auto w = randn(size_t(dim), rng_, true), table = randn(size_t(vocab * dim), rng_, true);
  std::vector<int32_t> ids(rows), pos(rows);
  for (int64_t i = 0; i < rows; ++i) ids[size_t(i)] = int32_t((i * 7) % vocab), pos[size_t(i)] = int32_t(i * 3 + 1);
  std::vector<float> inv(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
  std::vector<std::vector<float>> r[2];
  int i = 0;
  for (Backend* be : {cpu_.get(), gpu_.get()}) {
    Dev d(*be);
    float* y = d.out(size_t(rows * dim));
    be->rms_norm(d.f32(x), d.weight(w), y, rows, dim, 1e-5f);
    r[i].push_back(d.host(y, size_t(rows * dim)));
    float* rd = d.f32(res);
    be->add_rms_norm(rd, d.f32(x), d.weight(w), y, rows, dim, 1e-6f);
    r[i].push_back(d.host(y, size_t(rows * dim)));
    r[i].push_back(d.host(rd, size_t(rows * dim)));
    be->embedding(d.weight(table), d.i32(ids), y, rows, dim);
    r[i].push_back(d.host(y, size_t(rows * dim)));
    float* a = d.out(size_t(rows * dim / 2));
    be->silu_mul(d.f32(x), a, rows, dim / 2);
    r[i].push_back(d.host(a, size_t(rows * dim / 2)));
    for (bool interleaved : {false, true}) {
      float* q = d.f32(std::vector<float>(x.begin(), x.begin() + rows * heads * hd));
      be->rope({.x = q,
                .positions = d.i32(pos),
                .inv_freq = d.f32(inv),
                .tokens = rows,
                .heads = heads,
                .head_dim = hd,
                .rotary_dim = hd - 4,
                .attention_scale = 1.3f,
                .interleaved = interleaved});
      r[i].push_back(d.host(q, size_t(rows * heads * hd)));
    }
    ++i;
  }
  for (size_t k = 0; k < r[0].size(); ++k) EXPECT_LE(rel_err(r[1][k], r[0][k]), kTol) << "output " << k;
}

// The router product: fp32 throughout on both (m <= 4 with k % 4 == 0 takes the fp32 GEMV kernel).
TEST_F(CudaVsCpu, LinearF32) {
  for (auto [m, n, k] : {std::tuple{1, 128, 2048}, {3, 7, 36}, {4, 129, 4100}, {2, 33, 13}, {5, 64, 256}}) {
    const auto x = randn(size_t(m * k), rng_), w = randn(size_t(n * k), rng_);
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      float* y = d.out(size_t(m * n));
      be->linear_f32(d.f32(x), d.f32(w), y, m, n, k);
      r[i++] = d.host(y, size_t(m * n));
    }
    EXPECT_LE(rel_err(r[1], r[0]), 1e-5) << m << "x" << n << "x" << k;
  }
}

// q/k norm, rope and the KV write in one pass against the cpu-bf16 oracle's composition of the three:
// q and k in place, both caches (NaN where nothing may be written, checked to stay NaN).
TEST_F(CudaVsCpu, QkNormRopeKvWrite) {
  struct Case {
    int64_t tokens, n_heads, kv_heads, hd, rotary;
    bool norm, interleaved;
  };
  for (const Case& c : {Case{1, 32, 4, 128, 128, true, false}, Case{5, 4, 2, 64, 48, true, true},
                        Case{3, 3, 1, 24, 20, false, true}, Case{2, 6, 3, 40, 40, false, false}}) {
    const int64_t T = c.tokens, n_slots = 4 * T + 3;
    const auto q = randn(size_t(T * c.n_heads * c.hd), rng_), k = randn(size_t(T * c.kv_heads * c.hd), rng_),
               v = randn(size_t(T * c.kv_heads * c.hd), rng_);
    const auto qn = randn(size_t(c.hd), rng_, true), kn = randn(size_t(c.hd), rng_, true);
    std::vector<int32_t> slots(static_cast<size_t>(T)), pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      slots[size_t(t)] = int32_t((t * 5 + 2) % n_slots);
      pos[size_t(t)] = int32_t(t * 37 + 3);
    }
    std::vector<float> inv(size_t(c.rotary / 2));
    for (int64_t i = 0; i < c.rotary / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / c.rotary));
    const std::vector<float> nan_cache(size_t(n_slots * c.kv_heads * c.hd), std::numeric_limits<float>::quiet_NaN());
    const auto oracle = make_cpu_backend(true);
    std::vector<std::vector<float>> r[2];
    int i = 0;
    for (Backend* be : {oracle.get(), gpu_.get()}) {
      Dev d(*be);
      float* dq = d.f32(q);
      float* dk = d.f32(k);
      void* kc = d.cache(nan_cache);
      void* vc = d.cache(nan_cache);
      be->qk_norm_rope_kv_write({.q = dq,
                                 .k = dk,
                                 .v = d.f32(v),
                                 .q_norm = c.norm ? d.weight(qn) : nullptr,
                                 .k_norm = c.norm ? d.weight(kn) : nullptr,
                                 .norm_eps = 1e-6f,
                                 .positions = d.i32(pos),
                                 .inv_freq = d.f32(inv),
                                 .rotary_dim = c.rotary,
                                 .attention_scale = 1.1f,
                                 .interleaved = c.interleaved,
                                 .slots = d.i32(slots),
                                 .k_cache = kc,
                                 .v_cache = vc,
                                 .tokens = T,
                                 .n_heads = c.n_heads,
                                 .kv_heads = c.kv_heads,
                                 .head_dim = c.hd});
      r[i].push_back(d.host(dq, q.size()));
      r[i].push_back(d.host(dk, k.size()));
      r[i].push_back(d.host_cache(kc, nan_cache.size()));
      r[i].push_back(d.host_cache(vc, nan_cache.size()));
      ++i;
    }
    for (size_t o = 0; o < r[0].size(); ++o) {
      // NaN in the same places (unwritten slots), then the error over the written ones.
      std::vector<float> a, b;
      int64_t nan_mismatch = 0;
      for (size_t j = 0; j < r[0][o].size(); ++j) {
        const bool na = std::isnan(r[0][o][j]), nb = std::isnan(r[1][o][j]);
        nan_mismatch += na != nb ? 1 : 0;
        if (!na && !nb) a.push_back(r[0][o][j]), b.push_back(r[1][o][j]);
      }
      EXPECT_EQ(nan_mismatch, 0) << "output " << o << " heads " << c.n_heads << " hd " << c.hd;
      // q and k are fp32 on both; the caches bf16 on both, where one fp32 ulp can flip a rounding.
      EXPECT_LE(rel_err(b, a), o < 2 ? 1e-4 : 1e-2) << "output " << o << " heads " << c.n_heads << " hd " << c.hd;
    }
  }
}

// A batch of sequences for paged attention: each has `context` positions cached after the step, and
// its last `queries` positions are this step's tokens.
struct AttentionLayout {
  std::string name;
  int64_t block_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (context, queries)
};

void PrintTo(const AttentionLayout& layout, std::ostream* os) { *os << layout.name; }

using AttentionCase = std::tuple<std::tuple<int, int, int>, AttentionLayout>;  // (heads, kv heads, head_dim), layout
class CudaAttention : public CudaVsCpu, public ::testing::WithParamInterface<AttentionCase> {};

std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const auto& [heads, layout] = info.param;
  return layout.name + "_h" + std::to_string(std::get<0>(heads)) + "_kv" + std::to_string(std::get<1>(heads)) + "_d" +
         std::to_string(std::get<2>(heads));
}

// Head shapes: the generic kernel (head_dim 24; a group of 20), and the tensor-core kernels with groups
// of 1, 3, 4, 8 (Qwen3-30B-A3B) and 16 at head_dim 32, 64 and 128. Layouts: prefill chunks that start
// mid-tile and share tiles with other sequences, a long chunk after cached context next to a decode
// token (the prefill kernel), and decode batches (one token per sequence: the split decode kernel) of
// short and long contexts with an odd block size.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Combine(
        ::testing::Values(std::tuple{6, 2, 24}, std::tuple{20, 1, 64}, std::tuple{8, 8, 32},
                          std::tuple{12, 4, 64}, std::tuple{8, 2, 64}, std::tuple{32, 4, 128}, std::tuple{16, 1, 128}),
        ::testing::Values(AttentionLayout{"prefill_9_and_18", 4, {{9, 9}, {18, 18}}},
                          AttentionLayout{"chunk_after_context", 8, {{190, 150}, {77, 1}, {3, 3}}},
                          AttentionLayout{"decode_short_and_long", 16, {{1, 1}, {17, 1}, {64, 1}, {65, 1}, {300, 1}}},
                          AttentionLayout{"decode_odd_blocks", 5, {{700, 1}, {129, 1}, {2, 1}}})),
    attention_case_name);

// Against the cpu-bf16 oracle (the same bf16 KV cache): the kernels keep q and the probabilities to
// ~16 bits, so the outputs agree to fp32 summation order. Block tables hand out the pool's blocks in a
// shuffled order with unused blocks between them; cache slots never written and table entries past a
// sequence's blocks hold NaN (an unwritten block), as does the output before the call, so a read of a
// key that is not visible, or an output never written, shows.
TEST_P(CudaAttention, PagedAttentionMatchesCpuBf16) {
  const auto [nh, kvh, d] = std::get<0>(GetParam());
  const AttentionLayout& lay = std::get<1>(GetParam());
  const int64_t n_heads = nh, kv_heads = kvh, hd = d, bs = lay.block_size;
  const auto n_seqs = static_cast<int64_t>(lay.seqs.size());
  int64_t used_blocks = 0, max_blocks = 0;
  for (const auto& [ctx, queries] : lay.seqs) {
    used_blocks += (ctx + bs - 1) / bs;
    max_blocks = std::max(max_blocks, (ctx + bs - 1) / bs + 1);
  }
  const int64_t n_blocks = 2 * used_blocks + 1;
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) pool[size_t(b)] = int32_t(b);
  std::shuffle(pool.begin(), pool.end(), rng_);
  const int32_t never_written = pool.back();
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs * max_blocks), never_written);
  std::vector<int32_t> kv_slots, token_seq, positions;
  size_t next = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const auto [ctx, queries] = lay.seqs[size_t(s)];
    for (int64_t b = 0; b < (ctx + bs - 1) / bs; ++b) {
      tables[size_t(s * max_blocks + b)] = pool[next];
      next += 2;  // every other block of the shuffled pool stays unused
    }
    for (int64_t p = 0; p < ctx; ++p) {
      kv_slots.push_back(tables[size_t(s * max_blocks + p / bs)] * int32_t(bs) + int32_t(p % bs));
      if (p >= ctx - queries) token_seq.push_back(int32_t(s)), positions.push_back(int32_t(p));
    }
  }
  const auto n_kv = int64_t(kv_slots.size()), T = int64_t(token_seq.size());
  const auto q = randn(size_t(T * n_heads * hd), rng_), k = randn(size_t(n_kv * kv_heads * hd), rng_),
             v = randn(size_t(n_kv * kv_heads * hd), rng_);
  const std::vector<float> nan_cache(size_t(n_blocks * bs * kv_heads * hd), std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> nan_out(size_t(T * n_heads * hd), std::numeric_limits<float>::quiet_NaN());
  const auto oracle = make_cpu_backend(true);
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {oracle.get(), gpu_.get()}) {
      Dev dv(*be);
      void* kc = dv.cache(nan_cache);
      void* vc = dv.cache(nan_cache);
      be->kv_write({.k = dv.f32(k),
                    .v = dv.f32(v),
                    .slots = dv.i32(kv_slots),
                    .k_cache = kc,
                    .v_cache = vc,
                    .tokens = n_kv,
                    .kv_heads = kv_heads,
                    .head_dim = hd,
                    .v_head_dim = hd});
      float* out = dv.f32(nan_out);
      be->paged_attention({.q = dv.f32(q),
                           .k_cache = kc,
                           .v_cache = vc,
                           .block_tables = dv.i32(tables),
                           .token_seq = dv.i32(token_seq),
                           .positions = dv.i32(positions),
                           .out = out,
                           .tokens = T,
                           .n_seqs = n_seqs,
                           .n_heads = n_heads,
                           .kv_heads = kv_heads,
                           .head_dim = hd,
                           .v_head_dim = hd,
                           .block_size = bs,
                           .max_blocks = max_blocks,
                           .scale = 0.2f,
                           .sliding_window = window});
      r[i++] = dv.host(out, size_t(T * n_heads * hd));
    }
    int64_t non_finite = 0;
    for (float x : r[1]) non_finite += std::isfinite(x) ? 0 : 1;
    EXPECT_EQ(non_finite, 0) << "window " << window;
    EXPECT_LE(rel_err(r[1], r[0]), 1e-3) << "window " << window;
  }
}

TEST_F(CudaVsCpu, RoutingGatherScatter) {
  const int64_t T = 37, E = 128, K = 8, dim = 33;
  const auto logits = randn(size_t(T * E), rng_), src = randn(size_t(T * dim), rng_), w = randn(size_t(T), rng_);
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) rows[size_t(t)] = int32_t((t * 5) % 11);
  for (bool renorm : {false, true}) {
    std::vector<int32_t> ids[2];
    std::vector<float> wts[2], gathered[2], scattered[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      int32_t* di = d.i32(std::vector<int32_t>(size_t(T * K)));
      float* dw = d.out(size_t(T * K));
      be->softmax_topk({.logits = d.f32(logits),
                        .expert_ids = di,
                        .weights = dw,
                        .tokens = T,
                        .n_experts = E,
                        .top_k = K,
                        .renormalize = renorm});
      ids[i].resize(size_t(T * K));
      be->copy_to_host(ids[i].data(), di, ids[i].size() * 4);
      wts[i] = d.host(dw, size_t(T * K));
      float* g = d.out(size_t(T * dim));
      be->gather_rows(d.f32(src), d.i32(rows), g, T, dim);
      gathered[i] = d.host(g, size_t(T * dim));
      float* s = d.out(size_t(11 * dim));
      be->scatter_add_rows(s, d.i32(rows), d.f32(w), d.f32(src), T, dim);
      scattered[i] = d.host(s, size_t(11 * dim));
      ++i;
    }
    EXPECT_EQ(ids[1], ids[0]);
    EXPECT_LE(rel_err(wts[1], wts[0]), 1e-5);
    EXPECT_EQ(gathered[1], gathered[0]);
    EXPECT_LE(rel_err(scattered[1], scattered[0]), 1e-5);
  }
}

// Uniform routing (bench latency --routing uniform, the routers' .uniform): the fused kernels pick exactly the
// host's experts from the same logits and keep the top-k's weights, for softmax-sized and kimi-sized expert counts
// (kimi's 384 through the one-warp grouped kernel, 1,024 through the one-thread one and the separate draw), a
// top_k of all experts included.
TEST_F(CudaVsCpu, UniformRoutingPicksTheHostsExperts) {
  for (auto [T, E, K] :
       {std::tuple<int64_t, int64_t, int64_t>{300, 128, 8}, {37, 384, 8}, {5, 8, 8}, {1000, 64, 6}, {9, 1024, 8}}) {
    const auto logits = randn(size_t(T * E), rng_);
    for (const bool grouped : {false, true}) {
      if (!grouped && E > 512) continue;  // softmax_topk's CUDA kernel takes at most 512 experts
      std::vector<int32_t> ids[2];
      std::vector<float> wts[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        int32_t* di = d.i32(std::vector<int32_t>(size_t(T * K), -1));
        float* dw = d.out(size_t(T * K));
        if (grouped) {
          be->grouped_topk({.logits = d.f32(logits),
                            .expert_ids = di,
                            .weights = dw,
                            .tokens = T,
                            .n_experts = E,
                            .top_k = K,
                            .n_group = E >= 64 ? 8 : 1,
                            .topk_group = E >= 64 ? 4 : 1,
                            .renormalize = true,
                            .uniform = true});
        } else {
          be->softmax_topk({.logits = d.f32(logits),
                            .expert_ids = di,
                            .weights = dw,
                            .tokens = T,
                            .n_experts = E,
                            .top_k = K,
                            .renormalize = true,
                            .uniform = true});
        }
        ids[i] = d.host_i32(di, size_t(T * K));
        wts[i] = d.host(dw, size_t(T * K));
        ++i;
      }
      EXPECT_EQ(ids[1], ids[0]) << T << " tokens, " << E << " experts, top " << K << (grouped ? ", grouped" : "");
      EXPECT_LE(rel_err(wts[1], wts[0]), 1e-5) << T << " tokens, " << E << " experts" << (grouped ? ", grouped" : "");
    }
  }
}

// Expert counting (bench latency's floor): the device marks and the host's default count the same distinct
// experts per reported layer, equal to a std::set of the ids (out-of-range ids ignored); a take starts over,
// and layers past the first buffer's size keep the rows marked before it grows.
TEST_F(CudaVsCpu, CountsTheDistinctExpertsOfEachLayer) {
  std::uniform_int_distribution<int32_t> id(-2, 390);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<int32_t>> layers;
    std::vector<int64_t> expected;
    for (int64_t n : {1, 8, 64, 512, 3000, 0, 17}) {
      for (int layer = 0; layer < 3; ++layer) {  // 21 layers of 384 experts: past the first 4096 bytes
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (auto& x : ids) x = id(rng_);
        std::set<int32_t> distinct;
        for (int32_t x : ids) {
          if (x >= 0 && x < 384) distinct.insert(x);
        }
        expected.push_back(static_cast<int64_t>(distinct.size()));
        layers.push_back(ids);
      }
    }
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      be->set_expert_counting(true);
      Dev d(*be);
      for (const auto& ids : layers)
        be->count_experts(d.i32(ids.empty() ? std::vector<int32_t>{0} : ids), static_cast<int64_t>(ids.size()), 384);
      EXPECT_EQ(be->take_touched_experts(), expected) << (be == cpu_.get() ? "cpu" : "cuda");
      EXPECT_TRUE(be->take_touched_experts().empty());
      be->set_expert_counting(false);
    }
  }
}

// The routed experts: few pairs take the GEMV path, many the grouped path; both against the CPU.
// The GEMV path streams the down rows of four pairs at a time: top_k 4 and 3 (a partial group).
TEST_F(CudaVsCpu, MoeExpertsSmallAndLargeBatches) {
  const int64_t E = 16, H = 256, I = 96;
  const auto gate_up = randn(size_t(E * 2 * I * H), rng_, true), down = randn(size_t(E * H * I), rng_, true);
  for (auto [T, K] : {std::pair<int64_t, int64_t>{1, 4}, {3, 4}, {40, 4}, {1, 3}, {5, 3}}) {
    const auto x = randn(size_t(T * H), rng_);
    std::vector<int32_t> ids(size_t(T * K));
    std::vector<float> w(size_t(T * K));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        ids[size_t(t * K + k)] = int32_t((t * 7 + k * 5) % E);  // distinct within a token
        w[size_t(t * K + k)] = 0.1f + 0.2f * float(k);
      }
    }
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      float* out = d.out(size_t(T * H));
      be->moe_experts({.x = d.f32(x),
                       .expert_ids = d.i32(ids),
                       .weights = d.f32(w),
                       .gate_up = d.weight(gate_up),
                       .down = d.weight(down),
                       .out = out,
                       .tokens = T,
                       .hidden = H,
                       .inter = I,
                       .n_experts = E,
                       .top_k = K});
      r[i++] = d.host(out, size_t(T * H));
    }
    EXPECT_LE(rel_err(r[1], r[0]), kTol) << "tokens " << T << " top_k " << K;
  }
}

// The grouped path (more than 16 pairs) against the cpu-bf16 oracle, for each tile height (16, 32, 64
// and 128 rows: 4, 16, 32 and 512 pairs per expert) and decode batches of 3 and 10 tokens (24 and 80
// pairs, most experts idle or with one pair): uneven loads with idle experts, top_k 1 and 8,
// hidden and inter that are not multiples of the tiles. Also: the same bits on a second run and when
// replayed from a captured graph (no host round trip, no run-to-run variation).
TEST_F(CudaVsCpu, MoeExpertsGroupedPath) {
  struct Shape {
    int64_t tokens, top_k, n_experts, hidden, inter;
    bool skewed;  // Zipf-like expert popularity, every fifth expert idle
  };
  const auto oracle = make_cpu_backend(true);
  for (const Shape& c :
       {Shape{3, 8, 128, 256, 96, false}, Shape{10, 8, 128, 256, 96, false}, Shape{64, 8, 128, 256, 96, false},
        Shape{256, 8, 128, 256, 96, true}, Shape{512, 8, 128, 256, 96, true}, Shape{300, 1, 8, 200, 40, true},
        Shape{40, 8, 64, 128, 200, false}, Shape{1024, 8, 16, 256, 96, true}}) {
    const int64_t T = c.tokens, K = c.top_k, E = c.n_experts, H = c.hidden, I = c.inter;
    const std::string what = std::to_string(T) + "x" + std::to_string(K) + " pairs over " + std::to_string(E) +
                             " experts, hidden " + std::to_string(H) + ", inter " + std::to_string(I);
    const auto gate_up = randn(size_t(E * 2 * I * H), rng_, true), down = randn(size_t(E * H * I), rng_, true);
    const auto x = randn(size_t(T * H), rng_);
    std::vector<double> popularity(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      popularity[size_t(e)] = !c.skewed ? 1.0 : e % 5 == 3 ? 0.0 : 1.0 / std::pow(1.0 + double(e), 1.2);
    }
    std::vector<int32_t> ids(size_t(T * K));
    std::vector<float> w(size_t(T * K));
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> p = popularity;
      for (int64_t k = 0; k < K; ++k) {  // distinct within a token
        const int32_t e = std::discrete_distribution<int32_t>(p.begin(), p.end())(rng_);
        p[size_t(e)] = 0.0;
        ids[size_t(t * K + k)] = e;
        w[size_t(t * K + k)] = weight(rng_);
      }
    }
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {oracle.get(), gpu_.get()}) {
      Dev d(*be);
      float* out = d.out(size_t(T * H));
      const MoeExpertsArgs call{.x = d.f32(x),
                                .expert_ids = d.i32(ids),
                                .weights = d.f32(w),
                                .gate_up = d.weight(gate_up),
                                .down = d.weight(down),
                                .out = out,
                                .tokens = T,
                                .hidden = H,
                                .inter = I,
                                .n_experts = E,
                                .top_k = K};
      be->moe_experts(call);
      r[i] = d.host(out, size_t(T * H));
      if (be == gpu_.get()) {
        EXPECT_TRUE(be->moe_experts_async(call)) << what;
        const std::vector<float> poison(size_t(T * H), std::numeric_limits<float>::quiet_NaN());
        be->copy_to_device(out, poison.data(), poison.size() * sizeof(float));
        be->moe_experts(call);
        EXPECT_EQ(d.host(out, size_t(T * H)), r[i]) << what << ": second run";
        const int64_t graph = be->capture([&] { be->moe_experts(call); });
        be->copy_to_device(out, poison.data(), poison.size() * sizeof(float));
        be->replay(graph);
        EXPECT_EQ(d.host(out, size_t(T * H)), r[i]) << what << ": captured";
        be->drop_captures();
      }
      ++i;
    }
    int64_t non_finite = 0;
    for (float v : r[1]) non_finite += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(non_finite, 0) << what;
    EXPECT_LE(rel_err(r[1], r[0]), kTol) << what;
  }
}

// The q, k and v of one stacked product: exact copies, on both backends, with widths that break float4 rows
// and a part left out.
TEST_F(CudaVsCpu, SplitColumnsCopiesEachBlockOut) {
  for (auto [rows, w0, w1, w2] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 4096, 512, 512},
                                  {10, 4096, 512, 512},
                                  {256, 96, 32, 32},
                                  {7, 13, 5, 3},
                                  {3, 8, 4, 0}}) {
    const auto src = randn(size_t(rows * (w0 + w1 + w2)), rng_);
    std::vector<float> got[2][3];
    int b = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      float* parts[3] = {d.out(size_t(rows * w0)), d.out(size_t(rows * w1)), d.out(size_t(rows * w2))};
      be->split_columns(
          {.src = d.f32(src), .rows = rows, .dst = {parts[0], parts[1], parts[2]}, .width = {w0, w1, w2}});
      const int64_t widths[3] = {w0, w1, w2};
      for (int i = 0; i < 3; ++i) got[b][i] = d.host(parts[i], size_t(rows * widths[i]));
      ++b;
    }
    const int64_t widths[3] = {w0, w1, w2};
    int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < widths[i]; ++c) {
          const float want = src[size_t(r * (w0 + w1 + w2) + at + c)];
          ASSERT_EQ(got[0][i][size_t(r * widths[i] + c)], want) << "cpu part " << i << " row " << r << " col " << c;
          ASSERT_EQ(got[1][i][size_t(r * widths[i] + c)], want) << "gpu part " << i << " row " << r << " col " << c;
        }
      }
      at += widths[i];
    }
  }
}

TEST_F(CudaVsCpu, RandomFillIsTheSameGeneratorRoundedToBf16) {
  const int64_t n = 4099;
  auto c = cpu_->alloc(size_t(n) * 4);
  auto g = gpu_->alloc(size_t(n) * 2);
  cpu_->fill_random_normal({.dst = c->data(), .n = n, .seed = 77, .stddev = 0.5f});
  gpu_->fill_random_normal({.dst = g->data(), .n = n, .seed = 77, .stddev = 0.5f});
  std::vector<uint16_t> gb(static_cast<size_t>(n));
  gpu_->copy_to_host(gb.data(), g->data(), gb.size() * 2);
  const float* cf = c->as<float>();
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(bf16_to_f32(gb[size_t(i)]), cf[i], 0.01 * std::abs(cf[i]) + 1e-6) << i;
    mean += cf[i];
  }
  EXPECT_NEAR(mean / n, 0.0, 0.05);
}

}  // namespace
}  // namespace sy
