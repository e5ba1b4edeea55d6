// Device helpers for block-FP8 weights (QuantView fp8_block): E4M3 bytes widened with their block's scale.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/ops.h"

namespace sy::cuda {

// Sixteen E4M3 values of one 16-byte load (byte j is element j), each times `scale`, as fp32. E4M3 widens
// to fp16 exactly.
__device__ __forceinline__ void unpack16_fp8(const uint4& u, float scale, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * h)), __NV_E4M3);
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&r));
      f[4 * i + 2 * h] = v.x * scale;
      f[4 * i + 2 * h + 1] = v.y * scale;
    }
  }
}

// The scales of row `row` of matrix `matrix` of an FP8 array (one per block of columns).
__device__ __forceinline__ const float* fp8_row_scales(const QuantView& q, int64_t matrix, int64_t row) {
  return q.scales + matrix * q.scale_stride + (row / q.block_rows) * q.scale_cols;
}

// The scale of element (row, col) of matrix `matrix` of an FP8 array.
__device__ __forceinline__ float fp8_scale(const QuantView& q, int64_t matrix, int64_t row, int64_t col) {
  return q.scales[matrix * q.scale_stride + (row / q.block_rows) * q.scale_cols + col / q.block_cols];
}

}  // namespace sy::cuda
