// The CUDA backend's MLA, sparse-indexer, layer-norm and sigmoid-routing ops against the CPU backend in
// bf16 emulation (the same bf16 rounding of weights, matrix-product inputs and cache), op by op, on fresh
// inputs of awkward shapes. The two differ only in fp32 summation order, so tolerances are tight; the
// indexer runs on integer data, where every score is exact, so its choice (ties included) must be equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "common/backend_data.h"

namespace sy {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));  // bf16-exact: both backends hold the same values
  return v;
}

std::vector<float> small_ints(size_t n, std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

using test::Dev;
using test::rel_err;

// Sequences of the given lengths in shuffled blocks; every token a query (as in prefill).
struct Paging {
  std::vector<int32_t> tables, token_seq, positions, slots;
  int64_t max_blocks = 0, block_size = 0, n_slots = 0;
};
Paging make_paging(const std::vector<int64_t>& lengths, int64_t block_size, std::mt19937& rng) {
  Paging p;
  p.block_size = block_size;
  for (int64_t len : lengths) p.max_blocks = std::max(p.max_blocks, (len + block_size - 1) / block_size);
  const auto n_seqs = int64_t(lengths.size()), n_blocks = n_seqs * p.max_blocks + 2;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.tables.assign(ids.begin(), ids.begin() + n_seqs * p.max_blocks);
  p.n_slots = n_blocks * block_size;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t pos = 0; pos < lengths[size_t(s)]; ++pos) {
      p.token_seq.push_back(int32_t(s));
      p.positions.push_back(int32_t(pos));
      p.slots.push_back(p.tables[size_t(s * p.max_blocks + pos / block_size)] * int32_t(block_size) +
                        int32_t(pos % block_size));
    }
  }
  return p;
}

class CudaMlaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = make_cpu_backend(/*emulate_bf16=*/true);
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> cpu_, gpu_;
  std::mt19937 rng_{321};
};

TEST_F(CudaMlaVsCpu, KvWrite) {
  for (auto [lora, rope] : {std::pair<int64_t, int64_t>{1, 0}, {7, 2}, {32, 8}, {512, 64}}) {
    const auto pg = make_paging({5, 9, 1}, 4, rng_);
    const int64_t T = int64_t(pg.slots.size()), row = lora + rope, n = pg.n_slots * row;
    const auto kv = randn(size_t(T * row), rng_, 2.0f), w = randn(size_t(lora), rng_);
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      void* cache = d.cache(std::vector<float>(size_t(n), 0.0f));
      be->mla_kv_write({.kv = d.f32(kv),
                        .norm_weight = d.weight(w),
                        .slots = d.i32(pg.slots),
                        .cache = cache,
                        .tokens = T,
                        .kv_lora_rank = lora,
                        .rope_dim = rope,
                        .eps = 1e-6f});
      r[i++] = d.host_cache(cache, size_t(n));
    }
    EXPECT_LE(rel_err(r[1], r[0]), 1.0 / 128) << "lora " << lora << " rope " << rope;  // one bf16 ulp at most
  }
}

TEST_F(CudaMlaVsCpu, HeadLinearBothLayouts) {
  struct Shape {
    int64_t tokens, heads, in, out, x_stride, y_stride;
  };
  for (Shape s : {Shape{1, 1, 1, 1, 1, 1}, Shape{1, 3, 5, 7, 9, 8}, Shape{7, 4, 16, 32, 24, 40},
                  Shape{13, 2, 33, 17, 33, 17}, Shape{37, 16, 128, 512, 192, 512}}) {
    for (bool transposed : {false, true}) {
      const int64_t w_stride = s.in * s.out + 8;
      const auto x = randn(size_t(s.tokens * s.heads * s.x_stride), rng_);
      const auto w = randn(size_t(s.heads * w_stride), rng_);
      std::vector<float> r[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        float* y = d.out(size_t(s.tokens * s.heads * s.y_stride));
        be->head_linear({.x = d.f32(x),
                         .w = d.weight(w),
                         .y = y,
                         .tokens = s.tokens,
                         .heads = s.heads,
                         .in = s.in,
                         .out = s.out,
                         .x_stride = s.x_stride,
                         .y_stride = s.y_stride,
                         .w_head_stride = w_stride,
                         .w_transposed = transposed});
        r[i++] = d.host(y, size_t(s.tokens * s.heads * s.y_stride));
      }
      EXPECT_LE(rel_err(r[1], r[0]), 1e-4)
          << s.tokens << "x" << s.heads << " " << s.in << "->" << s.out << " transposed " << transposed;
    }
  }
}

TEST_F(CudaMlaVsCpu, AttentionDenseAndSparse) {
  struct Case {
    std::vector<int64_t> lengths;
    int64_t heads, lora, rope, block_size;
  };
  for (const Case& c : {Case{{1}, 1, 4, 2, 1}, Case{{7, 3}, 3, 16, 4, 4}, Case{{40, 1, 13}, 4, 64, 8, 16},
                        Case{{300}, 2, 512, 64, 64}}) {
    const auto pg = make_paging(c.lengths, c.block_size, rng_);
    const int64_t T = int64_t(pg.slots.size()), row = c.lora + c.rope, q_stride = c.rope + 5;
    const auto cache = randn(size_t(pg.n_slots * row), rng_);
    const auto ql = randn(size_t(T * c.heads * c.lora), rng_, 0.1f), qr = randn(size_t(T * c.heads * q_stride), rng_);
    for (int64_t n_selected : {int64_t{0}, int64_t{5}}) {
      std::vector<int32_t> keys;  // every other visible key, ascending, -1 padded
      for (int64_t t = 0; t < T && n_selected; ++t) {
        int64_t j = 0;
        for (int32_t k = pg.positions[size_t(t)]; k >= 0 && j < n_selected; k -= 2, ++j) keys.push_back(k);
        std::reverse(keys.end() - j, keys.end());
        for (; j < n_selected; ++j) keys.push_back(-1);
      }
      std::vector<float> r[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        float* out = d.out(size_t(T * c.heads * c.lora));
        be->mla_attention({.q_latent = d.f32(ql),
                           .q_rope = d.f32(qr),
                           .cache = d.cache(cache),
                           .block_tables = d.i32(pg.tables),
                           .token_seq = d.i32(pg.token_seq),
                           .positions = d.i32(pg.positions),
                           .key_positions = n_selected ? d.i32(keys) : nullptr,
                           .out = out,
                           .tokens = T,
                           .n_heads = c.heads,
                           .kv_lora_rank = c.lora,
                           .rope_dim = c.rope,
                           .q_rope_stride = q_stride,
                           .n_selected = n_selected,
                           .block_size = c.block_size,
                           .max_blocks = pg.max_blocks,
                           .scale = 0.2f});
        r[i++] = d.host(out, size_t(T * c.heads * c.lora));
      }
      EXPECT_LE(rel_err(r[1], r[0]), 1e-4) << c.heads << " heads, lora " << c.lora << ", sparse " << n_selected;
    }
  }
}

// The published shape (latent 512, rope 64) takes the tensor-core kernel: head counts that fill and do
// not fill its 32-row tiles, decode steps (one query per sequence, keys split over blocks and merged)
// and prefill (every token a query), dense and with the indexer's choice (several 32-key tiles of it).
TEST_F(CudaMlaVsCpu, FlashAttentionDecodeAndPrefill) {
  struct Case {
    std::vector<int64_t> lengths;
    int64_t heads, block_size;
    bool decode;
  };
  constexpr int64_t kLora = 512, kRope = 64;
  for (const Case& c : {Case{{700}, 64, 64, true}, Case{{1, 33, 300, 64}, 40, 16, true},
                        Case{{2000, 5, 129}, 16, 64, true}, Case{{90, 37}, 64, 16, false}}) {
    auto pg = make_paging(c.lengths, c.block_size, rng_);
    if (c.decode) {  // keep the last token of each sequence as the step's query
      std::vector<int32_t> seq, pos;
      for (size_t i = 0; i < pg.token_seq.size(); ++i) {
        if (i + 1 == pg.token_seq.size() || pg.token_seq[i + 1] != pg.token_seq[i]) {
          seq.push_back(pg.token_seq[i]);
          pos.push_back(pg.positions[i]);
        }
      }
      pg.token_seq = seq;
      pg.positions = pos;
    }
    const int64_t T = int64_t(pg.positions.size()), row = kLora + kRope, q_stride = kRope + 128 + 5;
    const auto cache = randn(size_t(pg.n_slots * row), rng_);
    const auto ql = randn(size_t(T * c.heads * kLora), rng_, 0.1f), qr = randn(size_t(T * c.heads * q_stride), rng_);
    for (int64_t n_selected : {int64_t{0}, int64_t{100}}) {
      std::vector<int32_t> keys;  // every third visible key, ascending, -1 padded
      for (int64_t t = 0; t < T && n_selected; ++t) {
        int64_t j = 0;
        for (int32_t k = pg.positions[size_t(t)]; k >= 0 && j < n_selected; k -= 3, ++j) keys.push_back(k);
        std::reverse(keys.end() - j, keys.end());
        for (; j < n_selected; ++j) keys.push_back(-1);
      }
      std::vector<float> r[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        float* out = d.out(size_t(T * c.heads * kLora));
        be->mla_attention({.q_latent = d.f32(ql),
                           .q_rope = d.f32(qr),
                           .cache = d.cache(cache),
                           .block_tables = d.i32(pg.tables),
                           .token_seq = d.i32(pg.token_seq),
                           .positions = d.i32(pg.positions),
                           .key_positions = n_selected ? d.i32(keys) : nullptr,
                           .out = out,
                           .tokens = T,
                           .n_heads = c.heads,
                           .kv_lora_rank = kLora,
                           .rope_dim = kRope,
                           .q_rope_stride = q_stride,
                           .n_selected = n_selected,
                           .block_size = c.block_size,
                           .max_blocks = pg.max_blocks,
                           .scale = 0.07f});
        r[i++] = d.host(out, size_t(T * c.heads * kLora));
      }
      EXPECT_LE(rel_err(r[1], r[0]), 1e-4)
          << c.heads << " heads, " << T << " queries, decode " << c.decode << ", sparse " << n_selected;
    }
  }
}

TEST_F(CudaMlaVsCpu, IndexerTopkIsIdenticalOnExactScores) {
  struct Case {
    int64_t heads, dim, top_k, block_size;
    std::vector<int64_t> lengths;
  };
  for (const Case& c : {Case{1, 4, 1, 4, {1, 6}}, Case{2, 16, 3, 4, {12, 30}}, Case{8, 32, 64, 16, {70, 200}},
                        Case{4, 128, 2048, 64, {3000}}}) {
    const auto pg = make_paging(c.lengths, c.block_size, rng_);
    const int64_t T = int64_t(pg.slots.size());
    // Small integers: every product and sum is exact in fp32, so both backends see identical scores
    // (and many exact ties, which must go to the lower position on both).
    const auto q = small_ints(size_t(T * c.heads * c.dim), rng_, -2, 2);
    const auto w = small_ints(size_t(T * c.heads), rng_, -1, 3);
    const auto k = small_ints(size_t(pg.n_slots * c.dim), rng_, -2, 2);
    std::vector<int32_t> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      int32_t* out = d.out_i32(size_t(T * c.top_k));
      be->indexer_topk({.q = d.f32(q),
                        .head_weights = d.f32(w),
                        .k_cache = d.cache(k),
                        .block_tables = d.i32(pg.tables),
                        .token_seq = d.i32(pg.token_seq),
                        .positions = d.i32(pg.positions),
                        .key_positions = out,
                        .tokens = T,
                        .n_heads = c.heads,
                        .head_dim = c.dim,
                        .top_k = c.top_k,
                        .block_size = c.block_size,
                        .max_blocks = pg.max_blocks,
                        .scale = 1.0f,
                        .weight_scale = 1.0f});
      r[i++] = d.host_i32(out, size_t(T * c.top_k));
    }
    EXPECT_EQ(r[1], r[0]) << c.heads << " heads of " << c.dim << ", top " << c.top_k;
  }
}

TEST_F(CudaMlaVsCpu, LayerNorm) {
  for (int64_t dim : {1, 7, 128, 1000}) {
    const auto x = randn(size_t(9 * dim), rng_, 3.0f), w = randn(size_t(dim), rng_), b = randn(size_t(dim), rng_);
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      float* y = d.f32(x);  // in place, as the indexer calls it
      be->layer_norm(y, d.weight(w), d.weight(b), y, 9, dim, 1e-6f);
      r[i++] = d.host(y, size_t(9 * dim));
    }
    EXPECT_LE(rel_err(r[1], r[0]), 1e-5) << dim;
  }
}

TEST_F(CudaMlaVsCpu, GroupedTopkAndAdd) {
  struct Case {
    int64_t experts, top_k, n_group, topk_group;
  };
  for (Case c : {Case{2, 1, 1, 1}, Case{16, 4, 4, 2}, Case{12, 3, 3, 1}, Case{256, 8, 8, 4}, Case{384, 8, 1, 1},
                 Case{6, 2, 6, 3}, Case{640, 6, 8, 3}}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool renorm = variant != 0, ties = variant == 2;
      const int64_t T = 37;
      // Distinct, well separated scores, so that no choice hinges on the last bit of an exp; or (ties) three
      // levels and no bias, so that groups and experts tie and the lower id must win, as on the CPU.
      std::vector<float> logits(size_t(T * c.experts)), bias(size_t(c.experts));
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int> perm(size_t(c.experts));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        for (int64_t e = 0; e < c.experts; ++e) {
          logits[size_t(t * c.experts + e)] =
              ties ? float(perm[size_t(e)] % 3) - 1.0f : -3.0f + 6.0f * perm[size_t(e)] / float(c.experts);
        }
      }
      for (int64_t e = 0; e < c.experts; ++e) bias[size_t(e)] = ties ? 0.0f : 0.013f * float((e * 7) % 11);
      std::vector<int32_t> ids[2];
      std::vector<float> w[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        int32_t* id = d.out_i32(size_t(T * c.top_k));
        float* wt = d.out(size_t(T * c.top_k));
        be->grouped_topk({.logits = d.f32(logits),
                          .score_bias = d.f32(bias),
                          .expert_ids = id,
                          .weights = wt,
                          .tokens = T,
                          .n_experts = c.experts,
                          .top_k = c.top_k,
                          .n_group = c.n_group,
                          .topk_group = c.topk_group,
                          .renormalize = renorm,
                          .scaling = 2.5f});
        ids[i] = d.host_i32(id, size_t(T * c.top_k));
        w[i++] = d.host(wt, size_t(T * c.top_k));
      }
      EXPECT_EQ(ids[1], ids[0]) << c.experts << " experts, " << c.n_group << " groups, variant " << variant;
      EXPECT_LE(rel_err(w[1], w[0]), 1e-5);
    }
  }
  for (int64_t n : {1, 1000, 1 << 20}) {
    const auto y = randn(size_t(n), rng_), x = randn(size_t(n), rng_);
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      float* yd = d.f32(y);
      be->add(yd, d.f32(x), n);
      r[i++] = d.host(yd, size_t(n));
    }
    EXPECT_EQ(r[1], r[0]) << n;
  }
}

}  // namespace
}  // namespace sy
