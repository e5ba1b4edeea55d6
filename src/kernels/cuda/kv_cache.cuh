// The KV cache's elements on the GPU (KvQuant in kernels/ops.h): bf16, or E4M3 bytes of x / scale. Kernels that
// read or write the cache are templates on the element type (bf16_bits or e4m3_bits); the bf16 instantiations are
// the kernels as they were, the scales entering only the E4M3 ones.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

using e4m3_bits = uint8_t;

template <typename KV>
inline constexpr bool kIsE4m3 = std::is_same_v<KV, e4m3_bits>;

// The stored element as a float, before its scale (E4M3 widens exactly: through fp16, which holds every E4M3 value).
__device__ __forceinline__ float kv_element(bf16_bits v) { return bf(v); }
__device__ __forceinline__ float kv_element(e4m3_bits v) {
  const __half_raw r = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(r));
}

// Stores x: bf16 rounded to nearest even; E4M3 as e4m3_rn_satfinite(x / scale), the division IEEE-rounded as on
// the host (kernels/e4m3.h), so the CPU oracle stores the same byte.
__device__ __forceinline__ void kv_store(bf16_bits* dst, float x, float scale) {
  (void)scale;
  *dst = to_bf(x);
}
__device__ __forceinline__ void kv_store(e4m3_bits* dst, float x, float scale) {
  *dst = static_cast<e4m3_bits>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// Two E4M3 values (the low byte first) as a bf16 pair (the first in the low half), exactly: E4M3 → fp16 → fp32 are
// exact and an E4M3 value has 3 mantissa bits, so dropping fp32's low 16 bits loses nothing.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
  return (__float_as_uint(f.x) >> 16) | (__float_as_uint(f.y) & 0xffff0000u);
}

// Sixteen E4M3 values of one 16-byte load as sixteen bf16 in two 16-byte chunks (elements 0-7, 8-15).
__device__ __forceinline__ void e4m3x16_to_bf16(const uint4& in, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3x2_to_bf16x2(in.x), e4m3x2_to_bf16x2(in.x >> 16), e4m3x2_to_bf16x2(in.y),
                  e4m3x2_to_bf16x2(in.y >> 16));
  hi = make_uint4(e4m3x2_to_bf16x2(in.z), e4m3x2_to_bf16x2(in.z >> 16), e4m3x2_to_bf16x2(in.w),
                  e4m3x2_to_bf16x2(in.w >> 16));
}

// f(KV{}) with KV the element type the cache holds.
template <typename F>
void with_kv_element(const KvQuant& q, F&& f) {
  if (q.e4m3) return f(e4m3_bits{});
  return f(bf16_bits{});
}

}  // namespace sy::cuda
