// Routed experts for a few (token, expert) pairs as GEMVs that stream each pair's bf16 expert weights
// with 16-byte loads, many in flight per lane: SiLU·mul fused into the gate/up pass, the fixed-order
// weighted combine fused into the down pass. Two launches, both programmatic dependents; no host round
// trip.
#include <cuda_bf16.h>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kGateUpBatch = 8;  // 16-byte chunks of each of the gate and up rows per lane in flight
constexpr int kDownPairs = 4;    // pairs whose down rows a warp streams together
constexpr int kDownBatch = 4;    // 16-byte chunks per pair and lane in flight

// One warp per intermediate row i of one (token, expert) pair: gate and up rows together.
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_kernel(MoeExpertsArgs p, float* act) {
  extern __shared__ float x_s[];  // [hidden]
  pdl_launch_dependents();
  pdl_wait();  // the expert ids and x come from the previous kernels
  const int64_t pair = blockIdx.y, t = pair / p.top_k;
  const int64_t e = p.expert_ids[pair];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t chunks = i < p.inter ? p.hidden / 8 : 0;
  const bf16_bits* base = bf16_storage(p.gate_up) + e * 2 * p.inter * p.hidden;
  const uint4* g_row = reinterpret_cast<const uint4*>(base + i * p.hidden);
  const uint4* u_row = reinterpret_cast<const uint4*>(base + (p.inter + i) * p.hidden);
  uint4 gw[kGateUpBatch] = {}, uw[kGateUpBatch] = {};
  const auto load = [&](int64_t c0) {
#pragma unroll
    for (int j = 0; j < kGateUpBatch; ++j) {
      const int64_t c = c0 + 32 * j;
      if (c < chunks) {
        gw[j] = __ldg(g_row + c);
        uw[j] = __ldg(u_row + c);
      }
    }
  };
  load(lane);  // in flight while x is staged
  // Inputs rounded to bf16, as cuBLAS is fed on the grouped path and as the cpu-bf16 oracle does.
  for (int64_t h = threadIdx.x; h < p.hidden; h += blockDim.x) x_s[h] = round_bf16(p.x[t * p.hidden + h]);
  __syncthreads();
  if (i >= p.inter) return;
  float g = 0.0f, u = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kGateUpBatch) {
    if (c0 != lane) load(c0);
#pragma unroll
    for (int j = 0; j < kGateUpBatch; ++j) {
      const int64_t c = c0 + 32 * j;
      if (c >= chunks) break;
      float gf[8], uf[8];
      unpack8(gw[j], gf);
      unpack8(uw[j], uf);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        g += gf[q] * x_s[c * 8 + q];
        u += uf[q] * x_s[c * 8 + q];
      }
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) act[pair * p.inter + i] = g / (1.0f + __expf(-g)) * u;
}

// One warp per hidden row j of one token: y_k = down[e_k][j, :] · bf16(act[t·K + k]) for each of the
// token's pairs k, then out[t, j] = Σ_k weights[t, k] · y_k with k in order (the combine).
__global__ void __launch_bounds__(kWarps * 32) moe_down_combine_kernel(MoeExpertsArgs p, const float* act) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (j >= p.hidden) return;
  const int64_t chunks = p.inter / 8;
  float s = 0.0f;
  for (int64_t k0 = 0; k0 < p.top_k; k0 += kDownPairs) {
    const uint4* rows[kDownPairs];
    const float* acts[kDownPairs];
#pragma unroll
    for (int q = 0; q < kDownPairs; ++q) {
      const int64_t pair = t * p.top_k + min(k0 + q, p.top_k - 1);
      rows[q] = reinterpret_cast<const uint4*>(bf16_storage(p.down) +
                                               (static_cast<int64_t>(p.expert_ids[pair]) * p.hidden + j) * p.inter);
      acts[q] = act + pair * p.inter;
    }
    float y[kDownPairs] = {};
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kDownBatch) {
      uint4 w[kDownPairs][kDownBatch] = {};
#pragma unroll
      for (int q = 0; q < kDownPairs; ++q) {
#pragma unroll
        for (int b = 0; b < kDownBatch; ++b) {
          if (k0 + q < p.top_k && c0 + 32 * b < chunks) w[q][b] = __ldg(rows[q] + c0 + 32 * b);
        }
      }
#pragma unroll
      for (int q = 0; q < kDownPairs; ++q) {
        if (k0 + q >= p.top_k) break;
#pragma unroll
        for (int b = 0; b < kDownBatch; ++b) {
          const int64_t c = c0 + 32 * b;
          if (c >= chunks) break;
          float wf[8];
          unpack8(w[q][b], wf);
          const float4 a0 = reinterpret_cast<const float4*>(acts[q] + c * 8)[0];
          const float4 a1 = reinterpret_cast<const float4*>(acts[q] + c * 8)[1];
          const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
          for (int r = 0; r < 8; ++r) y[q] += wf[r] * round_bf16(a[r]);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kDownPairs; ++q) {
      if (k0 + q >= p.top_k) break;
      s += p.weights[t * p.top_k + k0 + q] * warp_sum(y[q]);
    }
  }
  if (lane == 0) p.out[t * p.hidden + j] = s;
}

}  // namespace

bool moe_small_batch_supported(int64_t hidden, int64_t inter) { return hidden % 8 == 0 && inter % 8 == 0; }

void moe_small_batch(const MoeExpertsArgs& p, float* act, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  if (pairs == 0) return;
  launch_pdl(moe_gate_up_kernel,
             dim3(static_cast<unsigned>((p.inter + kWarps - 1) / kWarps), static_cast<unsigned>(pairs)),
             dim3(kWarps * 32), static_cast<size_t>(p.hidden) * sizeof(float), s, "moe_gate_up", p, act);
  launch_pdl(moe_down_combine_kernel,
             dim3(static_cast<unsigned>((p.hidden + kWarps - 1) / kWarps), static_cast<unsigned>(p.tokens)),
             dim3(kWarps * 32), 0, s, "moe_down_combine", p, static_cast<const float*>(act));
}

}  // namespace sy::cuda
