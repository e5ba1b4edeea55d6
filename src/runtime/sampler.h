// Next-token sampling: greedy, or temperature → top-k → top-p (the order transformers applies them),
// drawn from a per-request seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sy {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

// Throws sy::Error describing the bad value (negative temperature, top_p outside (0, 1], ...).
void validate(const SamplingParams& params);

}  // namespace sy
