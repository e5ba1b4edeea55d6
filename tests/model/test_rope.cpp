// Rope tables against their definitions: theta^(-2i/d), linear interpolation, and YaRN's limits
// (high-frequency dims untouched, low-frequency dims divided by the factor, mscale 0.1 ln s + 1).
#include <gtest/gtest.h>

#include <cmath>

#include "base/check.h"
#include "model/rope.h"

namespace sy {
namespace {

TEST(Rope, DefaultIsThetaPowerMinusTwoIOverD) {
  const RopeTable t = compute_rope_table({.theta = 10000.0}, 20, 256);
  ASSERT_EQ(t.inv_freq.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(t.inv_freq[i], std::pow(10000.0, -2.0 * i / 20.0), 1e-7);
  EXPECT_EQ(t.attention_scale, 1.0f);
}

TEST(Rope, LinearDividesByFactor) {
  const RopeTable t = compute_rope_table({.type = "linear", .theta = 500.0, .factor = 4.0}, 12, 256);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(t.inv_freq[i], std::pow(500.0, -2.0 * i / 12.0) / 4.0, 1e-7);
}

TEST(Rope, YarnKeepsFastDimsAndInterpolatesSlowOnes) {
  const double factor = 8.0;
  const RopeTable t =
      compute_rope_table({.type = "yarn", .theta = 10000.0, .factor = factor, .original_max_position = 64}, 64, 512);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-7);  // fastest rotation: extrapolated (unchanged)
  EXPECT_NEAR(t.inv_freq[31], std::pow(10000.0, -62.0 / 64.0) / factor, 1e-9);  // slowest: interpolated
  for (size_t i = 0; i < 32; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / 64.0);
    EXPECT_LE(t.inv_freq[i], base * (1 + 1e-6));
    EXPECT_GE(t.inv_freq[i], base / factor * (1 - 1e-6));
  }
  EXPECT_NEAR(t.attention_scale, 0.1 * std::log(factor) + 1.0, 1e-6);
}

TEST(Rope, YarnMscaleRatioWhenBothGiven) {
  const RopeTable t = compute_rope_table({.type = "yarn",
                                          .theta = 10000.0,
                                          .factor = 40.0,
                                          .original_max_position = 4096,
                                          .mscale = 1.0,
                                          .mscale_all_dim = 0.707},
                                         64, 163840);
  const double m = 0.1 * std::log(40.0);
  EXPECT_NEAR(t.attention_scale, (m + 1.0) / (0.707 * m + 1.0), 1e-6);
}

TEST(Rope, UnknownTypeIsRefused) {
  EXPECT_THROW(compute_rope_table({.type = "dynamic"}, 16, 256), Error);
  EXPECT_THROW(compute_rope_table({}, 15, 256), Error);
}

}  // namespace
}  // namespace sy
