// Every CPU kernel against its scalar reference on fresh random inputs of several shapes, including
// awkward ones (1, odd sizes, not multiples of a vector width or tile).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace sy {
namespace {

// Max-abs error normalised by the max-abs of the reference.
constexpr double kRelTol = 1e-5;

std::vector<float> random_normal(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) {
    x = dist(rng);
  }
  return v;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_err = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::abs(double(got[i]) - double(want[i])));
    max_ref = std::max(max_ref, std::abs(double(want[i])));
  }
  return max_err / std::max(max_ref, 1e-30);
}

#define EXPECT_CLOSE(got, want, what)                            \
  do {                                                           \
    ASSERT_EQ((got).size(), (want).size()) << (what);            \
    EXPECT_LE(relative_error((got), (want)), kRelTol) << (what); \
  } while (0)

TEST(KernelsCpuVsRef, Linear) {
  std::mt19937 rng(1);
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{1, 7, 13}, Shape{7, 13, 37}, Shape{37, 129, 65}, Shape{13, 256, 1024},
                  Shape{129, 37, 7}, Shape{3, 5, 0}}) {
    for (bool with_bias : {false, true}) {
      const auto x = random_normal(size_t(s.m * s.k), rng);
      const auto w = random_normal(size_t(s.n * s.k), rng);
      const auto bias = random_normal(size_t(s.n), rng);
      std::vector<float> got(size_t(s.m * s.n)), want(got.size());
      cpu::linear(x.data(), w.data(), with_bias ? bias.data() : nullptr, got.data(), s.m, s.n, s.k);
      ref::linear(x.data(), w.data(), with_bias ? bias.data() : nullptr, want.data(), s.m, s.n, s.k);
      EXPECT_CLOSE(got, want,
                   testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k << " bias=" << with_bias);
    }
  }
}

TEST(KernelsCpuVsRef, RmsNormAndInPlace) {
  std::mt19937 rng(2);
  for (int64_t rows : {1, 7, 13}) {
    for (int64_t dim : {1, 7, 129, 1024}) {
      const auto x = random_normal(size_t(rows * dim), rng, 3.0f);
      const auto weight = random_normal(size_t(dim), rng);
      std::vector<float> got(x.size()), want(x.size());
      cpu::rms_norm(x.data(), weight.data(), got.data(), rows, dim, 1e-6f);
      ref::rms_norm(x.data(), weight.data(), want.data(), rows, dim, 1e-6f);
      const std::string what = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
      EXPECT_CLOSE(got, want, what);

      std::vector<float> in_place = x;
      cpu::rms_norm(in_place.data(), weight.data(), in_place.data(), rows, dim, 1e-6f);
      EXPECT_CLOSE(in_place, want, what + " in place");
    }
  }
}

TEST(KernelsCpuVsRef, AddRmsNorm) {
  std::mt19937 rng(3);
  for (int64_t rows : {1, 7, 37}) {
    for (int64_t dim : {1, 13, 129, 2048}) {
      const auto residual = random_normal(size_t(rows * dim), rng);
      const auto x = random_normal(size_t(rows * dim), rng);
      const auto weight = random_normal(size_t(dim), rng);
      auto res_got = residual, res_want = residual;
      std::vector<float> got(x.size()), want(x.size());
      cpu::add_rms_norm(res_got.data(), x.data(), weight.data(), got.data(), rows, dim, 1e-5f);
      ref::add_rms_norm(res_want.data(), x.data(), weight.data(), want.data(), rows, dim, 1e-5f);
      const std::string what = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
      EXPECT_CLOSE(res_got, res_want, what + " residual");
      EXPECT_CLOSE(got, want, what + " y");

      // The model calls it with y aliasing x (hidden states normalised in place).
      auto res_alias = residual;
      auto y_alias = x;
      cpu::add_rms_norm(res_alias.data(), y_alias.data(), weight.data(), y_alias.data(), rows, dim, 1e-5f);
      EXPECT_CLOSE(res_alias, res_want, what + " residual, y aliasing x");
      EXPECT_CLOSE(y_alias, want, what + " y aliasing x");
    }
  }
}

TEST(KernelsCpuVsRef, Embedding) {
  std::mt19937 rng(4);
  for (int64_t vocab : {1, 37, 1000}) {
    for (int64_t dim : {1, 13, 129}) {
      for (int64_t tokens : {1, 7, 64}) {
        const auto table = random_normal(size_t(vocab * dim), rng);
        std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
        std::vector<int32_t> ids(static_cast<size_t>(tokens));
        for (int32_t& id : ids) {
          id = pick(rng);
        }
        std::vector<float> got(size_t(tokens * dim)), want(got.size());
        cpu::embedding(table.data(), ids.data(), got.data(), tokens, dim);
        ref::embedding(table.data(), ids.data(), want.data(), tokens, dim);
        EXPECT_EQ(got, want) << "vocab=" << vocab << " dim=" << dim << " tokens=" << tokens;
      }
    }
  }
}

TEST(KernelsCpuVsRef, SiluMul) {
  std::mt19937 rng(5);
  for (int64_t rows : {1, 7, 37}) {
    for (int64_t inter : {1, 13, 129, 1408}) {
      const auto gate_up = random_normal(size_t(rows * 2 * inter), rng, 4.0f);
      std::vector<float> got(size_t(rows * inter)), want(got.size());
      cpu::silu_mul(gate_up.data(), got.data(), rows, inter);
      ref::silu_mul(gate_up.data(), want.data(), rows, inter);
      EXPECT_CLOSE(got, want, "rows=" + std::to_string(rows) + " inter=" + std::to_string(inter));
    }
  }
}

TEST(KernelsCpuVsRef, Rope) {
  std::mt19937 rng(6);
  struct Shape {
    int64_t tokens, heads, head_dim, rotary_dim;
  };
  for (Shape s : {Shape{1, 1, 2, 2}, Shape{7, 3, 8, 8}, Shape{13, 4, 64, 32}, Shape{5, 2, 130, 128},
                  Shape{37, 1, 128, 64}, Shape{3, 5, 7, 6}}) {
    for (bool interleaved : {false, true}) {
      for (float scale : {1.0f, 1.3f}) {
        const int64_t half = s.rotary_dim / 2;
        std::vector<float> inv_freq(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) {
          inv_freq[size_t(i)] = std::pow(10000.0f, -float(2 * i) / float(s.rotary_dim));
        }
        std::uniform_int_distribution<int32_t> pick_pos(0, 32767);
        std::vector<int32_t> positions(size_t(s.tokens));
        for (int32_t& p : positions) {
          p = pick_pos(rng);
        }
        const auto x = random_normal(size_t(s.tokens * s.heads * s.head_dim), rng);
        auto got = x, want = x;
        RopeArgs args{.x = got.data(),
                      .positions = positions.data(),
                      .inv_freq = inv_freq.data(),
                      .tokens = s.tokens,
                      .heads = s.heads,
                      .head_dim = s.head_dim,
                      .rotary_dim = s.rotary_dim,
                      .attention_scale = scale,
                      .interleaved = interleaved};
        cpu::rope(args);
        args.x = want.data();
        ref::rope(args);
        EXPECT_CLOSE(got, want,
                     testing::Message() << "tokens=" << s.tokens << " heads=" << s.heads << " head_dim=" << s.head_dim
                                        << " rotary_dim=" << s.rotary_dim << " interleaved=" << interleaved
                                        << " scale=" << scale);
      }
    }
  }
}

TEST(KernelsCpuVsRef, KvWrite) {
  std::mt19937 rng(7);
  struct Shape {
    int64_t tokens, kv_heads, head_dim, v_head_dim, n_slots;
  };
  for (Shape s : {Shape{1, 1, 1, 1, 1}, Shape{7, 2, 13, 13, 37}, Shape{13, 4, 64, 37, 129}}) {
    std::vector<int32_t> all_slots(size_t(s.n_slots));
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng);
    const std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + s.tokens);
    const auto k = random_normal(size_t(s.tokens * s.kv_heads * s.head_dim), rng);
    const auto v = random_normal(size_t(s.tokens * s.kv_heads * s.v_head_dim), rng);
    const auto k_cache = random_normal(size_t(s.n_slots * s.kv_heads * s.head_dim), rng);
    const auto v_cache = random_normal(size_t(s.n_slots * s.kv_heads * s.v_head_dim), rng);
    auto k_got = k_cache, v_got = v_cache, k_want = k_cache, v_want = v_cache;
    KvWriteArgs args{.k = k.data(),
                     .v = v.data(),
                     .slots = slots.data(),
                     .k_cache = k_got.data(),
                     .v_cache = v_got.data(),
                     .tokens = s.tokens,
                     .kv_heads = s.kv_heads,
                     .head_dim = s.head_dim,
                     .v_head_dim = s.v_head_dim};
    cpu::kv_write(args);
    args.k_cache = k_want.data();
    args.v_cache = v_want.data();
    ref::kv_write(args);
    EXPECT_EQ(k_got, k_want) << "tokens=" << s.tokens;
    EXPECT_EQ(v_got, v_want) << "tokens=" << s.tokens;
  }
}

// A batch of sequences in a shuffled paged cache; each sequence contributes its last `queries` positions
// as query tokens (queries == length is a prefill, queries == 1 a decode step).
struct AttentionCase {
  std::vector<int64_t> lengths;
  std::vector<int64_t> queries;
  int64_t n_heads, kv_heads, head_dim, v_head_dim, block_size;
  int64_t sliding_window = 0;
};

void compare_paged_attention(const AttentionCase& c, std::mt19937& rng) {
  const int64_t n_seqs = int64_t(c.lengths.size());
  int64_t max_blocks = 0, tokens = 0;
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    max_blocks = std::max(max_blocks, (c.lengths[s] + c.block_size - 1) / c.block_size);
    tokens += c.queries[s];
  }
  // Spare blocks so the shuffled ids leave holes, as in a real pool.
  const int64_t n_blocks = n_seqs * max_blocks + 3;
  std::vector<int32_t> block_ids(static_cast<size_t>(n_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::vector<int32_t> block_tables(size_t(n_seqs * max_blocks), -1);
  size_t next = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t used = (c.lengths[size_t(s)] + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < used; ++b) {
      block_tables[size_t(s * max_blocks + b)] = block_ids[next++];
    }
  }
  std::vector<int32_t> token_seq, positions;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t p = c.lengths[size_t(s)] - c.queries[size_t(s)]; p < c.lengths[size_t(s)]; ++p) {
      token_seq.push_back(int32_t(s));
      positions.push_back(int32_t(p));
    }
  }
  const int64_t n_slots = n_blocks * c.block_size;
  const auto q = random_normal(size_t(tokens * c.n_heads * c.head_dim), rng);
  const auto k_cache = random_normal(size_t(n_slots * c.kv_heads * c.head_dim), rng);
  const auto v_cache = random_normal(size_t(n_slots * c.kv_heads * c.v_head_dim), rng);
  std::vector<float> got(size_t(tokens * c.n_heads * c.v_head_dim)), want(got.size());
  PagedAttentionArgs args{.q = q.data(),
                          .k_cache = k_cache.data(),
                          .v_cache = v_cache.data(),
                          .block_tables = block_tables.data(),
                          .token_seq = token_seq.data(),
                          .positions = positions.data(),
                          .out = got.data(),
                          .tokens = tokens,
                          .n_heads = c.n_heads,
                          .kv_heads = c.kv_heads,
                          .head_dim = c.head_dim,
                          .v_head_dim = c.v_head_dim,
                          .block_size = c.block_size,
                          .max_blocks = max_blocks,
                          .scale = 1.0f / std::sqrt(float(c.head_dim)),
                          .sliding_window = c.sliding_window};
  cpu::paged_attention(args);
  args.out = want.data();
  ref::paged_attention(args);
  EXPECT_CLOSE(got, want,
               testing::Message() << "seqs=" << n_seqs << " n_heads=" << c.n_heads << " kv_heads=" << c.kv_heads
                                  << " head_dim=" << c.head_dim << " v_head_dim=" << c.v_head_dim
                                  << " block_size=" << c.block_size << " window=" << c.sliding_window);
}

TEST(KernelsCpuVsRef, PagedAttention) {
  std::mt19937 rng(8);
  const std::vector<AttentionCase> cases = {
      {.lengths = {1}, .queries = {1}, .n_heads = 1, .kv_heads = 1, .head_dim = 1, .v_head_dim = 1, .block_size = 1},
      {.lengths = {7}, .queries = {7}, .n_heads = 2, .kv_heads = 1, .head_dim = 7, .v_head_dim = 7, .block_size = 4},
      {.lengths = {13, 37, 1},
       .queries = {13, 1, 1},
       .n_heads = 4,
       .kv_heads = 2,
       .head_dim = 64,
       .v_head_dim = 64,
       .block_size = 16},
      {.lengths = {129, 5},
       .queries = {3, 5},
       .n_heads = 6,
       .kv_heads = 6,
       .head_dim = 13,
       .v_head_dim = 37,
       .block_size = 5},
      {.lengths = {37, 20},
       .queries = {37, 2},
       .n_heads = 8,
       .kv_heads = 2,
       .head_dim = 129,
       .v_head_dim = 129,
       .block_size = 16,
       .sliding_window = 7},
      {.lengths = {300},
       .queries = {4},
       .n_heads = 4,
       .kv_heads = 1,
       .head_dim = 128,
       .v_head_dim = 128,
       .block_size = 16,
       .sliding_window = 1},
  };
  for (const AttentionCase& c : cases) {
    compare_paged_attention(c, rng);
  }
}

TEST(KernelsCpuVsRef, SoftmaxTopk) {
  std::mt19937 rng(9);
  for (int64_t tokens : {1, 7, 129}) {
    for (int64_t n_experts : {1, 8, 13, 64, 128}) {
      for (int64_t top_k : {int64_t{1}, int64_t{2}, int64_t{8}, n_experts}) {
        if (top_k > n_experts) {
          continue;
        }
        for (bool renormalize : {false, true}) {
          const auto logits = random_normal(size_t(tokens * n_experts), rng, 2.0f);
          std::vector<int32_t> ids_got(size_t(tokens * top_k)), ids_want(ids_got.size());
          std::vector<float> w_got(ids_got.size()), w_want(ids_got.size());
          SoftmaxTopkArgs args{.logits = logits.data(),
                               .expert_ids = ids_got.data(),
                               .weights = w_got.data(),
                               .tokens = tokens,
                               .n_experts = n_experts,
                               .top_k = top_k,
                               .renormalize = renormalize};
          cpu::softmax_topk(args);
          args.expert_ids = ids_want.data();
          args.weights = w_want.data();
          ref::softmax_topk(args);
          const std::string what = "tokens=" + std::to_string(tokens) + " n_experts=" + std::to_string(n_experts) +
                                   " top_k=" + std::to_string(top_k) + " renormalize=" + std::to_string(renormalize);
          EXPECT_EQ(ids_got, ids_want) << what;
          EXPECT_CLOSE(w_got, w_want, what);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sy
