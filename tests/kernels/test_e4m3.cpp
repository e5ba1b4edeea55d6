// The host E4M3 codec (kernels/e4m3.h, base's f8_e4m3_to_f32) against the OCP FP8 specification's E4M3
// ("E4M3FN"): the expected values are computed here from the format's definition, never from the codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/e4m3.h"

namespace sy {
namespace {

// The value the OCP spec gives code c: S.EEEE.MMM with bias 7; exponent 0 is subnormal (M · 2^-9); S.1111.111 is
// NaN; there are no infinities, so S.1111.000 .. S.1111.110 are 256 .. 448. Computed in double, exactly.
double spec_value(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s != 0 ? -mag : mag;
}

// The non-negative finite codes in increasing order of value: 0x00 .. 0x7E (the code order is the value order).
std::vector<int> positive_codes() {
  std::vector<int> out;
  for (int c = 0; c <= 0x7E; ++c) out.push_back(c);
  return out;
}

TEST(E4m3, EveryCodeDecodesToTheSpecValue) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double want = spec_value(c);
    const float got = f8_e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code 0x" << std::hex << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code 0x" << std::hex << c;  // -0 is 0x80
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: no infinities
  EXPECT_EQ(spec_value(0x7E), 448.0);
  EXPECT_EQ(spec_value(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(spec_value(0x08), std::ldexp(1.0, -6));
}

TEST(E4m3, EveryFiniteValueEncodesToItsOwnCode) {
  for (int c = 0; c < 256; ++c) {
    const double v = spec_value(c);
    if (std::isnan(v)) continue;
    EXPECT_EQ(f32_to_e4m3_satfinite(static_cast<float>(v)), c) << "value " << v;
  }
}

TEST(E4m3, MidpointsRoundToTheEvenCodeAndNeighboursToTheNearest) {
  const std::vector<int> codes = positive_codes();
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    const int lo = codes[i], hi = codes[i + 1];
    const double a = spec_value(lo), b = spec_value(hi);
    const double mid = (a + b) / 2;  // exact in double, and in float: E4M3 midpoints need 5 significant bits
    ASSERT_EQ(static_cast<double>(static_cast<float>(mid)), mid);
    const int even = lo % 2 == 0 ? lo : hi;  // the code whose last mantissa bit is 0
    for (const double sign : {1.0, -1.0}) {
      const int s = sign < 0 ? 0x80 : 0;
      EXPECT_EQ(f32_to_e4m3_satfinite(static_cast<float>(sign * mid)), even | s) << "midpoint " << sign * mid;
      const float below = std::nextafter(static_cast<float>(mid), 0.0f);
      const float above = std::nextafter(static_cast<float>(mid), 1e9f);
      EXPECT_EQ(f32_to_e4m3_satfinite(static_cast<float>(sign) * below), lo | s) << "just below " << mid;
      EXPECT_EQ(f32_to_e4m3_satfinite(static_cast<float>(sign) * above), hi | s) << "just above " << mid;
    }
  }
}

TEST(E4m3, BeyondTheLargestFiniteSaturates) {
  for (const float x : {448.0f, std::nextafter(448.0f, 1e9f), 463.9f, 464.0f, 465.0f, 480.0f, 1e6f, 3.4e38f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_e4m3_satfinite(x), 0x7E) << x;
    EXPECT_EQ(f32_to_e4m3_satfinite(-x), 0xFE) << -x;
  }
  EXPECT_EQ(f8_e4m3_to_f32(f32_to_e4m3_satfinite(1e30f)), 448.0f);
}

TEST(E4m3, NanStaysNanAndTinyValuesFlushToSignedZero) {
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(f32_to_e4m3_satfinite(std::numeric_limits<float>::quiet_NaN()))));
  // Half the smallest subnormal is a tie between 0 and 2^-9: to the even code, 0.
  EXPECT_EQ(f32_to_e4m3_satfinite(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3_satfinite(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(f32_to_e4m3_satfinite(std::ldexp(1.0f, -30)), 0x00);
  EXPECT_EQ(f32_to_e4m3_satfinite(1e-45f), 0x00);  // fp32's smallest subnormal
}

// Random fp32 values of every magnitude against a search for the nearest spec value (ties: the even code).
TEST(E4m3, RandomValuesEncodeToTheNearestSpecValue) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-14, 10);
  const std::vector<int> codes = positive_codes();
  for (int n = 0; n < 100000; ++n) {
    const float x = std::ldexp(mantissa(rng), exponent(rng)) * (n % 2 == 0 ? 1.0f : -1.0f);
    const double a = std::fabs(static_cast<double>(x));
    int best = 0x7E;  // saturation when a is past 448
    if (a <= 448.0) {
      double best_err = std::numeric_limits<double>::infinity();
      for (const int c : codes) {
        const double err = std::fabs(spec_value(c) - a);
        if (err < best_err || (err == best_err && c % 2 == 0)) {
          best = c;
          best_err = err;
        }
      }
    }
    ASSERT_EQ(f32_to_e4m3_satfinite(x), best | (x < 0 ? 0x80 : 0)) << "x = " << x;
  }
}

TEST(E4m3, ScaledRoundTripDividesThenMultiplies) {
  // stored = e4m3(x / scale), read = float(stored) · scale.
  EXPECT_EQ(e4m3_quantise(3.0f, 0.5f), f32_to_e4m3_satfinite(6.0f));
  EXPECT_EQ(e4m3_round_trip(3.0f, 0.5f), 3.0f);
  EXPECT_EQ(e4m3_round_trip(1000.0f, 2.0f), 896.0f);  // 500 saturates to 448
  EXPECT_EQ(e4m3_round_trip(1.0625f, 1.0f), 1.0f);    // midpoint of 1 and 1.125: even code
  EXPECT_EQ(e4m3_round_trip(0.3f, 0.1f), static_cast<float>(spec_value(0x44)) * 0.1f);  // 3 = 1.5·2^1: 0x44
}

}  // namespace
}  // namespace sy
