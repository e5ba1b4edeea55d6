// Sampler.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace sy {

void validate(const SamplingParams& p) {
  SY_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f,
           "temperature must be a finite number >= 0 (0 means greedy), got {}", p.temperature);
  SY_CHECK(p.top_k >= 0, "top_k must be >= 0 (0 disables it), got {}", p.top_k);
  SY_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1] (1 disables it), got {}", p.top_p);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (params_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  scratch_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    scratch_[static_cast<size_t>(i)] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
  }
  // Highest first, lower id first on ties, so the candidate order is deterministic.
  std::sort(scratch_.begin(), scratch_.end(),
            [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  size_t keep = scratch_.size();
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  const float max_logit = scratch_[0].first;
  std::vector<double> probs(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(static_cast<double>(scratch_[i].first - max_logit));
  if (params_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n] / sum;
      ++n;
      if (cum >= params_.top_p) break;
    }
    keep = n;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  const double u = uniform(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace sy
