// dtype names, sizes and conversions.
#include "base/dtype.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "base/check.h"

namespace sy {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::f32, "F32", 4, true},         {DType::f16, "F16", 2, true},         {DType::bf16, "BF16", 2, true},
    {DType::f8_e4m3, "F8_E4M3", 1, true}, {DType::f8_e5m2, "F8_E5M2", 1, true}, {DType::f64, "F64", 8, true},
    {DType::i64, "I64", 8, false},        {DType::i32, "I32", 4, false},        {DType::i16, "I16", 2, false},
    {DType::i8, "I8", 1, false},          {DType::u8, "U8", 1, false},          {DType::boolean, "BOOL", 1, false},
};
const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool is_float(DType t) { return info(t).is_float; }

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& i : kInfo) {
    if (i.name == name) {
      *out = i.type;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nanf("") : INFINITY;
  } else {
    v = std::ldexp(float(mant | 0x400u), int(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {                                  // subnormal half (or zero)
    float a;
    std::memcpy(&a, &absx, 4);
    return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));  // 2^24, ties to even
  }
  const uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

float f8_e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  float r;
  if (exp == 0xf && mant == 0x7) {
    r = std::nanf("");  // e4m3fn has no infinities
  } else if (exp == 0) {
    r = std::ldexp(float(mant), -9);
  } else {
    r = std::ldexp(float(mant | 0x8u), int(exp) - 10);
  }
  return sign ? -r : r;
}

float f8_e5m2_to_f32(uint8_t v) { return f16_to_f32(uint16_t(v) << 8); }

float f4_e2m1_to_f32(uint8_t v) {
  static constexpr std::array<float, 8> kMagnitude = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[v & 0x7u];
  return v & 0x8u ? -m : m;
}

namespace {
// Element i of an array that may sit at any byte offset (a safetensors tensor need not be aligned to its
// element size): memcpy, which compiles to a plain load, instead of a misaligned dereference.
template <typename T>
T load_unaligned(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace

void convert_to_f32(const void* src, DType t, float* dst, size_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_unaligned<uint16_t>(src, i));
      return;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_unaligned<uint16_t>(src, i));
      return;
    case DType::f8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e4m3_to_f32(s[i]);
      return;
    }
    case DType::f8_e5m2: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e5m2_to_f32(s[i]);
      return;
    }
    case DType::f64:
      for (size_t i = 0; i < n; ++i) dst[i] = float(load_unaligned<double>(src, i));
      return;
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      break;
  }
  SY_FAIL("cannot convert {} to F32: not a floating-point type", dtype_name(t));
}

}  // namespace sy
