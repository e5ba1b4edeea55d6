// Next-token sampling of one logit row on the host: greedy, or temperature → top-k → top-p → min-p with the
// caller's uniform draw. The oracle of the device sampler (kernels/cuda/sampling.cu).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace sy::cpu {

namespace {

// Candidate order: highest first, lower id first on ties, so the order (and the sample) is deterministic.
bool higher(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The index of `probs[0, n)` (unnormalised weights summing to `sum`) that the uniform draw u in [0, 1) lands on.
size_t draw(const std::vector<double>& probs, size_t n, double sum, double u) {
  const double target = u * sum;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += probs[i];
    if (target < acc) return i;
  }
  return n - 1;
}

}  // namespace

int32_t sample_row(const float* logits, int64_t vocab, const SampleRow& p) {
  if (p.temperature == 0.0f) {
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
    return finite ? static_cast<int32_t>(best) : kSampleNotFinite;
  }
  // Scratch per thread, not per request: a server holds thousands of requests, each would keep a
  // vocabulary's worth (1.2 MB for Qwen3).
  thread_local std::vector<std::pair<float, int32_t>> cand;
  thread_local std::vector<double> probs;
  const auto n_vocab = static_cast<size_t>(vocab);
  cand.resize(n_vocab);
  bool finite = true;
  for (size_t i = 0; i < n_vocab; ++i) {
    finite = finite && std::isfinite(logits[i]);
    cand[i] = {logits[i] / p.temperature, static_cast<int32_t>(i)};
  }
  if (!finite) return kSampleNotFinite;

  if (p.top_k == 0 && p.top_p >= 1.0f) {
    // Every token is a candidate: no order is needed, only min_p's threshold against the top token.
    const float max_logit = std::max_element(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
                              return a.first < b.first;
                            })->first;
    probs.resize(n_vocab);
    double sum = 0.0;
    const double threshold = static_cast<double>(p.min_p);  // the top token's weight is 1
    for (size_t i = 0; i < n_vocab; ++i) {
      const double w = std::exp(static_cast<double>(cand[i].first - max_logit));
      sum += probs[i] = w >= threshold ? w : 0.0;
    }
    return cand[draw(probs, n_vocab, sum, p.u)].second;
  }

  // The candidates in order, as far as top-k and top-p can reach: top-k sorts k of them; top-p alone sorts a
  // prefix of 1024 first and the whole vocabulary only when that prefix holds less than top_p of the mass.
  size_t keep = n_vocab;
  if (p.top_k > 0) {
    keep = std::min(n_vocab, static_cast<size_t>(p.top_k));
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
    if (head * (1.0 - 1e-9) < static_cast<double>(p.top_p) * total) {
      std::sort(cand.begin() + static_cast<std::ptrdiff_t>(prefix), cand.end(), higher);
    }
  }
  const float max_logit = cand[0].first;
  probs.resize(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(static_cast<double>(cand[i].first - max_logit));
  if (p.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n] / sum;
      ++n;
      if (cum >= p.top_p) break;
    }
    keep = n;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  if (p.min_p > 0.0f) {
    // probs[0] is the top token's (unnormalised 1), so the kept tokens are a prefix; the top one stays.
    const double threshold = static_cast<double>(p.min_p) * probs[0];
    size_t n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  return cand[draw(probs, keep, sum, p.u)].second;
}

}  // namespace sy::cpu
