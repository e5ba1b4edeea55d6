// Sampler: greedy is argmax (lowest id on ties); sampling frequencies follow softmax(logits / T);
// top-k, top-p and min-p restrict the support as defined; seeds reproduce; logprobs are log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "base/check.h"
#include "runtime/sampler.h"

namespace sy {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s({});
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits, 4), 1);
}

// A row holding a NaN or an infinity is never sampled (-1), greedy or not, wherever the bad value sits; a
// refused row draws nothing, so the seeded sequence of the next rows is the one a fresh sampler gives.
TEST(Sampler, NonFiniteRowsAreRefusedWithoutDrawing) {
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> good = {0.1f, 0.7f, -0.3f, 0.4f, 0.2f};
  for (const SamplingParams& p : {SamplingParams{}, SamplingParams{.temperature = 0.8f, .seed = 5},
                                  SamplingParams{.temperature = 1.0f, .top_k = 2, .seed = 5},
                                  SamplingParams{.temperature = 1.0f, .top_p = 0.5f, .seed = 5}}) {
    for (float bad : {nan, inf, -inf}) {
      for (size_t at : {size_t{0}, size_t{2}, size_t{4}}) {
        std::vector<float> row = good;
        row[at] = bad;
        Sampler s(p), fresh(p);
        EXPECT_EQ(s.sample(row.data(), 5), -1) << "T " << p.temperature << " bad " << bad << " at " << at;
        for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(good.data(), 5), fresh.sample(good.data(), 5));
      }
    }
  }
}

TEST(Sampler, FrequenciesFollowSoftmaxOverTemperature) {
  const float logits[] = {0.0f, std::log(2.0f), std::log(3.0f)};  // probs 1/6, 2/6, 3/6 at T=1
  for (float temperature : {1.0f, 2.0f}) {
    Sampler s({.temperature = temperature, .seed = 11});
    std::map<int32_t, int> counts;
    const int n = 60000;
    for (int i = 0; i < n; ++i) ++counts[s.sample(logits, 3)];
    double z = 0;
    for (float l : logits) z += std::exp(l / temperature);
    for (int t = 0; t < 3; ++t) {
      const double p = std::exp(logits[t] / temperature) / z;
      const double sd = std::sqrt(p * (1 - p) / n);
      EXPECT_NEAR(counts[t] / double(n), p, 5 * sd) << "token " << t << " T " << temperature;
    }
  }
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const float logits[] = {1.0f, 3.0f, 2.0f, 0.0f};
  Sampler k2({.temperature = 1.0f, .top_k = 2, .seed = 3});
  Sampler p_small({.temperature = 1.0f, .top_p = 0.5f, .seed = 3});
  for (int i = 0; i < 2000; ++i) {
    const int32_t a = k2.sample(logits, 4);
    EXPECT_TRUE(a == 1 || a == 2);
    // p(token 1) = e^3 / (e^0 + e^1 + e^2 + e^3) ≈ 0.64 >= 0.5: nucleus is {1}.
    EXPECT_EQ(p_small.sample(logits, 4), 1);
  }
}

// min_p after temperature: with T = 2 the logits log(16), log(9), log(4), log(1) give probabilities
// 4, 3, 2, 1 (/10); min_p 0.4 keeps those >= 0.4 · 0.4 = 0.16, i.e. 4, 3, 2 renormalised to 4/9, 3/9, 2/9.
TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTopProbability) {
  const float logits[] = {std::log(16.0f), std::log(9.0f), std::log(4.0f), std::log(1.0f)};
  Sampler s({.temperature = 2.0f, .min_p = 0.4f, .seed = 5});
  std::map<int32_t, int> counts;
  const int n = 60000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits, 4)];
  const double want[] = {4.0 / 9, 3.0 / 9, 2.0 / 9, 0.0};
  for (int t = 0; t < 4; ++t) {
    const double sd = std::sqrt(want[t] * (1 - want[t]) / n);
    EXPECT_NEAR(counts[t] / double(n), want[t], 5 * sd + 1e-12) << "token " << t;
  }
  // min_p 1 keeps only the top token; min_p 0 changes nothing.
  Sampler only_top({.temperature = 2.0f, .min_p = 1.0f, .seed = 5});
  for (int i = 0; i < 500; ++i) EXPECT_EQ(only_top.sample(logits, 4), 0);
  Sampler off({.temperature = 2.0f, .seed = 5}), zero({.temperature = 2.0f, .min_p = 0.0f, .seed = 5});
  for (int i = 0; i < 500; ++i) EXPECT_EQ(off.sample(logits, 4), zero.sample(logits, 4));
}

// Hand-computed log-softmax of {1, 3, 3, 0, 2}: log Z = log(e + 2e^3 + 1 + e^2).
TEST(Sampler, TokenLogprobsAreLogSoftmaxOfTheRawLogits) {
  const float logits[] = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + 1.0 + std::exp(2.0));
  const TokenLogprobs lp = token_logprobs(logits, 5, 4, 3);
  EXPECT_NEAR(lp.logprob, 2.0 - log_z, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  // Highest first, the lower id first on the tie.
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_EQ(lp.top[2].first, 4);
  EXPECT_NEAR(lp.top[0].second, 3.0 - log_z, 1e-6);
  EXPECT_NEAR(lp.top[2].second, 2.0 - log_z, 1e-6);
  EXPECT_TRUE(token_logprobs(logits, 5, 0, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 5, 0, 5).top.back().first, 3);
  EXPECT_THROW(token_logprobs(logits, 5, 5, 1), Error);
  EXPECT_THROW(token_logprobs(logits, 5, 0, 6), Error);
  EXPECT_THROW(token_logprobs(logits, 5, 0, kMaxLogprobs + 1), Error);
}

// Large vocabularies take the sampler's partial-sort paths: a nucleus wider than its 1024-token first
// prefix, one inside it, and top-k; each sample must lie in the support the definitions give.
TEST(Sampler, LargeVocabularyNucleusAndTopKStayInTheirSupport) {
  const int64_t vocab = 50000;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) logits[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
  // Support of top-p: the smallest set of highest logits (lower id first on ties) whose softmax mass reaches p.
  auto nucleus = [&](double p) {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l));
    std::set<int32_t> in;
    double cum = 0.0;
    for (int32_t t : order) {
      in.insert(t);
      cum += std::exp(static_cast<double>(logits[t])) / z;
      if (cum >= p) break;
    }
    return in;
  };
  for (double p : {0.9, 0.01}) {  // ~45,000 tokens (beyond the first prefix), then ~500 (inside it)
    const std::set<int32_t> support = nucleus(p);
    Sampler s({.temperature = 1.0f, .top_p = static_cast<float>(p), .seed = 3});
    for (int i = 0; i < 200; ++i) EXPECT_TRUE(support.count(s.sample(logits.data(), vocab))) << "top_p " << p;
  }
  Sampler k({.temperature = 1.0f, .top_k = 3, .seed = 5});
  for (int i = 0; i < 200; ++i) {
    const int32_t t = k.sample(logits.data(), vocab);
    EXPECT_NEAR(logits[static_cast<size_t>(t)], 0.999f, 1e-6f) << t;  // the three best share logit 0.999
  }
}

TEST(Sampler, SameSeedSameTokens) {
  const float logits[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  Sampler a({.temperature = 1.0f, .seed = 42}), b({.temperature = 1.0f, .seed = 42});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits, 5), b.sample(logits, 5));
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_k = -2}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = -0.1f}), Error);
  EXPECT_THROW(Sampler({.min_p = 1.01f}), Error);
}

}  // namespace
}  // namespace sy
