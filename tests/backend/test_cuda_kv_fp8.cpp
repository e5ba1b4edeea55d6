// The CUDA backend's FP8 E4M3 KV cache (--kv-dtype fp8) against its oracle, the CPU backend in bf16 emulation with
// the same KV dtype: the KV writes (GQA, fused q/k norm + rope, MLA's latent rows), GQA attention (the decode and
// prefill tensor-core kernels and the generic one) and MLA attention (the tensor-core kernel and the generic one),
// under per-tensor scales that are not powers of two, on awkward shapes. Both backends store the same E4M3 values
// (the CPU keeps float(e4m3) · scale in fp32, the GPU the byte, widened exactly to bf16 for the tensor cores with the
// scales folded into the score scale and the output), so attention outputs agree to fp32 summation order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "common/backend_data.h"
#include "kernels/e4m3.h"

namespace sy {
namespace {

using test::Dev;
using test::rel_err;

std::vector<float> randn(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));  // bf16-exact: both backends hold the same values
  return v;
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Sequences of the given (context, queries) in shuffled blocks with unused blocks between them: each sequence's
// keys 0..context-1 are written, its last `queries` positions are the step's tokens.
struct Paging {
  std::vector<int32_t> tables, token_seq, positions, kv_slots;
  int64_t max_blocks = 0, block_size = 0, n_slots = 0;
};
Paging make_paging(const std::vector<std::pair<int64_t, int64_t>>& seqs, int64_t block_size, std::mt19937& rng) {
  Paging p;
  p.block_size = block_size;
  for (const auto& [ctx, q] : seqs) p.max_blocks = std::max(p.max_blocks, (ctx + block_size - 1) / block_size);
  const auto n_seqs = static_cast<int64_t>(seqs.size()), n_blocks = 2 * n_seqs * p.max_blocks + 1;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.n_slots = n_blocks * block_size;
  p.tables.assign(static_cast<size_t>(n_seqs * p.max_blocks), ids.back());  // past the end: a block never written
  size_t next = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const auto [ctx, queries] = seqs[size_t(s)];
    for (int64_t b = 0; b < (ctx + block_size - 1) / block_size; ++b) {
      p.tables[size_t(s * p.max_blocks + b)] = ids[next];
      next += 2;
    }
    for (int64_t pos = 0; pos < ctx; ++pos) {
      p.kv_slots.push_back(p.tables[size_t(s * p.max_blocks + pos / block_size)] * int32_t(block_size) +
                           int32_t(pos % block_size));
      if (pos >= ctx - queries) p.token_seq.push_back(int32_t(s)), p.positions.push_back(int32_t(pos));
    }
  }
  return p;
}

class CudaKvFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = make_cpu_backend(/*emulate_bf16=*/true, KvDType::fp8);
    gpu_ = make_cuda_backend(0, KvDType::fp8);
    ASSERT_EQ(gpu_->kv_dtype(), DType::f8_e4m3);
    ASSERT_EQ(gpu_->kv_storage_dtype(), DType::f8_e4m3);
  }
  std::unique_ptr<Backend> cpu_, gpu_;
  std::mt19937 rng_{8};
};

// The CPU's cache holds float(e4m3) · scale, the GPU's the bytes: the GPU's decoded and scaled must equal the CPU's
// values exactly where both wrote the same fp32 inputs, NaN (never written) in the same places.
int64_t count_unequal(const std::vector<float>& cpu, const std::vector<float>& gpu_unscaled, float scale,
                      int64_t* nan_mismatch) {
  int64_t unequal = 0;
  *nan_mismatch = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool na = std::isnan(cpu[i]), nb = std::isnan(gpu_unscaled[i]);
    *nan_mismatch += na != nb ? 1 : 0;
    if (!na && !nb) unequal += cpu[i] != gpu_unscaled[i] * scale ? 1 : 0;
  }
  return unequal;
}

// Plain KV writes: identical fp32 inputs, so identical bytes; scales chosen so that values saturate at 448 (small
// scale), fall among the subnormals (large scale) and sit in the normal range.
TEST_F(CudaKvFp8, KvWriteStoresTheSameBytes) {
  const int64_t tokens = 37, kv_heads = 3, hd = 40, n_slots = 64;
  const auto k = randn(size_t(tokens * kv_heads * hd), rng_, 3.0f), v = randn(size_t(tokens * kv_heads * hd), rng_);
  std::vector<int32_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) slots[size_t(t)] = int32_t((t * 11 + 5) % n_slots);
  const std::vector<float> nan_cache(size_t(n_slots * kv_heads * hd), kNan);
  for (const auto& [ks, vs] : {std::pair{0.013f, 0.0021f}, std::pair{0.37f, 1.9f}, std::pair{9.0f, 300.0f}}) {
    std::vector<float> kc_host[2], vc_host[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      void* kc = d.cache(nan_cache);
      void* vc = d.cache(nan_cache);
      be->kv_write({.k = d.f32(k),
                    .v = d.f32(v),
                    .slots = d.i32(slots),
                    .k_cache = kc,
                    .v_cache = vc,
                    .tokens = tokens,
                    .kv_heads = kv_heads,
                    .head_dim = hd,
                    .v_head_dim = hd,
                    .kv_quant = {.e4m3 = true, .k_scale = ks, .v_scale = vs}});
      kc_host[i] = d.host_cache(kc, nan_cache.size());
      vc_host[i] = d.host_cache(vc, nan_cache.size());
      ++i;
    }
    int64_t nan_k = 0, nan_v = 0;
    EXPECT_EQ(count_unequal(kc_host[0], kc_host[1], ks, &nan_k), 0) << "k scale " << ks;
    EXPECT_EQ(count_unequal(vc_host[0], vc_host[1], vs, &nan_v), 0) << "v scale " << vs;
    EXPECT_EQ(nan_k + nan_v, 0);
  }
}

// The fused q/k norm + rope + write computes k in its own order, so a value within an fp32 ulp of an E4M3 rounding
// boundary may land one step apart: at most one step (1/8 of the largest value's binade) and rarely.
TEST_F(CudaKvFp8, QkNormRopeKvWriteQuantisesWhatItComputes) {
  const int64_t T = 7, n_heads = 8, kv_heads = 2, hd = 128, n_slots = 40;
  const auto q = randn(size_t(T * n_heads * hd), rng_), k = randn(size_t(T * kv_heads * hd), rng_),
             v = randn(size_t(T * kv_heads * hd), rng_);
  const auto qn = randn(size_t(hd), rng_), kn = randn(size_t(hd), rng_);
  std::vector<int32_t> slots(static_cast<size_t>(T)), pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) slots[size_t(t)] = int32_t((t * 5 + 2) % n_slots), pos[size_t(t)] = int32_t(t * 37);
  std::vector<float> inv(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(1e6, -2.0 * i / hd));
  const std::vector<float> nan_cache(size_t(n_slots * kv_heads * hd), kNan);
  const float ks = 0.0113f, vs = 0.0077f;
  std::vector<float> kc_host[2], vc_host[2];
  int i = 0;
  for (Backend* be : {cpu_.get(), gpu_.get()}) {
    Dev d(*be);
    void* kc = d.cache(nan_cache);
    void* vc = d.cache(nan_cache);
    be->qk_norm_rope_kv_write({.q = d.f32(q),
                               .k = d.f32(k),
                               .v = d.f32(v),
                               .q_norm = d.weight(qn),
                               .k_norm = d.weight(kn),
                               .positions = d.i32(pos),
                               .inv_freq = d.f32(inv),
                               .rotary_dim = hd,
                               .slots = d.i32(slots),
                               .k_cache = kc,
                               .v_cache = vc,
                               .tokens = T,
                               .n_heads = n_heads,
                               .kv_heads = kv_heads,
                               .head_dim = hd,
                               .kv_quant = {.e4m3 = true, .k_scale = ks, .v_scale = vs}});
    kc_host[i] = d.host_cache(kc, nan_cache.size());
    vc_host[i] = d.host_cache(vc, nan_cache.size());
    ++i;
  }
  int64_t nan_k = 0, nan_v = 0;
  const int64_t k_unequal = count_unequal(kc_host[0], kc_host[1], ks, &nan_k);
  EXPECT_EQ(count_unequal(vc_host[0], vc_host[1], vs, &nan_v), 0);  // v is written as given
  EXPECT_EQ(nan_k + nan_v, 0);
  EXPECT_LE(k_unequal, T * kv_heads * hd / 100);
  std::vector<float> gpu_k(kc_host[1]), a, b;
  for (size_t j = 0; j < gpu_k.size(); ++j) {
    if (!std::isnan(gpu_k[j])) a.push_back(kc_host[0][j]), b.push_back(gpu_k[j] * ks);
  }
  EXPECT_LE(rel_err(b, a), 1.0 / 8);
}

struct GqaCase {
  int64_t n_heads, kv_heads, hd, block_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (context, queries)
  const char* what;
};

// Decode (one query per sequence: the split decode kernel), prefill chunks after cached context (the prefill
// kernel), and a head_dim the tensor-core kernels do not take (the generic kernel); sliding window on and off.
TEST_F(CudaKvFp8, GqaAttentionMatchesTheCpu) {
  for (const GqaCase& c : {GqaCase{32, 4, 128, 16, {{1, 1}, {17, 1}, {300, 1}, {65, 1}}, "decode, Qwen3-30B-A3B heads"},
                           GqaCase{16, 1, 128, 5, {{700, 1}, {129, 1}, {2, 1}}, "decode, odd blocks"},
                           GqaCase{12, 4, 64, 8, {{190, 150}, {77, 1}, {3, 3}}, "prefill chunk after context"},
                           GqaCase{8, 8, 32, 4, {{9, 9}, {18, 18}}, "prefill, group 1"},
                           GqaCase{6, 2, 24, 4, {{40, 40}, {33, 1}}, "generic kernel"}}) {
    const Paging pg = make_paging(c.seqs, c.block_size, rng_);
    const auto n_kv = static_cast<int64_t>(pg.kv_slots.size()), T = static_cast<int64_t>(pg.positions.size());
    const auto q = randn(size_t(T * c.n_heads * c.hd), rng_), k = randn(size_t(n_kv * c.kv_heads * c.hd), rng_, 2.0f),
               v = randn(size_t(n_kv * c.kv_heads * c.hd), rng_, 0.5f);
    const std::vector<float> nan_cache(size_t(pg.n_slots * c.kv_heads * c.hd), kNan);
    const std::vector<float> nan_out(size_t(T * c.n_heads * c.hd), kNan);
    const KvQuant quant{.e4m3 = true, .k_scale = 0.0213f, .v_scale = 0.0047f};
    for (int64_t window : {int64_t{0}, int64_t{37}}) {
      std::vector<float> r[2];
      int i = 0;
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        Dev d(*be);
        void* kc = d.cache(nan_cache);
        void* vc = d.cache(nan_cache);
        be->kv_write({.k = d.f32(k),
                      .v = d.f32(v),
                      .slots = d.i32(pg.kv_slots),
                      .k_cache = kc,
                      .v_cache = vc,
                      .tokens = n_kv,
                      .kv_heads = c.kv_heads,
                      .head_dim = c.hd,
                      .v_head_dim = c.hd,
                      .kv_quant = quant});
        float* out = d.f32(nan_out);
        be->paged_attention({.q = d.f32(q),
                             .k_cache = kc,
                             .v_cache = vc,
                             .block_tables = d.i32(pg.tables),
                             .token_seq = d.i32(pg.token_seq),
                             .positions = d.i32(pg.positions),
                             .out = out,
                             .tokens = T,
                             .n_seqs = static_cast<int64_t>(c.seqs.size()),
                             .n_heads = c.n_heads,
                             .kv_heads = c.kv_heads,
                             .head_dim = c.hd,
                             .v_head_dim = c.hd,
                             .block_size = c.block_size,
                             .max_blocks = pg.max_blocks,
                             .scale = 0.2f,
                             .sliding_window = window,
                             .kv_quant = quant});
        r[i++] = d.host(out, nan_out.size());
      }
      int64_t non_finite = 0;
      for (float x : r[1]) non_finite += std::isfinite(x) ? 0 : 1;
      EXPECT_EQ(non_finite, 0) << c.what << ", window " << window;
      // As the bf16 cache's test: the same stored values, q and the probabilities kept to ~16 bits.
      EXPECT_LE(rel_err(r[1], r[0]), 1e-3) << c.what << ", window " << window;
    }
  }
}

// MLA's latent write: the latent's RMS is summed in another order on each, so a value may land one E4M3 step
// apart, rarely; the rope part is written as given, so it is identical.
TEST_F(CudaKvFp8, MlaKvWriteQuantisesTheRow) {
  for (auto [lora, rope] : {std::pair<int64_t, int64_t>{7, 2}, {512, 64}}) {
    const int64_t T = 13, row = lora + rope, n_slots = 32;
    const auto kv = randn(size_t(T * row), rng_, 2.0f), w = randn(size_t(lora), rng_);
    std::vector<int32_t> slots(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) slots[size_t(t)] = int32_t((t * 7 + 3) % n_slots);
    const std::vector<float> nan_cache(size_t(n_slots * row), kNan);
    const float s = 0.0093f;
    std::vector<float> r[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      Dev d(*be);
      void* cache = d.cache(nan_cache);
      be->mla_kv_write({.kv = d.f32(kv),
                        .norm_weight = d.weight(w),
                        .slots = d.i32(slots),
                        .cache = cache,
                        .tokens = T,
                        .kv_lora_rank = lora,
                        .rope_dim = rope,
                        .eps = 1e-6f,
                        .kv_quant = {.e4m3 = true, .k_scale = s}});
      r[i++] = d.host_cache(cache, nan_cache.size());
    }
    int64_t nan_mismatch = 0, rope_unequal = 0;
    const int64_t unequal = count_unequal(r[0], r[1], s, &nan_mismatch);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = lora; j < row; ++j) {
        const size_t at = size_t(slots[size_t(t)] * row + j);
        rope_unequal += r[0][at] != r[1][at] * s ? 1 : 0;
      }
    }
    EXPECT_EQ(nan_mismatch, 0);
    EXPECT_EQ(rope_unequal, 0) << "lora " << lora;
    EXPECT_LE(unequal, T * row / 50 + 1) << "lora " << lora;
  }
}

// MLA attention over a cache already on the scaled E4M3 grid (the CPU given float(q) · scale, the GPU the bytes q):
// the tensor-core kernel (latent 512, rope 64) in decode and prefill, dense and sparse, and the generic kernel.
TEST_F(CudaKvFp8, MlaAttentionMatchesTheCpu) {
  struct Case {
    std::vector<std::pair<int64_t, int64_t>> seqs;
    int64_t heads, lora, rope, block_size;
  };
  for (const Case& c : {Case{{{700, 1}, {33, 1}, {1, 1}}, 64, 512, 64, 64}, Case{{{90, 90}, {37, 37}}, 40, 512, 64, 16},
                        Case{{{40, 40}, {13, 1}}, 4, 64, 8, 16}}) {
    const Paging pg = make_paging(c.seqs, c.block_size, rng_);
    const int64_t T = static_cast<int64_t>(pg.positions.size()), row = c.lora + c.rope, q_stride = c.rope + 5;
    const float s = 0.0171f;
    const auto x = randn(size_t(pg.n_slots * row), rng_, 2.0f);
    std::vector<float> unscaled(x.size()), scaled(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      unscaled[j] = f8_e4m3_to_f32(e4m3_quantise(x[j], s));
      scaled[j] = unscaled[j] * s;
    }
    const auto ql = randn(size_t(T * c.heads * c.lora), rng_, 0.1f), qr = randn(size_t(T * c.heads * q_stride), rng_);
    for (int64_t n_selected : {int64_t{0}, int64_t{50}}) {
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
        float* out = d.out(size_t(T * c.heads * c.lora));
        be->mla_attention({.q_latent = d.f32(ql),
                           .q_rope = d.f32(qr),
                           .cache = d.cache(be == cpu_.get() ? scaled : unscaled),  // GPU: cache() encodes q exactly
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
                           .scale = 0.07f,
                           .kv_quant = {.e4m3 = true, .k_scale = s}});
        r[i++] = d.host(out, size_t(T * c.heads * c.lora));
      }
      EXPECT_LE(rel_err(r[1], r[0]), 1e-4) << c.heads << " heads, lora " << c.lora << ", sparse " << n_selected;
    }
  }
}

}  // namespace
}  // namespace sy
