// The MLA, sparse-indexer and sigmoid-routing CPU kernels against their scalar references on fresh random
// inputs of awkward shapes, plus known answers that pin the semantics (absorbed MLA equals attention over
// the expanded per-head K/V; the bias chooses but does not weight; the group limit; indexer ties).
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

constexpr double kRelTol = 1e-5;

std::vector<float> randn(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0.0, m = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    e = std::max(e, std::abs(double(got[i]) - double(want[i])));
    m = std::max(m, std::abs(double(want[i])));
  }
  return e / std::max(m, 1e-30);
}

// A paged layout with scattered blocks: sequence s owns blocks in a shuffled order.
struct Paging {
  std::vector<int32_t> tables, token_seq, positions, slots;
  int64_t n_seqs = 0, max_blocks = 0, block_size = 0, n_slots = 0;
};

// Sequences of the given lengths; every token of every sequence is a query (as in prefill).
Paging make_paging(const std::vector<int64_t>& lengths, int64_t block_size, std::mt19937& rng) {
  Paging p;
  p.block_size = block_size;
  p.n_seqs = int64_t(lengths.size());
  for (int64_t len : lengths) p.max_blocks = std::max(p.max_blocks, (len + block_size - 1) / block_size);
  const int64_t n_blocks = p.n_seqs * p.max_blocks + 3;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.tables.assign(size_t(p.n_seqs * p.max_blocks), 0);
  for (int64_t i = 0; i < p.n_seqs * p.max_blocks; ++i) p.tables[size_t(i)] = ids[size_t(i)];
  p.n_slots = n_blocks * block_size;
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    for (int64_t pos = 0; pos < lengths[size_t(s)]; ++pos) {
      p.token_seq.push_back(int32_t(s));
      p.positions.push_back(int32_t(pos));
      p.slots.push_back(p.tables[size_t(s * p.max_blocks + pos / block_size)] * int32_t(block_size) +
                        int32_t(pos % block_size));
    }
  }
  return p;
}

TEST(MlaKernelsCpuVsRef, KvWrite) {
  std::mt19937 rng(11);
  for (auto [lora, rope] : {std::pair<int64_t, int64_t>{1, 0}, {7, 2}, {32, 8}, {512, 64}}) {
    const auto pg = make_paging({5, 9}, 4, rng);
    const int64_t T = int64_t(pg.slots.size()), row = lora + rope;
    const auto kv = randn(size_t(T * row), rng, 2.0f), w = randn(size_t(lora), rng);
    std::vector<float> got(size_t(pg.n_slots * row), 7.0f), want = got;
    MlaKvWriteArgs a{.kv = kv.data(),
                     .norm_weight = w.data(),
                     .slots = pg.slots.data(),
                     .cache = got.data(),
                     .tokens = T,
                     .kv_lora_rank = lora,
                     .rope_dim = rope,
                     .eps = 1e-6f};
    cpu::mla_kv_write(a);
    a.cache = want.data();
    ref::mla_kv_write(a);
    EXPECT_LE(rel_err(got, want), kRelTol) << "lora " << lora << " rope " << rope;
  }
}

TEST(MlaKernelsCpuVsRef, HeadLinearBothLayouts) {
  std::mt19937 rng(12);
  struct Shape {
    int64_t tokens, heads, in, out, x_stride, y_stride;
  };
  for (Shape s :
       {Shape{1, 1, 1, 1, 1, 1}, Shape{1, 3, 5, 7, 9, 8}, Shape{7, 4, 16, 32, 24, 40}, Shape{13, 2, 33, 17, 33, 17}}) {
    for (bool transposed : {false, true}) {
      const int64_t w_stride = s.in * s.out + 5;
      const auto x = randn(size_t(s.tokens * s.heads * s.x_stride), rng);
      const auto w = randn(size_t(s.heads * w_stride), rng);
      std::vector<float> got(size_t(s.tokens * s.heads * s.y_stride), 3.0f), want = got;
      HeadLinearArgs a{.x = x.data(),
                       .w = w.data(),
                       .y = got.data(),
                       .tokens = s.tokens,
                       .heads = s.heads,
                       .in = s.in,
                       .out = s.out,
                       .x_stride = s.x_stride,
                       .y_stride = s.y_stride,
                       .w_head_stride = w_stride,
                       .w_transposed = transposed};
      cpu::head_linear(a);
      a.y = want.data();
      ref::head_linear(a);
      EXPECT_LE(rel_err(got, want), kRelTol) << s.tokens << "x" << s.heads << " " << s.in << "->" << s.out;
      // Columns past `out` in each head's y row are left untouched.
      for (int64_t r = 0; r < s.tokens * s.heads; ++r) {
        for (int64_t c = s.out; c < s.y_stride; ++c) EXPECT_EQ(got[size_t(r * s.y_stride + c)], 3.0f);
      }
    }
  }
}

struct MlaCase {
  std::vector<int64_t> lengths;
  int64_t heads, lora, rope, block_size;
};

TEST(MlaKernelsCpuVsRef, AttentionDenseAndSparse) {
  std::mt19937 rng(13);
  for (const MlaCase& c : {MlaCase{{1}, 1, 4, 2, 1}, MlaCase{{7, 3}, 3, 16, 4, 4}, MlaCase{{20, 1, 13}, 4, 32, 8, 8},
                           MlaCase{{9}, 2, 64, 0, 3}}) {
    const auto pg = make_paging(c.lengths, c.block_size, rng);
    const int64_t T = int64_t(pg.slots.size()), row = c.lora + c.rope, q_stride = c.rope + 3;
    const auto cache = randn(size_t(pg.n_slots * row), rng);
    const auto ql = randn(size_t(T * c.heads * c.lora), rng, 0.3f), qr = randn(size_t(T * c.heads * q_stride), rng);
    for (int64_t n_selected : {int64_t{0}, int64_t{3}}) {
      std::vector<int32_t> keys;  // every other visible key, ascending, -1 padded
      for (int64_t t = 0; t < T && n_selected; ++t) {
        int64_t j = 0;
        for (int32_t k = pg.positions[size_t(t)]; k >= 0 && j < n_selected; k -= 2, ++j) keys.push_back(k);
        std::reverse(keys.end() - j, keys.end());
        for (; j < n_selected; ++j) keys.push_back(-1);
      }
      std::vector<float> got(size_t(T * c.heads * c.lora)), want(got.size());
      MlaAttentionArgs a{.q_latent = ql.data(),
                         .q_rope = qr.data(),
                         .cache = cache.data(),
                         .block_tables = pg.tables.data(),
                         .token_seq = pg.token_seq.data(),
                         .positions = pg.positions.data(),
                         .key_positions = n_selected ? keys.data() : nullptr,
                         .out = got.data(),
                         .tokens = T,
                         .n_heads = c.heads,
                         .kv_lora_rank = c.lora,
                         .rope_dim = c.rope,
                         .q_rope_stride = q_stride,
                         .n_selected = n_selected,
                         .block_size = c.block_size,
                         .max_blocks = pg.max_blocks,
                         .scale = 0.3f};
      cpu::mla_attention(a);
      a.out = want.data();
      ref::mla_attention(a);
      EXPECT_LE(rel_err(got, want), kRelTol) << "heads " << c.heads << " lora " << c.lora << " sparse " << n_selected;
    }
  }
}

// Absorbed MLA (q through W_UK into latent space, attention over the latent cache, output through W_UV)
// equals plain attention over per-head K = [W_UK·latent | rope], V = W_UV·latent, as transformers computes.
TEST(MlaKernelsKnownAnswer, AbsorbedEqualsExpanded) {
  std::mt19937 rng(14);
  const int64_t heads = 3, nope = 5, rope = 4, v_dim = 6, lora = 8, len = 7;
  const auto pg = make_paging({len}, 2, rng);
  const int64_t T = len, row = lora + rope, qk = nope + rope;
  const auto cache = randn(size_t(pg.n_slots * row), rng);
  const auto kv_b = randn(size_t(heads * (nope + v_dim) * lora), rng, 0.4f);  // [heads, nope + v, lora]
  const auto q = randn(size_t(T * heads * qk), rng);                          // [T, heads, nope | rope]
  const float scale = 0.37f;

  std::vector<float> q_lat(size_t(T * heads * lora)), o_lat(size_t(T * heads * lora)), o(size_t(T * heads * v_dim));
  cpu::head_linear({.x = q.data(),
                    .w = kv_b.data(),
                    .y = q_lat.data(),
                    .tokens = T,
                    .heads = heads,
                    .in = nope,
                    .out = lora,
                    .x_stride = qk,
                    .y_stride = lora,
                    .w_head_stride = (nope + v_dim) * lora,
                    .w_transposed = true});
  cpu::mla_attention({.q_latent = q_lat.data(),
                      .q_rope = q.data() + nope,
                      .cache = cache.data(),
                      .block_tables = pg.tables.data(),
                      .token_seq = pg.token_seq.data(),
                      .positions = pg.positions.data(),
                      .out = o_lat.data(),
                      .tokens = T,
                      .n_heads = heads,
                      .kv_lora_rank = lora,
                      .rope_dim = rope,
                      .q_rope_stride = qk,
                      .block_size = 2,
                      .max_blocks = pg.max_blocks,
                      .scale = scale});
  cpu::head_linear({.x = o_lat.data(),
                    .w = kv_b.data() + nope * lora,
                    .y = o.data(),
                    .tokens = T,
                    .heads = heads,
                    .in = lora,
                    .out = v_dim,
                    .x_stride = lora,
                    .y_stride = v_dim,
                    .w_head_stride = (nope + v_dim) * lora});

  std::vector<float> want(o.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> s;
      std::vector<std::vector<double>> vs;
      for (int64_t k = 0; k <= t; ++k) {
        const float* c = cache.data() + pg.slots[size_t(k)] * row;
        double dot = 0.0;
        for (int64_t d = 0; d < nope; ++d) {
          double kd = 0.0;  // K_nope[h, d] = Σ_c kv_b[h, d, c] · latent[c]
          for (int64_t i = 0; i < lora; ++i) kd += double(kv_b[size_t((h * (nope + v_dim) + d) * lora + i)]) * c[i];
          dot += double(q[size_t((t * heads + h) * qk + d)]) * kd;
        }
        for (int64_t d = 0; d < rope; ++d) dot += double(q[size_t((t * heads + h) * qk + nope + d)]) * c[lora + d];
        s.push_back(dot * scale);
        std::vector<double> v(static_cast<size_t>(v_dim));
        for (int64_t d = 0; d < v_dim; ++d) {
          for (int64_t i = 0; i < lora; ++i)
            v[size_t(d)] += double(kv_b[size_t((h * (nope + v_dim) + nope + d) * lora + i)]) * c[i];
        }
        vs.push_back(v);
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int64_t d = 0; d < v_dim; ++d) {
        double acc = 0.0;
        for (size_t j = 0; j < s.size(); ++j) acc += s[j] / sum * vs[j][size_t(d)];
        want[size_t((t * heads + h) * v_dim + d)] = float(acc);
      }
    }
  }
  EXPECT_LE(rel_err(o, want), 1e-5);
}

TEST(MlaKernelsCpuVsRef, IndexerTopk) {
  std::mt19937 rng(15);
  for (auto [heads, dim, top_k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 4, 1}, {2, 16, 3}, {4, 32, 8}, {3, 7, 64}}) {
    const auto pg = make_paging({1, 12, 30}, 4, rng);
    const int64_t T = int64_t(pg.slots.size());
    const auto q = randn(size_t(T * heads * dim), rng), w = randn(size_t(T * heads), rng);
    const auto k_cache = randn(size_t(pg.n_slots * dim), rng);
    std::vector<int32_t> got(size_t(T * top_k)), want(got.size());
    IndexerTopkArgs a{.q = q.data(),
                      .head_weights = w.data(),
                      .k_cache = k_cache.data(),
                      .block_tables = pg.tables.data(),
                      .token_seq = pg.token_seq.data(),
                      .positions = pg.positions.data(),
                      .key_positions = got.data(),
                      .tokens = T,
                      .n_heads = heads,
                      .head_dim = dim,
                      .top_k = top_k,
                      .block_size = 4,
                      .max_blocks = pg.max_blocks,
                      .scale = 1.0f / std::sqrt(float(dim)),
                      .weight_scale = 1.0f / std::sqrt(float(heads))};
    cpu::indexer_topk(a);
    a.key_positions = want.data();
    ref::indexer_topk(a);
    EXPECT_EQ(got, want) << heads << " heads, dim " << dim << ", top " << top_k;
    for (int64_t t = 0; t < T; ++t) {  // ascending, -1 exactly when fewer keys than top_k are visible
      const int64_t visible = pg.positions[size_t(t)] + 1;
      for (int64_t j = 0; j < top_k; ++j) {
        EXPECT_EQ(got[size_t(t * top_k + j)] < 0, j >= visible);
        if (j > 0 && j < std::min(visible, top_k)) {
          EXPECT_LT(got[size_t(t * top_k + j - 1)], got[size_t(t * top_k + j)]);
        }
      }
    }
  }
}

TEST(MlaKernelsKnownAnswer, IndexerTiesGoToTheLowerPosition) {
  // Every key scores zero (relu of negative dots): the first top_k positions are kept.
  const int64_t dim = 2, len = 6, top_k = 3;
  std::vector<int32_t> tables{0}, seq(1, 0), pos{int32_t(len - 1)};
  std::vector<float> q{1.0f, 0.0f}, w{1.0f}, k(size_t(len * dim));
  for (int64_t i = 0; i < len; ++i) k[size_t(i * dim)] = -1.0f - float(i);
  std::vector<int32_t> out(static_cast<size_t>(top_k));
  IndexerTopkArgs a{.q = q.data(),
                    .head_weights = w.data(),
                    .k_cache = k.data(),
                    .block_tables = tables.data(),
                    .token_seq = seq.data(),
                    .positions = pos.data(),
                    .key_positions = out.data(),
                    .tokens = 1,
                    .n_heads = 1,
                    .head_dim = dim,
                    .top_k = top_k,
                    .block_size = 8,
                    .max_blocks = 1};
  cpu::indexer_topk(a);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2}));
  k[4 * dim] = 5.0f;  // key 4 now scores 5
  cpu::indexer_topk(a);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 4}));
}

TEST(MlaKernelsCpuVsRef, LayerNorm) {
  std::mt19937 rng(16);
  for (int64_t dim : {1, 7, 128}) {
    const auto x = randn(size_t(5 * dim), rng, 3.0f), w = randn(size_t(dim), rng), b = randn(size_t(dim), rng);
    std::vector<float> got(x.size()), want(x.size());
    cpu::layer_norm(x.data(), w.data(), b.data(), got.data(), 5, dim, 1e-6f);
    ref::layer_norm(x.data(), w.data(), b.data(), want.data(), 5, dim, 1e-6f);
    EXPECT_LE(rel_err(got, want), kRelTol) << dim;
    std::vector<float> in_place = x;
    cpu::layer_norm(in_place.data(), w.data(), b.data(), in_place.data(), 5, dim, 1e-6f);
    EXPECT_LE(rel_err(in_place, want), kRelTol) << dim << " in place";
  }
}

TEST(RoutingKernelsCpuVsRef, GroupedTopk) {
  std::mt19937 rng(17);
  struct Case {
    int64_t experts, top_k, n_group, topk_group;
  };
  for (Case c : {Case{2, 1, 1, 1}, Case{8, 2, 1, 1}, Case{16, 4, 4, 2}, Case{12, 3, 3, 1}, Case{64, 8, 8, 4},
                 Case{6, 2, 6, 3}}) {
    for (bool renorm : {false, true}) {
      const int64_t T = 9;
      const auto logits = randn(size_t(T * c.experts), rng, 1.5f), bias = randn(size_t(c.experts), rng, 0.1f);
      std::vector<int32_t> ids(size_t(T * c.top_k)), ref_ids(ids.size());
      std::vector<float> w(ids.size()), ref_w(ids.size());
      GroupedTopkArgs a{.logits = logits.data(),
                        .score_bias = bias.data(),
                        .expert_ids = ids.data(),
                        .weights = w.data(),
                        .tokens = T,
                        .n_experts = c.experts,
                        .top_k = c.top_k,
                        .n_group = c.n_group,
                        .topk_group = c.topk_group,
                        .renormalize = renorm,
                        .scaling = 2.5f};
      cpu::grouped_topk(a);
      a.expert_ids = ref_ids.data();
      a.weights = ref_w.data();
      ref::grouped_topk(a);
      EXPECT_EQ(ids, ref_ids) << c.experts << " experts, " << c.n_group << " groups";
      EXPECT_LE(rel_err(w, ref_w), kRelTol);
    }
  }
}

TEST(RoutingKernelsKnownAnswer, BiasChoosesGroupsLimitAndScalingWeights) {
  // 4 experts in 2 groups. Scores (sigmoid of the logits) 0.9, 0.2 | 0.6, 0.5; the bias lifts expert 1.
  const auto logit = [](double p) { return float(std::log(p / (1 - p))); };
  std::vector<float> logits{logit(0.9), logit(0.2), logit(0.6), logit(0.5)};
  std::vector<float> bias{0.0f, 0.8f, 0.0f, 0.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  GroupedTopkArgs a{.logits = logits.data(),
                    .score_bias = bias.data(),
                    .expert_ids = ids.data(),
                    .weights = w.data(),
                    .tokens = 1,
                    .n_experts = 4,
                    .top_k = 2,
                    .n_group = 2,
                    .topk_group = 1,
                    .renormalize = false,
                    .scaling = 2.0f};
  // Group 0 scores 0.9 + 1.0 = 1.9 against 1.1: only experts 0 and 1 are eligible; 1 leads by its bias.
  cpu::grouped_topk(a);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(w[0], 0.2 * 2.0, 1e-6);  // the unbiased score, times the scaling
  EXPECT_NEAR(w[1], 0.9 * 2.0, 1e-6);
  a.renormalize = true;
  cpu::grouped_topk(a);
  EXPECT_NEAR(w[0], 0.2 / 1.1 * 2.0, 1e-6);
  a.topk_group = 2;  // both groups: biased 1.0 (e1), 0.9 (e0), 0.6 (e2)
  a.top_k = 3;
  ids.resize(3);
  w.resize(3);
  a.expert_ids = ids.data();
  a.weights = w.data();
  cpu::grouped_topk(a);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0, 2}));
}

TEST(RoutingKernelsCpuVsRef, Add) {
  std::mt19937 rng(18);
  for (int64_t n : {1, 17, 100000}) {
    auto y = randn(size_t(n), rng);
    const auto x = randn(size_t(n), rng);
    auto want = y;
    cpu::add(y.data(), x.data(), n);
    ref::add(want.data(), x.data(), n);
    EXPECT_EQ(y, want);
  }
}

}  // namespace
}  // namespace sy
