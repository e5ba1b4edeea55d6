// Backend ops with a default in terms of the others (a backend overrides them to fuse).
#include "backend/backend.h"

#include <algorithm>

#include "base/check.h"

namespace sy {

void Backend::qk_norm_rope_kv_write(const QkRopeKvArgs& a) {
  if (a.q_norm) {
    rms_norm(a.q, a.q_norm, a.q, a.tokens * a.n_heads, a.head_dim, a.norm_eps);
    rms_norm(a.k, a.k_norm, a.k, a.tokens * a.kv_heads, a.head_dim, a.norm_eps);
  }
  RopeArgs ra{.x = a.q,
              .positions = a.positions,
              .inv_freq = a.inv_freq,
              .tokens = a.tokens,
              .heads = a.n_heads,
              .head_dim = a.head_dim,
              .rotary_dim = a.rotary_dim,
              .attention_scale = a.attention_scale,
              .interleaved = a.interleaved};
  rope(ra);
  ra.x = a.k;
  ra.heads = a.kv_heads;
  rope(ra);
  kv_write({.k = a.k,
            .v = a.v,
            .slots = a.slots,
            .k_cache = a.k_cache,
            .v_cache = a.v_cache,
            .tokens = a.tokens,
            .kv_heads = a.kv_heads,
            .head_dim = a.head_dim,
            .v_head_dim = a.head_dim,
            .kv_quant = a.kv_quant});
}

void Backend::set_expert_counting(bool on) {
  counting_experts_ = on;
  touched_.clear();
}

void Backend::count_experts(const int32_t* ids, int64_t n, int64_t n_experts) {
  std::vector<int32_t> host(static_cast<size_t>(n));
  if (n > 0) copy_to_host(host.data(), ids, host.size() * sizeof(int32_t));
  auto& seen = touched_.emplace_back(static_cast<size_t>(n_experts), uint8_t{0});
  for (int32_t e : host) {
    if (e >= 0 && e < n_experts) seen[static_cast<size_t>(e)] = 1;
  }
}

std::vector<int64_t> Backend::take_touched_experts() {
  std::vector<int64_t> out;
  for (const auto& seen : touched_) out.push_back(std::count(seen.begin(), seen.end(), uint8_t{1}));
  touched_.clear();
  return out;
}

void Backend::split_columns(const ColumnSplit& a) {
  const int64_t total = a.width[0] + a.width[1] + a.width[2];
  for (int64_t r = 0; r < a.rows; ++r) {
    int64_t at = 0;
    for (size_t i = 0; i < 3; ++i) {
      if (a.width[i] > 0) {
        copy_on_device(a.dst[i] + r * a.width[i], a.src + r * total + at,
                       static_cast<size_t>(a.width[i]) * sizeof(float));
      }
      at += a.width[i];
    }
  }
}

void Backend::sample_tokens(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens) {
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < n; ++i) {
    copy_to_host(row.data(), logits + rows[i].row * vocab, row.size() * sizeof(float));
    tokens[i] = cpu::sample_row(row.data(), vocab, rows[i]);
  }
}

void Backend::linear_quant(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) {
  (void)x, (void)bias, (void)y;
  SY_FAIL("this backend keeps no quantised weights, but linear got a quantised [{}, {}] matrix for {} rows (format {})",
          n, k, m, static_cast<int>(w.q.format));
}

void Backend::fill_random_fp8(const RandomFp8Args& a) {
  SY_FAIL("this backend keeps no FP8 weights, but was asked to draw {} of them", a.n);
}

void Backend::fill_random_q4(const RandomQ4Args& a) {
  SY_FAIL("this backend keeps no 4-bit weights, but was asked to draw {} bytes of them", a.n_bytes);
}

}  // namespace sy
