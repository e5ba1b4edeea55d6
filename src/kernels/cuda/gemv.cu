// Small-batch matrix products y[m, n] = x[m, k] · w[n, k]^T (+ bias) for m <= 16: one warp (or a few, for
// few rows) per output row streams that row of weights once with 16-byte loads and applies it to every token, so the
// weights are read once at close to full bandwidth (cuBLAS tiles leave most SMs idle at m = 1).
// bf16 weights: x is rounded to bf16 first, as on the cuBLAS path, so both paths compute the same
// products. fp32 weights (routers): fp32 products and sums throughout.
// Both are launched as programmatic dependents: each warp loads the first kPrefetch 16-byte chunks of
// its row before waiting for the previous kernel (weights are never written by a step).
#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kPrefetch = 8;  // 16-byte chunks per lane in flight before the wait

// acc[t] += Σ_j w[j] · bf16(x[t, c*8 + j]) for the 8 bf16 weights of chunk c.
template <int MT>
__device__ __forceinline__ void apply_chunk(const uint4& u, const float* __restrict__ x, int64_t m, int64_t k,
                                            int64_t c, float* acc) {
  float wf[8];
  unpack8(u, wf);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    const float4* xp = reinterpret_cast<const float4*>(x + t * k + c * 8);
    const float4 a = xp[0], b = xp[1];
    acc[t] += wf[0] * round_bf16(a.x) + wf[1] * round_bf16(a.y) + wf[2] * round_bf16(a.z) + wf[3] * round_bf16(a.w) +
              wf[4] * round_bf16(b.x) + wf[5] * round_bf16(b.y) + wf[6] * round_bf16(b.z) + wf[7] * round_bf16(b.w);
  }
}

// acc[t] += Σ_j w[j] · x[t, c*4 + j] for the 4 fp32 weights of chunk c.
template <int MT>
__device__ __forceinline__ void apply_chunk(const float4& wv, const float* __restrict__ x, int64_t m, int64_t k,
                                            int64_t c, float* acc) {
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    const float4 a = reinterpret_cast<const float4*>(x + t * k)[c];
    acc[t] += wv.x * a.x + wv.y * a.y + wv.z * a.z + wv.w * a.w;
  }
}

// Weights per 16-byte chunk: 8 bf16 or 4 fp32.
template <typename Chunk>
constexpr int64_t kPerChunk = std::is_same_v<Chunk, uint4> ? 8 : 4;

// `split` warps per output row (1, 2, 4 or 8: WARPS / split rows per block), each streaming every split-th
// 32-chunk stretch of the row; their sums meet in shared memory, added in slice order. A few rows (a
// latent projection, a router) thus still put enough loads in flight to stream at full bandwidth. Chunk is
// uint4 (bf16 weights, x rounded to bf16, optional bf16 bias) or float4 (fp32 weights, fp32 throughout, no
// bias).
template <int MT, int WARPS, typename Chunk, int split>
__global__ void __launch_bounds__(WARPS * 32)
    gemv_kernel(const float* __restrict__ x, const Chunk* __restrict__ w, const bf16_bits* __restrict__ bias,
                float* __restrict__ y, int64_t m, int64_t n, int64_t k) {
  __shared__ float part[WARPS][MT];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % split;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (WARPS / split) + warp / split;
  const int64_t per_row = k / kPerChunk<Chunk>;
  const int64_t chunks = row < n ? per_row : 0;
  const int64_t first = 32 * slice + lane, stride = 32 * split;
  const Chunk* wr = w + row * per_row;
  Chunk pre[kPrefetch] = {};
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < chunks) pre[j] = __ldg(wr + first + stride * j);
  }
  pdl_wait();
  float acc[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < chunks) apply_chunk<MT>(pre[j], x, m, k, first + stride * j, acc);
  }
#pragma unroll 4
  for (int64_t c = first + stride * kPrefetch; c < chunks; c += stride) apply_chunk<MT>(__ldg(wr + c), x, m, k, c, acc);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    const float v = warp_sum(acc[t]);
    if constexpr (split == 1) {
      if (lane == 0 && row < n) y[t * n + row] = v + (bias ? bf(bias[row]) : 0.0f);
    } else if (lane == 0) {
      part[warp][t] = v;
    }
  }
  if constexpr (split == 1) return;
  __syncthreads();
  if (slice != 0 || lane >= MT || lane >= m || row >= n) return;
  float v = 0.0f;
  for (int s = 0; s < split; ++s) v += part[warp + s][lane];
  y[lane * n + row] = v + (bias ? bf(bias[row]) : 0.0f);
}

// Four warps per block for fp32 weights: a router's few rows spread over more SMs.
constexpr int kF32Warps = 4;

template <int MT, int WARPS, typename Chunk, int SPLIT, typename W>
void launch_split(const float* x, const W* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t s, const char* name) {
  constexpr int rows = WARPS / SPLIT;
  launch_pdl(gemv_kernel<MT, WARPS, Chunk, SPLIT>, dim3(static_cast<unsigned>((n + rows - 1) / rows)), dim3(WARPS * 32),
             0, s, name, x, reinterpret_cast<const Chunk*>(w), bias, y, m, n, k);
}

// The split is a template argument: one warp per row keeps the constant stride of the plain kernel.
template <int MT, int WARPS, typename Chunk, typename W>
void launch_any(const float* x, const W* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
                cudaStream_t s, const char* name) {
  with_split<WARPS>(gemv_split(n, 1, WARPS), [&](auto split) {
    launch_split<MT, WARPS, Chunk, decltype(split)::value>(x, w, bias, y, m, n, k, s, name);
  });
}

template <int MT>
void launch(const float* x, const bf16_bits* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
            cudaStream_t s) {
  launch_any<MT, kWarps, uint4>(x, w, bias, y, m, n, k, s, "gemv");
}

template <int MT>
void launch_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  launch_any<MT, kF32Warps, float4>(x, w, static_cast<const bf16_bits*>(nullptr), y, m, n, k, s, "gemv_f32");
}

}  // namespace

bool gemv_supported(int64_t m, int64_t k) { return m >= 1 && m <= 16 && k % 8 == 0; }

void gemv(const float* x, const bf16_bits* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
          cudaStream_t s) {
  if (n == 0) return;
  if (m <= 1) {
    launch<1>(x, w, bias, y, m, n, k, s);
  } else if (m <= 2) {
    launch<2>(x, w, bias, y, m, n, k, s);
  } else if (m <= 4) {
    launch<4>(x, w, bias, y, m, n, k, s);
  } else if (m <= 8) {
    launch<8>(x, w, bias, y, m, n, k, s);
  } else {
    launch<16>(x, w, bias, y, m, n, k, s);
  }
}

bool gemv_f32_supported(int64_t m, int64_t k) { return m >= 1 && m <= 4 && k % 4 == 0; }

void gemv_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  if (n == 0) return;
  if (m <= 1) {
    launch_f32<1>(x, w, y, m, n, k, s);
  } else if (m <= 2) {
    launch_f32<2>(x, w, y, m, n, k, s);
  } else {
    launch_f32<4>(x, w, y, m, n, k, s);
  }
}

}  // namespace sy::cuda
