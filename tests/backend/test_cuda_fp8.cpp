// The CUDA backend's block-FP8 weights (kept as stored: E4M3 bytes and fp32 block scales) against the
// CPU backend on the same weights dequantised on the host by the format's definition,
// w = float(e4m3) · scale of its block: the small-batch GEMV, the widen-then-cuBLAS path, the routed
// experts' per-pair and grouped paths, and the random FP8 generator.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "base/int_math.h"
#include "common/backend_data.h"
#include "common/moe_experts_check.h"

namespace sy {
namespace {

// As the bf16 comparisons (test_cuda_backend.cpp): activations rounded to bf16 at product inputs; the
// CUDA path widens each weight in fp32 where the cpu-bf16 oracle rounds the dequantised weight to bf16.
constexpr double kTol = 2e-2;

using test::Dev;
using test::randn;
using test::rel_err;

// `count` matrices [rows, cols] of random E4M3 bytes (no NaN codes) with random block scales.
struct Fp8Array {
  int64_t count, rows, cols, br, bc;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;  // [count][ceil(rows / br)][ceil(cols / bc)]
  int64_t scale_cols() const { return ceil_div_sat(cols, bc); }
  int64_t scale_stride() const { return ceil_div_sat(rows, br) * scale_cols(); }

  Fp8Array(int64_t count_, int64_t rows_, int64_t cols_, int64_t br_, int64_t bc_, std::mt19937& rng)
      : count(count_), rows(rows_), cols(cols_), br(br_), bc(bc_) {
    std::uniform_int_distribution<int> byte(0, 255);
    bytes.resize(size_t(count * rows * cols));
    for (auto& b : bytes) {
      do {
        b = static_cast<uint8_t>(byte(rng));
      } while ((b & 0x7f) == 0x7f || (b & 0x78) == 0x78);  // no NaN, and |value| < 256 (exponent 15 left out)
    }
    std::uniform_real_distribution<float> s(0.001f, 0.01f);
    scales.resize(size_t(count * scale_stride()));
    for (auto& v : scales) v = s(rng);
  }
  // The weights by the format's definition.
  std::vector<float> dequantised() const {
    std::vector<float> w(bytes.size());
    for (int64_t e = 0; e < count; ++e) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = size_t((e * rows + r) * cols + c);
          w[i] = f8_e4m3_to_f32(bytes[i]) * scales[size_t(e * scale_stride() + r / br * scale_cols() + c / bc)];
        }
      }
    }
    return w;
  }
};

// The array on `be` as the CUDA backend keeps it.
class Fp8Dev {
 public:
  explicit Fp8Dev(Backend& be) : be_(be) {}
  Matrix upload(const Fp8Array& a) {
    bufs_.push_back(be_.alloc(a.bytes.size()));
    be_.copy_to_device(bufs_.back()->data(), a.bytes.data(), a.bytes.size());
    const void* w = bufs_.back()->data();
    bufs_.push_back(be_.alloc(a.scales.size() * 4));
    be_.copy_to_device(bufs_.back()->data(), a.scales.data(), a.scales.size() * 4);
    return {.w = w,
            .q = {.format = WeightFormat::fp8_block,
                  .scales = bufs_.back()->as<float>(),
                  .block_rows = a.br,
                  .block_cols = a.bc,
                  .scale_cols = a.scale_cols(),
                  .scale_stride = a.scale_stride()}};
  }

 private:
  Backend& be_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
};

class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    oracle_ = make_cpu_backend(true);
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> oracle_, gpu_;
  std::mt19937 rng_{2024};
};

TEST_F(CudaFp8, BackendKeepsWholeChunksOfWholeBlocks) {
  EXPECT_TRUE(gpu_->keeps_quantised(WeightFormat::fp8_block, 4096, 2048, 128, 128));
  EXPECT_TRUE(gpu_->keeps_quantised(WeightFormat::fp8_block, 576, 7168, 128, 128));  // a partial last block row is fine
  EXPECT_FALSE(
      gpu_->keeps_quantised(WeightFormat::fp8_block, 80, 36, 4, 4));  // rows of 36 bytes are not 16-byte chunks
  EXPECT_FALSE(gpu_->keeps_quantised(WeightFormat::fp8_block, 80, 64, 4, 8));  // blocks narrower than a chunk
  EXPECT_FALSE(oracle_->keeps_quantised(WeightFormat::fp8_block, 4096, 2048, 128, 128));
}

// m <= 16 takes the FP8 GEMV, more rows the widened bf16 matrix on cuBLAS; blocks of 128 and smaller
// ones, partial last block rows and columns, with and without bias.
TEST_F(CudaFp8, LinearMatchesTheDequantisedWeights) {
  struct Case {
    int64_t m, n, k, br, bc;
  };
  for (const Case& c : {Case{1, 300, 256, 128, 128}, Case{1, 4096, 2048, 128, 128}, Case{3, 129, 512, 16, 32},
                        Case{16, 64, 2048, 128, 128}, Case{7, 200, 400, 128, 128}, Case{37, 300, 256, 128, 128},
                        Case{256, 576, 1024, 128, 128}}) {
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " blocks " +
                             std::to_string(c.br) + "x" + std::to_string(c.bc);
    ASSERT_TRUE(gpu_->keeps_quantised(WeightFormat::fp8_block, c.n, c.k, c.br, c.bc)) << what;
    const Fp8Array w(1, c.n, c.k, c.br, c.bc, rng_);
    const auto x = randn(size_t(c.m * c.k), rng_), b = randn(size_t(c.n), rng_);
    for (bool bias : {false, true}) {
      Dev od(*oracle_), gd(*gpu_);
      Fp8Dev g8(*gpu_);
      float* yo = od.out(size_t(c.m * c.n));
      float* yg = gd.out(size_t(c.m * c.n));
      oracle_->linear(od.f32(x), od.weight(w.dequantised()), bias ? od.weight(b) : nullptr, yo, c.m, c.n, c.k);
      gpu_->linear(gd.f32(x), g8.upload(w), bias ? gd.weight(b) : nullptr, yg, c.m, c.n, c.k);
      EXPECT_LE(rel_err(gd.host(yg, size_t(c.m * c.n)), od.host(yo, size_t(c.m * c.n))), kTol)
          << what << " bias " << bias;
    }
  }
}

// Per-pair GEMVs (up to 16 pairs) and the grouped tensor-core path for each tile height, against the
// cpu-bf16 oracle on the dequantised experts; the grouped path also replayed from a captured graph.
TEST_F(CudaFp8, MoeExpertsMatchTheDequantisedExperts) {
  struct Case {
    int64_t tokens, top_k, n_experts, hidden, inter, br, bc;
  };
  for (const Case& c :
       {Case{1, 8, 32, 256, 128, 128, 128}, Case{2, 8, 32, 256, 128, 128, 128}, Case{3, 8, 32, 256, 128, 128, 128},
        Case{10, 8, 32, 512, 256, 128, 128}, Case{64, 8, 32, 256, 128, 128, 128}, Case{600, 4, 8, 256, 128, 64, 64},
        Case{40, 2, 8, 160, 48, 16, 16}}) {
    const std::string what = std::to_string(c.tokens) + "x" + std::to_string(c.top_k) + " pairs over " +
                             std::to_string(c.n_experts) + " experts, hidden " + std::to_string(c.hidden) + ", inter " +
                             std::to_string(c.inter);
    const Fp8Array gate_up(c.n_experts, 2 * c.inter, c.hidden, c.br, c.bc, rng_),
        down(c.n_experts, c.hidden, c.inter, c.br, c.bc, rng_);
    Fp8Dev g8(*gpu_);
    test::expect_moe_experts_match(*oracle_, *gpu_, {c.tokens, c.top_k, c.n_experts, c.hidden, c.inter},
                                   gate_up.dequantised(), down.dequantised(), g8.upload(gate_up), g8.upload(down), rng_,
                                   kTol, what);
  }
}

// Random FP8 weights are the CPU generator's N(0, 1) sequence times stddev, rounded to the nearest E4M3
// (within half an E4M3 step: 2^-4 relative for normal values), every scale as asked.
TEST_F(CudaFp8, RandomFp8IsTheSameGeneratorRoundedToE4m3) {
  const int64_t n = 5003, n_scales = 41;
  auto g = gpu_->alloc(size_t(n));
  auto gs = gpu_->alloc(size_t(n_scales) * 4);
  gpu_->fill_random_fp8({.dst = g->data(),
                         .n = n,
                         .scales = gs->as<float>(),
                         .n_scales = n_scales,
                         .seed = 9,
                         .stddev = 16.0f,
                         .scale = 0.25f});
  std::vector<uint8_t> q(static_cast<size_t>(n));
  std::vector<float> s(static_cast<size_t>(n_scales));
  gpu_->copy_to_host(q.data(), g->data(), q.size());
  gpu_->copy_to_host(s.data(), gs->data(), s.size() * 4);
  for (float v : s) EXPECT_EQ(v, 0.25f);
  std::vector<float> z(static_cast<size_t>(n));
  oracle_->fill_random_normal({.dst = z.data(), .n = n, .seed = 9, .stddev = 16.0f});
  for (int64_t i = 0; i < n; ++i) {
    const float want = z[size_t(i)], got = f8_e4m3_to_f32(q[size_t(i)]);
    EXPECT_NEAR(got, want, std::abs(want) / 16.0 + 1.0 / 512) << i;
  }
}

}  // namespace
}  // namespace sy
