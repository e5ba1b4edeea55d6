// Device helpers shared by the CUDA kernels: the bf16 view of storage pointers, bf16 bit conversions, 16-byte bf16
// unpacking, warp and block reductions, the paged-KV slot of a position, and programmatic dependent launch.
#pragma once

#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

// The CUDA kernels' view of the ops' storage pointers (kernels/ops.h): bf16 weights and KV cache.
__host__ __device__ __forceinline__ const bf16_bits* bf16_storage(const void* p) {
  return static_cast<const bf16_bits*>(p);
}
__host__ __device__ __forceinline__ bf16_bits* bf16_storage(void* p) { return static_cast<bf16_bits*>(p); }

__device__ __forceinline__ float bf(bf16_bits v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ bf16_bits to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// The value bf16 storage would hold (round to nearest even).
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Eight bf16 values of one 16-byte load, widened to fp32.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum or max over a block of Threads threads (a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds at least Threads / 32 floats; the call synchronises the block.
template <int Threads>
__device__ float block_reduce(float v, bool is_max, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < Threads / 32 ? shared[lane] : (is_max ? -FLT_MAX : 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  return v;
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of the seeded N(0, 1) sequence, the same generator as the CPU backend's: it depends only on
// (seed, i).
__device__ __forceinline__ float random_normal_at(uint64_t seed, int64_t i) {
  const uint64_t r1 = mix64(seed ^ mix64(static_cast<uint64_t>(2 * i)));
  const uint64_t r2 = mix64(seed ^ mix64(static_cast<uint64_t>(2 * i + 1)));
  const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
}

// Cache slot of position `pos` of a sequence with this block table.
__device__ __forceinline__ int64_t slot_of(const int32_t* table, int64_t block_size, int64_t pos) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

// Warps per group of `rows_per_warp` GEMV rows (1, 2, 4 or 8, at most `warps`): the fewest that give about 32
// warps a multiprocessor of an H200 (132 of them), so that a product with few rows still streams at full
// bandwidth.
inline int gemv_split(int64_t rows, int64_t rows_per_warp, int warps) {
  const int64_t groups = (rows + rows_per_warp - 1) / rows_per_warp;
  int split = 1;
  while (split < warps && groups * split < 132 * 32) split *= 2;
  return split;
}

// f(std::integral_constant<int, S>{}) for S = split (1, 2, 4, or kMax past them): a GEMV's split as a
// template argument.
template <int kMax, typename F>
void with_split(int split, F&& f) {
  switch (split) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, kMax>{});
  }
}

// Programmatic dependent launch (sm_90). A kernel started by launch_pdl may begin while its
// predecessor on the stream is still running: everything before pdl_wait() must read only memory no
// earlier op of the step writes (weights), and nothing may be written before it. pdl_wait() returns once
// the predecessor grids have finished and their writes are visible; every block calls it before it
// returns, so that a kernel never completes before its predecessor (completion stays transitive).
// pdl_launch_dependents() lets the next kernel's blocks be scheduled once every block of this one has
// started (they then prefetch their weights and wait). Both are no-ops in a plain launch.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) with programmatic stream serialisation allowed (captured
// into graphs as programmatic edges). The kernel must call pdl_wait() as above.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, const char* name,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(std::forward<Args>(args))...), name);
}

}  // namespace sy::cuda
