// The CUDA backend's block-FP8 weights (kept as stored: E4M3 bytes and fp32 block scales) against the
// CPU backend on the same weights dequantised on the host by the format's definition,
// w = float(e4m3) · scale of its block: the small-batch GEMV, the widen-then-cuBLAS path, the routed
// experts' per-pair and grouped paths, and the random FP8 generator.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "base/int_math.h"
#include "common/backend_data.h"
#include "common/moe_experts_check.h"
#include "kernels/cuda/ops.cuh"

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

// The nearest E4M3 code to v (ties to the even code), saturated at ±448: a search over the format's values.
uint8_t nearest_e4m3(float v) {
  static const std::vector<double> values = [] {
    std::vector<double> t(127);
    for (int c = 0; c < 127; ++c) t[size_t(c)] = f8_e4m3_to_f32(uint8_t(c));
    return t;
  }();
  const double a = std::min(std::abs(double(v)), 448.0);
  int best = 0;
  for (int c = 1; c < 127; ++c) {
    const double d = std::abs(values[size_t(c)] - a), db = std::abs(values[size_t(best)] - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return uint8_t(best | (std::signbit(v) ? 0x80 : 0));
}

// Rows quantised as the FP8 tensor-core products take them: per row and 128 columns, scale = amax / 448 (1 for
// an all-zero block), each value the nearest E4M3 of x / scale.
struct HostFp8Rows {
  int64_t rows, k;
  std::vector<uint8_t> q;
  std::vector<float> scales;
  int64_t scale_cols() const { return (k + 127) / 128; }
  double value(int64_t r, int64_t j) const {
    return double(f8_e4m3_to_f32(q[size_t(r * k + j)])) * scales[size_t(r * scale_cols() + j / 128)];
  }
};
HostFp8Rows quantise_rows(const std::vector<float>& x, int64_t rows, int64_t k) {
  HostFp8Rows out{rows, k, std::vector<uint8_t>(size_t(rows * k)), {}};
  out.scales.resize(size_t(rows * out.scale_cols()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < out.scale_cols(); ++b) {
      const int64_t j0 = b * 128, j1 = std::min(k, j0 + 128);
      float amax = 0.0f;
      for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::abs(x[size_t(r * k + j)]));
      const float scale = amax > 0.0f && amax <= 3.0e38f ? amax / 448.0f : 1.0f;
      out.scales[size_t(r * out.scale_cols() + b)] = scale;
      for (int64_t j = j0; j < j1; ++j) out.q[size_t(r * k + j)] = nearest_e4m3(x[size_t(r * k + j)] / scale);
    }
  }
  return out;
}

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

// Up to 4 rows take the FP8 GEMV; more rows of blocks that are not whole multiples of 128 columns (or an odd
// number of output columns) the widened bf16 matrix on cuBLAS (128-column blocks: the FP8 tensor cores, tested
// below); partial last block rows and columns, with and without bias.
TEST_F(CudaFp8, LinearMatchesTheDequantisedWeights) {
  struct Case {
    int64_t m, n, k, br, bc;
  };
  for (const Case& c : {Case{1, 300, 256, 128, 128}, Case{1, 4096, 2048, 128, 128}, Case{3, 129, 512, 16, 32},
                        Case{4, 576, 1024, 128, 128}, Case{16, 64, 2048, 16, 32}, Case{37, 300, 256, 64, 64},
                        Case{256, 129, 1024, 128, 128}}) {
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

// Per-pair GEMVs (up to 16 pairs) and the grouped bf16 tensor-core path (blocks narrower than 128 columns), against
// the cpu-bf16 oracle on the dequantised experts; the grouped path also replayed from a captured graph.
TEST_F(CudaFp8, MoeExpertsMatchTheDequantisedExperts) {
  struct Case {
    int64_t tokens, top_k, n_experts, hidden, inter, br, bc;
  };
  for (const Case& c : {Case{1, 8, 32, 256, 128, 128, 128}, Case{2, 8, 32, 256, 128, 128, 128},
                        Case{600, 4, 8, 256, 128, 64, 64}, Case{40, 2, 8, 160, 48, 16, 16}}) {
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

// The activation quantiser of the FP8 tensor-core products, from fp32 and from bf16 rows, against the format's
// rule: every byte and every scale equal. Rows of ordinary, tiny and huge magnitudes, an all-zero block, a partial
// last block.
TEST_F(CudaFp8, QuantisedRowsAreTheNearestE4m3OfTheScaledValues) {
  const int64_t rows = 6, k = 272, sc = 3;
  std::vector<float> x = randn(size_t(rows * k), rng_);
  for (int64_t j = 0; j < k; ++j) {
    x[size_t(1 * k + j)] *= 1e-30f;
    x[size_t(2 * k + j)] *= 1e30f;
    x[size_t(3 * k + j)] = j < 128 ? 0.0f : x[size_t(3 * k + j)];
    x[size_t(4 * k + j)] = float(j % 17) - 8.0f;  // exact small integers: many values on E4M3 points and midpoints
  }
  for (bool from_bf16 : {false, true}) {
    std::vector<float> in = x;
    std::vector<uint16_t> bits(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      bits[i] = f32_to_bf16(in[i]);
      if (from_bf16) in[i] = bf16_to_f32(bits[i]);
    }
    const HostFp8Rows want = quantise_rows(in, rows, k);
    auto src = gpu_->alloc(in.size() * 4);
    auto q = gpu_->alloc(size_t(rows * k));
    auto scales = gpu_->alloc(size_t(rows * sc) * 4);
    if (from_bf16) {
      gpu_->copy_to_device(src->data(), bits.data(), bits.size() * 2);
      cuda::quantise_fp8_rows(static_cast<const cuda::bf16_bits*>(src->data()), rows, k, q->as<uint8_t>(),
                              scales->as<float>(), nullptr);
    } else {
      gpu_->copy_to_device(src->data(), in.data(), in.size() * 4);
      cuda::quantise_fp8_rows(src->as<float>(), rows, k, q->as<uint8_t>(), scales->as<float>(), nullptr);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> got_q(size_t(rows * k));
    std::vector<float> got_s(size_t(rows * sc));
    gpu_->copy_to_host(got_q.data(), q->data(), got_q.size());
    gpu_->copy_to_host(got_s.data(), scales->data(), got_s.size() * 4);
    EXPECT_EQ(got_s, want.scales) << "from bf16 " << from_bf16;
    for (size_t i = 0; i < got_q.size(); ++i) {
      ASSERT_EQ(int(got_q[i]), int(want.q[i])) << "element " << i << " = " << in[i] << ", from bf16 " << from_bf16;
    }
  }
}

// Block-FP8 products on the FP8 tensor cores (the backend's for 5 to 32 rows with 128-column blocks, the kernels'
// at every size): x quantised as above, the product of those values with the dequantised weights computed here in
// double. Tolerance: the tensor cores
// sum the FP8 products of a 128-column block in reduced precision (Hopper keeps about 14 bits, DeepSeek-V3 report,
// section 3.3.2) before each block's partial is added in fp32.
TEST_F(CudaFp8, LinearOnFp8TensorCoresIsTheProductOfTheQuantisedRows) {
  constexpr double kTolW8A8 = 1e-3;
  struct Case {
    int64_t m, n, k, br, bc;
  };
  for (const Case& c : {Case{5, 2048, 4096, 128, 128}, Case{7, 200, 400, 128, 128}, Case{16, 64, 2048, 128, 128},
                        Case{37, 300, 256, 128, 128}, Case{64, 5120, 2048, 128, 128}, Case{33, 264, 512, 8, 256},
                        Case{256, 576, 1024, 128, 128}, Case{300, 1030, 384, 128, 128}}) {
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " blocks " +
                             std::to_string(c.br) + "x" + std::to_string(c.bc);
    const Fp8Array w(1, c.n, c.k, c.br, c.bc, rng_);
    std::vector<float> x = randn(size_t(c.m * c.k), rng_);
    for (int64_t j = 0; j < c.k; ++j) x[size_t(j)] *= 1000.0f;  // one row of another magnitude
    const std::vector<float> b = randn(size_t(c.n), rng_), wd = w.dequantised();
    const HostFp8Rows xq = quantise_rows(x, c.m, c.k);
    for (bool bias : {false, true}) {
      std::vector<float> want(size_t(c.m * c.n));
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t n = 0; n < c.n; ++n) {
          double acc = bias ? bf16_to_f32(f32_to_bf16(b[size_t(n)])) : 0.0;
          for (int64_t j = 0; j < c.k; ++j) acc += xq.value(i, j) * wd[size_t(n * c.k + j)];
          want[size_t(i * c.n + n)] = float(acc);
        }
      }
      Dev gd(*gpu_);
      Fp8Dev g8(*gpu_);
      const Matrix wm = g8.upload(w);
      float* xd = gd.f32(x);
      void* bd = bias ? gd.weight(b) : nullptr;
      // The kernels themselves at every size (tile heights 16 to 128, k split or not)...
      float* y = gd.out(size_t(c.m * c.n));
      auto xq_d = gpu_->alloc(size_t(c.m * c.k));
      auto xs_d = gpu_->alloc(size_t(c.m * xq.scale_cols()) * 4);
      auto part = gpu_->alloc(size_t(std::max<int64_t>(1, cuda::gemm_fp8_partials(c.m, c.n, c.k))) * 4);
      gpu_->synchronize();
      cuda::quantise_fp8_rows(xd, c.m, c.k, xq_d->as<uint8_t>(), xs_d->as<float>(), nullptr);
      cuda::gemm_fp8({.q = xq_d->as<uint8_t>(), .scales = xs_d->as<float>()}, static_cast<const uint8_t*>(wm.w), wm.q,
                     static_cast<const cuda::bf16_bits*>(bd), y, part->as<float>(), c.m, c.n, c.k, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(rel_err(gd.host(y, size_t(c.m * c.n)), want), kTolW8A8) << what << " bias " << bias;
      // ...and the backend's products up to the rows it gives them.
      if (c.m > 32) continue;
      float* yb = gd.out(size_t(c.m * c.n));
      gpu_->linear(xd, wm, bd, yb, c.m, c.n, c.k);
      EXPECT_LE(rel_err(gd.host(yb, size_t(c.m * c.n)), want), kTolW8A8) << what << " bias " << bias << " (backend)";
    }
  }
}

// Routed experts of block-FP8 arrays with 128-column blocks on the FP8 tensor cores (the kernels at every tile
// height, 16 to 128 rows; the backend's path where it takes them, more than 16 pairs in tiles of up to 32 rows):
// x quantised per token, SiLU(gate)·up rounded to bf16 and quantised per pair, each product from the quantised
// values in double here; a captured replay of the backend's path equal bit for bit.
// Tolerance: the tensor cores' block sums as above, and an activation that lands on the other side of a bf16 or
// E4M3 rounding point here than on the GPU (SiLU's exponential and the sums' order differ in the last bits): each
// such value moves by one E4M3 step of one of 128 or more terms.
TEST_F(CudaFp8, MoeExpertsOnFp8TensorCoresAreTheProductsOfTheQuantisedRows) {
  constexpr double kTolExperts = 5e-3;
  struct Case {
    int64_t tokens, top_k, n_experts, hidden, inter, br, bc;
  };
  for (const Case& c :
       {Case{3, 8, 32, 256, 128, 128, 128}, Case{10, 8, 32, 512, 256, 128, 128}, Case{64, 8, 32, 256, 128, 128, 128},
        Case{40, 8, 16, 384, 256, 128, 128}, Case{20, 8, 16, 256, 256, 8, 256}, Case{200, 4, 16, 256, 128, 128, 128},
        Case{600, 4, 8, 256, 128, 128, 128}}) {
    const int64_t T = c.tokens, K = c.top_k, H = c.hidden, I = c.inter;
    const std::string what = std::to_string(T) + "x" + std::to_string(K) + " pairs over " +
                             std::to_string(c.n_experts) + " experts, hidden " + std::to_string(H) + ", inter " +
                             std::to_string(I);
    const Fp8Array gate_up(c.n_experts, 2 * I, H, c.br, c.bc, rng_), down(c.n_experts, H, I, c.br, c.bc, rng_);
    const std::vector<float> gu = gate_up.dequantised(), dn = down.dequantised(), x = randn(size_t(T * H), rng_);
    std::vector<int32_t> ids(size_t(T * K));
    std::vector<float> wts(size_t(T * K));
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        ids[size_t(t * K + k)] = int32_t((t * 5 + k * 3 + t / 3) % c.n_experts);  // distinct within a token
        wts[size_t(t * K + k)] = weight(rng_);
      }
    }
    const HostFp8Rows xq = quantise_rows(x, T, H);
    std::vector<float> act(size_t(T * K * I));
    for (int64_t p = 0; p < T * K; ++p) {
      const int64_t t = p / K, e = ids[size_t(p)];
      for (int64_t j = 0; j < I; ++j) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += xq.value(t, h) * gu[size_t((e * 2 * I + j) * H + h)];
          u += xq.value(t, h) * gu[size_t((e * 2 * I + I + j) * H + h)];
        }
        act[size_t(p * I + j)] = bf16_to_f32(f32_to_bf16(float(g / (1.0 + std::exp(-g)) * u)));
      }
    }
    const HostFp8Rows aq = quantise_rows(act, T * K, I);
    std::vector<float> want(size_t(T * H));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double out = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t p = t * K + k, e = ids[size_t(p)];
          double y = 0;
          for (int64_t j = 0; j < I; ++j) y += aq.value(p, j) * dn[size_t((e * H + h) * I + j)];
          out += double(wts[size_t(p)]) * y;
        }
        want[size_t(t * H + h)] = float(out);
      }
    }
    Dev gd(*gpu_);
    Fp8Dev g8(*gpu_);
    const Matrix gum = g8.upload(gate_up), dnm = g8.upload(down);
    float* yg = gd.out(size_t(T * H));
    float* yk = gd.out(size_t(T * H));
    const MoeExpertsArgs call{.x = gd.f32(x),
                              .expert_ids = gd.i32(ids),
                              .weights = gd.f32(wts),
                              .gate_up = gum.w,
                              .down = dnm.w,
                              .gate_up_q = gum.q,
                              .down_q = dnm.q,
                              .out = yg,
                              .tokens = T,
                              .hidden = H,
                              .inter = I,
                              .n_experts = c.n_experts,
                              .top_k = K};
    // The kernels at every tile height...
    const int64_t P = T * K;
    auto xq_d = gpu_->alloc(size_t(T * H)), xs_d = gpu_->alloc(size_t(T * cuda::fp8_act_scale_cols(H)) * 4);
    auto aq_d = gpu_->alloc(size_t(P * I)), as_d = gpu_->alloc(size_t(P * cuda::fp8_act_scale_cols(I)) * 4);
    auto act_d = gpu_->alloc(size_t(P * I) * 2), y_d = gpu_->alloc(size_t(P * H) * 4);
    for (int tile_m : {16, 32, 64, 128}) {
      auto route = gpu_->alloc(size_t(cuda::moe_grouped_route_ints(P, c.n_experts, tile_m)) * 4);
      cuda::MoeGroupedScratch g{.route = cuda::moe_grouped_route_at(route->as<int32_t>(), P, c.n_experts, tile_m),
                                .x_bf16 = nullptr,
                                .act = static_cast<cuda::bf16_bits*>(act_d->data()),
                                .y = y_d->as<float>(),
                                .tile_m = tile_m};
      g.x_fp8 = xq_d->as<uint8_t>(), g.x_scales = xs_d->as<float>(), g.act_fp8 = aq_d->as<uint8_t>();
      g.act_scales = as_d->as<float>();
      MoeExpertsArgs direct = call;
      direct.out = yk;
      gpu_->synchronize();
      cuda::moe_grouped_dispatch(direct, g, nullptr);
      cuda::moe_grouped_gemms(direct, g, nullptr);
      cuda::moe_grouped_combine(direct, g, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(rel_err(gd.host(yk, size_t(T * H)), want), kTolExperts) << what << ", " << tile_m << "-row tiles";
    }
    // ...and the backend's path where it takes them (up to 32-row tiles), captured too.
    if (cuda::moe_grouped_tile_m(P, c.n_experts) > 32) continue;
    ASSERT_TRUE(gpu_->moe_experts_async(call)) << what;
    gpu_->moe_experts(call);
    const std::vector<float> first = gd.host(yg, size_t(T * H));
    EXPECT_LE(rel_err(first, want), kTolExperts) << what;
    const std::vector<float> poison(size_t(T * H), std::numeric_limits<float>::quiet_NaN());
    const int64_t graph = gpu_->capture([&] { gpu_->moe_experts(call); });
    gpu_->copy_to_device(yg, poison.data(), poison.size() * sizeof(float));
    gpu_->replay(graph);
    EXPECT_EQ(gd.host(yg, size_t(T * H)), first) << what << ": captured";
    gpu_->drop_captures();
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
