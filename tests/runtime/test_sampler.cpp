// Sampler: greedy is argmax (lowest id on ties); sampling frequencies follow softmax(logits / T);
// top-k and top-p restrict the support as defined; seeds reproduce.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/check.h"
#include "runtime/sampler.h"

namespace sy {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s({});
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits, 4), 1);
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
}

}  // namespace
}  // namespace sy
