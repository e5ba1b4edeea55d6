// Bandwidth-oriented CUDA paths for decode-sized work:
// - gqa_attention_warp: one block per (token, kv head) serves that head's whole GQA group, so K and V
//   are read once per group; warps split the keys and keep an online softmax, merged at the end.
// - moe_small_batch: routed experts for a few (token, expert) pairs as GEMVs that stream each pair's
//   bf16 expert weights with 16-byte loads, SiLU·mul fused into the gate/up pass, then a fixed-order
//   weighted combine. No host round trip.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/device_utils.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxGroup = 8;

// DPL: dims per lane (head_dim / 32). Block (token, kv head, split) covers split `split` of the
// token's visible keys; with one split it writes the output, else an unnormalised partial (m, l, acc).
template <int DPL>
__global__ void __launch_bounds__(kWarps * 32) gqa_attention_warp_kernel(AttentionParams p, AttentionSplit sp) {
  __shared__ float q_s[kMaxGroup][DPL * 32];
  __shared__ float m_s[kWarps][kMaxGroup], l_s[kWarps][kMaxGroup];
  __shared__ float acc_s[kWarps][kMaxGroup][DPL * 32];
  const int G = static_cast<int>(p.n_heads / p.kv_heads);
  const int64_t split = blockIdx.x % sp.splits, tk = blockIdx.x / sp.splits;
  const int64_t t = tk / p.kv_heads, kvh = tk % p.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = DPL * 32;
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
    q_s[i / hd][i % hd] = p.q[(t * p.n_heads + kvh * G + i / hd) * hd + i % hd] * p.scale;
  }
  __syncthreads();
  const int64_t pos = p.positions[t];
  const int64_t visible_first = p.sliding_window > 0 ? max(int64_t(0), pos - p.sliding_window + 1) : 0;
  const int64_t chunk = (pos - visible_first + sp.splits) / sp.splits;  // ceil(n_keys / splits)
  const int64_t first = visible_first + split * chunk;
  const int64_t last = min(pos, first + chunk - 1);
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;

  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][DPL];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[g][d] = 0.0f;
  }
  for (int64_t kp = first + warp; kp <= last; kp += kWarps) {
    const int64_t slot = static_cast<int64_t>(table[kp / p.block_size]) * p.block_size + kp % p.block_size;
    const bf16_bits* krow = p.k_cache + (slot * p.kv_heads + kvh) * hd;
    const bf16_bits* vrow = p.v_cache + (slot * p.kv_heads + kvh) * hd;
    float kv[DPL], vv[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
      kv[d] = bf(krow[lane * DPL + d]);
      vv[d] = bf(vrow[lane * DPL + d]);
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < DPL; ++d) s += q_s[g][lane * DPL + d] * kv[d];
      s = warp_sum(s);
      const float m_new = fmaxf(m[g], s);
      const float corr = __expf(m[g] - m_new), e = __expf(s - m_new);
      l[g] = l[g] * corr + e;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[g][d] = acc[g][d] * corr + e * vv[d];
      m[g] = m_new;
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc_s[warp][g][lane * DPL + d] = acc[g][d];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w][g]);
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (l_s[w][g] == 0.0f) continue;  // a warp that saw no key
      const float f = __expf(m_s[w][g] - M);
      L += l_s[w][g] * f;
      A += acc_s[w][g][d] * f;
    }
    const int64_t head = t * p.n_heads + kvh * G + g;
    if (sp.splits == 1) {
      p.out[head * hd + d] = A / L;
    } else {
      sp.acc[(head * sp.splits + split) * hd + d] = A;
      if (d == 0) {
        sp.m[head * sp.splits + split] = M;
        sp.l[head * sp.splits + split] = L;
      }
    }
  }
}

// Merges the splits of every (token, head): out = Σ acc_s e^(m_s − M) / Σ l_s e^(m_s − M).
__global__ void attention_merge_kernel(AttentionParams p, AttentionSplit sp) {
  const int64_t hd = p.head_dim;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * p.n_heads * hd) return;
  const int64_t head = i / hd, d = i % hd;
  float M = -FLT_MAX;
  for (int64_t s = 0; s < sp.splits; ++s) {
    if (sp.l[head * sp.splits + s] > 0.0f) M = fmaxf(M, sp.m[head * sp.splits + s]);
  }
  float L = 0.0f, A = 0.0f;
  for (int64_t s = 0; s < sp.splits; ++s) {
    const float l = sp.l[head * sp.splits + s];
    if (l == 0.0f) continue;  // a split with no visible key
    const float f = __expf(sp.m[head * sp.splits + s] - M);
    L += l * f;
    A += sp.acc[(head * sp.splits + s) * hd + d] * f;
  }
  p.out[i] = A / L;
}

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

bool gqa_attention_warp_supported(int64_t n_heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim) {
  const int64_t group = n_heads / kv_heads;
  return head_dim == v_head_dim && group <= kMaxGroup &&
         (head_dim == 32 || head_dim == 64 || head_dim == 128);
}

int64_t gqa_attention_splits(int64_t tokens, int64_t kv_heads, int64_t max_keys) {
  // Enough blocks to cover the GPU twice over, but at least 64 keys (8 per warp) per split.
  const int64_t want = (264 + tokens * kv_heads - 1) / (tokens * kv_heads);
  return std::max<int64_t>(1, std::min<int64_t>(want, max_keys / 64));
}

void gqa_attention_warp(const AttentionParams& p, const AttentionSplit& sp, cudaStream_t s) {
  if (p.tokens == 0) return;
  const auto blocks = static_cast<unsigned>(p.tokens * p.kv_heads * sp.splits);
  switch (p.head_dim) {
    case 32:
      gqa_attention_warp_kernel<1><<<blocks, kWarps * 32, 0, s>>>(p, sp);
      break;
    case 64:
      gqa_attention_warp_kernel<2><<<blocks, kWarps * 32, 0, s>>>(p, sp);
      break;
    default:
      gqa_attention_warp_kernel<4><<<blocks, kWarps * 32, 0, s>>>(p, sp);
      break;
  }
  check_launch("gqa_attention_warp");
  if (sp.splits > 1) {
    const int64_t n = p.tokens * p.n_heads * p.head_dim;
    attention_merge_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(p, sp);
    check_launch("attention_merge");
  }
}

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
