// dtype names and sizes, and the scalar conversions, against bit patterns worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"

namespace sy {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(DType, NamesSizesAndParsing) {
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::f64,
                       DType::i64, DType::i32, DType::i16,  DType::i8,      DType::u8,      DType::boolean};
  for (DType t : all) {
    DType parsed = DType::boolean;
    ASSERT_TRUE(parse_dtype(dtype_name(t), &parsed)) << dtype_name(t);
    EXPECT_EQ(parsed, t);
  }
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8_e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_name(DType::f8_e4m3), "F8_E4M3");
  EXPECT_TRUE(is_float(DType::bf16));
  EXPECT_FALSE(is_float(DType::i64));
  DType out = DType::f32;
  EXPECT_FALSE(parse_dtype("F7", &out));
  EXPECT_FALSE(parse_dtype("bf16", &out));  // safetensors spells dtypes in upper case
  EXPECT_EQ(out, DType::f32);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // bf16 keeps the top 16 bits of an f32; the low 16 bits decide the rounding.
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-1.5f), 0xbfc0);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // below half an ulp: down
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, 0x3f80 is even: down
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above half: up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, 0x3f81 is odd: up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000u)), 0xbf82);  // same, negative
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001u)), 0x0000);  // smallest f32 subnormal: to zero
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  // A signalling NaN whose payload is only in the low bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(DType, F16KnownBitPatterns) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));

  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the midpoint: ties to even, which is inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // tie between 0 and 0x0001: even
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);     // tie between 0x0001 and 0x0002
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie between 0x3c00 and 0x3c01
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(DType, F16RoundTripsEveryNonNanValue) {
  int checked = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (nan) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << std::hex << "0x" << h;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);
}

TEST(DType, F8E4M3KnownValues) {
  EXPECT_EQ(f8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0x7e), 448.0f);  // largest finite: e4m3fn has no infinities
  EXPECT_EQ(f8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(f8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0xff)));
  EXPECT_EQ(f8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite apart from mantissa 7
}

// E2M1 (NVFP4): every code, by the OCP MX definition (bias 1, one mantissa bit, exponent 0 subnormal: 0 and 0.5).
TEST(DType, F4E2M1EveryCode) {
  const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t v = 0; v < 16; ++v) {
    EXPECT_EQ(f4_e2m1_to_f32(v), v & 8 ? -magnitude[v & 7] : magnitude[v & 7]) << int(v);
    EXPECT_EQ(std::signbit(f4_e2m1_to_f32(v)), (v & 8) != 0) << int(v);
    EXPECT_EQ(f4_e2m1_to_f32(uint8_t(v | 0xF0)), f4_e2m1_to_f32(v)) << "only the low 4 bits are read";
  }
}

TEST(DType, F8E5M2KnownValues) {
  EXPECT_EQ(f8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(f8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f8_e5m2_to_f32(0x7c), INFINITY);
  EXPECT_EQ(f8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

TEST(DType, ConvertToF32) {
  const uint16_t bf16[3] = {0x3f80, 0xc000, 0x4049};
  float out[3];
  convert_to_f32(bf16, DType::bf16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.140625f);
  const uint8_t f8[2] = {0x38, 0x7e};
  convert_to_f32(f8, DType::f8_e4m3, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 448.0f);
  const double f64[1] = {0.5};
  convert_to_f32(f64, DType::f64, out, 1);
  EXPECT_EQ(out[0], 0.5f);
  const int64_t i64[1] = {1};
  EXPECT_THROW(convert_to_f32(i64, DType::i64, out, 1), Error);
}

}  // namespace
}  // namespace sy
