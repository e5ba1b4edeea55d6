// Routed experts for a few (token, expert) pairs as GEMVs that stream each pair's bf16 expert weights
// with 16-byte loads, SiLU·mul fused into the gate/up pass, then a fixed-order weighted combine. No
// host round trip.
#include <cuda_bf16.h>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;

// One warp per intermediate row i of one (token, expert) pair: gate and up rows together.
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_kernel(MoeSmallBatchParams p) {
  extern __shared__ float x_s[];  // [hidden]
  const int64_t pair = blockIdx.y, t = pair / p.top_k;
  const int64_t e = p.expert_ids[pair];
  // Inputs rounded to bf16, as cuBLAS is fed on the grouped path and as the cpu-bf16 oracle does.
  for (int64_t i = threadIdx.x; i < p.hidden; i += blockDim.x) x_s[i] = round_bf16(p.x[t * p.hidden + i]);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (i >= p.inter) return;
  const bf16_bits* base = p.gate_up + e * 2 * p.inter * p.hidden;
  const uint4* g_row = reinterpret_cast<const uint4*>(base + i * p.hidden);
  const uint4* u_row = reinterpret_cast<const uint4*>(base + (p.inter + i) * p.hidden);
  float g = 0.0f, u = 0.0f;
  for (int64_t c = lane; c < p.hidden / 8; c += 32) {
    float gw[8], uw[8];
    unpack8(g_row[c], gw);
    unpack8(u_row[c], uw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      g += gw[j] * x_s[c * 8 + j];
      u += uw[j] * x_s[c * 8 + j];
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) p.act[pair * p.inter + i] = g / (1.0f + __expf(-g)) * u;
}

// One warp per hidden row j of one pair: y[pair, j] = down[e][j, :] · act[pair].
__global__ void __launch_bounds__(kWarps * 32) moe_down_kernel(MoeSmallBatchParams p) {
  extern __shared__ float a_s[];  // [inter]
  const int64_t pair = blockIdx.y;
  const int64_t e = p.expert_ids[pair];
  for (int64_t i = threadIdx.x; i < p.inter; i += blockDim.x) a_s[i] = round_bf16(p.act[pair * p.inter + i]);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (j >= p.hidden) return;
  const uint4* row = reinterpret_cast<const uint4*>(p.down + (e * p.hidden + j) * p.inter);
  float y = 0.0f;
  for (int64_t c = lane; c < p.inter / 8; c += 32) {
    float w[8];
    unpack8(row[c], w);
#pragma unroll
    for (int k = 0; k < 8; ++k) y += w[k] * a_s[c * 8 + k];
  }
  y = warp_sum(y);
  if (lane == 0) p.y[pair * p.hidden + j] = y;
}

// out[t, j] = Σ_k weights[t, k] · y[t·K + k, j], k in order.
__global__ void moe_combine_kernel(MoeSmallBatchParams p) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * p.hidden) return;
  const int64_t t = i / p.hidden, j = i % p.hidden;
  float s = 0.0f;
  for (int64_t k = 0; k < p.top_k; ++k) s += p.weights[t * p.top_k + k] * p.y[(t * p.top_k + k) * p.hidden + j];
  p.out[i] = s;
}

}  // namespace

bool moe_small_batch_supported(int64_t hidden, int64_t inter) { return hidden % 8 == 0 && inter % 8 == 0; }

void moe_small_batch(const MoeSmallBatchParams& p, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  if (pairs == 0) return;
  moe_gate_up_kernel<<<dim3(static_cast<unsigned>((p.inter + kWarps - 1) / kWarps), static_cast<unsigned>(pairs)),
                       kWarps * 32, static_cast<size_t>(p.hidden) * sizeof(float), s>>>(p);
  check_launch("moe_gate_up");
  moe_down_kernel<<<dim3(static_cast<unsigned>((p.hidden + kWarps - 1) / kWarps), static_cast<unsigned>(pairs)),
                    kWarps * 32, static_cast<size_t>(p.inter) * sizeof(float), s>>>(p);
  check_launch("moe_down");
  const int64_t n = p.tokens * p.hidden;
  moe_combine_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(p);
  check_launch("moe_combine");
}

}  // namespace sy::cuda
