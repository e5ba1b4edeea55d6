// Device helpers for 4-bit weights (QuantView int4_group and nvfp4): the 32 values of one 16-byte load
// widened in registers with their group scales.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/ops.h"

namespace sy::cuda {

// Weights in one 16-byte load of a matrix stored in format f.
__host__ __device__ constexpr int weights_per_load(WeightFormat f) {
  return f == WeightFormat::dense ? 8 : f == WeightFormat::fp8_block ? 16 : 32;
}

// Whether the expert kernels read an expert array of rows of `hidden` and `inter` columns in these forms
// (gate_up and down alike): whole 16-byte loads per row, and FP8 blocks or 4-bit groups of whole 16-column
// halves of a load.
inline bool expert_layout_ok(const QuantView& gate_up, const QuantView& down, int64_t hidden, int64_t inter) {
  const int64_t per = weights_per_load(gate_up.format);
  return gate_up.format == down.format && hidden % per == 0 && inter % per == 0 &&
         (gate_up.dense() || (gate_up.block_cols % 16 == 0 && down.block_cols % 16 == 0));
}

// Nibbles j and j + 4 of the word w (bits 4j and 16 + 4j; j < 4) as an fp16 pair, exactly: int4_group gives
// nibble - 8 (1024 + n in fp16's mantissa, minus 1032); nvfp4 gives e2m1(n) · 2^-14 (E2M1's sign, exponent
// and mantissa bits placed at fp16's, whose exponent bias is 14 more).
template <WeightFormat F>
__device__ __forceinline__ float2 q4_pair(uint32_t w, int j) {
  uint32_t h;
  if constexpr (F == WeightFormat::int4_group) {
    h = ((w >> (4 * j)) & 0x000F000Fu) | 0x64006400u;
    const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x6408)));
    return __half22float2(v);
  } else {
    const int mag = 9 - 4 * j, sign = 12 - 4 * j;
    const uint32_t m = mag >= 0 ? w << mag : w >> -mag;
    const uint32_t s = w << sign;
    h = (m & 0x0E000E00u) | (s & 0x80008000u);
    return __half22float2(*reinterpret_cast<const __half2*>(&h));
  }
}

// What one row of a 4-bit matrix needs besides its bytes: its group scales and (nvfp4) its row scale, times
// 2^14 to undo q4_pair's exponent offset.
struct Q4Row {
  const void* group_scales;
  float row_scale;
};

// Row `row` of matrix `matrix` of a 4-bit array of `rows` rows.
template <WeightFormat F>
__device__ __forceinline__ Q4Row q4_row(const QuantView& q, int64_t matrix, int64_t rows, int64_t row) {
  const int64_t first = matrix * q.scale_stride + row * q.scale_cols;
  if constexpr (F == WeightFormat::int4_group) {
    return {static_cast<const uint16_t*>(q.group_scales) + first, 1.0f};
  } else {
    return {static_cast<const uint8_t*>(q.group_scales) + first, __ldg(q.row_scales + matrix * rows + row) * 16384.0f};
  }
}

// Group scale `g` of a row.
template <WeightFormat F>
__device__ __forceinline__ float q4_group_scale(const Q4Row& r, int64_t g) {
  if constexpr (F == WeightFormat::int4_group) {
    return __uint_as_float(static_cast<uint32_t>(__ldg(static_cast<const uint16_t*>(r.group_scales) + g)) << 16);
  } else {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(
        static_cast<__nv_fp8_storage_t>(__ldg(static_cast<const uint8_t*>(r.group_scales) + g)), __NV_E4M3);
    return __half2float(__half(h)) * r.row_scale;
  }
}

// The scales of chunk c (elements 32c .. 32c + 31) of a row in groups of `group` columns (a multiple of
// 16): x for elements 32c .. 32c + 15, y for the rest.
// 32-bit index arithmetic, and no division for the published groups (16 and 32): a 64-bit division per
// chunk costs more than the chunk's arithmetic.
template <WeightFormat F>
__device__ __forceinline__ float2 q4_chunk_scales(const Q4Row& r, int64_t group, int64_t c) {
  const auto g = static_cast<uint32_t>(group), first = static_cast<uint32_t>(c) * 32u;
  uint32_t g0, g1;
  if (g == 16) {
    g0 = first >> 4;
    g1 = g0 + 1;
  } else if (g == 32) {
    g0 = g1 = first >> 5;
  } else {
    g0 = first / g;
    g1 = (first + 16) / g;
  }
  const float s0 = q4_group_scale<F>(r, g0);
  return make_float2(s0, g1 == g0 ? s0 : q4_group_scale<F>(r, g1));
}

// The 32 values of one 16-byte chunk in order, each times its half's scale (s.x for the first 16).
template <WeightFormat F>
__device__ __forceinline__ void unpack32_q4(const uint4& u, float2 s, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float scale = i < 2 ? s.x : s.y;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 v = q4_pair<F>(w[i], j);
      f[8 * i + j] = v.x * scale;
      f[8 * i + j + 4] = v.y * scale;
    }
  }
}

// Eight fp32 values as one 16-byte chunk of bf16 (round to nearest even).
__device__ __forceinline__ uint4 pack8_bf16(const float* f) {
  uint32_t p[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    p[j] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return make_uint4(p[0], p[1], p[2], p[3]);
}

}  // namespace sy::cuda
