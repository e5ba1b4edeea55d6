// Fast fp32 CPU kernels: linear through OpenBLAS sgemm, the rest as OpenMP loops over rows, tokens or
// (token, head) pairs with `omp simd` inner loops so the compiler vectorises the fp32 reductions.
#include "kernels/ops.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "kernels/e4m3.h"
#include "kernels/uniform_route.h"

namespace sy::cpu {
namespace {

// Below this many floats of work an OpenMP fork-join costs more than the loop itself. Plain copies run
// near memory bandwidth on one core, so they only split when they are several MiB.
constexpr int64_t kParallelMinFloats = int64_t{1} << 15;
constexpr int64_t kParallelMinCopyFloats = int64_t{1} << 20;

// The hot inner loops of attention and norms. The project builds for baseline x86-64 (SSE2), so these
// also get AVX2 clones, picked at load time where the CPU has AVX2.
//
// Sixteen partial sums give the vector units independent add chains instead of one latency-bound chain.
__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) {
      partial[l] += a[i + l] * b[i + l];
    }
  }
  float acc = 0.0f;
  for (; i < n; ++i) {
    acc += a[i] * b[i];
  }
#pragma omp simd reduction(+ : acc)
  for (int64_t l = 0; l < kLanes; ++l) {
    acc += partial[l];
  }
  return acc;
}

// y += alpha * x
__attribute__((target_clones("avx2", "default"))) void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    y[i] += alpha * x[i];
  }
}

// HF order: normalise in fp32, then multiply by the weight. y may alias x (same index read before write).
void rms_norm_row(const float* x, const float* weight, float* y, int64_t dim, float eps) {
  const float inv_rms = 1.0f / std::sqrt(dot(x, x, dim) / float(dim) + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) {
    y[i] = x[i] * inv_rms * weight[i];
  }
}

}  // namespace

void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  SY_CHECK(m >= 0 && n >= 0 && k >= 0, "linear: sizes must be non-negative, got m={} n={} k={}", m, n, k);
  SY_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "linear: sizes exceed the BLAS int range, got m={} n={} k={}",
           m, n, k);
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    std::fill(y, y + m * n, 0.0f);
  } else if (m == 1) {
    // Decode-time GEMV: OpenBLAS 0.3.21's sgemm with m = 1 runs ~8x slower than its sgemv (bench_kernels).
    cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(n), blasint(k), 1.0f, w, blasint(k), x, 1, 0.0f, y, 1);
  } else {
    // Row-major y[m, n] = x[m, k] · w[n, k]^T.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(n), blasint(k), 1.0f, x, blasint(k), w,
                blasint(k), 0.0f, y, blasint(n));
  }
  if (!bias) {
    return;
  }
#pragma omp parallel for if (m * n >= kParallelMinFloats)
  for (int64_t i = 0; i < m; ++i) {
    float* yi = y + i * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      yi[j] += bias[j];
    }
  }
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "rms_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
#pragma omp parallel for if (rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < rows; ++r) {
    rms_norm_row(x + r * dim, weight, y + r * dim, dim, eps);
  }
}

void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                  float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "add_rms_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
#pragma omp parallel for if (rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    const float* xr = x + r * dim;
    // The whole row of x is consumed before y is written, so y may alias x or residual.
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) {
      res[i] += xr[i];
    }
    rms_norm_row(res, weight, y + r * dim, dim, eps);
  }
}

void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) {
  SY_CHECK(tokens >= 0 && dim >= 0, "embedding: sizes must be non-negative, got tokens={} dim={}", tokens, dim);
#pragma omp parallel for if (tokens * dim >= kParallelMinCopyFloats)
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(out + t * dim, table + int64_t(ids[t]) * dim, size_t(dim) * sizeof(float));
  }
}

void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) {
  SY_CHECK(rows >= 0 && inter >= 0, "silu_mul: sizes must be non-negative, got rows={} inter={}", rows, inter);
#pragma omp parallel for if (rows * inter >= kParallelMinFloats / 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * inter;
    const float* up = gate + inter;
    float* o = out + r * inter;
#pragma omp simd
    for (int64_t i = 0; i < inter; ++i) {
      o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
  }
}

void rope(const RopeArgs& a) {
  SY_CHECK(a.rotary_dim >= 0 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.head_dim,
           "rope: rotary_dim must be even and at most head_dim, got rotary_dim={} head_dim={}", a.rotary_dim,
           a.head_dim);
  const int64_t half = a.rotary_dim / 2;
  // In the interleaved layout pair i is (2i, 2i+1); in rotate-half it is (i, i + half).
  const int64_t stride_a = a.interleaved ? 2 : 1;
  const int64_t offset_b = a.interleaved ? 1 : half;
#pragma omp parallel if (a.tokens * a.heads * a.rotary_dim >= kParallelMinFloats / 8)
  {
    // cos and sin depend only on the token's position, so they are computed once per token for all heads.
    std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
#pragma omp for
    for (int64_t t = 0; t < a.tokens; ++t) {
      const float pos = float(a.positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        // fp32 angle as PyTorch forms it: float(position) * inv_freq.
        const float angle = pos * a.inv_freq[i];
        cos_t[size_t(i)] = std::cos(angle) * a.attention_scale;
        sin_t[size_t(i)] = std::sin(angle) * a.attention_scale;
      }
      for (int64_t h = 0; h < a.heads; ++h) {
        float* x = a.x + (t * a.heads + h) * a.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cos_t[size_t(i)], s = sin_t[size_t(i)];
          const float xa = x[i * stride_a];
          const float xb = x[i * stride_a + offset_b];
          x[i * stride_a] = xa * c - xb * s;
          x[i * stride_a + offset_b] = xb * c + xa * s;
        }
      }
    }
  }
}

void kv_write(const KvWriteArgs& a) {
  const int64_t k_row = a.kv_heads * a.head_dim;
  const int64_t v_row = a.kv_heads * a.v_head_dim;
  const KvQuant& q = a.kv_quant;
#pragma omp parallel for if (a.tokens * (k_row + v_row) >= (q.e4m3 ? kParallelMinFloats : kParallelMinCopyFloats))
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t slot = a.slots[t];
    float* k = f32_storage(a.k_cache) + slot * k_row;
    float* v = f32_storage(a.v_cache) + slot * v_row;
    if (q.e4m3) {
      for (int64_t i = 0; i < k_row; ++i) k[i] = e4m3_round_trip(a.k[t * k_row + i], q.k_scale);
      for (int64_t i = 0; i < v_row; ++i) v[i] = e4m3_round_trip(a.v[t * v_row + i], q.v_scale);
    } else {
      std::memcpy(k, a.k + t * k_row, size_t(k_row) * sizeof(float));
      // A key-only cache (the DSA indexer's) has no V row, and its V source may be null.
      if (v_row > 0) std::memcpy(v, a.v + t * v_row, size_t(v_row) * sizeof(float));
    }
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  SY_CHECK(a.kv_heads > 0 && a.n_heads % a.kv_heads == 0,
           "paged_attention: n_heads must be a multiple of kv_heads, got n_heads={} kv_heads={}", a.n_heads,
           a.kv_heads);
  SY_CHECK(a.block_size > 0 && a.sliding_window >= 0,
           "paged_attention: need block_size > 0 and sliding_window >= 0, got block_size={} sliding_window={}",
           a.block_size, a.sliding_window);
  const int64_t group = a.n_heads / a.kv_heads;
  // Small steps (a few decode tokens over short contexts) run faster on one thread than the cost of
  // waking the team.
#pragma omp parallel if (a.tokens * a.n_heads * a.max_blocks * a.block_size * a.head_dim >= 4 * kParallelMinFloats)
  {
    std::vector<int64_t> slots;
    std::vector<float> probs;  // [group, n_keys]
    // The query heads of one GQA group share their kv head, so each (token, kv head) task reads that
    // head's K and V rows once for the whole group. Queries see different numbers of keys (prefill vs
    // decode), hence dynamic scheduling.
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t t = 0; t < a.tokens; ++t) {
      for (int64_t kvh = 0; kvh < a.kv_heads; ++kvh) {
        const int64_t pos = a.positions[t];
        const int64_t first = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
        const int64_t n_keys = pos - first + 1;
        const int32_t* table = a.block_tables + int64_t(a.token_seq[t]) * a.max_blocks;
        const float* q = a.q + (t * a.n_heads + kvh * group) * a.head_dim;
        float* out = a.out + (t * a.n_heads + kvh * group) * a.v_head_dim;

        slots.resize(size_t(n_keys));
        probs.resize(size_t(group * n_keys));
        for (int64_t j = 0; j < n_keys; ++j) {
          const int64_t key = first + j;
          slots[size_t(j)] = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
          const float* k = f32_storage(a.k_cache) + (slots[size_t(j)] * a.kv_heads + kvh) * a.head_dim;
          for (int64_t g = 0; g < group; ++g) {
            probs[size_t(g * n_keys + j)] = dot(q + g * a.head_dim, k, a.head_dim);
          }
        }
        for (int64_t g = 0; g < group; ++g) {
          float* p = probs.data() + g * n_keys;
          float max_score = -INFINITY;
          for (int64_t j = 0; j < n_keys; ++j) {
            p[j] *= a.scale;
            max_score = std::max(max_score, p[j]);
          }
          float sum = 0.0f;
          for (int64_t j = 0; j < n_keys; ++j) {
            p[j] = std::exp(p[j] - max_score);
            sum += p[j];
          }
          const float inv_sum = 1.0f / sum;
          for (int64_t j = 0; j < n_keys; ++j) {
            p[j] *= inv_sum;
          }
        }

        std::fill(out, out + group * a.v_head_dim, 0.0f);
        for (int64_t j = 0; j < n_keys; ++j) {
          const float* v = f32_storage(a.v_cache) + (slots[size_t(j)] * a.kv_heads + kvh) * a.v_head_dim;
          for (int64_t g = 0; g < group; ++g) {
            const float p = probs[size_t(g * n_keys + j)];
            axpy(p, v, out + g * a.v_head_dim, a.v_head_dim);
          }
        }
      }
    }
  }
}

void softmax_topk(const SoftmaxTopkArgs& a) {
  SY_CHECK(a.top_k >= 1 && a.top_k <= a.n_experts,
           "softmax_topk: need 1 <= top_k <= n_experts, got top_k={} n_experts={}", a.top_k, a.n_experts);
#pragma omp parallel if (a.tokens * a.n_experts >= kParallelMinFloats / 8)
  {
    std::vector<float> probs(size_t(a.n_experts));
    std::vector<int32_t> order(size_t(a.n_experts));
#pragma omp for
    for (int64_t t = 0; t < a.tokens; ++t) {
      const float* logits = a.logits + t * a.n_experts;
      const float max_logit = *std::max_element(logits, logits + a.n_experts);
      float sum = 0.0f;
      for (int64_t e = 0; e < a.n_experts; ++e) {
        probs[size_t(e)] = std::exp(logits[e] - max_logit);
        sum += probs[size_t(e)];
      }
      for (int64_t e = 0; e < a.n_experts; ++e) {
        probs[size_t(e)] /= sum;
      }

      // Descending by probability, ties to the lower id: a stable descending sort's first top_k.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + a.top_k, order.end(), [&](int32_t l, int32_t r) {
        return probs[size_t(l)] > probs[size_t(r)] || (probs[size_t(l)] == probs[size_t(r)] && l < r);
      });
      float chosen_sum = 0.0f;
      for (int64_t j = 0; j < a.top_k; ++j) {
        chosen_sum += probs[size_t(order[size_t(j)])];
      }
      for (int64_t j = 0; j < a.top_k; ++j) {
        const int32_t e = order[size_t(j)];
        a.expert_ids[t * a.top_k + j] = e;
        a.weights[t * a.top_k + j] = a.renormalize ? probs[size_t(e)] / chosen_sum : probs[size_t(e)];
      }
      if (a.uniform) uniform_route_row(logits, a.n_experts, a.top_k, a.expert_ids + t * a.top_k);
    }
  }
}

}  // namespace sy::cpu
