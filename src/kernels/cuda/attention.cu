// Paged KV write (alone, or after the q/k norm and rope in one pass) and paged GQA attention (causal,
// optional sliding window), over a bf16 or an E4M3 cache (kv_cache.cuh).
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_cache.cuh"

namespace sy::cuda {

namespace {

template <typename KV>
__global__ void kv_write_kernel(KvWriteArgs p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t k_row = p.kv_heads * p.head_dim, v_row = p.kv_heads * p.v_head_dim;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * (k_row + v_row)) return;
  const int64_t t = i / (k_row + v_row), c = i % (k_row + v_row);
  const int64_t slot = p.slots[t];
  if (c < k_row) {
    kv_store(static_cast<KV*>(p.k_cache) + slot * k_row + c, p.k[t * k_row + c], p.kv_quant.k_scale);
  } else {
    kv_store(static_cast<KV*>(p.v_cache) + slot * v_row + (c - k_row), p.v[t * v_row + (c - k_row)],
             p.kv_quant.v_scale);
  }
}

constexpr int kHeadThreads = 128;

// Block (token, head) over each token's n_heads q heads, then kv_heads k heads, then kv_heads v heads.
// The same arithmetic as rms_norm_kernel, rope_kernel and kv_write_kernel in sequence.
template <typename KV>
__global__ void __launch_bounds__(kHeadThreads) qk_norm_rope_kv_write_kernel(QkRopeKvArgs p) {
  extern __shared__ float head_s[];  // [head_dim]
  __shared__ float reduce[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t per_token = p.n_heads + 2 * p.kv_heads, hd = p.head_dim;
  const int64_t t = blockIdx.x / per_token, h = blockIdx.x % per_token;
  const int64_t slot = p.slots[t];
  if (h >= p.n_heads + p.kv_heads) {
    const int64_t hv = h - p.n_heads - p.kv_heads;
    const float* src = p.v + (t * p.kv_heads + hv) * hd;
    KV* dst = static_cast<KV*>(p.v_cache) + (slot * p.kv_heads + hv) * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) kv_store(dst + i, src[i], p.kv_quant.v_scale);
    return;
  }
  const bool is_q = h < p.n_heads;
  float* x = is_q ? p.q + (t * p.n_heads + h) * hd : p.k + (t * p.kv_heads + (h - p.n_heads)) * hd;
  const bf16_bits* w = is_q ? bf16_storage(p.q_norm) : bf16_storage(p.k_norm);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    const float v = x[i];
    head_s[i] = v;
    ss += v * v;
  }
  if (w) {  // the same for the whole block
    const float inv = rsqrtf(block_reduce<kHeadThreads>(ss, false, reduce) / static_cast<float>(hd) + p.norm_eps);
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) head_s[i] = head_s[i] * inv * bf(w[i]);
  }
  __syncthreads();
  const int64_t half = p.rotary_dim / 2;
  const float pos = static_cast<float>(p.positions[t]);
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    float sn, cs;
    sincosf(pos * p.inv_freq[j], &sn, &cs);
    cs *= p.attention_scale;
    sn *= p.attention_scale;
    const int64_t ia = p.interleaved ? 2 * j : j, ib = p.interleaved ? 2 * j + 1 : j + half;
    const float a = head_s[ia], b = head_s[ib];
    head_s[ia] = a * cs - b * sn;
    head_s[ib] = b * cs + a * sn;
  }
  __syncthreads();
  KV* cache = is_q ? nullptr : static_cast<KV*>(p.k_cache) + (slot * p.kv_heads + (h - p.n_heads)) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    const float v = head_s[i];
    x[i] = v;
    if (cache) kv_store(cache + i, v, p.kv_quant.k_scale);
  }
}

constexpr int kAttnThreads = 128;

// One block per (token, head): scores of every visible key into shared memory, softmax, then V. An E4M3 cache's
// scales multiply the scores and the output (the stored values are read unscaled).
template <typename KV>
__global__ void __launch_bounds__(kAttnThreads) paged_attention_kernel(PagedAttentionArgs p) {
  extern __shared__ float scores[];
  __shared__ float reduce[32];
  const int64_t t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
  const int64_t kvh = h / (p.n_heads / p.kv_heads);
  const int64_t pos = p.positions[t];
  const int64_t first = p.sliding_window > 0 ? max(int64_t(0), pos - p.sliding_window + 1) : 0;
  const int64_t n_keys = pos - first + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
  const float* q = p.q + (t * p.n_heads + h) * p.head_dim;
  const float score_scale = kIsE4m3<KV> ? p.scale * p.kv_quant.k_scale : p.scale;
  const float v_scale = kIsE4m3<KV> ? p.kv_quant.v_scale : 1.0f;

  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) {
    const int64_t kp = first + j;
    const int64_t slot = static_cast<int64_t>(table[kp / p.block_size]) * p.block_size + kp % p.block_size;
    const KV* k = static_cast<const KV*>(p.k_cache) + (slot * p.kv_heads + kvh) * p.head_dim;
    float dot = 0.0f;
    for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * kv_element(k[d]);
    const float s = dot * score_scale;
    scores[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = block_reduce<kAttnThreads>(local_max, true, reduce);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) {
    const float e = expf(scores[j] - m);
    scores[j] = e;
    local_sum += e;
  }
  const float inv = 1.0f / block_reduce<kAttnThreads>(local_sum, false, reduce);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < p.v_head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
      const int64_t kp = first + j;
      const int64_t slot = static_cast<int64_t>(table[kp / p.block_size]) * p.block_size + kp % p.block_size;
      acc += scores[j] * kv_element(static_cast<const KV*>(p.v_cache)[(slot * p.kv_heads + kvh) * p.v_head_dim + d]);
    }
    p.out[(t * p.n_heads + h) * p.v_head_dim + d] = kIsE4m3<KV> ? acc * inv * v_scale : acc * inv;
  }
}

}  // namespace

void kv_write(const KvWriteArgs& p, cudaStream_t s) {
  const int64_t n = p.tokens * p.kv_heads * (p.head_dim + p.v_head_dim);
  if (n == 0) return;
  with_kv_element(p.kv_quant, [&](auto kv) {
    launch_pdl(kv_write_kernel<decltype(kv)>, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, s, "kv_write",
               p);
  });
}

void qk_norm_rope_kv_write(const QkRopeKvArgs& p, cudaStream_t s) {
  const int64_t blocks = p.tokens * (p.n_heads + 2 * p.kv_heads);
  if (blocks == 0) return;
  check_supported(p.rotary_dim >= 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim &&
                      p.head_dim * sizeof(float) <= 48 * 1024 &&
                      (bf16_storage(p.q_norm) == nullptr) == (bf16_storage(p.k_norm) == nullptr),
                  "qk_norm_rope_kv_write: needs an even rotary_dim <= head_dim <= 12288, and both norms or neither");
  with_kv_element(p.kv_quant, [&](auto kv) {
    launch_pdl(qk_norm_rope_kv_write_kernel<decltype(kv)>, dim3(static_cast<unsigned>(blocks)), dim3(kHeadThreads),
               static_cast<size_t>(p.head_dim) * sizeof(float), s, "qk_norm_rope_kv_write", p);
  });
}

void paged_attention(const PagedAttentionArgs& p, cudaStream_t s) {
  if (p.tokens == 0) return;
  const size_t smem = static_cast<size_t>(p.max_blocks * p.block_size) * sizeof(float);
  with_kv_element(p.kv_quant, [&](auto kv) {
    using KV = decltype(kv);
    static size_t configured = 48 * 1024;  // one per instantiation
    if (smem > configured) {
      check_shared_memory("paged_attention", smem, 227 * 1024);
      check_cuda(cudaFuncSetAttribute(paged_attention_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)),
                 "cudaFuncSetAttribute(paged_attention)");
      configured = smem;
    }
    paged_attention_kernel<KV><<<static_cast<unsigned>(p.tokens * p.n_heads), kAttnThreads, smem, s>>>(p);
  });
  check_launch("paged_attention");
}

}  // namespace sy::cuda
