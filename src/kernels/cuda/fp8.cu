// Block-FP8 weights on the device as stored: the small-batch matrix-vector product (each warp streams a
// few output rows' E4M3 weights once, 16 weights per 16-byte load, each chunk widened with its block's
// scale in registers; x in bf16 as on every other product path), the dequantisation to bf16 that larger
// products hand to cuBLAS, and seeded random values for timing full-size shapes.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kPrefetch = 4;  // 16-byte chunks per lane and row in flight before the wait

// acc[r][t] += Σ_j w_r[j] · x[t, c*16 + j] for the 16 weights of chunk c of each of the warp's R rows; x
// is bf16 (rounded once by the caller), read once per chunk for all R rows.
template <int MT, int R>
__device__ __forceinline__ void apply_fp8_chunks(const uint4 (&u)[R], const float (&scale)[R],
                                                 const bf16_bits* __restrict__ x, int m, int64_t k, int64_t c,
                                                 float (&acc)[R][MT]) {
  float wf[R][16];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack16_fp8(u[r], scale[r], wf[r]);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    const uint4* xp = reinterpret_cast<const uint4*>(x + t * k + c * 16);
    float xf[16];
    unpack8(xp[0], xf);
    unpack8(xp[1], xf + 8);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) s += wf[r][j] * xf[j];
      acc[r][t] += s;
    }
  }
}

// Each group of `split` warps (1, 2, 4 or 8) owns R consecutive output rows and streams them together, chunk
// by chunk, each warp every split-th 32-chunk stretch (their sums meet in shared memory, added in slice
// order): more tokens reuse each x chunk over more rows (the x reads, not the weights, bound a one-row warp
// from a few tokens on), and few rows still put enough loads in flight.
template <int MT, int R, int split>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_fp8_kernel(const bf16_bits* __restrict__ x, const uint4* __restrict__ w, QuantView q,
                    const bf16_bits* __restrict__ bias, float* __restrict__ y, int m, int64_t n, int64_t k) {
  __shared__ float part[kWarps][R][MT];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % split;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kWarps / split) + warp / split) * R;
  const int per_row = row0 < n ? static_cast<int>(k / 16) : 0;
  const int first = 32 * slice + lane, stride = 32 * split;
  const int chunks_per_block = static_cast<int>(q.block_cols / 16);
  const uint4* wr[R];
  const float* sr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = min(row0 + r, n - 1);  // rows past n repeat the last one and are not stored
    wr[r] = w + row * per_row;
    sr[r] = fp8_row_scales(q, 0, row);
  }
  const auto load = [&](int c, uint4(&u)[R], float(&s)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      u[r] = __ldg(wr[r] + c);
      s[r] = __ldg(sr[r] + c / chunks_per_block);
    }
  };
  uint4 pre[kPrefetch][R];
  float pre_s[kPrefetch][R];
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < per_row) load(first + stride * j, pre[j], pre_s[j]);
  }
  pdl_wait();
  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[r][t] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < per_row) apply_fp8_chunks<MT, R>(pre[j], pre_s[j], x, m, k, first + stride * j, acc);
  }
  for (int c = first + stride * kPrefetch; c < per_row; c += stride) {
    uint4 u[R];
    float s[R];
    load(c, u, s);
    apply_fp8_chunks<MT, R>(u, s, x, m, k, c, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      if (t >= m) break;
      const float v = warp_sum(acc[r][t]);
      if constexpr (split == 1) {
        if (lane == 0 && row < n) y[t * n + row] = v + (bias ? bf(bias[row]) : 0.0f);
      } else if (lane == 0) {
        part[warp][r][t] = v;
      }
    }
  }
  if constexpr (split == 1) return;
  __syncthreads();
  if (slice != 0 || lane >= R * MT) return;
  const int r = lane / MT, t = lane % MT;
  const int64_t row = row0 + r;
  if (t >= m || row >= n) return;
  float v = 0.0f;
  for (int sl = 0; sl < split; ++sl) v += part[warp + sl][r][t];
  y[t * n + row] = v + (bias ? bf(bias[row]) : 0.0f);
}

template <int MT, int R, int SPLIT>
void launch_split(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
                  int64_t n, int64_t k, cudaStream_t s) {
  constexpr int64_t rows_per_block = int64_t(kWarps / SPLIT) * R;
  launch_pdl(gemv_fp8_kernel<MT, R, SPLIT>, dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block)),
             dim3(kWarps * 32), 0, s, "gemv_fp8", x, reinterpret_cast<const uint4*>(w), q, bias, y, static_cast<int>(m),
             n, k);
}

template <int MT, int R>
void launch(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
            int64_t n, int64_t k, cudaStream_t s) {
  with_split<kWarps>(gemv_split(n, R, kWarps),
                     [&](auto split) { launch_split<MT, R, decltype(split)::value>(x, w, q, bias, y, m, n, k, s); });
}

// One thread per 16 weights: one 16-byte load, two 16-byte stores.
__global__ void fp8_to_bf16_kernel(const uint4* __restrict__ w, QuantView q, int64_t rows, int64_t cols,
                                   uint4* __restrict__ out) {
  const int64_t per_row = cols / 16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = (i % per_row) * 16;
    float f[16];
    unpack16_fp8(__ldg(w + i), fp8_scale(q, 0, r, c), f);
    uint32_t p[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
      p[j] = *reinterpret_cast<const uint32_t*>(&b);
    }
    out[2 * i] = make_uint4(p[0], p[1], p[2], p[3]);
    out[2 * i + 1] = make_uint4(p[4], p[5], p[6], p[7]);
  }
}

__global__ void fill_random_fp8_kernel(uint8_t* dst, int64_t n, float* scales, int64_t n_scales, uint64_t seed,
                                       float stddev, float scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    dst[i] = __nv_cvt_float_to_fp8(stddev * random_normal_at(seed, i), __NV_SATFINITE, __NV_E4M3);
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_scales; i += stride) scales[i] = scale;
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 132 * 16)); }

}  // namespace

bool gemv_fp8_supported(int64_t m, int64_t k, const QuantView& q) {
  return m >= 1 && m <= 16 && k % 16 == 0 && q.format == WeightFormat::fp8_block && q.block_cols % 16 == 0;
}

void gemv_fp8(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t s) {
  if (n == 0) return;
  check_supported(gemv_fp8_supported(m, k, q), "gemv_fp8: needs 1 <= m <= 16, k and block_cols multiples of 16");
  if (m <= 1) {
    launch<1, 1>(x, w, q, bias, y, m, n, k, s);
  } else if (m <= 2) {
    launch<2, 2>(x, w, q, bias, y, m, n, k, s);
  } else if (m <= 4) {
    launch<4, 2>(x, w, q, bias, y, m, n, k, s);
  } else if (m <= 8) {
    launch<8, 4>(x, w, q, bias, y, m, n, k, s);
  } else {
    launch<16, 4>(x, w, q, bias, y, m, n, k, s);
  }
}

void fp8_to_bf16(const uint8_t* w, const QuantView& q, int64_t rows, int64_t cols, bf16_bits* out, cudaStream_t s) {
  check_supported(cols % 16 == 0, "fp8_to_bf16: needs cols % 16 == 0");
  if (rows * cols == 0) return;
  fp8_to_bf16_kernel<<<grid_for(rows * cols / 16), 256, 0, s>>>(reinterpret_cast<const uint4*>(w), q, rows, cols,
                                                                reinterpret_cast<uint4*>(out));
  check_launch("fp8_to_bf16");
}

void fill_random_fp8(uint8_t* dst, int64_t n, float* scales, int64_t n_scales, uint64_t seed, float stddev, float scale,
                     cudaStream_t s) {
  if (n == 0 && n_scales == 0) return;
  fill_random_fp8_kernel<<<grid_for(std::max(n, n_scales)), 256, 0, s>>>(dst, n, scales, n_scales, seed, stddev, scale);
  check_launch("fill_random_fp8");
}

}  // namespace sy::cuda
