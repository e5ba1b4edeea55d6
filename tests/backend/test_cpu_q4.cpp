// The cpu-bf16 oracle's 4-bit weights (QuantView int4_group and nvfp4), kept where the CUDA backend keeps them
// and widened as its paths widen them (backend/quant_paths.h): exactly for up to kQuantGemvMaxRows rows and for
// up to kMoeSmallBatchPairs routed pairs, to bf16 beyond. Checked against double-precision products over weights
// decoded here from the formats' definitions (../shared/quant-formats.md B and C): w = (nibble − 8) · bf16 scale,
// and w = e2m1(nibble) · e4m3 scale · row scale, element c of a row in byte c / 2, the low nibble first. The plain
// CPU backend keeps none of them.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/quant_paths.h"
#include "common/backend_data.h"

namespace sy {
namespace {

using test::rel_err;

constexpr double kTol = 1e-5;

constexpr std::array<double, 8> kE2m1 = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

const char* name(WeightFormat f) { return f == WeightFormat::int4_group ? "int4" : "nvfp4"; }

double bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, 4);
  return f;
}

// E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 holds the subnormals m · 2^-9.
double e4m3_value(uint8_t v) {
  const int e = (v >> 3) & 0xF, m = v & 7;
  const double a = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return v & 0x80 ? -a : a;
}

// The nearest bf16 value (ties to even) of a value exact in fp32.
double bf16_round(double v) { return bf16_value(f32_to_bf16(static_cast<float>(v))); }

// `count` matrices [rows, cols] of a 4-bit form as the loader keeps them: bytes [count][rows][cols / 2], group
// scales [count][rows][cols / group] (bf16 bits or e4m3 bytes), row scales [count][rows] (nvfp4).
struct Q4Array {
  WeightFormat format;
  int64_t count, rows, cols, group;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> group_scales;
  std::vector<float> row_scales;
  int64_t scale_cols() const { return cols / group; }
  size_t scale_bytes() const { return format == WeightFormat::int4_group ? 2 : 1; }

  Q4Array(WeightFormat f, int64_t count_, int64_t rows_, int64_t cols_, int64_t group_)
      : format(f), count(count_), rows(rows_), cols(cols_), group(group_) {
    bytes.resize(size_t(count * rows * cols / 2));
    group_scales.resize(size_t(count * rows * scale_cols()) * scale_bytes());
    if (f == WeightFormat::nvfp4) row_scales.resize(size_t(count * rows));
  }
  void set_group_scale(size_t g, double v) {
    if (format == WeightFormat::int4_group) {
      const uint16_t b = f32_to_bf16(static_cast<float>(v));
      ASSERT_EQ(bf16_value(b), v);
      std::memcpy(&group_scales[2 * g], &b, 2);
    } else {
      group_scales[g] = f32_to_e4m3_satfinite(static_cast<float>(v));
      ASSERT_EQ(e4m3_value(group_scales[g]), v);
    }
  }
  // The weights [count][rows][cols] by the formats' definitions, in double (exact: for the row scales used here,
  // with at most 8 significant bits, every weight is an fp32 number).
  std::vector<double> decoded() const {
    std::vector<double> w(size_t(count * rows * cols));
    for (int64_t r = 0; r < count * rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int nibble = (bytes[size_t((r * cols + c) / 2)] >> (4 * (c % 2))) & 0xF;
        const size_t g = size_t(r * scale_cols() + c / group);
        double v = 0.0;
        if (format == WeightFormat::int4_group) {
          uint16_t s = 0;
          std::memcpy(&s, &group_scales[2 * g], 2);
          v = (nibble - 8) * bf16_value(s);
        } else {
          v = (nibble & 8 ? -1.0 : 1.0) * kE2m1[nibble & 7] * e4m3_value(group_scales[g]) * row_scales[size_t(r)];
        }
        w[size_t(r * cols + c)] = v;
      }
    }
    return w;
  }
};

// Random nibbles, group scales (int4: bf16 in [0.001, 0.01]; nvfp4: e4m3 codes of 2^-5 .. 2^2) and row scales in
// [0.0005, 0.004] of 8 significant bits (bf16 numbers).
Q4Array random_q4(WeightFormat f, int64_t count, int64_t rows, int64_t cols, int64_t group, std::mt19937& rng) {
  Q4Array a(f, count, rows, cols, group);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : a.bytes) b = static_cast<uint8_t>(byte(rng));
  const size_t n_groups = size_t(count * rows * a.scale_cols());
  std::uniform_real_distribution<double> s(0.001, 0.01);
  std::uniform_int_distribution<int> code(0x20, 0x48);
  for (size_t g = 0; g < n_groups; ++g) {
    a.set_group_scale(g, f == WeightFormat::int4_group ? bf16_round(s(rng)) : e4m3_value(uint8_t(code(rng))));
  }
  std::uniform_real_distribution<double> rs(0.0005, 0.004);
  for (auto& v : a.row_scales) v = static_cast<float>(bf16_round(rs(rng)));
  return a;
}

// y = bf16(x) · w^T (+ bf16(bias)) in double, w [n, k] with each weight as given or (round_weights) rounded to bf16.
std::vector<float> reference_linear(const std::vector<float>& x, const std::vector<double>& w, const float* bias,
                                    int64_t m, int64_t n, int64_t k, bool round_weights) {
  std::vector<float> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bf16_round(bias[j]) : 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double wv = w[size_t(j * k + c)];
        acc += bf16_round(x[size_t(i * k + c)]) * (round_weights ? bf16_round(wv) : wv);
      }
      y[size_t(i * n + j)] = static_cast<float>(acc);
    }
  }
  return y;
}

// The array as the loader keeps it on a CPU backend (host memory).
Matrix held(const Q4Array& a) {
  return {.w = a.bytes.data(),
          .q = {.format = a.format,
                .group_scales = a.group_scales.data(),
                .row_scales = a.row_scales.empty() ? nullptr : a.row_scales.data(),
                .block_rows = 1,
                .block_cols = a.group,
                .scale_cols = a.scale_cols(),
                .scale_stride = a.rows * a.scale_cols()}};
}

class CpuQ4 : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> oracle_ = make_cpu_backend(true);
  std::mt19937 rng_{2026};
};

TEST_F(CpuQ4, Bf16EmulationKeepsWhatTheCudaBackendKeeps) {
  const auto plain = make_cpu_backend();
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    EXPECT_TRUE(oracle_->keeps_quantised(f, 4096, 7168, 1, 32)) << name(f);
    EXPECT_TRUE(oracle_->keeps_quantised(f, 20, 2048, 1, 16)) << name(f);
    EXPECT_TRUE(oracle_->keeps_quantised(f, 64, 96, 1, 16)) << name(f);
    EXPECT_FALSE(oracle_->keeps_quantised(f, 64, 20, 1, 4)) << name(f);   // rows of 10 bytes
    EXPECT_FALSE(oracle_->keeps_quantised(f, 64, 48, 1, 16)) << name(f);  // rows of 24 bytes
    EXPECT_FALSE(oracle_->keeps_quantised(f, 64, 64, 1, 8)) << name(f);   // groups narrower than half a load
    EXPECT_FALSE(oracle_->keeps_quantised(f, 64, 64, 2, 16)) << name(f);  // groups of two rows
    EXPECT_FALSE(oracle_->keeps_quantised(f, 0, 64, 1, 16)) << name(f);
    EXPECT_FALSE(plain->keeps_quantised(f, 4096, 7168, 1, 32)) << name(f);
  }
  // Block FP8 stays dequantised at load on both (the GPU's FP8 paths quantise activations as well).
  EXPECT_FALSE(oracle_->keeps_quantised(WeightFormat::fp8_block, 4096, 2048, 128, 128));
  EXPECT_FALSE(plain->keeps_quantised(WeightFormat::fp8_block, 4096, 2048, 128, 128));
}

// Up to kQuantGemvMaxRows rows the weights are used exactly, beyond it rounded to bf16; x and the bias are
// rounded to bf16 either way. Groups of 16, 32 and 128; with and without bias.
TEST_F(CpuQ4, LinearUsesTheWeightsAsTheCudaPathForItsRowsDoes) {
  struct Case {
    int64_t m, n, k, group;
  };
  const int64_t G = kQuantGemvMaxRows;
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    for (const Case& c : {Case{1, 300, 256, 32}, Case{1, 64, 2048, 128}, Case{2, 129, 512, 16}, Case{G, 24, 96, 16},
                          Case{G + 1, 300, 256, 32}, Case{G + 1, 64, 2048, 128}, Case{37, 129, 512, 16}}) {
      const bool exact = c.m <= G;
      const std::string what = std::string(name(f)) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                               std::to_string(c.k) + " group " + std::to_string(c.group);
      ASSERT_TRUE(oracle_->keeps_quantised(f, c.n, c.k, 1, c.group)) << what;
      const Q4Array w = random_q4(f, 1, c.n, c.k, c.group, rng_);
      const std::vector<double> wd = w.decoded();
      const auto x = test::randn(size_t(c.m * c.k), rng_), b = test::randn(size_t(c.n), rng_);
      // The two uses of the weights differ by far more than the tolerance, so each case tells them apart.
      ASSERT_GT(rel_err(reference_linear(x, wd, nullptr, c.m, c.n, c.k, false),
                        reference_linear(x, wd, nullptr, c.m, c.n, c.k, true)),
                10 * kTol)
          << what;
      for (bool bias : {false, true}) {
        std::vector<float> y(size_t(c.m * c.n));
        oracle_->linear(x.data(), held(w), bias ? b.data() : nullptr, y.data(), c.m, c.n, c.k);
        EXPECT_LE(rel_err(y, reference_linear(x, wd, bias ? b.data() : nullptr, c.m, c.n, c.k, !exact)), kTol)
            << what << " bias " << bias;
      }
    }
  }
}

// Routed experts: weights on a grid where every gate/up sum is exact in fp32 (x in steps of 1/8 up to 1; int4
// scales (1 + j/128) / 16, nvfp4 e4m3 scales 1/2, 1, 2 and row scales (1 + j/128) / 16), so that the SiLU·mul
// inputs are the same numbers in any summation order and its bf16-rounded outputs the same; the experts'
// products are exact for up to kMoeSmallBatchPairs pairs however many rows an expert gets (the CUDA backend's
// per-pair GEMVs), rounded to bf16 beyond however few (its grouped GEMMs).
Q4Array grid_q4(WeightFormat f, int64_t count, int64_t rows, int64_t cols, int64_t group, std::mt19937& rng) {
  Q4Array a(f, count, rows, cols, group);
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 2);
  for (auto& b : a.bytes) b = static_cast<uint8_t>(byte(rng));
  const std::array<double, 3> fine = {(1 + 1 / 128.0) / 16, (1 + 3 / 128.0) / 16, (1 + 5 / 128.0) / 16};
  const std::array<double, 3> coarse = {0.5, 1.0, 2.0};
  for (size_t g = 0; g < size_t(count * rows * a.scale_cols()); ++g) {
    a.set_group_scale(g, (f == WeightFormat::int4_group ? fine : coarse)[size_t(pick(rng))]);
  }
  for (auto& v : a.row_scales) v = static_cast<float>(fine[size_t(pick(rng))]);
  return a;
}

struct MoeCase {
  int64_t tokens, top_k, n_experts, hidden, inter, group;
  std::vector<int32_t> ids;  // [tokens, top_k]
};

// out[t] = Σ_k weight · down_e(bf16(silu(g) · u)), (g, u) = up_gate_e(bf16(x[t])), in double but for the SiLU·mul,
// taken from the backend's own op on the exact gate/up values; weights as decoded or rounded to bf16.
std::vector<float> reference_moe(Backend& be, const MoeCase& c, const std::vector<float>& x,
                                 const std::vector<float>& weights, const std::vector<double>& gate_up,
                                 const std::vector<double>& down, bool round_weights) {
  const int64_t H = c.hidden, I = c.inter;
  std::vector<double> out(size_t(c.tokens * H), 0.0);
  std::vector<float> gu(static_cast<size_t>(2 * I)), act(static_cast<size_t>(I));
  for (int64_t p = 0; p < c.tokens * c.top_k; ++p) {
    const int64_t t = p / c.top_k, e = c.ids[size_t(p)];
    for (int64_t j = 0; j < 2 * I; ++j) {
      double acc = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        const double w = gate_up[size_t((e * 2 * I + j) * H + h)];
        acc += bf16_round(x[size_t(t * H + h)]) * (round_weights ? bf16_round(w) : w);
      }
      gu[size_t(j)] = static_cast<float>(acc);
      EXPECT_EQ(double(gu[size_t(j)]), acc) << "the gate/up sums must be exact in fp32";
    }
    be.silu_mul(gu.data(), act.data(), 1, I);
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0.0;
      for (int64_t i = 0; i < I; ++i) {
        const double w = down[size_t((e * H + h) * I + i)];
        acc += bf16_round(act[size_t(i)]) * (round_weights ? bf16_round(w) : w);
      }
      out[size_t(t * H + h)] += weights[size_t(p)] * acc;
    }
  }
  return {out.begin(), out.end()};
}

TEST_F(CpuQ4, MoeExpertsUseTheWeightsAsTheCudaPathForItsPairsDoes) {
  const int64_t P = kMoeSmallBatchPairs;
  std::vector<MoeCase> cases;
  // P pairs with one expert taking a row from every token (more than kQuantGemvMaxRows rows): exact.
  MoeCase crowded{.tokens = P / 2, .top_k = 2, .n_experts = 8, .hidden = 64, .inter = 32, .group = 16};
  for (int64_t t = 0; t < crowded.tokens; ++t) {
    crowded.ids.push_back(int32_t(t % 3 == 0 ? 5 : 3));
    crowded.ids.push_back(int32_t(t % 3 == 0 ? 3 : 6 + t % 2));
  }
  // P + 2 pairs spread over every expert (at most kQuantGemvMaxRows rows each): rounded.
  MoeCase spread{.tokens = P / 2 + 1, .top_k = 2, .n_experts = 8, .hidden = 64, .inter = 32, .group = 32};
  for (int64_t t = 0; t < spread.tokens; ++t) {
    spread.ids.push_back(int32_t(t % 8));
    spread.ids.push_back(int32_t((t + 3) % 8));
  }
  // Many pairs, random experts (some untouched), groups of 32 over hidden 96: rounded.
  MoeCase many{.tokens = 40, .top_k = 2, .n_experts = 12, .hidden = 96, .inter = 64, .group = 32};
  std::uniform_int_distribution<int32_t> expert(0, 9);
  for (int64_t t = 0; t < many.tokens; ++t) {
    const int32_t a = expert(rng_);
    many.ids.push_back(a);
    many.ids.push_back((a + 1 + expert(rng_) % 9) % 10);
  }
  // One token, one pair.
  MoeCase one{.tokens = 1, .top_k = 1, .n_experts = 4, .hidden = 32, .inter = 32, .group = 16, .ids = {2}};
  cases = {crowded, spread, many, one};

  std::uniform_int_distribution<int> eighths(-8, 8);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    for (const MoeCase& c : cases) {
      const int64_t pairs = c.tokens * c.top_k;
      const bool exact = pairs <= P;
      const std::string what = std::string(name(f)) + " " + std::to_string(c.tokens) + "x" + std::to_string(c.top_k) +
                               " pairs over " + std::to_string(c.n_experts) + " experts, hidden " +
                               std::to_string(c.hidden) + ", inter " + std::to_string(c.inter);
      ASSERT_TRUE(oracle_->keeps_quantised(f, 2 * c.inter, c.hidden, 1, c.group)) << what;
      ASSERT_TRUE(oracle_->keeps_quantised(f, c.hidden, c.inter, 1, c.group)) << what;
      const Q4Array gate_up = grid_q4(f, c.n_experts, 2 * c.inter, c.hidden, c.group, rng_);
      const Q4Array down = grid_q4(f, c.n_experts, c.hidden, c.inter, c.group, rng_);
      const std::vector<double> gu = gate_up.decoded(), dn = down.decoded();
      std::vector<float> x(static_cast<size_t>(c.tokens * c.hidden)), w(static_cast<size_t>(pairs));
      for (auto& v : x) v = static_cast<float>(eighths(rng_)) / 8;
      for (auto& v : w) v = weight(rng_);
      const auto want = reference_moe(*oracle_, c, x, w, gu, dn, !exact);
      ASSERT_GT(rel_err(want, reference_moe(*oracle_, c, x, w, gu, dn, exact)), 10 * kTol) << what;

      const Matrix gm = held(gate_up), dm = held(down);
      std::vector<float> out(size_t(c.tokens * c.hidden), -1.0f);
      MoeExpertsArgs call{.x = x.data(),
                          .expert_ids = c.ids.data(),
                          .weights = w.data(),
                          .gate_up = gm.w,
                          .down = dm.w,
                          .gate_up_q = gm.q,
                          .down_q = dm.q,
                          .out = out.data(),
                          .tokens = c.tokens,
                          .hidden = c.hidden,
                          .inter = c.inter,
                          .n_experts = c.n_experts,
                          .top_k = c.top_k};
      oracle_->moe_experts(call);
      EXPECT_LE(rel_err(out, want), kTol) << what;
      if (exact) continue;
      // Beyond kMoeSmallBatchPairs, the same as the dense experts (exactly dequantised, rounded by the dense path).
      const std::vector<float> gu_dense(gu.begin(), gu.end()), dn_dense(dn.begin(), dn.end());
      std::vector<float> dense_out(out.size());
      call.gate_up = gu_dense.data();
      call.down = dn_dense.data();
      call.gate_up_q = {};
      call.down_q = {};
      call.out = dense_out.data();
      oracle_->moe_experts(call);
      EXPECT_LE(rel_err(out, dense_out), 1e-6) << what;
    }
  }
}

// The CUDA generator's contract (test_cuda_q4): every nibble value about equally often, every scale as asked,
// and the same seed gives the same bytes.
TEST_F(CpuQ4, RandomQ4IsUniformNibblesWithTheScalesAsked) {
  const int64_t n = 1 << 16, groups = 97, rows = 33;
  for (WeightFormat f : {WeightFormat::int4_group, WeightFormat::nvfp4}) {
    std::vector<uint8_t> q(static_cast<size_t>(n)), s(static_cast<size_t>(groups) * 2);
    std::vector<float> r(static_cast<size_t>(rows));
    const RandomQ4Args a{.format = f,
                         .dst = q.data(),
                         .n_bytes = n,
                         .group_scales = s.data(),
                         .n_groups = groups,
                         .row_scales = r.data(),
                         .n_rows = rows,
                         .seed = 5,
                         .group_scale = f == WeightFormat::int4_group ? 0.00431f : 1.0f,
                         .row_scale = 0.0068f};
    oracle_->fill_random_q4(a);
    std::array<int64_t, 16> counts{};
    for (uint8_t v : q) {
      ++counts[v & 0xF];
      ++counts[v >> 4];
    }
    // 2n nibbles, 8192 expected per value; 5 standard deviations (about 88 each) either way.
    for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), 2.0 * n / 16, 450.0) << name(f);
    for (int64_t g = 0; g < groups; ++g) {
      if (f == WeightFormat::int4_group) {
        EXPECT_EQ(bf16_value(static_cast<uint16_t>(s[size_t(2 * g)] | (s[size_t(2 * g + 1)] << 8))),
                  bf16_round(0.00431f));
      } else {
        EXPECT_EQ(e4m3_value(s[size_t(g)]), 1.0);
      }
    }
    for (float v : r) EXPECT_EQ(v, 0.0068f);
    std::vector<uint8_t> again(q.size()), other(q.size());
    RandomQ4Args b = a;
    b.dst = again.data();
    oracle_->fill_random_q4(b);
    EXPECT_EQ(again, q) << name(f);
    b.dst = other.data();
    b.seed = 6;
    oracle_->fill_random_q4(b);
    EXPECT_NE(other, q) << name(f);
  }
}

}  // namespace
}  // namespace sy
