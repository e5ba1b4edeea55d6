// Multi-head latent attention over the bf16 or E4M3 latent cache (kv_cache.cuh), the sparse-attention indexer's top-k
// key selection. Plain first versions: one block per (token, head) or per token, scores in shared memory, as
// paged_attention; correctness against the CPU backend first, speed later.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/mla_ops.cuh"

namespace sy::cuda {

namespace {

constexpr int kThreads = 128;

// One block per token: RMSNorm of the latent with kv_a_layernorm, then the rope key, both to the cache's type.
template <typename KV>
__global__ void __launch_bounds__(kThreads) mla_kv_write_kernel(MlaKvWriteArgs p) {
  __shared__ float reduce[32];
  const int64_t t = blockIdx.x, row = p.kv_lora_rank + p.rope_dim;
  const float* in = p.kv + t * row;
  KV* out = static_cast<KV*>(p.cache) + static_cast<int64_t>(p.slots[t]) * row;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < p.kv_lora_rank; i += blockDim.x) ss += in[i] * in[i];
  const float inv = rsqrtf(block_reduce<kThreads>(ss, false, reduce) / static_cast<float>(p.kv_lora_rank) + p.eps);
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kv_store(out + i, i < p.kv_lora_rank ? in[i] * inv * bf(bf16_storage(p.norm_weight)[i]) : in[i],
             p.kv_quant.k_scale);
  }
}

// One block per (token, head): score every key (all of 0..p or the indexer's choice) into shared memory,
// softmax, then each thread mixes some latent dims. An E4M3 cache's scale multiplies the scores and the output.
template <typename KV>
__global__ void __launch_bounds__(kThreads) mla_attention_kernel(MlaAttentionArgs p) {
  extern __shared__ float scores[];
  __shared__ float reduce[32];
  const int64_t t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
  const int64_t pos = p.positions[t], row = p.kv_lora_rank + p.rope_dim;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
  const int32_t* chosen = p.key_positions ? p.key_positions + t * p.n_selected : nullptr;
  const int64_t n = chosen ? p.n_selected : pos + 1;
  const float* ql = p.q_latent + (t * p.n_heads + h) * p.kv_lora_rank;
  const float* qr = p.q_rope + (t * p.n_heads + h) * p.q_rope_stride;
  const float score_scale = kIsE4m3<KV> ? p.scale * p.kv_quant.k_scale : p.scale;

  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t k = chosen ? chosen[j] : j;
    if (k < 0 || k > pos) {
      scores[j] = -INFINITY;
      continue;
    }
    const KV* c = static_cast<const KV*>(p.cache) + slot_of(table, p.block_size, k) * row;
    float dot = 0.0f;
    for (int64_t d = 0; d < p.kv_lora_rank; ++d) dot += ql[d] * kv_element(c[d]);
    for (int64_t d = 0; d < p.rope_dim; ++d) dot += qr[d] * kv_element(c[p.kv_lora_rank + d]);
    scores[j] = dot * score_scale;
    local_max = fmaxf(local_max, scores[j]);
  }
  const float m = block_reduce<kThreads>(local_max, true, reduce);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = scores[j] == -INFINITY ? 0.0f : expf(scores[j] - m);
    scores[j] = e;
    local_sum += e;
  }
  const float inv = 1.0f / block_reduce<kThreads>(local_sum, false, reduce);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < p.kv_lora_rank; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      if (scores[j] == 0.0f) continue;
      const int64_t k = chosen ? chosen[j] : j;
      acc += scores[j] * kv_element(static_cast<const KV*>(p.cache)[slot_of(table, p.block_size, k) * row + d]);
    }
    p.out[(t * p.n_heads + h) * p.kv_lora_rank + d] = kIsE4m3<KV> ? acc * inv * p.kv_quant.k_scale : acc * inv;
  }
}

// Order-preserving map of floats to unsigned integers (for the radix select).
__device__ __forceinline__ uint32_t ordered(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kScoreKeys = 128;  // keys of one scoring block, one a thread
constexpr int kHeadGroup = 32;   // heads whose dot products a thread holds at once

// Block (chunk of 128 keys, token t0 + blockIdx.y): each thread scores one key, score_j = Σ_h weight_scale ·
// head_weights[h] · relu(scale · q_h · k_j), with the token's queries and head weights staged in shared
// memory (every thread reads the same word: a broadcast). Each dot product runs over d in order, as the CPU
// sums it. A token whose keys all fit top_k needs no score.
__global__ void __launch_bounds__(kScoreKeys)
    indexer_scores_kernel(IndexerTopkArgs p, float* scores, int64_t stride, int64_t t0) {
  extern __shared__ __align__(16) float q_s[];  // [n_heads][head_dim], then the head weights
  const int64_t t = t0 + blockIdx.y, n_keys = static_cast<int64_t>(p.positions[t]) + 1;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kScoreKeys;
  if (n_keys <= p.top_k || j0 >= n_keys) return;
  const int64_t H = p.n_heads, D = p.head_dim;
  float* w_s = q_s + H * D;
  for (int64_t i = threadIdx.x; i < H * D; i += blockDim.x) q_s[i] = p.q[t * H * D + i];
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) w_s[i] = p.head_weights[t * H + i];
  __syncthreads();
  const int64_t j = j0 + threadIdx.x;
  if (j >= n_keys) return;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
  const bf16_bits* key = bf16_storage(p.k_cache) + slot_of(table, p.block_size, j) * D;
  float s = 0.0f;
  for (int64_t h0 = 0; h0 < H; h0 += kHeadGroup) {
    const int nh = static_cast<int>(min(int64_t(kHeadGroup), H - h0));
    float acc[kHeadGroup] = {};
    const float* q0 = q_s + h0 * D;
    if (D % 8 == 0) {
      for (int64_t d0 = 0; d0 < D; d0 += 8) {
        float k8[8];
        unpack8(*reinterpret_cast<const uint4*>(key + d0), k8);
#pragma unroll
        for (int h = 0; h < kHeadGroup; ++h) {
          if (h >= nh) break;
          const float4 a = *reinterpret_cast<const float4*>(q0 + h * D + d0);
          const float4 b = *reinterpret_cast<const float4*>(q0 + h * D + d0 + 4);
          acc[h] += a.x * k8[0];
          acc[h] += a.y * k8[1];
          acc[h] += a.z * k8[2];
          acc[h] += a.w * k8[3];
          acc[h] += b.x * k8[4];
          acc[h] += b.y * k8[5];
          acc[h] += b.z * k8[6];
          acc[h] += b.w * k8[7];
        }
      }
    } else {
      for (int64_t d = 0; d < D; ++d) {
        const float kd = bf(key[d]);
#pragma unroll
        for (int h = 0; h < kHeadGroup; ++h) {
          if (h < nh) acc[h] += q0[h * D + d] * kd;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kHeadGroup; ++h) {
      if (h < nh) s += w_s[h0 + h] * p.weight_scale * fmaxf(0.0f, acc[h] * p.scale);
    }
  }
  scores[(t - t0) * stride + j] = s + 0.0f;  // -0 → +0, as on the CPU
}

// One block per token t0 + blockIdx.x: its keys' scores into shared memory, a radix select of the top_k-th
// largest score, then a stable compaction that writes the chosen positions in ascending order (keys
// equal to the threshold: the lowest positions first).
__global__ void __launch_bounds__(kThreads)
    indexer_select_kernel(IndexerTopkArgs p, const float* all_scores, int64_t stride, int64_t t0) {
  extern __shared__ float scores[];
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_remaining;
  __shared__ int32_t below_gt[kThreads], below_eq[kThreads];
  const int64_t t = t0 + blockIdx.x, n_keys = static_cast<int64_t>(p.positions[t]) + 1;
  if (n_keys > p.top_k) {
    for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) scores[j] = all_scores[(t - t0) * stride + j];
  }
  __syncthreads();
  int32_t* out = p.key_positions + t * p.top_k;
  if (n_keys <= p.top_k) {
    for (int64_t j = threadIdx.x; j < p.top_k; j += blockDim.x) out[j] = j < n_keys ? static_cast<int32_t>(j) : -1;
    return;
  }
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(p.top_k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) {
      const uint32_t u = ordered(scores[j]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t above = 0;
      for (int b = 255; b >= 0; --b) {
        if (above + hist[b] >= remaining) {
          s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
          s_remaining = remaining - above;
          break;
        }
        above += hist[b];
      }
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
  }
  // prefix is now the top_k-th largest score; `remaining` of the keys equal to it are kept.
  const int64_t chunk = (n_keys + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * chunk, end = min(begin + chunk, n_keys);
  int32_t gt = 0, eq = 0;
  for (int64_t j = begin; j < end; ++j) {
    const uint32_t u = ordered(scores[j]);
    gt += u > prefix;
    eq += u == prefix;
  }
  below_gt[threadIdx.x] = gt;
  below_eq[threadIdx.x] = eq;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive prefix sums over the threads' chunks
    int32_t sum_gt = 0, sum_eq = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x); ++i) {
      const int32_t g = below_gt[i], e = below_eq[i];
      below_gt[i] = sum_gt;
      below_eq[i] = sum_eq;
      sum_gt += g;
      sum_eq += e;
    }
  }
  __syncthreads();
  int64_t eq_before = below_eq[threadIdx.x];
  int64_t at = below_gt[threadIdx.x] + min(eq_before, static_cast<int64_t>(remaining));
  for (int64_t j = begin; j < end; ++j) {
    const uint32_t u = ordered(scores[j]);
    if (u > prefix) {
      out[at++] = static_cast<int32_t>(j);
    } else if (u == prefix) {
      if (eq_before < static_cast<int64_t>(remaining)) out[at++] = static_cast<int32_t>(j);
      ++eq_before;
    }
  }
}

// Raises a kernel's dynamic shared memory limit when a launch needs more than the default 48 KiB.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, const char* name, size_t bytes, size_t& configured) {
  if (bytes <= configured) return;
  check_shared_memory(name, bytes, 227 * 1024);
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), name);
  configured = bytes;
}

}  // namespace

void mla_kv_write(const MlaKvWriteArgs& p, cudaStream_t s) {
  if (p.tokens == 0) return;
  with_kv_element(p.kv_quant, [&](auto kv) {
    mla_kv_write_kernel<decltype(kv)><<<static_cast<unsigned>(p.tokens), kThreads, 0, s>>>(p);
  });
  check_launch("mla_kv_write");
}

void mla_attention(const MlaAttentionArgs& p, cudaStream_t s) {
  if (p.tokens == 0 || p.n_heads == 0) return;
  const int64_t keys = p.key_positions ? p.n_selected : p.max_blocks * p.block_size;
  const size_t smem = static_cast<size_t>(keys) * sizeof(float);
  with_kv_element(p.kv_quant, [&](auto kv) {
    using KV = decltype(kv);
    static size_t configured = 48 * 1024 - 32 * sizeof(float);  // per instantiation; the reduction buffer counts too
    allow_shared_memory(mla_attention_kernel<KV>, "mla_attention", smem, configured);
    mla_attention_kernel<KV><<<static_cast<unsigned>(p.tokens * p.n_heads), kThreads, smem, s>>>(p);
  });
  check_launch("mla_attention");
}

int64_t indexer_score_tokens(const IndexerTopkArgs& p) {
  // Tokens scored at once: 16 M scores (64 MB) at most, at least one token.
  const int64_t keys = std::max<int64_t>(1, p.max_blocks * p.block_size);
  return std::max<int64_t>(1, std::min<int64_t>(p.tokens, (int64_t(16) << 20) / keys));
}

void indexer_topk(const IndexerTopkArgs& p, float* scores, cudaStream_t s) {
  if (p.tokens == 0) return;
  const int64_t keys = p.max_blocks * p.block_size, chunk = indexer_score_tokens(p);
  const size_t smem = static_cast<size_t>(keys) * sizeof(float);
  static size_t configured = 48 * 1024 - 2 * kThreads * sizeof(int32_t) - 256 * sizeof(uint32_t) - 64;
  allow_shared_memory(indexer_select_kernel, "indexer_topk", smem, configured);
  const size_t q_smem = static_cast<size_t>(p.n_heads * (p.head_dim + 1)) * sizeof(float);
  static size_t q_configured = 48 * 1024;
  allow_shared_memory(indexer_scores_kernel, "indexer_scores", q_smem, q_configured);
  for (int64_t t0 = 0; t0 < p.tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, p.tokens - t0);
    const dim3 grid(static_cast<unsigned>((keys + kScoreKeys - 1) / kScoreKeys), static_cast<unsigned>(n));
    indexer_scores_kernel<<<grid, kScoreKeys, q_smem, s>>>(p, scores, keys, t0);
    check_launch("indexer_scores");
    indexer_select_kernel<<<static_cast<unsigned>(n), kThreads, smem, s>>>(p, scores, keys, t0);
    check_launch("indexer_topk");
  }
}

}  // namespace sy::cuda
