// FP8 E4M3 (OCP "E4M3FN": bias 7, no infinities, S.1111.111 is NaN, largest finite 448, subnormals in steps
// of 2^-9) on the host: encoding with round-to-nearest-even and saturation to ±448 (what CUDA's
// cvt.rn.satfinite.e4m3x2.f32 does; decoding is base's f8_e4m3_to_f32), and the per-tensor scaled round trip
// of the FP8 KV cache. Plain C++, for the CPU kernels, the CUDA backend's host side and the tests.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"

namespace sy {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3Nan = 0x7F;

// x rounded to the nearest E4M3 value (ties to the even code), magnitudes past 448 (infinities included)
// saturated to ±448; NaN stays NaN. Requires the default rounding mode (std::nearbyint rounds ties to even).
inline uint8_t f32_to_e4m3_satfinite(float x) {
  if (std::isnan(x)) return kE4m3Nan;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;  // 448 = 1.75 · 2^8: exponent 15, mantissa 6
  if (a < 0x1p-6f) {
    // Below the smallest normal 2^-6: multiples of 2^-9. q = 8 is 2^-6, whose code (exponent 1, mantissa 0) is
    // also 8. a · 2^9 is exact in fp32.
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): a's binary exponent is e - 1, here >= -6
  // Eight steps of 2^(e-4) per binade [2^(e-1), 2^e): q in [8, 16]; 16 carries into the next binade.
  auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 4 - e)));
  int exponent = e - 1 + 7;
  if (q == 16) {
    q = 8;
    ++exponent;
  }
  // a < 448 rounds to at most 448 (exponent 15, mantissa 6), never to the NaN code.
  return sign | static_cast<uint8_t>((exponent << 3) | (q - 8));
}

// What the FP8 KV cache holds for x under a per-tensor scale: stored = e4m3(x / scale), read back as
// float(stored) · scale.
inline uint8_t e4m3_quantise(float x, float scale) { return f32_to_e4m3_satfinite(x / scale); }
inline float e4m3_round_trip(float x, float scale) { return f8_e4m3_to_f32(e4m3_quantise(x, scale)) * scale; }

}  // namespace sy
