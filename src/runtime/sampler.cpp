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
  SY_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1] (0 disables it), got {}", p.min_p);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

SampleRow Sampler::next_row(int64_t row) {
  SampleRow r{.row = row,
              .temperature = params_.temperature,
              .top_k = params_.top_k,
              .top_p = params_.top_p,
              .min_p = params_.min_p,
              .u = 0.0};
  if (!greedy()) r.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return r;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (greedy()) return cpu::sample_row(logits, vocab, next_row(0));
  const std::mt19937_64 before = rng_;
  const int32_t token = cpu::sample_row(logits, vocab, next_row(0));
  if (token == kSampleNotFinite) rng_ = before;  // a refused row draws nothing
  return token;
}

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t k) {
  SY_CHECK(token >= 0 && token < vocab, "token {} is outside the vocabulary [0, {})", token, vocab);
  SY_CHECK(k >= 0 && k <= kMaxLogprobs && k <= vocab, "logprobs asks for {} tokens; at most {} (vocabulary {})", k,
           kMaxLogprobs, vocab);
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  const auto logprob = [&](int32_t t) { return static_cast<float>(static_cast<double>(logits[t]) - log_z); };
  TokenLogprobs out{.logprob = logprob(token), .top = {}};
  if (k == 0) return out;
  // The k best (logit, id) pairs, kept sorted best first in a small array: one pass over the vocabulary.
  const auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(k) + 1);
  for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i) {
    if (static_cast<int32_t>(best.size()) == k && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (static_cast<int32_t>(best.size()) > k) best.pop_back();
  }
  for (int32_t t : best) out.top.emplace_back(t, logprob(t));
  return out;
}

}  // namespace sy
