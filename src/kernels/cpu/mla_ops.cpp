// Fast fp32 CPU kernels for multi-head latent attention and the sparse-attention indexer: OpenBLAS for the
// per-head products, OpenMP over (token, head) or tokens elsewhere.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "kernels/e4m3.h"
#include "kernels/ops.h"

namespace sy::cpu {

namespace {

constexpr int64_t kParallelMinFloats = int64_t{1} << 15;

__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) partial[l] += a[i + l] * b[i + l];
  }
  float acc = 0.0f;
  for (; i < n; ++i) acc += a[i] * b[i];
#pragma omp simd reduction(+ : acc)
  for (int64_t l = 0; l < kLanes; ++l) acc += partial[l];
  return acc;
}

__attribute__((target_clones("avx2", "default"))) void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

int64_t slot_of(const int32_t* block_tables, int64_t max_blocks, int64_t block_size, int32_t seq, int64_t pos) {
  return int64_t(block_tables[int64_t(seq) * max_blocks + pos / block_size]) * block_size + pos % block_size;
}

}  // namespace

void mla_kv_write(const MlaKvWriteArgs& a) {
  SY_CHECK(a.kv_lora_rank > 0 && a.rope_dim >= 0, "mla_kv_write: need kv_lora_rank > 0, got {}", a.kv_lora_rank);
  const int64_t row = a.kv_lora_rank + a.rope_dim;
#pragma omp parallel for if (a.tokens * row >= kParallelMinFloats)
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* in = a.kv + t * row;
    float* out = f32_storage(a.cache) + int64_t(a.slots[t]) * row;
    const float inv_rms = 1.0f / std::sqrt(dot(in, in, a.kv_lora_rank) / float(a.kv_lora_rank) + a.eps);
    for (int64_t i = 0; i < a.kv_lora_rank; ++i) out[i] = in[i] * inv_rms * f32_storage(a.norm_weight)[i];
    std::memcpy(out + a.kv_lora_rank, in + a.kv_lora_rank, size_t(a.rope_dim) * sizeof(float));
    if (a.kv_quant.e4m3) {
      for (int64_t i = 0; i < row; ++i) out[i] = e4m3_round_trip(out[i], a.kv_quant.k_scale);
    }
  }
}

void head_linear(const HeadLinearArgs& a) {
  SY_CHECK(a.x_stride >= a.in && a.y_stride >= a.out && a.tokens >= 0 && a.heads >= 0,
           "head_linear: strides {} / {} are below in {} / out {}", a.x_stride, a.y_stride, a.in, a.out);
  SY_CHECK(a.tokens * a.heads * std::max(a.x_stride, a.y_stride) <= INT_MAX && a.in <= INT_MAX && a.out <= INT_MAX,
           "head_linear: sizes exceed the BLAS int range");
  if (a.tokens == 0 || a.out == 0) return;
  const auto lda = blasint(a.heads * a.x_stride), ldc = blasint(a.heads * a.y_stride);
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* w = f32_storage(a.w) + h * a.w_head_stride;
    float* y = a.y + h * a.y_stride;
    if (a.in == 0) {
      for (int64_t t = 0; t < a.tokens; ++t) std::fill(y + t * ldc, y + t * ldc + a.out, 0.0f);
      continue;
    }
    // Row-major y_h[T, out] = x_h[T, in] · W_h^T (W_h [out, in]) or x_h · W_h (W_h [in, out]).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, a.w_transposed ? CblasNoTrans : CblasTrans, blasint(a.tokens),
                blasint(a.out), blasint(a.in), 1.0f, a.x + h * a.x_stride, lda, w,
                a.w_transposed ? blasint(a.out) : blasint(a.in), 0.0f, y, ldc);
  }
}

void mla_attention(const MlaAttentionArgs& a) {
  SY_CHECK(a.block_size > 0 && a.kv_lora_rank > 0,
           "mla_attention: need block_size > 0 and kv_lora_rank > 0, got {} "
           "and {}",
           a.block_size, a.kv_lora_rank);
  const int64_t row = a.kv_lora_rank + a.rope_dim;
#pragma omp parallel if (a.tokens * a.n_heads * a.max_blocks * a.block_size * row >= 4 * kParallelMinFloats)
  {
    std::vector<const float*> rows;
    std::vector<float> probs;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t t = 0; t < a.tokens; ++t) {
      for (int64_t h = 0; h < a.n_heads; ++h) {
        const int64_t p = a.positions[t];
        rows.clear();
        const auto add_key = [&](int64_t k) {
          rows.push_back(f32_storage(a.cache) +
                         slot_of(a.block_tables, a.max_blocks, a.block_size, a.token_seq[t], k) * row);
        };
        if (a.key_positions == nullptr) {
          for (int64_t k = 0; k <= p; ++k) add_key(k);
        } else {
          for (int64_t j = 0; j < a.n_selected; ++j) {
            const int64_t k = a.key_positions[t * a.n_selected + j];
            if (k >= 0 && k <= p) add_key(k);
          }
        }
        const float* ql = a.q_latent + (t * a.n_heads + h) * a.kv_lora_rank;
        const float* qr = a.q_rope + (t * a.n_heads + h) * a.q_rope_stride;
        probs.resize(rows.size());
        float max_score = -INFINITY;
        for (size_t j = 0; j < rows.size(); ++j) {
          probs[j] = (dot(ql, rows[j], a.kv_lora_rank) + dot(qr, rows[j] + a.kv_lora_rank, a.rope_dim)) * a.scale;
          max_score = std::max(max_score, probs[j]);
        }
        float sum = 0.0f;
        for (float& s : probs) sum += (s = std::exp(s - max_score));
        float* out = a.out + (t * a.n_heads + h) * a.kv_lora_rank;
        std::fill(out, out + a.kv_lora_rank, 0.0f);
        const float inv_sum = 1.0f / sum;
        for (size_t j = 0; j < rows.size(); ++j) axpy(probs[j] * inv_sum, rows[j], out, a.kv_lora_rank);
      }
    }
  }
}

void indexer_topk(const IndexerTopkArgs& a) {
  SY_CHECK(a.top_k >= 1 && a.block_size > 0, "indexer_topk: need top_k >= 1 and block_size > 0, got {} and {}", a.top_k,
           a.block_size);
#pragma omp parallel if (a.tokens * a.max_blocks * a.block_size * a.n_heads * a.head_dim >= 4 * kParallelMinFloats)
  {
    std::vector<float> scores;
    std::vector<int32_t> order;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < a.tokens; ++t) {
      const int64_t n_keys = int64_t(a.positions[t]) + 1;
      scores.resize(size_t(n_keys));
      for (int64_t k = 0; k < n_keys; ++k) {
        const float* key = f32_storage(a.k_cache) +
                           slot_of(a.block_tables, a.max_blocks, a.block_size, a.token_seq[t], k) * a.head_dim;
        float s = 0.0f;
        for (int64_t h = 0; h < a.n_heads; ++h) {
          const float relu = std::max(0.0f, dot(a.q + (t * a.n_heads + h) * a.head_dim, key, a.head_dim) * a.scale);
          s += a.head_weights[t * a.n_heads + h] * a.weight_scale * relu;
        }
        scores[size_t(k)] = s + 0.0f;  // -0 → +0, so that equal scores compare equal on every backend
      }
      const int64_t n = std::min(n_keys, a.top_k);
      order.resize(size_t(n_keys));
      std::iota(order.begin(), order.end(), 0);
      std::nth_element(order.begin(), order.begin() + (n - 1), order.end(), [&](int32_t l, int32_t r) {
        return scores[size_t(l)] > scores[size_t(r)] || (scores[size_t(l)] == scores[size_t(r)] && l < r);
      });
      std::sort(order.begin(), order.begin() + n);
      int32_t* out = a.key_positions + t * a.top_k;
      std::copy(order.begin(), order.begin() + n, out);
      std::fill(out + n, out + a.top_k, -1);
    }
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows, int64_t dim,
                float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "layer_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
#pragma omp parallel for if (rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float mean = 0.0f;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= float(dim);
    float var = 0.0f;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.0f / std::sqrt(var / float(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = (xr[i] - mean) * inv * weight[i] + bias[i];
  }
}

}  // namespace sy::cpu
