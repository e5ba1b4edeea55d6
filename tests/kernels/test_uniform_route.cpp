// Uniform routing (kernels/uniform_route.h, bench latency --routing uniform) against what uniform sampling without
// replacement means: distinct experts in range, every expert and every pair of experts equally likely (chi-square
// bounds at p = 1e-6), and the distinct experts n tokens touch as the planner's formula E (1 - (1 - K/E)^n).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "kernels/ops.h"
#include "kernels/uniform_route.h"

namespace sy {
namespace {

std::vector<int32_t> route(const std::vector<float>& logits, int64_t T, int64_t E, int64_t K) {
  std::vector<int32_t> ids(static_cast<size_t>(T * K), -1);
  ref::uniform_route({.logits = logits.data(), .expert_ids = ids.data(), .tokens = T, .n_experts = E, .top_k = K});
  return ids;
}

std::vector<float> normal_logits(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// The chi-square statistic's 1 - 1e-6 quantile at `dof` degrees of freedom (Wilson–Hilferty; z = 4.753).
double chi2_bound(double dof) {
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3.0);
}

double chi2(const std::vector<double>& observed, double expected) {
  double s = 0;
  for (double o : observed) s += (o - expected) * (o - expected) / expected;
  return s;
}

TEST(UniformRoute, DistinctExpertsInRangeTheSameForTheSameLogits) {
  const int64_t T = 500, E = 8;
  for (int64_t K : {1, 2, 7, 8}) {
    auto logits = normal_logits(T * E, 1);
    logits[3] = std::numeric_limits<float>::quiet_NaN();  // a non-finite logit still routes
    const auto ids = route(logits, T, E, K);
    for (int64_t t = 0; t < T; ++t) {
      std::set<int32_t> row(ids.begin() + t * K, ids.begin() + (t + 1) * K);
      ASSERT_EQ(static_cast<int64_t>(row.size()), K) << "token " << t;
      EXPECT_GE(*row.begin(), 0);
      EXPECT_LT(*row.rbegin(), E);
    }
    EXPECT_EQ(route(logits, T, E, K), ids);
    // A token's choice is its own: routing a suffix of the tokens picks what their rows picked before.
    const std::vector<float> tail(logits.begin() + 100 * E, logits.end());
    EXPECT_EQ(route(tail, T - 100, E, K), std::vector<int32_t>(ids.begin() + 100 * K, ids.end()));
  }
}

TEST(UniformRoute, EveryExpertAndEveryPosition) {
  const int64_t T = 20000;
  for (auto [E, K] : {std::pair<int64_t, int64_t>{64, 8}, {384, 8}, {8, 2}}) {
    const auto ids = route(normal_logits(T * E, 2), T, E, K);
    std::vector<double> all(static_cast<size_t>(E), 0.0), first(static_cast<size_t>(E), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      first[static_cast<size_t>(ids[static_cast<size_t>(t * K)])] += 1;
      for (int64_t j = 0; j < K; ++j) all[static_cast<size_t>(ids[static_cast<size_t>(t * K + j)])] += 1;
    }
    // Each expert is in a token's K picks with probability K / E, and is its first pick with 1 / E. The K
    // picks of a token are not independent, which makes the count's variance smaller: the bound holds.
    EXPECT_LT(chi2(all, static_cast<double>(T * K) / E), chi2_bound(static_cast<double>(E - 1))) << E << "/" << K;
    EXPECT_LT(chi2(first, static_cast<double>(T) / E), chi2_bound(static_cast<double>(E - 1))) << E << "/" << K;
  }
}

// A choice of "K consecutive from a random start" would pass the test above and fail this one.
TEST(UniformRoute, EveryPairOfExperts) {
  const int64_t T = 20000, E = 16, K = 4;
  const auto ids = route(normal_logits(T * E, 3), T, E, K);
  std::vector<double> pairs(static_cast<size_t>(E * E), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = 0; j < K; ++j) {
        const int32_t a = ids[static_cast<size_t>(t * K + i)], b = ids[static_cast<size_t>(t * K + j)];
        if (a < b) pairs[static_cast<size_t>(a * E + b)] += 1;
      }
    }
  }
  std::vector<double> upper;
  for (int64_t a = 0; a < E; ++a) {
    for (int64_t b = a + 1; b < E; ++b) upper.push_back(pairs[static_cast<size_t>(a * E + b)]);
  }
  // C(K, 2) / C(E, 2) of the tokens hold a given pair.
  const double expected = static_cast<double>(T) * (K * (K - 1)) / static_cast<double>(E * (E - 1));
  EXPECT_LT(chi2(upper, expected), chi2_bound(static_cast<double>(upper.size() - 1)));
}

// The planner's expected experts touched: groups of n tokens (a decode step's batch) touch E (1 - (1 - K/E)^n)
// distinct experts on average; over 2,000 groups the mean's standard deviation is below 0.1 expert.
TEST(UniformRoute, TouchesTheExpectedExpertsPerStep) {
  const int64_t E = 128, K = 8, groups = 2000;
  for (int64_t n : {1, 16, 64}) {
    const auto ids = route(normal_logits(groups * n * E, 4), groups * n, E, K);
    double touched = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const std::set<int32_t> seen(ids.begin() + g * n * K, ids.begin() + (g + 1) * n * K);
      touched += static_cast<double>(seen.size());
    }
    const double expected = E * (1.0 - std::pow(1.0 - static_cast<double>(K) / E, static_cast<double>(n)));
    EXPECT_NEAR(touched / groups, expected, 0.6) << n << " tokens a step";
  }
}

// The routers with .uniform (how the MoE blocks ask for it): the CPU kernels and the references write
// uniform_route's ids, and the weights they write without it (the router's top-k weights, kept).
TEST(UniformRoute, TheRoutersReplaceTheirIdsAndKeepTheirWeights) {
  const int64_t T = 33, E = 64, K = 6;
  const std::vector<float> logits = normal_logits(T * E, 11);
  const std::vector<int32_t> expected = route(logits, T, E, K);
  for (const bool grouped : {false, true}) {
    for (const bool reference : {false, true}) {
      std::vector<int32_t> ids[2];
      std::vector<float> weights[2];
      for (const bool uniform : {false, true}) {
        auto& id = ids[uniform ? 1 : 0];
        auto& w = weights[uniform ? 1 : 0];
        id.assign(static_cast<size_t>(T * K), -1);
        w.assign(static_cast<size_t>(T * K), 0.0f);
        if (grouped) {
          const GroupedTopkArgs a{.logits = logits.data(),
                                  .expert_ids = id.data(),
                                  .weights = w.data(),
                                  .tokens = T,
                                  .n_experts = E,
                                  .top_k = K,
                                  .n_group = 8,
                                  .topk_group = 4,
                                  .renormalize = true,
                                  .scaling = 2.5f,
                                  .uniform = uniform};
          (reference ? ref::grouped_topk : cpu::grouped_topk)(a);
        } else {
          const SoftmaxTopkArgs a{.logits = logits.data(),
                                  .expert_ids = id.data(),
                                  .weights = w.data(),
                                  .tokens = T,
                                  .n_experts = E,
                                  .top_k = K,
                                  .renormalize = true,
                                  .uniform = uniform};
          (reference ? ref::softmax_topk : cpu::softmax_topk)(a);
        }
      }
      EXPECT_EQ(ids[1], expected) << (grouped ? "grouped" : "softmax") << (reference ? " reference" : " cpu");
      EXPECT_NE(ids[0], expected) << "the top-k's own choice differs from the uniform draw";
      EXPECT_EQ(weights[1], weights[0]) << (grouped ? "grouped" : "softmax") << (reference ? " reference" : " cpu");
    }
  }
}

}  // namespace
}  // namespace sy
