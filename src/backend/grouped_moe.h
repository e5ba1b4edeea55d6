// The portable routed-experts path (Backend::moe_experts) built from a backend's primitive ops.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/scratch.h"

namespace sy {

// moe_experts by grouping (token, k) pairs per expert on the host, then gather → gate_up → SiLU·mul
// → down → weighted scatter-add per touched expert, all through `backend`'s own ops. Grow-only scratch.
class GroupedMoe {
 public:
  explicit GroupedMoe(Backend& backend) : backend_(backend), scratch_(backend) {}
  void run(const MoeExpertsArgs& c);

 private:
  Backend& backend_;
  Scratch scratch_;
  std::vector<int32_t> ids_, rows_;
  std::vector<float> weights_, row_weights_;
  std::vector<int64_t> offsets_, fill_;
};

}  // namespace sy
