// Feed-forward blocks: the dense SwiGLU MLP and the routed mixture of experts.
// Gate and up projections are fused at load into one [2*inter, hidden] matrix (gate rows first).
#pragma once

#include <cstdint>
#include <string>

#include "arch/model_desc.h"
#include "model/blocks/step.h"
#include "model/parallel.h"
#include "model/weights.h"

namespace sy {

// Checkpoint names of one SwiGLU MLP's matrices, relative to a prefix (e.g. "gate_proj.weight").
struct MlpNames {
  std::string gate;
  std::string up;
  std::string down;
};
// The names of dense MLPs and shared experts in every family here.
inline const MlpNames kProjMlpNames{.gate = "gate_proj.weight", .up = "up_proj.weight", .down = "down_proj.weight"};

struct DenseMlpWeights {
  Matrix gate_up;  // [2 * inter, hidden]
  Matrix down;     // [hidden, inter]
  int64_t hidden = 0;
  int64_t inter = 0;  // this rank's share of the intermediate dimension (dense_tp)
};

// `inter` is the model's; with dense_tp > 1 (loader.plan()) the rank binds its share of the intermediate
// dimension (gate and up rows, down columns) and its output is a partial sum over the dense_tp group.
DenseMlpWeights bind_dense_mlp(WeightLoader& loader, const std::string& prefix, const MlpNames& names, int64_t hidden,
                               int64_t inter);
// out[T, hidden] = down(silu(gate x) * up x)
void dense_mlp_forward(const StepContext& step, Scratch& scratch, const DenseMlpWeights& w, const float* x, float* out);

struct MoeConfig {
  int64_t hidden = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t inter = 0;         // per-expert intermediate size
  bool renormalize = false;  // top-k weights divided by their sum (Mixtral always; Qwen3 / DeepSeek if norm_topk_prob)
  RouterScoring scoring = RouterScoring::softmax;
  int64_t n_group = 1;  // sigmoid: experts form n_group equal groups, only the topk_group best are eligible
  int64_t topk_group = 1;
  float routed_scaling_factor = 1.0f;  // sigmoid: multiplies the final routed weights
  int64_t shared_inter = 0;  // shared experts as one SwiGLU MLP of this size (moe_inter * n_shared_experts); 0: none
  bool router_bias = false;  // e_score_correction_bias (sigmoid routing)
};

// The routed-experts block of the model `d` describes.
MoeConfig moe_config(const ModelDesc& d);

struct MoeWeights {
  const float* router = nullptr;      // fp32 [n_experts, hidden]
  const float* score_bias = nullptr;  // fp32 [n_experts] e_score_correction_bias, or null
  Matrix gate_up;                     // [local_experts, 2 * local_inter, hidden]
  Matrix down;                        // [local_experts, hidden, local_inter]
  DenseMlpWeights shared;             // added to every token's output when MoeConfig::shared_inter > 0
  // This rank's experts [expert_begin, expert_begin + local_experts) (ep) and its share of each one's
  // intermediate dimension (etp); the whole layer on one rank.
  int64_t expert_begin = 0;
  int64_t local_experts = 0;
  int64_t local_inter = 0;
};

// Binds the block under `prefix` (e.g. "model.layers.3.mlp."): gate.weight (every rank routes with the
// whole router), gate.e_score_correction_bias with router_bias, for each of this rank's experts e
// (loader.plan(): ep, etp) experts.{e}.{names} (the other experts are skipped), and with shared_inter > 0
// shared_experts.{gate,up,down}_proj.weight.
MoeWeights bind_moe(WeightLoader& loader, const std::string& prefix, const MlpNames& names, const MoeConfig& c);
// Routing in fp32 (softmax or sigmoid as configured), then out[T, hidden] = Σ_k w_k · expert_k(x) (+ shared(x)).
// On one rank, or with every expert local (tp only): the output is complete except for the etp / dense
// partial sums, which the caller reduces.
void moe_forward(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x,
                 float* out);

// Expert parallelism over the stage (ep, etp, edp with attention tp and dp): the T tokens of this rank's
// attention group (replicated across its tp ranks) are split over the tp ranks; each routes its share,
// sends each (token, expert) pair's activation to the ranks holding that expert (its ep rank, every etp
// rank, this rank's edp replica) in one all-to-all-v, the experts run there, the results come back in a
// second all-to-all-v and are combined with the routing weights; the tp group then gathers the tokens
// back. `out` holds the routed experts' sum on return; shared experts are the caller's (they run on the
// dense_tp group). Collective over the stage, also with T == 0 (a dp rank without tokens in this step
// still serves its experts).
void moe_forward_parallel(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w,
                          const float* x, float* out, const ShardPlan& plan, ModelComm& comm);

}  // namespace sy
