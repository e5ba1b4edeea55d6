// The portable routed-experts path (Backend::moe_experts) built from a backend's primitive ops.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "backend/scratch.h"

namespace sy {

// moe_experts by grouping (token, k) pairs per expert on the host, then gather → gate_up → SiLU·mul
// → down → weighted scatter-add per touched expert, all through `backend`'s own ops. The expert arrays may be
// in any form the backend keeps (gate_up_q, down_q). Grow-only scratch.
class GroupedMoe {
 public:
  // One expert's product y[m, n] = x[m, k] · w[n, k]^T, for a backend whose expert products differ from its linear.
  using ExpertLinear = std::function<void(const float* x, const Matrix& w, float* y, int64_t m, int64_t n, int64_t k)>;

  explicit GroupedMoe(Backend& backend) : backend_(backend), scratch_(backend) {}
  // The products go through `linear` if given, else the backend's linear.
  void run(const MoeExpertsArgs& c, const ExpertLinear& linear = nullptr);

 private:
  Backend& backend_;
  Scratch scratch_;
  std::vector<int32_t> ids_, rows_;
  std::vector<float> weights_, row_weights_;
  std::vector<int64_t> offsets_, fill_;
};

}  // namespace sy
