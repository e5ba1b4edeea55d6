// Element types of checkpoints and tensors, and scalar conversions to and from fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sy {

enum class DType : uint8_t { f32, f16, bf16, f8_e4m3, f8_e5m2, f64, i64, i32, i16, i8, u8, boolean };

size_t dtype_size(DType t);
// Safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType t);
// Returns false for a name safetensors does not define (or we do not know).
bool parse_dtype(std::string_view name, DType* out);
bool is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8_e4m3_to_f32(uint8_t v);
float f8_e5m2_to_f32(uint8_t v);
// The low 4 bits of v as FP4 E2M1 (NVFP4's elements): bit 3 the sign, bits 0-2 index 0, 0.5, 1, 1.5, 2, 3, 4, 6.
float f4_e2m1_to_f32(uint8_t v);

// Converts n elements of a floating dtype (f32, f16, bf16, f8_*, f64) to fp32. Precondition: is_float(t).
void convert_to_f32(const void* src, DType t, float* dst, size_t n);

}  // namespace sy
