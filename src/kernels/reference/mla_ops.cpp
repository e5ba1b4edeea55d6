// Scalar references of the MLA and sparse-indexer kernels (kernels/ops.h): plain loops in double, written
// straight from the math. The oracle the fast kernels are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/e4m3.h"
#include "kernels/ops.h"

namespace sy::ref {

namespace {

int64_t slot_of(const int32_t* block_tables, int64_t max_blocks, int64_t block_size, int32_t seq, int64_t pos) {
  return int64_t(block_tables[int64_t(seq) * max_blocks + pos / block_size]) * block_size + pos % block_size;
}

}  // namespace

void mla_kv_write(const MlaKvWriteArgs& a) {
  const int64_t row = a.kv_lora_rank + a.rope_dim;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* in = a.kv + t * row;
    float* out = f32_storage(a.cache) + int64_t(a.slots[t]) * row;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < a.kv_lora_rank; ++i) sum_sq += double(in[i]) * double(in[i]);
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(a.kv_lora_rank) + double(a.eps));
    for (int64_t i = 0; i < a.kv_lora_rank; ++i)
      out[i] = float(double(in[i]) * inv_rms * double(f32_storage(a.norm_weight)[i]));
    for (int64_t i = a.kv_lora_rank; i < row; ++i) out[i] = in[i];
    if (a.kv_quant.e4m3) {
      for (int64_t i = 0; i < row; ++i) out[i] = e4m3_round_trip(out[i], a.kv_quant.k_scale);
    }
  }
}

void head_linear(const HeadLinearArgs& a) {
  SY_CHECK(a.x_stride >= a.in && a.y_stride >= a.out, "head_linear: strides {} / {} are below in {} / out {}",
           a.x_stride, a.y_stride, a.in, a.out);
  for (int64_t t = 0; t < a.tokens; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* x = a.x + (t * a.heads + h) * a.x_stride;
      const float* w = f32_storage(a.w) + h * a.w_head_stride;
      for (int64_t o = 0; o < a.out; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < a.in; ++i)
          acc += double(x[i]) * double(a.w_transposed ? w[i * a.out + o] : w[o * a.in + i]);
        a.y[(t * a.heads + h) * a.y_stride + o] = float(acc);
      }
    }
  }
}

void mla_attention(const MlaAttentionArgs& a) {
  SY_CHECK(a.block_size > 0, "mla_attention: block_size must be positive, got {}", a.block_size);
  const int64_t row = a.kv_lora_rank + a.rope_dim;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t p = a.positions[t];
    std::vector<int64_t> keys;
    if (a.key_positions == nullptr) {
      for (int64_t k = 0; k <= p; ++k) keys.push_back(k);
    } else {
      for (int64_t j = 0; j < a.n_selected; ++j) {
        const int64_t k = a.key_positions[t * a.n_selected + j];
        if (k >= 0 && k <= p) keys.push_back(k);
      }
    }
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float* ql = a.q_latent + (t * a.n_heads + h) * a.kv_lora_rank;
      const float* qr = a.q_rope + (t * a.n_heads + h) * a.q_rope_stride;
      std::vector<double> scores;
      std::vector<const float*> rows;
      for (int64_t k : keys) {
        const float* c =
            f32_storage(a.cache) + slot_of(a.block_tables, a.max_blocks, a.block_size, a.token_seq[t], k) * row;
        double dot = 0.0;
        for (int64_t d = 0; d < a.kv_lora_rank; ++d) dot += double(ql[d]) * double(c[d]);
        for (int64_t d = 0; d < a.rope_dim; ++d) dot += double(qr[d]) * double(c[a.kv_lora_rank + d]);
        scores.push_back(dot * double(a.scale));
        rows.push_back(c);
      }
      double max_score = -INFINITY, sum = 0.0;
      for (double s : scores) max_score = std::max(max_score, s);
      for (double& s : scores) sum += (s = std::exp(s - max_score));
      float* out = a.out + (t * a.n_heads + h) * a.kv_lora_rank;
      for (int64_t d = 0; d < a.kv_lora_rank; ++d) {
        double acc = 0.0;
        for (size_t j = 0; j < rows.size(); ++j) acc += scores[j] / sum * double(rows[j][d]);
        out[d] = float(acc);
      }
    }
  }
}

void indexer_topk(const IndexerTopkArgs& a) {
  SY_CHECK(a.top_k >= 1 && a.block_size > 0, "indexer_topk: need top_k >= 1 and block_size > 0, got {} and {}", a.top_k,
           a.block_size);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t p = a.positions[t];
    std::vector<std::pair<double, int64_t>> scored;  // (score, position)
    for (int64_t k = 0; k <= p; ++k) {
      const float* key =
          f32_storage(a.k_cache) + slot_of(a.block_tables, a.max_blocks, a.block_size, a.token_seq[t], k) * a.head_dim;
      double score = 0.0;
      for (int64_t h = 0; h < a.n_heads; ++h) {
        const float* q = a.q + (t * a.n_heads + h) * a.head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < a.head_dim; ++d) dot += double(q[d]) * double(key[d]);
        score +=
            double(a.head_weights[t * a.n_heads + h]) * double(a.weight_scale) * std::max(0.0, dot * double(a.scale));
      }
      scored.emplace_back(score, k);
    }
    std::sort(scored.begin(), scored.end(), [](const auto& l, const auto& r) {
      return l.first > r.first || (l.first == r.first && l.second < r.second);
    });
    std::vector<int64_t> chosen;
    for (size_t j = 0; j < scored.size() && int64_t(j) < a.top_k; ++j) chosen.push_back(scored[j].second);
    std::sort(chosen.begin(), chosen.end());
    for (int64_t j = 0; j < a.top_k; ++j) {
      a.key_positions[t * a.top_k + j] = j < int64_t(chosen.size()) ? int32_t(chosen[size_t(j)]) : -1;
    }
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows, int64_t dim,
                float eps) {
  SY_CHECK(rows >= 0 && dim > 0, "layer_norm: need rows >= 0 and dim > 0, got rows={} dim={}", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < dim; ++i) mean += double(xr[i]);
    mean /= double(dim);
    for (int64_t i = 0; i < dim; ++i) var += (double(xr[i]) - mean) * (double(xr[i]) - mean);
    const double inv = 1.0 / std::sqrt(var / double(dim) + double(eps));
    for (int64_t i = 0; i < dim; ++i) {
      y[r * dim + i] = float((double(xr[i]) - mean) * inv * double(weight[i]) + double(bias[i]));
    }
  }
}

}  // namespace sy::ref
