// Feed-forward blocks: the dense SwiGLU MLP and the routed mixture of experts.
// Gate and up projections are fused at load into one [2*inter, hidden] matrix (gate rows first).
#pragma once

#include <cstdint>
#include <string>

#include "model/blocks/step.h"
#include "model/weights.h"

namespace sy {

// Checkpoint names of one SwiGLU MLP's matrices, relative to a prefix (e.g. "gate_proj.weight").
struct MlpNames {
  std::string gate;
  std::string up;
  std::string down;
};

struct DenseMlpWeights {
  WeightPtr gate_up = nullptr;  // [2 * inter, hidden]
  WeightPtr down = nullptr;     // [hidden, inter]
  int64_t hidden = 0;
  int64_t inter = 0;
};

DenseMlpWeights bind_dense_mlp(WeightLoader& loader, const std::string& prefix, const MlpNames& names,
                               int64_t hidden, int64_t inter);
// out[T, hidden] = down(silu(gate x) * up x)
void dense_mlp_forward(const StepContext& step, Scratch& scratch, const DenseMlpWeights& w, const float* x,
                       float* out);

struct MoeConfig {
  int64_t hidden = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t inter = 0;           // per-expert intermediate size
  bool renormalize = false;    // top-k weights divided by their sum (Mixtral always; Qwen3 if norm_topk_prob)
};

struct MoeWeights {
  const float* router = nullptr;   // fp32 [n_experts, hidden]
  WeightPtr gate_up = nullptr;  // [n_experts, 2 * inter, hidden]
  WeightPtr down = nullptr;     // [n_experts, hidden, inter]
};

// Binds `router_name` and, for each expert e, expert_prefix + e + "." + names.{gate,up,down}.
MoeWeights bind_moe(WeightLoader& loader, const std::string& router_name, const std::string& expert_prefix,
                    const MlpNames& names, const MoeConfig& c);
// Softmax routing in fp32, top-k, optional renormalisation; out[T, hidden] = Σ_k w_k · expert_k(x).
void moe_forward(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x,
                 float* out);

}  // namespace sy
