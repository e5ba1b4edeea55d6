// Element-wise and per-row CUDA kernels: conversions, bias, norms (RMS and layer norm), embedding,
// SiLU·mul, rope, random fill, row gather / scatter-add, the element-wise sum.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int threads = kThreads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__global__ void fill_random_kernel(bf16_bits* dst, int64_t n, uint64_t seed, float mean, float stddev) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = to_bf(mean + stddev * random_normal_at(seed, i));
  }
}

// With `vectors` (x and y 16-byte aligned) eight elements per thread and step: two 16-byte loads in
// flight and one 16-byte store (one 4-byte load per thread left the copy at a fraction of the
// bandwidth); the n % 8 tail, or everything otherwise, one element at a time.
__global__ void f32_to_bf16_kernel(const float* __restrict__ x, bf16_bits* __restrict__ y, int64_t n, bool vectors) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vectors) {
    const auto pack = [](float lo, float hi) { return uint32_t{to_bf(lo)} | (uint32_t{to_bf(hi)} << 16); };
    const int64_t chunks = n / 8;
    for (int64_t i = first; i < chunks; i += stride) {
      const float4 a = reinterpret_cast<const float4*>(x)[2 * i], b = reinterpret_cast<const float4*>(x)[2 * i + 1];
      reinterpret_cast<uint4*>(y)[i] = make_uint4(pack(a.x, a.y), pack(a.z, a.w), pack(b.x, b.y), pack(b.z, b.w));
    }
    done = chunks * 8;
  }
  for (int64_t i = done + first; i < n; i += stride) y[i] = to_bf(x[i]);
}

__global__ void add_bias_kernel(float* y, const bf16_bits* bias, int64_t m, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < m * n) y[i] += bf(bias[i % n]);
}

// One block per row. With residual != nullptr: residual += x first, and the sum is normalised.
// Threads is chosen so that a row takes few strides: at decode the kernel is one block, whose time is
// the latency of its dependent strides.
template <int Threads>
__global__ void __launch_bounds__(Threads)
    rms_norm_kernel(float* residual, const float* x, const bf16_bits* weight, float* y, int64_t dim, float eps) {
  __shared__ float reduce[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const float* in = x + row * dim;
  float* res = residual ? residual + row * dim : nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = in[i];
    if (res) {
      v += res[i];
      res[i] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_reduce<Threads>(ss, false, reduce) / static_cast<float>(dim) + eps);
  const float* src = res ? res : in;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[row * dim + i] = src[i] * inv * bf(weight[i]);
}

__global__ void embedding_kernel(const bf16_bits* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= tokens * dim) return;
  const int64_t t = i / dim, d = i % dim;
  out[i] = bf(table[static_cast<int64_t>(ids[t]) * dim + d]);
}

__global__ void silu_mul_kernel(const float* gate_up, float* out, int64_t rows, int64_t inter) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * inter) return;
  const int64_t r = i / inter, c = i % inter;
  const float g = gate_up[r * 2 * inter + c], u = gate_up[r * 2 * inter + inter + c];
  out[i] = g / (1.0f + expf(-g)) * u;
}

// One thread per (token, head, pair).
__global__ void rope_kernel(RopeArgs p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t half = p.rotary_dim / 2;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * p.heads * half) return;
  const int64_t t = i / (p.heads * half), h = (i / half) % p.heads, j = i % half;
  const float angle = static_cast<float>(p.positions[t]) * p.inv_freq[j];
  float sn, cs;
  sincosf(angle, &sn, &cs);
  cs *= p.attention_scale;
  sn *= p.attention_scale;
  float* head = p.x + (t * p.heads + h) * p.head_dim;
  const int64_t ia = p.interleaved ? 2 * j : j, ib = p.interleaved ? 2 * j + 1 : j + half;
  const float a = head[ia], b = head[ib];
  head[ia] = a * cs - b * sn;
  head[ib] = b * cs + a * sn;
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n * dim) return;
  dst[i] = src[static_cast<int64_t>(rows[i / dim]) * dim + i % dim];
}

// One thread per column, rows in order: deterministic, and correct when a destination row repeats.
__global__ void scatter_add_rows_kernel(float* dst, const int32_t* rows, const float* weights, const float* src,
                                        int64_t n, int64_t dim) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= dim) return;
  for (int64_t i = 0; i < n; ++i) {
    const float w = weights ? weights[i] : 1.0f;
    dst[static_cast<int64_t>(rows[i]) * dim + j] += w * src[i * dim + j];
  }
}

constexpr int kRowThreads = 128;

// Layer norm, one block per row.
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_kernel(const float* x, const bf16_bits* weight, const bf16_bits* bias, float* y, int64_t dim,
                      float eps) {
  __shared__ float reduce[32];
  const float* in = x + blockIdx.x * dim;
  float* o = y + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += in[i];
  const float mean = block_reduce<kRowThreads>(sum, false, reduce) / static_cast<float>(dim);
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) var += (in[i] - mean) * (in[i] - mean);
  const float inv = rsqrtf(block_reduce<kRowThreads>(var, false, reduce) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = (in[i] - mean) * inv * bf(weight[i]) + bf(bias[i]);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

// Block (row, part): the part's columns of the row, float4 at a time where every width is a multiple of 4.
template <bool kVec>
__global__ void split_columns_kernel(ColumnSplit a) {
  const int64_t r = blockIdx.x;
  const int part = static_cast<int>(blockIdx.y);
  const int64_t width = a.width[part];
  const int64_t offset = part == 0 ? 0 : (part == 1 ? a.width[0] : a.width[0] + a.width[1]);
  const float* src = a.src + r * (a.width[0] + a.width[1] + a.width[2]) + offset;
  float* dst = a.dst[part] + r * width;
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x; i < width / 4; i += blockDim.x)
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

void split_columns(const ColumnSplit& a, cudaStream_t s) {
  if (a.rows == 0) return;
  const bool vec = a.width[0] % 4 == 0 && a.width[1] % 4 == 0 && a.width[2] % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(a.src) % 16 == 0 && reinterpret_cast<uintptr_t>(a.dst[0]) % 16 == 0 &&
                   (a.width[1] == 0 || reinterpret_cast<uintptr_t>(a.dst[1]) % 16 == 0) &&
                   (a.width[2] == 0 || reinterpret_cast<uintptr_t>(a.dst[2]) % 16 == 0);
  const dim3 grid(static_cast<unsigned>(a.rows), 3);
  if (vec) {
    split_columns_kernel<true><<<grid, 256, 0, s>>>(a);
  } else {
    split_columns_kernel<false><<<grid, 256, 0, s>>>(a);
  }
  check_launch("split_columns");
}

void fill_random_normal_bf16(bf16_bits* dst, int64_t n, uint64_t seed, float mean, float stddev, cudaStream_t s) {
  if (n == 0) return;
  fill_random_kernel<<<std::min<unsigned>(blocks_for(n), 132 * 16), kThreads, 0, s>>>(dst, n, seed, mean, stddev);
  check_launch("fill_random_normal_bf16");
}

void f32_to_bf16(const float* x, bf16_bits* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const bool vectors = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  const unsigned blocks = blocks_for(vectors ? std::max<int64_t>(n / 8, 1) : n);
  f32_to_bf16_kernel<<<std::min<unsigned>(blocks, 132 * 16), kThreads, 0, s>>>(x, y, n, vectors);
  check_launch("f32_to_bf16");
}

void add_bias(float* y, const bf16_bits* bias, int64_t m, int64_t n, cudaStream_t s) {
  if (m * n == 0) return;
  add_bias_kernel<<<blocks_for(m * n), kThreads, 0, s>>>(y, bias, m, n);
  check_launch("add_bias");
}

namespace {
void launch_rms_norm(float* residual, const float* x, const bf16_bits* weight, float* y, int64_t rows, int64_t dim,
                     float eps, cudaStream_t s, const char* name) {
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows));
  if (dim >= 2048) {
    launch_pdl(rms_norm_kernel<1024>, grid, dim3(1024), 0, s, name, residual, x, weight, y, dim, eps);
  } else if (dim >= 512) {
    launch_pdl(rms_norm_kernel<256>, grid, dim3(256), 0, s, name, residual, x, weight, y, dim, eps);
  } else {
    launch_pdl(rms_norm_kernel<128>, grid, dim3(128), 0, s, name, residual, x, weight, y, dim, eps);
  }
}
}  // namespace

void rms_norm(const float* x, const bf16_bits* weight, float* y, int64_t rows, int64_t dim, float eps, cudaStream_t s) {
  launch_rms_norm(nullptr, x, weight, y, rows, dim, eps, s, "rms_norm");
}

void add_rms_norm(float* residual, const float* x, const bf16_bits* weight, float* y, int64_t rows, int64_t dim,
                  float eps, cudaStream_t s) {
  launch_rms_norm(residual, x, weight, y, rows, dim, eps, s, "add_rms_norm");
}

void embedding(const bf16_bits* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim, cudaStream_t s) {
  if (tokens * dim == 0) return;
  embedding_kernel<<<blocks_for(tokens * dim), kThreads, 0, s>>>(table, ids, out, tokens, dim);
  check_launch("embedding");
}

void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter, cudaStream_t s) {
  if (rows * inter == 0) return;
  silu_mul_kernel<<<blocks_for(rows * inter), kThreads, 0, s>>>(gate_up, out, rows, inter);
  check_launch("silu_mul");
}

void rope(const RopeArgs& p, cudaStream_t s) {
  const int64_t n = p.tokens * p.heads * (p.rotary_dim / 2);
  if (n == 0) return;
  launch_pdl(rope_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, s, "rope", p);
}

void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim, cudaStream_t s) {
  if (n * dim == 0) return;
  gather_rows_kernel<<<blocks_for(n * dim), kThreads, 0, s>>>(src, rows, dst, n, dim);
  check_launch("gather_rows");
}

void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t dim,
                      cudaStream_t s) {
  if (n * dim == 0) return;
  scatter_add_rows_kernel<<<blocks_for(dim), kThreads, 0, s>>>(dst, rows, weights, src, n, dim);
  check_launch("scatter_add_rows");
}

void layer_norm(const float* x, const bf16_bits* weight, const bf16_bits* bias, float* y, int64_t rows, int64_t dim,
                float eps, cudaStream_t s) {
  if (rows == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(x, weight, bias, y, dim, eps);
  check_launch("layer_norm");
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 16));
  add_kernel<<<blocks, 256, 0, s>>>(y, x, n);
  check_launch("add");
}

}  // namespace sy::cuda
