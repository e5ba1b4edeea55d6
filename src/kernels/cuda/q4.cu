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

// acc[r][t] += Σ_j w_r[j] · x[t, c*32 + j] for the 32 weights of chunk c of each of the warp's R rows.
template <WeightFormat F, int MT, int R>
__device__ __forceinline__ void apply_q4_chunks(const uint4 (&u)[R], const float2 (&scale)[R],
                                                const bf16_bits* __restrict__ x, int m, int64_t k, int64_t c,
                                                float (&acc)[R][MT]) {
  float wf[R][32];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack32_q4<F>(u[r], scale[r], wf[r]);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= m) break;
    const uint4* xp = reinterpret_cast<const uint4*>(x + t * k + c * 32);
    float xf[32];
#pragma unroll
    for (int q = 0; q < 4; ++q) unpack8(xp[q], xf + 8 * q);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 32; ++j) s += wf[r][j] * xf[j];
      acc[r][t] += s;
    }
  }
}

template <WeightFormat F, int MT, int R>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q4_kernel(const bf16_bits* __restrict__ x, const uint4* __restrict__ w, QuantView q,
                   const bf16_bits* __restrict__ bias, float* __restrict__ y, int m, int64_t n, int64_t k) {
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  const int per_row = static_cast<int>(k / 32);
  const uint4* wr[R];
  Q4Row sr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = min(row0 + r, n - 1);  // rows past n repeat the last one and are not stored
    wr[r] = w + row * per_row;
    sr[r] = q4_row<F>(q, 0, n, row);
  }
  const auto load = [&](int c, uint4(&u)[R], float2(&s)[R]) {
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
    if (lane + 32 * j < per_row) load(lane + 32 * j, pre[j], pre_s[j]);
  }
  pdl_wait();
  if (row0 >= n) return;
  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[r][t] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    if (lane + 32 * j < per_row) apply_q4_chunks<F, MT, R>(pre[j], pre_s[j], x, m, k, lane + 32 * j, acc);
  }
  for (int c = lane + 32 * kPrefetch; c < per_row; c += 32) {
    uint4 u[R];
    float2 s[R];
    load(c, u, s);
    apply_q4_chunks<F, MT, R>(u, s, x, m, k, c, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      if (t >= m) break;
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && row < n) y[t * n + row] = v + (bias ? bf(bias[row]) : 0.0f);
    }
  }
}

template <WeightFormat F, int MT, int R>
void launch(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
            int64_t n, int64_t k, cudaStream_t s) {
  const int64_t rows_per_block = int64_t(kWarps) * R;
  launch_pdl(gemv_q4_kernel<F, MT, R>, dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block)),
             dim3(kWarps * 32), 0, s, "gemv_q4", x, reinterpret_cast<const uint4*>(w), q, bias, y, static_cast<int>(m),
             n, k);
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
