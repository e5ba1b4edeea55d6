// 4-bit weights on the device as stored (QuantView int4_group, nvfp4): the small-batch matrix-vector
// product (each warp streams a few output rows once, 32 weights per 16-byte load, widened with their group
// scales in registers; x in bf16 as on every other product path), the dequantisation to bf16 that larger
// products hand to cuBLAS, and seeded random values for timing full-size shapes.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/q4.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kPrefetch = 2;  // 16-byte chunks per lane and row in flight before the wait

// Largest x staged in shared memory by the GEMV (m · k bf16); past it lanes read x from global memory.
constexpr size_t kMaxStagedX = 64 * 1024;

// acc[r][t] += Σ_j w_r[j] · x[t, c*32 + j] for the 32 weights of chunk c of each of the warp's R rows; x from
// global memory, or (x_s) staged as bf16 pairs, pair q2 of chunk c of token t at word (t·16 + q2)·chunks + c.
template <WeightFormat F, int MT, int R>
__device__ __forceinline__ void apply_q4_chunks(const uint4 (&u)[R], const float2 (&scale)[R],
                                                const bf16_bits* __restrict__ x, const uint32_t* x_s, int64_t chunks,
                                                int m, int64_t k, int64_t c, float (&acc)[R][MT]) {
  float wf[R][32];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack32_q4<F>(u[r], scale[r], wf[r]);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    float xf[32];
    if (x_s != nullptr) {
#pragma unroll
      for (int q2 = 0; q2 < 16; ++q2) {
        const uint32_t pair = x_s[(t * 16 + q2) * chunks + c];
        xf[2 * q2] = __uint_as_float(pair << 16);
        xf[2 * q2 + 1] = __uint_as_float(pair & 0xffff0000u);
      }
    } else {
      const uint4* xp = reinterpret_cast<const uint4*>(x + t * k + c * 32);
#pragma unroll
      for (int q = 0; q < 4; ++q) unpack8(xp[q], xf + 8 * q);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 32; ++j) s += wf[r][j] * xf[j];
      acc[r][t] += s;
    }
  }
}

// `split` warps (1, 2, 4 or 8) per group of R rows, each streaming every split-th 32-chunk stretch; their sums
// meet in shared memory, added in slice order. kStaged: x is first staged in shared memory (a lane's 32
// weights need 64 bytes of x, which from global memory cost more L1 traffic than the weights themselves).
template <WeightFormat F, int MT, int R, bool kStaged, int split>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q4_kernel(const bf16_bits* __restrict__ x, const uint4* __restrict__ w, QuantView q,
                   const bf16_bits* __restrict__ bias, float* __restrict__ y, int m, int64_t n, int64_t k) {
  extern __shared__ uint32_t x_s[];
  __shared__ float part[kWarps][R][MT];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % split;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kWarps / split) + warp / split) * R;
  const int64_t per_row = k / 32, chunks = row0 < n ? per_row : 0;
  const int64_t first = 32 * slice + lane, stride = 32 * split;
  const uint4* wr[R];
  Q4Row sr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = min(row0 + r, n - 1);  // rows past n repeat the last one and are not stored
    wr[r] = w + row * per_row;
    sr[r] = q4_row<F>(q, 0, n, row);
  }
  const auto load = [&](int64_t c, uint4(&u)[R], float2(&s)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      u[r] = __ldg(wr[r] + c);
      s[r] = q4_chunk_scales<F>(sr[r], q.block_cols, c);
    }
  };
  uint4 pre[kPrefetch][R];
  float2 pre_s[kPrefetch][R];
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < chunks) load(first + stride * j, pre[j], pre_s[j]);
  }
  pdl_wait();
  if constexpr (kStaged) {
    for (int64_t i = threadIdx.x; i < m * k / 8; i += blockDim.x) {
      const uint4 v = reinterpret_cast<const uint4*>(x)[i];
      const int64_t t = 8 * i / k, h = 8 * i % k, c = h / 32, q2 = h % 32 / 2;
      uint32_t* dst = x_s + (t * 16 + q2) * per_row + c;
      dst[0] = v.x;
      dst[per_row] = v.y;
      dst[2 * per_row] = v.z;
      dst[3 * per_row] = v.w;
    }
    __syncthreads();
  }
  const uint32_t* xs = kStaged ? x_s : nullptr;
  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[r][t] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (first + stride * j < chunks) {
      apply_q4_chunks<F, MT, R>(pre[j], pre_s[j], x, xs, per_row, m, k, first + stride * j, acc);
    }
  }
  for (int64_t c = first + stride * kPrefetch; c < chunks; c += stride) {
    uint4 u[R];
    float2 s[R];
    load(c, u, s);
    apply_q4_chunks<F, MT, R>(u, s, x, xs, per_row, m, k, c, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      if (t >= m) break;
      const float v = warp_sum(acc[r][t]);
      const int64_t row = row0 + r;
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

template <WeightFormat F, int MT, int R, int SPLIT>
void launch_split(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
                  int64_t n, int64_t k, cudaStream_t s) {
  constexpr int64_t rows_per_block = int64_t(kWarps / SPLIT) * R;
  const dim3 grid(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block));
  const size_t staged = static_cast<size_t>(m * k) * sizeof(bf16_bits);
  if (staged <= kMaxStagedX) {
    static bool configured = false;
    if (!configured) {
      check_cuda(cudaFuncSetAttribute(gemv_q4_kernel<F, MT, R, true, SPLIT>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxStagedX)),
                 "cudaFuncSetAttribute(gemv_q4)");
      configured = true;
    }
    launch_pdl(gemv_q4_kernel<F, MT, R, true, SPLIT>, grid, dim3(kWarps * 32), staged, s, "gemv_q4", x,
               reinterpret_cast<const uint4*>(w), q, bias, y, static_cast<int>(m), n, k);
  } else {
    launch_pdl(gemv_q4_kernel<F, MT, R, false, SPLIT>, grid, dim3(kWarps * 32), 0, s, "gemv_q4", x,
               reinterpret_cast<const uint4*>(w), q, bias, y, static_cast<int>(m), n, k);
  }
}

template <WeightFormat F, int MT, int R>
void launch(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
            int64_t n, int64_t k, cudaStream_t s) {
  with_split<kWarps>(gemv_split(n, R, kWarps),
                     [&](auto split) { launch_split<F, MT, R, decltype(split)::value>(x, w, q, bias, y, m, n, k, s); });
}

template <WeightFormat F>
void gemv_q4_as(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
                int64_t n, int64_t k, cudaStream_t s) {
  if (m <= 1) {
    launch<F, 1, 2>(x, w, q, bias, y, m, n, k, s);
  } else if (m <= 2) {
    launch<F, 2, 2>(x, w, q, bias, y, m, n, k, s);
  } else {
    launch<F, 4, 2>(x, w, q, bias, y, m, n, k, s);
  }
}

// One thread per 32 weights: one 16-byte load, four 16-byte stores.
template <WeightFormat F>
__global__ void q4_to_bf16_kernel(const uint4* __restrict__ w, QuantView q, int64_t rows, int64_t cols,
                                  uint4* __restrict__ out) {
  const int64_t per_row = cols / 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row;
    float f[32];
    unpack32_q4<F>(__ldg(w + i), q4_chunk_scales<F>(q4_row<F>(q, 0, rows, r), q.block_cols, c), f);
#pragma unroll
    for (int o = 0; o < 4; ++o) out[4 * i + o] = pack8_bf16(f + 8 * o);
  }
}

__global__ void fill_random_q4_kernel(RandomQ4Args a, uint16_t group_bits) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  auto* bytes = static_cast<uint8_t*>(a.dst);
  for (int64_t i = first; i < a.n_bytes; i += stride) {
    bytes[i] = static_cast<uint8_t>(mix64(a.seed ^ mix64(static_cast<uint64_t>(i))) >> 24);
  }
  for (int64_t i = first; i < a.n_groups; i += stride) {
    if (a.format == WeightFormat::int4_group) {
      static_cast<uint16_t*>(a.group_scales)[i] = group_bits;
    } else {
      static_cast<uint8_t*>(a.group_scales)[i] = static_cast<uint8_t>(group_bits);
    }
  }
  for (int64_t i = first; i < a.n_rows; i += stride) a.row_scales[i] = a.row_scale;
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 132 * 16)); }

}  // namespace

bool gemv_q4_supported(int64_t m, int64_t k, const QuantView& q) {
  return m >= 1 && m <= 4 && k % 32 == 0 && q.four_bit() && q.block_cols % 16 == 0;
}

void gemv_q4(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
             int64_t n, int64_t k, cudaStream_t s) {
  if (n == 0) return;
  check_supported(gemv_q4_supported(m, k, q), "gemv_q4: needs 1 <= m <= 4, k % 32 == 0 and groups of 16k columns");
  if (q.format == WeightFormat::int4_group) return gemv_q4_as<WeightFormat::int4_group>(x, w, q, bias, y, m, n, k, s);
  gemv_q4_as<WeightFormat::nvfp4>(x, w, q, bias, y, m, n, k, s);
}

void q4_to_bf16(const uint8_t* w, const QuantView& q, int64_t rows, int64_t cols, bf16_bits* out, cudaStream_t s) {
  check_supported(cols % 32 == 0 && q.four_bit(), "q4_to_bf16: needs a 4-bit matrix with cols % 32 == 0");
  if (rows * cols == 0) return;
  const auto* in = reinterpret_cast<const uint4*>(w);
  auto* o = reinterpret_cast<uint4*>(out);
  const unsigned grid = grid_for(rows * cols / 32);
  if (q.format == WeightFormat::int4_group) {
    q4_to_bf16_kernel<WeightFormat::int4_group><<<grid, 256, 0, s>>>(in, q, rows, cols, o);
  } else {
    q4_to_bf16_kernel<WeightFormat::nvfp4><<<grid, 256, 0, s>>>(in, q, rows, cols, o);
  }
  check_launch("q4_to_bf16");
}

void fill_random_q4(const RandomQ4Args& a, cudaStream_t s) {
  const int64_t n = std::max({a.n_bytes, a.n_groups, a.n_rows});
  if (n == 0) return;
  check_supported(a.format == WeightFormat::int4_group || a.format == WeightFormat::nvfp4,
                  "fill_random_q4: needs a 4-bit format");
  uint16_t bits = 0;
  if (a.format == WeightFormat::int4_group) {
    bits = __bfloat16_as_ushort(__float2bfloat16_rn(a.group_scale));
  } else {
    bits = __nv_cvt_float_to_fp8(a.group_scale, __NV_SATFINITE, __NV_E4M3);
  }
  fill_random_q4_kernel<<<grid_for(n), 256, 0, s>>>(a, bits);
  check_launch("fill_random_q4");
}

}  // namespace sy::cuda
