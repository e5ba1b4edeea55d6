// Next-token sampling: greedy, or temperature → top-k → top-p → min-p (the order transformers applies
// them), drawn from a per-request seeded generator; and the log-probabilities a request may ask for.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace sy {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  // 0: off. Drops tokens whose probability (after temperature) is below min_p times the top token's.
  float min_p = 0.0f;
  uint64_t seed = 0;
};

// A request's sampling: its parameters and its seeded generator. The arithmetic is cpu::sample_row's (and
// each backend's sample_tokens, which draws the same token from the same row and uniform draw).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // The next token, or -1 when a logit of the row is NaN or infinite (such a row is never sampled, and the
  // generator does not advance). The check rides on the pass the sampling makes anyway.
  int32_t sample(const float* logits, int64_t vocab);
  // The next row to sample as a backend takes it: the parameters and the generator's next uniform draw
  // (none when greedy).
  SampleRow next_row(int64_t row);
  bool greedy() const { return params_.temperature == 0.0f; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Throws sy::Error describing the bad value (negative temperature, top_p outside (0, 1], ...).
void validate(const SamplingParams& params);

// The most likely tokens a request may ask for with each sampled token (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxLogprobs = 20;

// Log-softmax over the raw logits (before temperature and filtering) at one sampled position.
struct TokenLogprobs {
  float logprob = 0.0f;                        // of the sampled token
  std::vector<std::pair<int32_t, float>> top;  // the k most likely, highest first, lower id on ties
};

// The logprob of `token` and of the `k` most likely tokens (0 <= k <= min(kMaxLogprobs, vocab)) under
// log_softmax(logits), summed in double.
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t k);

}  // namespace sy
