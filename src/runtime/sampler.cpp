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

namespace {

// Candidate order: highest first, lower id first on ties, so the order (and the sample) is deterministic.
bool higher(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Draws an index of `probs[0, n)` (unnormalised weights summing to `sum`).
size_t draw(const std::vector<double>& probs, size_t n, double sum, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(0.0, sum);
  const double u = uniform(rng);
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += probs[i];
    if (u < acc) return i;
  }
  return n - 1;
}

}  // namespace

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (params_.temperature == 0.0f) {
    // One pass over the row: the first maximum (lowest id on ties) and whether every logit is finite.
    int64_t best = 0;
    float best_logit = logits[0];
    bool finite = true;
    for (int64_t i = 0; i < vocab; ++i) {
      const float v = logits[i];
      finite = finite && std::isfinite(v);
      if (v > best_logit) {
        best_logit = v;
        best = i;
      }
    }
    return finite ? static_cast<int32_t>(best) : -1;
  }
  // Scratch per thread, not per request: a server holds thousands of samplers, each would keep a
  // vocabulary's worth (1.2 MB for Qwen3).
  thread_local std::vector<std::pair<float, int32_t>> cand;
  thread_local std::vector<double> probs;
  const auto n_vocab = static_cast<size_t>(vocab);
  cand.resize(n_vocab);
  bool finite = true;
  for (size_t i = 0; i < n_vocab; ++i) {
    finite = finite && std::isfinite(logits[i]);
    cand[i] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
  }
  if (!finite) return -1;  // before any draw: the generator does not advance

  if (params_.top_k == 0 && params_.top_p >= 1.0f) {
    // Every token is a candidate: no order is needed, only min_p's threshold against the top token.
    const float max_logit = std::max_element(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
                              return a.first < b.first;
                            })->first;
    probs.resize(n_vocab);
    double sum = 0.0;
    const double threshold = static_cast<double>(params_.min_p);  // the top token's weight is 1
    for (size_t i = 0; i < n_vocab; ++i) {
      const double w = std::exp(static_cast<double>(cand[i].first - max_logit));
      sum += probs[i] = w >= threshold ? w : 0.0;
    }
    return cand[draw(probs, n_vocab, sum, rng_)].second;
  }

  // The candidates in order, as far as top-k and top-p can reach: top-k sorts k of them; top-p alone sorts a
  // prefix of 1024 first and the whole vocabulary only when that prefix holds less than top_p of the mass.
  size_t keep = n_vocab;
  if (params_.top_k > 0) {
    keep = std::min(n_vocab, static_cast<size_t>(params_.top_k));
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), higher);
  } else {
    const size_t prefix = std::min<size_t>(n_vocab, 1024);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(prefix), cand.end(), higher);
    const float max_logit = cand[0].first;
    double total = 0.0, head = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const double w = std::exp(static_cast<double>(cand[i].first - max_logit));
      total += w;
      if (i < prefix) head += w;
    }
    // With a margin, so that the nucleus walk below (which sums in another order) cannot leave the prefix.
    if (head * (1.0 - 1e-9) < static_cast<double>(params_.top_p) * total) {
      std::sort(cand.begin() + static_cast<std::ptrdiff_t>(prefix), cand.end(), higher);
    }
  }
  const float max_logit = cand[0].first;
  probs.resize(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(static_cast<double>(cand[i].first - max_logit));
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
  if (params_.min_p > 0.0f) {
    // probs[0] is the top token's (unnormalised 1), so the kept tokens are a prefix; the top one stays.
    const double threshold = static_cast<double>(params_.min_p) * probs[0];
    size_t n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  return cand[draw(probs, keep, sum, rng_)].second;
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
