// Small-batch matrix product y[m, n] = x[m, k] · w[n, k]^T (+ bias) for m <= 16: one warp per output
// row streams that row of bf16 weights once with 16-byte loads and applies it to every token, so the
// weights are read once at close to full bandwidth (cuBLAS tiles leave most SMs idle at m = 1).
// x is rounded to bf16 first, as on the cuBLAS path, so both paths compute the same products.
#include <cuda_bf16.h>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;

template <int MT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const uint4* __restrict__ w, const bf16_bits* __restrict__ bias,
                float* __restrict__ y, int64_t m, int64_t n, int64_t k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= n) return;
  const int64_t chunks = k / 8;
  const uint4* wr = w + row * chunks;
  float acc[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < chunks; c += 32) {
    const uint4 u = wr[c];
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
    float wf[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      wf[2 * i] = __uint_as_float(words[i] << 16);
      wf[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      if (t >= m) break;
      const float4* xp = reinterpret_cast<const float4*>(x + t * k + c * 8);
      const float4 a = xp[0], b = xp[1];
      acc[t] += wf[0] * round_bf16(a.x) + wf[1] * round_bf16(a.y) + wf[2] * round_bf16(a.z) +
                wf[3] * round_bf16(a.w) + wf[4] * round_bf16(b.x) + wf[5] * round_bf16(b.y) +
                wf[6] * round_bf16(b.z) + wf[7] * round_bf16(b.w);
    }
  }
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    float v = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[t * n + row] = v + (bias ? __uint_as_float(static_cast<uint32_t>(bias[row]) << 16) : 0.0f);
  }
}

template <int MT>
void launch(const float* x, const bf16_bits* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
            cudaStream_t s) {
  gemv_kernel<MT><<<static_cast<unsigned>((n + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
      x, reinterpret_cast<const uint4*>(w), bias, y, m, n, k);
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
  check_launch("gemv");
}

}  // namespace sy::cuda
