// Rotary-embedding inverse frequencies and cos/sin scale for each HF rope_type.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace sy {

struct RopeTable {
  std::vector<float> inv_freq;   // [rotary_dim / 2]
  float attention_scale = 1.0f;  // multiplies cos and sin (yarn)
};

// max_position_embeddings is the config's; yarn and llama3 read original_max_position from `rope`.
RopeTable compute_rope_table(const RopeConfig& rope, int64_t rotary_dim, int64_t max_position_embeddings);

}  // namespace sy
