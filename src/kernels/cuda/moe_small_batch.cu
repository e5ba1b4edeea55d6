// Routed experts for a few (token, expert) pairs as GEMVs that stream each pair's expert weights (bf16,
// or block FP8 as stored) with 16-byte loads, many in flight per lane: SiLU·mul fused into the gate/up
// pass, the fixed-order weighted combine fused into the down pass. Two launches, both programmatic
// dependents; no host round trip.
#include <cuda_bf16.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kGateUpBatch = 8;  // 16-byte chunks of each of the gate and up rows per lane in flight
constexpr int kDownPairs = 4;    // pairs whose down rows a warp streams together
constexpr int kDownBatch = 4;    // 16-byte chunks per pair and lane in flight

// An expert array [n_experts, rows, cols] as the kernels stream it: 16-byte chunks of kPer weights.
struct Bf16Experts {
  static constexpr int kPer = 8;
  const bf16_bits* w;
  int64_t rows, cols;
  __device__ const uint4* row(int64_t e, int64_t r) const {
    return reinterpret_cast<const uint4*>(w + (e * rows + r) * cols);
  }
  // What unpack needs of row r of expert e besides its chunks (bf16: nothing).
  __device__ const float* row_scales(int64_t e, int64_t r) const {
    (void)e, (void)r;
    return nullptr;
  }
  // The weights of chunk c of a row.
  __device__ void unpack(const uint4& u, const float* scales, int c, float* f) const {
    (void)scales, (void)c;
    unpack8(u, f);
  }
};
struct Fp8Experts {
  static constexpr int kPer = 16;
  const uint8_t* w;
  int64_t rows, cols;
  QuantView q;
  __device__ const uint4* row(int64_t e, int64_t r) const {
    return reinterpret_cast<const uint4*>(w + (e * rows + r) * cols);
  }
  __device__ const float* row_scales(int64_t e, int64_t r) const { return fp8_row_scales(q, e, r); }
  __device__ void unpack(const uint4& u, const float* scales, int c, float* f) const {
    unpack16_fp8(u, __ldg(scales + c / chunks_per_block), f);
  }
  int chunks_per_block;  // block_cols / 16
};

// One warp per intermediate row i of one (token, expert) pair: gate and up rows together.
template <typename W>
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_kernel(MoeExpertsArgs p, W gu, float* act) {
  // [kPer][hidden / kPer]: element q of chunk c at q * chunks + c, so that the lanes of a warp, which read
  // consecutive chunks, read consecutive words (x[c * kPer + q] would put every lane on a few banks).
  extern __shared__ float x_s[];
  pdl_launch_dependents();
  pdl_wait();  // the expert ids and x come from the previous kernels
  const int64_t pair = blockIdx.y, t = pair / p.top_k;
  const int64_t e = p.expert_ids[pair];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t chunks = i < p.inter ? p.hidden / W::kPer : 0;
  const uint4* g_row = gu.row(e, i);
  const uint4* u_row = gu.row(e, p.inter + i);
  const float* g_scales = gu.row_scales(e, i);
  const float* u_scales = gu.row_scales(e, p.inter + i);
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
  const int64_t x_chunks = p.hidden / W::kPer;
  for (int64_t h = threadIdx.x; h < p.hidden; h += blockDim.x) {
    x_s[(h % W::kPer) * x_chunks + h / W::kPer] = round_bf16(p.x[t * p.hidden + h]);
  }
  __syncthreads();
  if (i >= p.inter) return;
  float g = 0.0f, u = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kGateUpBatch) {
    if (c0 != lane) load(c0);
#pragma unroll
    for (int j = 0; j < kGateUpBatch; ++j) {
      const int64_t c = c0 + 32 * j;
      if (c >= chunks) break;
      float gf[W::kPer], uf[W::kPer];
      gu.unpack(gw[j], g_scales, static_cast<int>(c), gf);
      gu.unpack(uw[j], u_scales, static_cast<int>(c), uf);
#pragma unroll
      for (int q = 0; q < W::kPer; ++q) {
        g += gf[q] * x_s[q * x_chunks + c];
        u += uf[q] * x_s[q * x_chunks + c];
      }
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) act[pair * p.inter + i] = g / (1.0f + __expf(-g)) * u;
}

// One warp per hidden row j of one token: y_k = down[e_k][j, :] · bf16(act[t·K + k]) for each of the
// token's pairs k, then out[t, j] = Σ_k weights[t, k] · y_k with k in order (the combine).
template <typename W>
__global__ void __launch_bounds__(kWarps * 32) moe_down_combine_kernel(MoeExpertsArgs p, W dn, const float* act) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (j >= p.hidden) return;
  const int64_t chunks = p.inter / W::kPer;
  float s = 0.0f;
  for (int64_t k0 = 0; k0 < p.top_k; k0 += kDownPairs) {
    const uint4* rows[kDownPairs];
    const float* acts[kDownPairs];
    const float* scales[kDownPairs];
#pragma unroll
    for (int q = 0; q < kDownPairs; ++q) {
      const int64_t pair = t * p.top_k + min(k0 + q, p.top_k - 1);
      const int64_t e = p.expert_ids[pair];
      rows[q] = dn.row(e, j);
      scales[q] = dn.row_scales(e, j);
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
          float wf[W::kPer];
          dn.unpack(w[q][b], scales[q], static_cast<int>(c), wf);
          const float4* a4 = reinterpret_cast<const float4*>(acts[q] + c * W::kPer);
#pragma unroll
          for (int r = 0; r < W::kPer / 4; ++r) {
            const float4 a = a4[r];
            y[q] += wf[4 * r] * round_bf16(a.x) + wf[4 * r + 1] * round_bf16(a.y) + wf[4 * r + 2] * round_bf16(a.z) +
                    wf[4 * r + 3] * round_bf16(a.w);
          }
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

namespace {
template <typename W>
void run(const MoeExpertsArgs& p, const W& gate_up, const W& down, float* act, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  launch_pdl(moe_gate_up_kernel<W>,
             dim3(static_cast<unsigned>((p.inter + kWarps - 1) / kWarps), static_cast<unsigned>(pairs)),
             dim3(kWarps * 32), static_cast<size_t>(p.hidden) * sizeof(float), s, "moe_gate_up", p, gate_up, act);
  launch_pdl(moe_down_combine_kernel<W>,
             dim3(static_cast<unsigned>((p.hidden + kWarps - 1) / kWarps), static_cast<unsigned>(p.tokens)),
             dim3(kWarps * 32), 0, s, "moe_down_combine", p, down, static_cast<const float*>(act));
}
}  // namespace

bool moe_small_batch_supported(const MoeExpertsArgs& p) {
  const int64_t per = p.gate_up_q.dense() ? 8 : 16;
  return p.hidden % per == 0 && p.inter % per == 0 && p.gate_up_q.format == p.down_q.format &&
         (p.gate_up_q.dense() || (p.gate_up_q.block_cols % 16 == 0 && p.down_q.block_cols % 16 == 0));
}

void moe_small_batch(const MoeExpertsArgs& p, float* act, cudaStream_t s) {
  if (p.tokens * p.top_k == 0) return;
  check_supported(moe_small_batch_supported(p), "moe_small_batch: hidden and inter must be multiples of 8 (FP8: 16)");
  if (p.gate_up_q.dense()) {
    return run(p, Bf16Experts{bf16_storage(p.gate_up), 2 * p.inter, p.hidden},
               Bf16Experts{bf16_storage(p.down), p.hidden, p.inter}, act, s);
  }
  run(p,
      Fp8Experts{static_cast<const uint8_t*>(p.gate_up), 2 * p.inter, p.hidden, p.gate_up_q,
                 static_cast<int>(p.gate_up_q.block_cols / 16)},
      Fp8Experts{static_cast<const uint8_t*>(p.down), p.hidden, p.inter, p.down_q,
                 static_cast<int>(p.down_q.block_cols / 16)},
      act, s);
}

}  // namespace sy::cuda
