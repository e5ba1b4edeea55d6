// Known-answer and property checks whose expected values come from the mathematics, not from our code.
// They pin down the scalar reference (the oracle) and, run over both sets, the CPU kernels too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace sy {
namespace {

struct KernelSet {
  std::string name;
  decltype(&ref::linear) linear;
  decltype(&ref::rms_norm) rms_norm;
  decltype(&ref::add_rms_norm) add_rms_norm;
  decltype(&ref::embedding) embedding;
  decltype(&ref::silu_mul) silu_mul;
  decltype(&ref::rope) rope;
  decltype(&ref::kv_write) kv_write;
  decltype(&ref::paged_attention) paged_attention;
  decltype(&ref::softmax_topk) softmax_topk;
};

// Every op of namespace ns, in the order of SY_KERNEL_OPS.
// clang-format off
#define SY_KERNEL_SET(ns)                                                                                 \
  KernelSet{#ns, ns::linear, ns::rms_norm, ns::add_rms_norm, ns::embedding, ns::silu_mul, ns::rope,       \
            ns::kv_write, ns::paged_attention, ns::softmax_topk}
// clang-format on
const KernelSet ref_kernels = SY_KERNEL_SET(ref);
const KernelSet cpu_kernels = SY_KERNEL_SET(cpu);
#undef SY_KERNEL_SET

// NOLINTNEXTLINE(readability-identifier-naming): the name gtest looks up to print a parameter.
void PrintTo(const KernelSet& set, std::ostream* os) { *os << set.name; }

class KernelMath : public testing::TestWithParam<KernelSet> {
 protected:
  const KernelSet& ops() const { return GetParam(); }
};

std::vector<float> random_normal(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    x = dist(rng);
  }
  return v;
}

TEST_P(KernelMath, LinearHandComputed2x3) {
  const float x[] = {1, 2, 3, 4, 5, 6};            // [2, 3]
  const float w[] = {1, 0, -1, 0.5f, 0.5f, 0.5f};  // [2, 3]
  const float bias[] = {10, -1};
  float y[4];
  ops().linear(x, w, nullptr, y, 2, 2, 3);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-2, 3, -2, 7.5f}));
  ops().linear(x, w, bias, y, 2, 2, 3);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{8, 2, 8, 6.5f}));
}

TEST_P(KernelMath, RmsNormOfConstantRow) {
  const float eps = 1e-6f;
  for (float c : {3.0f, -0.01f, 1e-3f}) {
    for (int64_t dim : {1, 7, 129}) {
      const std::vector<float> x(static_cast<size_t>(dim), c), weight(static_cast<size_t>(dim), 1.0f);
      std::vector<float> y(static_cast<size_t>(dim));
      ops().rms_norm(x.data(), weight.data(), y.data(), 1, dim, eps);
      const double want = double(c) / std::abs(double(c)) / std::sqrt(1.0 + double(eps) / (double(c) * c));
      for (float v : y) {
        EXPECT_NEAR(v, want, 1e-6) << "c=" << c << " dim=" << dim;
      }
    }
  }
}

TEST_P(KernelMath, RmsNormScalesByWeight) {
  // Row [3, 4]: mean square 12.5, so y = x / sqrt(12.5) * weight (eps = 0).
  const float x[] = {3, 4}, weight[] = {2, -0.5f};
  float y[2];
  ops().rms_norm(x, weight, y, 1, 2, 0.0f);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5) * 2, 1e-6);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5) * -0.5, 1e-6);
}

TEST_P(KernelMath, AddRmsNormAddsThenNormalises) {
  float residual[] = {1, 2, 3, -1, -2, 2};
  const float x[] = {2, 2, 1, 1, 2, 2};  // sums: [3, 4, 4] and [0, 0, 4]
  const float weight[] = {1, 1, 1};
  float y[6];
  ops().add_rms_norm(residual, x, weight, y, 2, 3, 0.0f);
  EXPECT_EQ(std::vector<float>(residual, residual + 6), (std::vector<float>{3, 4, 4, 0, 0, 4}));
  const double rms0 = std::sqrt(41.0 / 3), rms1 = std::sqrt(16.0 / 3);
  const double want[] = {3 / rms0, 4 / rms0, 4 / rms0, 0, 0, 4 / rms1};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  }
}

TEST_P(KernelMath, EmbeddingGathersRows) {
  const float table[] = {0, 1, 10, 11, 20, 21};  // [3, 2]
  const int32_t ids[] = {2, 0, 2, 1};
  float out[8];
  ops().embedding(table, ids, out, 4, 2);
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
}

TEST_P(KernelMath, SiluMulKnownValues) {
  // silu(g) = g * sigmoid(g): silu(0) = 0, silu(ln 3) = ln 3 * 3/4, silu(-ln 3) = -ln 3 * 1/4.
  const float ln3 = std::log(3.0f);
  const float gate_up[] = {0, ln3, -ln3, 5, 2, 4};  // [1, 2*3]
  float out[3];
  ops().silu_mul(gate_up, out, 1, 3);
  EXPECT_NEAR(out[0], 0.0, 1e-7);
  EXPECT_NEAR(out[1], double(ln3) * 0.75 * 2, 1e-6);
  EXPECT_NEAR(out[2], -double(ln3) * 0.25 * 4, 1e-6);
}

// Rotary case: one head, positions and inv_freq as given, run in place on x.
void run_rope(const KernelSet& ops, std::vector<float>& x, const std::vector<int32_t>& positions,
              const std::vector<float>& inv_freq, int64_t heads, int64_t head_dim, int64_t rotary_dim, bool interleaved,
              float scale = 1.0f) {
  ops.rope({.x = x.data(),
            .positions = positions.data(),
            .inv_freq = inv_freq.data(),
            .tokens = int64_t(positions.size()),
            .heads = heads,
            .head_dim = head_dim,
            .rotary_dim = rotary_dim,
            .attention_scale = scale,
            .interleaved = interleaved});
}

std::vector<float> llama_inv_freq(int64_t rotary_dim) {
  std::vector<float> f(size_t(rotary_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = std::pow(10000.0f, -float(2 * i) / float(rotary_dim));
  }
  return f;
}

TEST_P(KernelMath, RopeKnownRotation) {
  // rotary_dim 2, inv_freq 1, position 1: [1, 0] -> [cos 1, sin 1], [0, 1] -> [-sin 1, cos 1].
  for (bool interleaved : {false, true}) {
    std::vector<float> x = {1, 0, 0, 1};  // two heads of dim 2
    run_rope(ops(), x, {1}, {1.0f}, 2, 2, 2, interleaved);
    EXPECT_NEAR(x[0], std::cos(1.0), 1e-7);
    EXPECT_NEAR(x[1], std::sin(1.0), 1e-7);
    EXPECT_NEAR(x[2], -std::sin(1.0), 1e-7);
    EXPECT_NEAR(x[3], std::cos(1.0), 1e-7);
  }
}

TEST_P(KernelMath, RopeAtPositionZeroIsIdentityAndTailPassesThrough) {
  std::mt19937 rng(11);
  for (bool interleaved : {false, true}) {
    const int64_t heads = 3, head_dim = 13, rotary_dim = 8;
    const auto x0 = random_normal(size_t(2 * heads * head_dim), rng);
    auto x = x0;
    run_rope(ops(), x, {0, 1234}, llama_inv_freq(rotary_dim), heads, head_dim, rotary_dim, interleaved);
    for (int64_t i = 0; i < heads * head_dim; ++i) {
      EXPECT_EQ(x[size_t(i)], x0[size_t(i)]) << "position 0, i=" << i;
    }
    for (int64_t h = heads; h < 2 * heads; ++h) {
      for (int64_t d = rotary_dim; d < head_dim; ++d) {
        EXPECT_EQ(x[size_t(h * head_dim + d)], x0[size_t(h * head_dim + d)]) << "pass-through dim " << d;
      }
    }
  }
}

TEST_P(KernelMath, RopePreservesPairNormsAndScalesThem) {
  std::mt19937 rng(12);
  const int64_t head_dim = 64, half = 32;
  for (bool interleaved : {false, true}) {
    for (float scale : {1.0f, 1.5f}) {
      const auto x0 = random_normal(size_t(head_dim), rng);
      auto x = x0;
      run_rope(ops(), x, {977}, llama_inv_freq(head_dim), 1, head_dim, head_dim, interleaved, scale);
      for (int64_t i = 0; i < half; ++i) {
        const size_t ia = size_t(interleaved ? 2 * i : i), ib = size_t(interleaved ? 2 * i + 1 : i + half);
        const double before = std::hypot(double(x0[ia]), double(x0[ib]));
        const double after = std::hypot(double(x[ia]), double(x[ib]));
        EXPECT_NEAR(after, before * scale, 1e-5 * (1 + before)) << "pair " << i;
      }
    }
  }
}

TEST_P(KernelMath, RopeComposesAdditively) {
  std::mt19937 rng(13);
  const int64_t head_dim = 32;
  const auto inv_freq = llama_inv_freq(head_dim);
  for (bool interleaved : {false, true}) {
    for (auto [p1, p2] : {std::pair{3, 5}, std::pair{1, 1}, std::pair{17, 40}}) {
      const auto x0 = random_normal(size_t(head_dim), rng);
      auto twice = x0, once = x0;
      run_rope(ops(), twice, {p1}, inv_freq, 1, head_dim, head_dim, interleaved);
      run_rope(ops(), twice, {p2}, inv_freq, 1, head_dim, head_dim, interleaved);
      run_rope(ops(), once, {p1 + p2}, inv_freq, 1, head_dim, head_dim, interleaved);
      for (int64_t i = 0; i < head_dim; ++i) {
        EXPECT_NEAR(twice[size_t(i)], once[size_t(i)], 2e-5) << "p1=" << p1 << " p2=" << p2 << " i=" << i;
      }
    }
  }
}

// One sequence of `length` tokens in a cache of blocks `block_ids` (in order), every position a query.
struct SingleSequence {
  int64_t length, n_heads, kv_heads, head_dim, v_head_dim, block_size;
  std::vector<int32_t> block_ids;
  int64_t sliding_window = 0;

  int64_t n_slots() const { return (*std::max_element(block_ids.begin(), block_ids.end()) + 1) * block_size; }
  int64_t slot(int64_t pos) const { return block_ids[size_t(pos / block_size)] * block_size + pos % block_size; }

  std::vector<float> attend(const KernelSet& ops, const std::vector<float>& q, const std::vector<float>& k_cache,
                            const std::vector<float>& v_cache, float scale) const {
    std::vector<int32_t> positions(static_cast<size_t>(length)), token_seq(static_cast<size_t>(length), 0);
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> out(size_t(length * n_heads * v_head_dim));
    ops.paged_attention({.q = q.data(),
                         .k_cache = k_cache.data(),
                         .v_cache = v_cache.data(),
                         .block_tables = block_ids.data(),
                         .token_seq = token_seq.data(),
                         .positions = positions.data(),
                         .out = out.data(),
                         .tokens = length,
                         .n_heads = n_heads,
                         .kv_heads = kv_heads,
                         .head_dim = head_dim,
                         .v_head_dim = v_head_dim,
                         .block_size = block_size,
                         .max_blocks = int64_t(block_ids.size()),
                         .scale = scale,
                         .sliding_window = sliding_window});
    return out;
  }

  // Scatters per-position rows k[length, kv_heads, dim] into a cache laid out by this block table.
  std::vector<float> scatter(const std::vector<float>& rows, int64_t dim) const {
    std::vector<float> cache(size_t(n_slots() * kv_heads * dim), 1e30f);  // poison unused slots
    for (int64_t p = 0; p < length; ++p) {
      std::copy_n(rows.begin() + p * kv_heads * dim, kv_heads * dim, cache.begin() + slot(p) * kv_heads * dim);
    }
    return cache;
  }
};

TEST_P(KernelMath, AttentionWithOneVisibleKeyReturnsItsValue) {
  std::mt19937 rng(21);
  const SingleSequence s{
      .length = 1, .n_heads = 4, .kv_heads = 2, .head_dim = 13, .v_head_dim = 7, .block_size = 4, .block_ids = {3}};
  const auto q = random_normal(size_t(s.n_heads * s.head_dim), rng);
  const auto v = random_normal(size_t(s.kv_heads * s.v_head_dim), rng);
  const auto out = s.attend(ops(), q, s.scatter(random_normal(size_t(s.kv_heads * s.head_dim), rng), s.head_dim),
                            s.scatter(v, s.v_head_dim), 0.3f);
  for (int64_t h = 0; h < s.n_heads; ++h) {
    for (int64_t d = 0; d < s.v_head_dim; ++d) {
      EXPECT_EQ(out[size_t(h * s.v_head_dim + d)], v[size_t((h / 2) * s.v_head_dim + d)]) << "h=" << h << " d=" << d;
    }
  }
}

TEST_P(KernelMath, AttentionTwoKeysHandComputed) {
  // head_dim 1, q = 1, keys 0 and ln 3: weights 1/4 and 3/4; values 4 and 8 give 7 at position 1.
  const SingleSequence s{
      .length = 2, .n_heads = 1, .kv_heads = 1, .head_dim = 1, .v_head_dim = 1, .block_size = 1, .block_ids = {1, 0}};
  const auto out = s.attend(ops(), {1, 1}, s.scatter({0, std::log(3.0f)}, 1), s.scatter({4, 8}, 1), 1.0f);
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_NEAR(out[1], 7.0, 1e-6);
}

TEST_P(KernelMath, AttentionOverEqualKeysIsMeanOfValues) {
  std::mt19937 rng(22);
  const SingleSequence s{.length = 37,
                         .n_heads = 2,
                         .kv_heads = 1,
                         .head_dim = 16,
                         .v_head_dim = 13,
                         .block_size = 8,
                         .block_ids = {4, 0, 2, 1, 3}};
  const auto key = random_normal(size_t(s.head_dim), rng);
  std::vector<float> k_rows;
  for (int64_t p = 0; p < s.length; ++p) {
    k_rows.insert(k_rows.end(), key.begin(), key.end());
  }
  const auto v = random_normal(size_t(s.length * s.v_head_dim), rng);
  const auto out = s.attend(ops(), random_normal(size_t(s.length * s.n_heads * s.head_dim), rng),
                            s.scatter(k_rows, s.head_dim), s.scatter(v, s.v_head_dim), 0.25f);
  for (int64_t p = 0; p < s.length; ++p) {
    for (int64_t d = 0; d < s.v_head_dim; ++d) {
      double mean = 0;
      for (int64_t j = 0; j <= p; ++j) {
        mean += v[size_t(j * s.v_head_dim + d)];
      }
      mean /= double(p + 1);
      for (int64_t h = 0; h < s.n_heads; ++h) {
        EXPECT_NEAR(out[size_t((p * s.n_heads + h) * s.v_head_dim + d)], mean, 1e-5) << "p=" << p << " d=" << d;
      }
    }
  }
}

TEST_P(KernelMath, SlidingWindowOfOneAttendsOnlyToSelf) {
  std::mt19937 rng(23);
  const SingleSequence s{.length = 21,
                         .n_heads = 3,
                         .kv_heads = 3,
                         .head_dim = 8,
                         .v_head_dim = 8,
                         .block_size = 4,
                         .block_ids = {5, 2, 0, 4, 1, 3},
                         .sliding_window = 1};
  const auto v = random_normal(size_t(s.length * s.kv_heads * s.v_head_dim), rng);
  const auto out = s.attend(ops(), random_normal(size_t(s.length * s.n_heads * s.head_dim), rng),
                            s.scatter(random_normal(size_t(s.length * s.kv_heads * s.head_dim), rng), s.head_dim),
                            s.scatter(v, s.v_head_dim), 0.35f);
  EXPECT_EQ(out, v);
}

TEST_P(KernelMath, SlidingWindowMatchesTruncatedSequence) {
  // With window w, the query at position p sees exactly what the last query of positions p-w+1..p sees
  // when those keys alone form the sequence.
  std::mt19937 rng(24);
  const int64_t window = 5;
  const SingleSequence full{.length = 12,
                            .n_heads = 2,
                            .kv_heads = 1,
                            .head_dim = 7,
                            .v_head_dim = 7,
                            .block_size = 3,
                            .block_ids = {3, 1, 0, 2},
                            .sliding_window = window};
  const auto q = random_normal(size_t(full.length * full.n_heads * full.head_dim), rng);
  const auto k = random_normal(size_t(full.length * full.head_dim), rng);
  const auto v = random_normal(size_t(full.length * full.v_head_dim), rng);
  const auto out = full.attend(ops(), q, full.scatter(k, full.head_dim), full.scatter(v, full.v_head_dim), 0.4f);

  const SingleSequence tail{.length = window,
                            .n_heads = 2,
                            .kv_heads = 1,
                            .head_dim = 7,
                            .v_head_dim = 7,
                            .block_size = window,
                            .block_ids = {0}};
  const int64_t first = full.length - window;
  const int64_t q_row = full.n_heads * full.head_dim, kv_row = full.head_dim;  // kv_heads = 1, v_head_dim = head_dim
  const std::vector<float> q_tail(q.begin() + first * q_row, q.end());
  const std::vector<float> k_tail(k.begin() + first * kv_row, k.end()), v_tail(v.begin() + first * kv_row, v.end());
  const auto out_tail = tail.attend(ops(), q_tail, tail.scatter(k_tail, kv_row), tail.scatter(v_tail, kv_row), 0.4f);
  for (int64_t i = 0; i < q_row; ++i) {
    EXPECT_NEAR(out[size_t((full.length - 1) * q_row + i)], out_tail[size_t((window - 1) * q_row + i)], 1e-6) << i;
  }
}

TEST_P(KernelMath, ShuffledBlocksEqualContiguousBlocks) {
  std::mt19937 rng(25);
  SingleSequence contiguous{
      .length = 45, .n_heads = 4, .kv_heads = 2, .head_dim = 13, .v_head_dim = 13, .block_size = 4, .block_ids = {}};
  contiguous.block_ids.resize(12);
  std::iota(contiguous.block_ids.begin(), contiguous.block_ids.end(), 0);
  SingleSequence shuffled = contiguous;
  shuffled.block_ids = {7, 19, 2, 11, 0, 15, 4, 9, 13, 1, 17, 6};  // non-contiguous, holes in 0..19
  const auto q = random_normal(size_t(45 * 4 * 13), rng);
  const auto k = random_normal(size_t(45 * 2 * 13), rng);
  const auto v = random_normal(size_t(45 * 2 * 13), rng);
  const auto want = contiguous.attend(ops(), q, contiguous.scatter(k, 13), contiguous.scatter(v, 13), 0.3f);
  const auto got = shuffled.attend(ops(), q, shuffled.scatter(k, 13), shuffled.scatter(v, 13), 0.3f);
  EXPECT_EQ(got, want);
}

TEST_P(KernelMath, GroupedQueryHeadsReadTheirKvHead) {
  // GQA with kv_heads 2 equals full multi-head attention with each kv head repeated n_heads/kv_heads times.
  std::mt19937 rng(26);
  const SingleSequence gqa{.length = 9,
                           .n_heads = 6,
                           .kv_heads = 2,
                           .head_dim = 5,
                           .v_head_dim = 3,
                           .block_size = 4,
                           .block_ids = {2, 0, 1}};
  SingleSequence mha = gqa;
  mha.kv_heads = 6;
  const auto q = random_normal(size_t(9 * 6 * 5), rng);
  const auto k = random_normal(size_t(9 * 2 * 5), rng);
  const auto v = random_normal(size_t(9 * 2 * 3), rng);
  std::vector<float> k_rep, v_rep;
  for (int64_t p = 0; p < 9; ++p) {
    for (int64_t h = 0; h < 6; ++h) {
      k_rep.insert(k_rep.end(), k.begin() + (p * 2 + h / 3) * 5, k.begin() + (p * 2 + h / 3 + 1) * 5);
      v_rep.insert(v_rep.end(), v.begin() + (p * 2 + h / 3) * 3, v.begin() + (p * 2 + h / 3 + 1) * 3);
    }
  }
  const auto want = mha.attend(ops(), q, mha.scatter(k_rep, 5), mha.scatter(v_rep, 3), 0.5f);
  const auto got = gqa.attend(ops(), q, gqa.scatter(k, 5), gqa.scatter(v, 3), 0.5f);
  EXPECT_EQ(got, want);
}

TEST_P(KernelMath, KvWriteFillsOnlyTheGivenSlots) {
  const float k[] = {1, 2, 3, 4};  // [2 tokens, 1 kv head, 2]
  const float v[] = {5, 6};        // [2 tokens, 1 kv head, 1]
  const int32_t slots[] = {3, 0};
  std::vector<float> k_cache(8, -1), v_cache(4, -1);
  ops().kv_write({.k = k,
                  .v = v,
                  .slots = slots,
                  .k_cache = k_cache.data(),
                  .v_cache = v_cache.data(),
                  .tokens = 2,
                  .kv_heads = 1,
                  .head_dim = 2,
                  .v_head_dim = 1});
  EXPECT_EQ(k_cache, (std::vector<float>{3, 4, -1, -1, -1, -1, 1, 2}));
  EXPECT_EQ(v_cache, (std::vector<float>{6, -1, -1, 5}));
}

struct TopkResult {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

TopkResult run_topk(const KernelSet& ops, const std::vector<float>& logits, int64_t n_experts, int64_t top_k,
                    bool renormalize) {
  const int64_t tokens = int64_t(logits.size()) / n_experts;
  TopkResult r{std::vector<int32_t>(size_t(tokens * top_k)), std::vector<float>(size_t(tokens * top_k))};
  ops.softmax_topk({.logits = logits.data(),
                    .expert_ids = r.ids.data(),
                    .weights = r.weights.data(),
                    .tokens = tokens,
                    .n_experts = n_experts,
                    .top_k = top_k,
                    .renormalize = renormalize});
  return r;
}

TEST_P(KernelMath, SoftmaxTopkKnownLogits) {
  // softmax([0, ln 2, ln 3]) = [1/6, 2/6, 3/6]; shifting all logits changes nothing.
  for (float shift : {0.0f, 8.0f, -8.0f}) {
    const std::vector<float> logits = {shift, std::log(2.0f) + shift, std::log(3.0f) + shift};
    const auto all = run_topk(ops(), logits, 3, 3, false);
    EXPECT_EQ(all.ids, (std::vector<int32_t>{2, 1, 0}));
    EXPECT_NEAR(all.weights[0], 3.0 / 6, 1e-6);
    EXPECT_NEAR(all.weights[1], 2.0 / 6, 1e-6);
    EXPECT_NEAR(all.weights[2], 1.0 / 6, 1e-6);

    const auto top2 = run_topk(ops(), logits, 3, 2, true);
    EXPECT_EQ(top2.ids, (std::vector<int32_t>{2, 1}));
    EXPECT_NEAR(top2.weights[0], 3.0 / 5, 1e-6);
    EXPECT_NEAR(top2.weights[1], 2.0 / 5, 1e-6);

    const auto top1 = run_topk(ops(), logits, 3, 1, true);
    EXPECT_EQ(top1.ids, (std::vector<int32_t>{2}));
    EXPECT_EQ(top1.weights[0], 1.0f);
  }
}

TEST_P(KernelMath, SoftmaxTopkTiesGoToLowerExpertId) {
  const std::vector<float> logits = {1, 2, 1, 2, 0, 2, 1,   // token 0: experts 1, 3, 5 tie for first
                                     0, 0, 0, 0, 0, 0, 0};  // token 1: all equal
  const auto r = run_topk(ops(), logits, 7, 4, false);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 5, 0, 0, 1, 2, 3}));
  for (int j = 4; j < 8; ++j) {
    EXPECT_NEAR(r.weights[size_t(j)], 1.0 / 7, 1e-7);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelMath, testing::Values(ref_kernels, cpu_kernels),
                         [](const testing::TestParamInfo<KernelSet>& info) { return info.param.name; });

}  // namespace
}  // namespace sy
