// The CUDA backend's 4-bit weights kept as stored (QuantView int4_group and nvfp4: packed nibbles, group
// scales, NVFP4's per-row tensor scales) against the CPU backend on the same weights dequantised on the host
// by the formats' definitions (../shared/quant-formats.md B and C): w = (nibble − 8) · bf16 scale, and
// w = e2m1(nibble) · e4m3 scale · tensor scale. The small-batch GEMV, the widen-then-cuBLAS path, the routed
// experts' per-pair and grouped paths (captured too), and the random 4-bit generator.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/dtype.h"
#include "common/backend_data.h"
#include "common/moe_experts_check.h"

namespace sy {
namespace {

// As the bf16 comparisons (test_cuda_backend.cpp): activations rounded to bf16 at product inputs; the
// GEMV paths widen each weight in fp32 where the cpu-bf16 oracle, given the dequantised weights as dense
// matrices here, rounds them to bf16 (given the 4-bit form it widens them as each GPU path does: test_cpu_q4).
constexpr double kTol = 2e-2;

using test::Dev;
using test::randn;
using test::rel_err;

constexpr std::array<float, 8> kE2m1 = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

const char* name(WeightFormat f) { return f == WeightFormat::int4_group ? "int4" : "nvfp4"; }

// `count` matrices [rows, cols] of random nibbles with random group scales (and NVFP4 row scales).
struct Q4Array {
  WeightFormat format;
  int64_t count, rows, cols, group;
  std::vector<uint8_t> bytes;         // [count][rows][cols / 2]
  std::vector<uint8_t> group_scales;  // [count][rows][cols / group]: bf16 bits (2 bytes each) or e4m3 bytes
  std::vector<float> row_scales;      // [count][rows], nvfp4
  int64_t scale_cols() const { return cols / group; }

  Q4Array(WeightFormat f, int64_t count_, int64_t rows_, int64_t cols_, int64_t group_, std::mt19937& rng)
      : format(f), count(count_), rows(rows_), cols(cols_), group(group_) {
    std::uniform_int_distribution<int> byte(0, 255);
    bytes.resize(size_t(count * rows * cols / 2));
    for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
    const size_t n_groups = size_t(count * rows * scale_cols());
    if (f == WeightFormat::int4_group) {
      std::uniform_real_distribution<float> s(0.001f, 0.01f);
      group_scales.resize(2 * n_groups);
      for (size_t i = 0; i < n_groups; ++i) {
        const uint16_t v = f32_to_bf16(s(rng));
        group_scales[2 * i] = static_cast<uint8_t>(v & 0xff);
        group_scales[2 * i + 1] = static_cast<uint8_t>(v >> 8);
      }
    } else {
      std::uniform_int_distribution<int> code(0x20, 0x48);  // positive normal E4M3 values 2^-5 .. 2^2
      group_scales.resize(n_groups);
      for (auto& v : group_scales) v = static_cast<uint8_t>(code(rng));
      std::uniform_real_distribution<float> s(0.0005f, 0.004f);
      row_scales.resize(size_t(count * rows));
      for (auto& v : row_scales) v = s(rng);
    }
  }
  std::vector<float> dequantised() const {
    std::vector<float> w(size_t(count * rows * cols));
    for (int64_t r = 0; r < count * rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t nib = (bytes[size_t(r * cols / 2 + c / 2)] >> (4 * (c % 2))) & 0xF;
        const size_t g = size_t(r * scale_cols() + c / group);
        float v = 0.0f;
        if (format == WeightFormat::int4_group) {
          const auto bits = static_cast<uint16_t>(group_scales[2 * g] | (group_scales[2 * g + 1] << 8));
          v = static_cast<float>(static_cast<int>(nib) - 8) * bf16_to_f32(bits);
        } else {
          v = (nib & 8 ? -kE2m1[nib & 7] : kE2m1[nib & 7]) * (f8_e4m3_to_f32(group_scales[g]) * row_scales[size_t(r)]);
        }
        w[size_t(r * cols + c)] = v;
      }
    }
    return w;
  }
};

// The array on `be` as the CUDA backend keeps it.
class Q4Dev {
 public:
  explicit Q4Dev(Backend& be) : be_(be) {}
  Matrix upload(const Q4Array& a) {
    const void* w = copy(a.bytes.data(), a.bytes.size());
    const void* gs = copy(a.group_scales.data(), a.group_scales.size());
    const void* rs = a.row_scales.empty() ? nullptr : copy(a.row_scales.data(), a.row_scales.size() * 4);
    return {.w = w,
            .q = {.format = a.format,
                  .group_scales = gs,
                  .row_scales = static_cast<const float*>(rs),
                  .block_rows = 1,
                  .block_cols = a.group,
                  .scale_cols = a.scale_cols(),
                  .scale_stride = a.rows * a.scale_cols()}};
  }

 private:
  const void* copy(const void* src, size_t n) {
    bufs_.push_back(be_.alloc(n));
    be_.copy_to_device(bufs_.back()->data(), src, n);
    return bufs_.back()->data();
  }
  Backend& be_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
};

class CudaQ4 : public ::testing::Test {
 protected:
  void SetUp() override {
    oracle_ = make_cpu_backend(true);
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> oracle_, gpu_;
  std::mt19937 rng_{2025};
};

TEST_F(CudaQ4, BackendKeepsRowsOfWholeLoadsAndGroupsOfHalfLoads) {
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    EXPECT_TRUE(gpu_->keeps_quantised(f, 4096, 7168, 1, 32)) << name(f);
    EXPECT_TRUE(gpu_->keeps_quantised(f, 20, 2048, 1, 16)) << name(f);
    EXPECT_FALSE(gpu_->keeps_quantised(f, 64, 20, 1, 4)) << name(f);         // rows of 10 bytes
    EXPECT_FALSE(gpu_->keeps_quantised(f, 64, 64, 1, 8)) << name(f);         // groups narrower than half a load
    EXPECT_TRUE(oracle_->keeps_quantised(f, 4096, 7168, 1, 32)) << name(f);  // cpu-bf16 keeps what the GPU keeps
    EXPECT_FALSE(make_cpu_backend()->keeps_quantised(f, 4096, 7168, 1, 32)) << name(f);
  }
}

// m <= 4 takes the 4-bit GEMV, more rows the widened bf16 matrix on cuBLAS; groups of 16, 32 and 128.
TEST_F(CudaQ4, LinearMatchesTheDequantisedWeights) {
  struct Case {
    int64_t m, n, k, group;
  };
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    for (const Case& c :
         {Case{1, 300, 256, 32}, Case{1, 2048, 7168, 32}, Case{2, 129, 512, 16}, Case{3, 64, 2048, 128},
          Case{4, 200, 384, 16}, Case{4, 24, 9216, 32}, Case{5, 300, 256, 32}, Case{37, 576, 1024, 16}}) {
      const std::string what = std::string(name(f)) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                               std::to_string(c.k) + " group " + std::to_string(c.group);
      ASSERT_TRUE(gpu_->keeps_quantised(f, c.n, c.k, 1, c.group)) << what;
      const Q4Array w(f, 1, c.n, c.k, c.group, rng_);
      const auto x = randn(size_t(c.m * c.k), rng_), b = randn(size_t(c.n), rng_);
      for (bool bias : {false, true}) {
        Dev od(*oracle_), gd(*gpu_);
        Q4Dev g4(*gpu_);
        float* yo = od.out(size_t(c.m * c.n));
        float* yg = gd.out(size_t(c.m * c.n));
        oracle_->linear(od.f32(x), od.weight(w.dequantised()), bias ? od.weight(b) : nullptr, yo, c.m, c.n, c.k);
        gpu_->linear(gd.f32(x), g4.upload(w), bias ? gd.weight(b) : nullptr, yg, c.m, c.n, c.k);
        EXPECT_LE(rel_err(gd.host(yg, size_t(c.m * c.n)), od.host(yo, size_t(c.m * c.n))), kTol)
            << what << " bias " << bias;
      }
    }
  }
}

// Per-pair GEMVs (up to 16 pairs) and the grouped tensor-core path for each tile height, against the
// cpu-bf16 oracle on the dequantised experts; also replayed from a captured graph.
TEST_F(CudaQ4, MoeExpertsMatchTheDequantisedExperts) {
  struct Case {
    int64_t tokens, top_k, n_experts, hidden, inter, group;
  };
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    for (const Case& c : {Case{1, 8, 32, 256, 128, 32}, Case{2, 8, 32, 512, 96, 16}, Case{10, 8, 32, 512, 256, 32},
                          Case{64, 8, 32, 256, 128, 16}, Case{600, 4, 8, 256, 160, 32}, Case{40, 2, 8, 160, 64, 16}}) {
      const std::string what = std::string(name(f)) + " " + std::to_string(c.tokens) + "x" + std::to_string(c.top_k) +
                               " pairs over " + std::to_string(c.n_experts) + " experts, hidden " +
                               std::to_string(c.hidden) + ", inter " + std::to_string(c.inter);
      const Q4Array gate_up(f, c.n_experts, 2 * c.inter, c.hidden, c.group, rng_),
          down(f, c.n_experts, c.hidden, c.inter, c.group, rng_);
      Q4Dev g4(*gpu_);
      test::expect_moe_experts_match(*oracle_, *gpu_, {c.tokens, c.top_k, c.n_experts, c.hidden, c.inter},
                                     gate_up.dequantised(), down.dequantised(), g4.upload(gate_up), g4.upload(down),
                                     rng_, kTol, what);
    }
  }
}

// Random 4-bit weights: every nibble value about equally often, every scale as asked (bf16 for INT4, e4m3
// for NVFP4, whose 1.0 is exact), and the same seed gives the same bytes.
TEST_F(CudaQ4, RandomQ4IsUniformNibblesWithTheScalesAsked) {
  const int64_t n = 1 << 16, groups = 97, rows = 33;
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    auto b = gpu_->alloc(size_t(n));
    auto gs = gpu_->alloc(size_t(groups) * 2);
    auto rs = gpu_->alloc(size_t(rows) * 4);
    const RandomQ4Args a{.format = f,
                         .dst = b->data(),
                         .n_bytes = n,
                         .group_scales = gs->data(),
                         .n_groups = groups,
                         .row_scales = rs->as<float>(),
                         .n_rows = rows,
                         .seed = 5,
                         .group_scale = f == WeightFormat::int4_group ? 0.00431f : 1.0f,
                         .row_scale = 0.0068f};
    gpu_->fill_random_q4(a);
    std::vector<uint8_t> q(static_cast<size_t>(n)), s(static_cast<size_t>(groups) * 2);
    std::vector<float> r(static_cast<size_t>(rows));
    gpu_->copy_to_host(q.data(), b->data(), q.size());
    gpu_->copy_to_host(s.data(), gs->data(), s.size());
    gpu_->copy_to_host(r.data(), rs->data(), r.size() * 4);
    std::array<int64_t, 16> counts{};
    for (uint8_t v : q) {
      ++counts[v & 0xF];
      ++counts[v >> 4];
    }
    // 2n nibbles, 8192 expected per value; 5 standard deviations (about 88 each) either way.
    for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), 2.0 * n / 16, 450.0) << name(f);
    for (int64_t g = 0; g < groups; ++g) {
      if (f == WeightFormat::int4_group) {
        EXPECT_EQ(bf16_to_f32(static_cast<uint16_t>(s[size_t(2 * g)] | (s[size_t(2 * g + 1)] << 8))),
                  bf16_to_f32(f32_to_bf16(0.00431f)));
      } else {
        EXPECT_EQ(f8_e4m3_to_f32(s[size_t(g)]), 1.0f);
      }
    }
    for (float v : r) EXPECT_EQ(v, 0.0068f);
    auto again = gpu_->alloc(size_t(n));
    RandomQ4Args b2 = a;
    b2.dst = again->data();
    gpu_->fill_random_q4(b2);
    std::vector<uint8_t> q2(static_cast<size_t>(n));
    gpu_->copy_to_host(q2.data(), again->data(), q2.size());
    EXPECT_EQ(q2, q) << name(f);
  }
}

}  // namespace
}  // namespace sy
