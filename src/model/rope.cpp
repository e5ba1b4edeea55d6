// Rope tables following transformers' modeling_rope_utils for default, linear, yarn and llama3.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

// transformers computes base ** (arange(0, dim, 2) / dim) in fp32.
std::vector<float> base_pos_freqs(double theta, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[static_cast<size_t>(i)] = std::pow(static_cast<float>(theta), expo);
  }
  return f;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeTable yarn(const RopeConfig& r, int64_t dim, int64_t max_pos) {
  RopeTable t;
  const int64_t original = r.original_max_position > 0 ? r.original_max_position : max_pos;
  const double factor = r.factor;
  if (r.attention_factor) {
    t.attention_scale = static_cast<float>(*r.attention_factor);
  } else if (r.mscale != 0.0 && r.mscale_all_dim != 0.0) {
    t.attention_scale = static_cast<float>(yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim));
  } else {
    t.attention_scale = static_cast<float>(yarn_mscale(factor, 1.0));
  }
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(static_cast<double>(original) / (rotations * 2.0 * M_PI))) /
           (2.0 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const auto pos_freqs = base_pos_freqs(r.theta, dim);
  t.inv_freq.resize(pos_freqs.size());
  for (size_t i = 0; i < pos_freqs.size(); ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    t.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return t;
}

RopeTable llama3(const RopeConfig& r, int64_t dim, int64_t max_pos) {
  RopeTable t;
  const double original =
      r.original_max_position > 0 ? static_cast<double>(r.original_max_position) : static_cast<double>(max_pos);
  const double low_wavelen = original / r.low_freq_factor, high_wavelen = original / r.high_freq_factor;
  for (float pf : base_pos_freqs(r.theta, dim)) {
    const double inv = 1.0 / pf, wavelen = 2.0 * M_PI / inv;
    double v = inv;
    if (wavelen > low_wavelen) {
      v = inv / r.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      v = (1.0 - smooth) * inv / r.factor + smooth * inv;
    }
    t.inv_freq.push_back(static_cast<float>(v));
  }
  return t;
}

}  // namespace

RopeTable compute_rope_table(const RopeConfig& rope, int64_t rotary_dim, int64_t max_position_embeddings) {
  SY_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary dimension must be positive and even, got {}", rotary_dim);
  SY_CHECK(rope.theta > 0, "rope_theta must be positive, got {}", rope.theta);
  if (rope.type == "yarn") return yarn(rope, rotary_dim, max_position_embeddings);
  if (rope.type == "llama3") return llama3(rope, rotary_dim, max_position_embeddings);
  SY_CHECK(rope.type == "default" || rope.type == "linear",
           "rope type '{}' is not supported; supported: default, linear, yarn, llama3", cut_for_message(rope.type));
  RopeTable t;
  for (float pf : base_pos_freqs(rope.theta, rotary_dim)) {
    float inv = 1.0f / pf;
    if (rope.type == "linear") inv /= static_cast<float>(rope.factor);
    t.inv_freq.push_back(inv);
  }
  return t;
}

}  // namespace sy
