// Scalar references of the kernels in kernels/ops.h: the plainest loops, written straight from the math
// and accumulating in double. They are the oracle the fast kernels are tested against, never a fast path.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/e4m3.h"
#include "kernels/uniform_route.h"

namespace sy::ref {

void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  SY_CHECK(m >= 0 && n >= 0 && k >= 0, "linear: sizes must be non-negative, got m={} n={} k={}", m, n, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? double(bias[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        acc += double(x[i * k + p]) * double(w[j * k + p]);
      }
      y[i * n + j] = float(acc);
    }
  }
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "rms_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      sum_sq += double(xr[i]) * double(xr[i]);
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + double(eps));
    // Each x[i] is read before y[i] is written, so y may alias x.
    for (int64_t i = 0; i < dim; ++i) {
      yr[i] = float(double(xr[i]) * inv_rms * double(weight[i]));
    }
  }
}

void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                  float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "add_rms_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    // The residual stream is stored in fp32, so the sum is rounded to fp32 before it is normalised.
    for (int64_t i = 0; i < dim; ++i) {
      res[i] = float(double(res[i]) + double(x[r * dim + i]));
    }
    rms_norm(res, weight, y + r * dim, 1, dim, eps);
  }
}

void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) {
  SY_CHECK(tokens >= 0 && dim >= 0, "embedding: sizes must be non-negative, got tokens={} dim={}", tokens, dim);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      out[t * dim + i] = table[int64_t(ids[t]) * dim + i];
    }
  }
}

void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) {
  SY_CHECK(rows >= 0 && inter >= 0, "silu_mul: sizes must be non-negative, got rows={} inter={}", rows, inter);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const double gate = gate_up[r * 2 * inter + i];
      const double up = gate_up[r * 2 * inter + inter + i];
      out[r * inter + i] = float(gate / (1.0 + std::exp(-gate)) * up);
    }
  }
}

void rope(const RopeArgs& a) {
  SY_CHECK(a.rotary_dim >= 0 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.head_dim,
           "rope: rotary_dim must be even and at most head_dim, got rotary_dim={} head_dim={}", a.rotary_dim,
           a.head_dim);
  const int64_t half = a.rotary_dim / 2;
  for (int64_t t = 0; t < a.tokens; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      float* x = a.x + (t * a.heads + h) * a.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // The angle is formed in fp32 as PyTorch does (position as float times inv_freq in fp32);
        // only cos and sin are evaluated in double.
        const float angle = float(a.positions[t]) * a.inv_freq[i];
        const double c = std::cos(double(angle)) * double(a.attention_scale);
        const double s = std::sin(double(angle)) * double(a.attention_scale);
        const int64_t ia = a.interleaved ? 2 * i : i;
        const int64_t ib = a.interleaved ? 2 * i + 1 : i + half;
        const double xa = x[ia];
        const double xb = x[ib];
        x[ia] = float(xa * c - xb * s);
        x[ib] = float(xb * c + xa * s);
      }
    }
  }
}

void kv_write(const KvWriteArgs& a) {
  const KvQuant& q = a.kv_quant;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t slot = a.slots[t];
    for (int64_t i = 0; i < a.kv_heads * a.head_dim; ++i) {
      const float x = a.k[t * a.kv_heads * a.head_dim + i];
      f32_storage(a.k_cache)[slot * a.kv_heads * a.head_dim + i] = q.e4m3 ? e4m3_round_trip(x, q.k_scale) : x;
    }
    for (int64_t i = 0; i < a.kv_heads * a.v_head_dim; ++i) {
      const float x = a.v[t * a.kv_heads * a.v_head_dim + i];
      f32_storage(a.v_cache)[slot * a.kv_heads * a.v_head_dim + i] = q.e4m3 ? e4m3_round_trip(x, q.v_scale) : x;
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
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t p = a.positions[t];
    const int32_t* table = a.block_tables + int64_t(a.token_seq[t]) * a.max_blocks;
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t kvh = h / group;
      const float* q = a.q + (t * a.n_heads + h) * a.head_dim;
      std::vector<int64_t> slots;
      std::vector<double> scores;
      for (int64_t key = 0; key <= p; ++key) {
        if (a.sliding_window > 0 && p - key >= a.sliding_window) {
          continue;
        }
        const int64_t slot = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
        const float* k = f32_storage(a.k_cache) + (slot * a.kv_heads + kvh) * a.head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < a.head_dim; ++d) {
          dot += double(q[d]) * double(k[d]);
        }
        slots.push_back(slot);
        scores.push_back(dot * double(a.scale));
      }
      double max_score = -INFINITY;
      for (double s : scores) {
        max_score = std::max(max_score, s);
      }
      double sum = 0.0;
      for (double& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* out = a.out + (t * a.n_heads + h) * a.v_head_dim;
      for (int64_t d = 0; d < a.v_head_dim; ++d) {
        double acc = 0.0;
        for (size_t j = 0; j < slots.size(); ++j) {
          acc += scores[j] / sum * double(f32_storage(a.v_cache)[(slots[j] * a.kv_heads + kvh) * a.v_head_dim + d]);
        }
        out[d] = float(acc);
      }
    }
  }
}

void softmax_topk(const SoftmaxTopkArgs& a) {
  SY_CHECK(a.top_k >= 1 && a.top_k <= a.n_experts,
           "softmax_topk: need 1 <= top_k <= n_experts, got top_k={} n_experts={}", a.top_k, a.n_experts);
  std::vector<double> probs(size_t(a.n_experts));
  std::vector<bool> taken(size_t(a.n_experts));
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* logits = a.logits + t * a.n_experts;
    double max_logit = -INFINITY;
    for (int64_t e = 0; e < a.n_experts; ++e) {
      max_logit = std::max(max_logit, double(logits[e]));
    }
    double sum = 0.0;
    for (int64_t e = 0; e < a.n_experts; ++e) {
      sum += std::exp(double(logits[e]) - max_logit);
    }
    for (int64_t e = 0; e < a.n_experts; ++e) {
      probs[size_t(e)] = std::exp(double(logits[e]) - max_logit) / sum;
    }

    // Repeated argmax; the strict '>' keeps the lower expert id on ties.
    std::fill(taken.begin(), taken.end(), false);
    double chosen_sum = 0.0;
    for (int64_t j = 0; j < a.top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < a.n_experts; ++e) {
        if (!taken[size_t(e)] && (best < 0 || probs[size_t(e)] > probs[size_t(best)])) {
          best = e;
        }
      }
      taken[size_t(best)] = true;
      a.expert_ids[t * a.top_k + j] = int32_t(best);
      chosen_sum += probs[size_t(best)];
    }
    for (int64_t j = 0; j < a.top_k; ++j) {
      const double p = probs[size_t(a.expert_ids[t * a.top_k + j])];
      a.weights[t * a.top_k + j] = float(a.renormalize ? p / chosen_sum : p);
    }
  }
  if (a.uniform) uniform_route_rows(a.logits, a.expert_ids, a.tokens, a.n_experts, a.top_k);
}

}  // namespace sy::ref
