// Tensor-core and asynchronous-copy primitives shared by the CUDA kernels (sm_80+ PTX): 16-byte
// cp.async with zero fill, ldmatrix (plain and transposed) and mma.sync m16n8k16 bf16 with fp32
// accumulation, and mma.sync m16n8k32 E4M3.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sy::cuda {

// Copies 16 bytes from global to shared memory; when !valid nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 bf16 matrices; lanes 8j..8j+7 give the row addresses of matrix j.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
// As ldmatrix_x4, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// d[16x8] += a[16x16] · b[16x8], bf16 inputs, fp32 accumulators. Fragment layouts (lane = 4·g + i):
// a {a0,a1},{a2,a3},{a4,a5},{a6,a7} = rows g, g+8, g, g+8 at columns 2i, 2i, 2i+8, 2i+8 (and +1);
// b {b0,b1},{b2,b3} = rows 2i, 2i+8 (and +1) of column g; d {d0,d1},{d2,d3} = rows g, g+8 at columns 2i, 2i+1.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d[16x8] += a[16x32] · b[32x8], E4M3 inputs, fp32 accumulators. In bytes the fragments are those of mma_bf16
// with two E4M3 values where it has one bf16 (lane 4·g + i: a rows g, g+8 at bytes 4i..4i+3 and 16+4i..; b bytes
// 4i..4i+3 and 16+4i.. of column g), so the same ldmatrix addressing loads them from [rows][k bytes] tiles.
__device__ __forceinline__ void mma_fp8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two bf16 columns packed as one 32-bit mma operand register (the lower column in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo_col, float hi_col) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo_col, hi_col);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// x = hi + lo to ~2^-16 relative: hi = bf16(x), lo = bf16(x - hi), for a pair of columns. Feeding both
// halves to the tensor cores keeps ~16 mantissa bits of an fp32 operand against a bf16 one.
__device__ __forceinline__ void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const auto low = [](uint32_t v) { return __uint_as_float(v << 16); };
  hi = pack_bf16(x0, x1);
  lo = pack_bf16(x0 - low(hi & 0xffffu), x1 - low(hi >> 16));
}

}  // namespace sy::cuda
