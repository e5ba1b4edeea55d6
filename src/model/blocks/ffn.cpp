// Dense MLP and softmax-routed MoE blocks.
#include "model/blocks/ffn.h"

#include <algorithm>
#include <vector>

namespace sy {

namespace {
enum ScratchId : int { kGateUp = 200, kAct, kRouterLogits, kExpertIds, kExpertWeights, kSharedOut };
}

DenseMlpWeights bind_dense_mlp(WeightLoader& loader, const std::string& prefix, const MlpNames& names,
                               int64_t hidden, int64_t inter) {
  DenseMlpWeights w{.hidden = hidden, .inter = inter};
  void* gate_up = loader.allocate(2 * inter * hidden);
  loader.load_into(prefix + names.gate, {inter, hidden}, gate_up);
  loader.load_into(prefix + names.up, {inter, hidden}, loader.at(gate_up, inter * hidden));
  w.gate_up = gate_up;
  w.down = loader.bind(prefix + names.down, {hidden, inter});
  return w;
}

void dense_mlp_forward(const StepContext& step, Scratch& scratch, const DenseMlpWeights& w, const float* x,
                       float* out) {
  Backend& be = *step.backend;
  be.mark(Phase::dense);
  const int64_t T = step.tokens;
  float* gate_up = scratch.get<float>(kGateUp, T * 2 * w.inter);
  float* act = scratch.get<float>(kAct, T * w.inter);
  be.linear(x, w.gate_up, nullptr, gate_up, T, 2 * w.inter, w.hidden);
  be.silu_mul(gate_up, act, T, w.inter);
  be.linear(act, w.down, nullptr, out, T, w.hidden, w.inter);
}

MoeWeights bind_moe(WeightLoader& loader, const std::string& router_name, const std::string& expert_prefix,
                    const MlpNames& names, const MoeConfig& c) {
  MoeWeights w;
  w.router = loader.bind_f32(router_name, {c.n_experts, c.hidden});
  const int64_t gu = 2 * c.inter * c.hidden, dn = c.hidden * c.inter;
  void* gate_up = loader.allocate(c.n_experts * gu);
  void* down = loader.allocate(c.n_experts * dn);
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const std::string p = expert_prefix + std::to_string(e) + ".";
    loader.load_into(p + names.gate, {c.inter, c.hidden}, loader.at(gate_up, e * gu));
    loader.load_into(p + names.up, {c.inter, c.hidden}, loader.at(gate_up, e * gu + c.inter * c.hidden));
    loader.load_into(p + names.down, {c.hidden, c.inter}, loader.at(down, e * dn));
  }
  w.gate_up = gate_up;
  w.down = down;
  return w;
}

MoeWeights bind_deepseek_moe(WeightLoader& loader, const std::string& mlp_prefix, const MoeConfig& c) {
  const MlpNames names{.gate = "gate_proj.weight", .up = "up_proj.weight", .down = "down_proj.weight"};
  MoeWeights w = bind_moe(loader, mlp_prefix + "gate.weight", mlp_prefix + "experts.", names, c);
  w.score_bias = loader.bind_f32(mlp_prefix + "gate.e_score_correction_bias", {c.n_experts});
  if (c.shared_inter > 0) {
    w.shared = bind_dense_mlp(loader, mlp_prefix + "shared_experts.", names, c.hidden, c.shared_inter);
  }
  return w;
}

void moe_forward(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x,
                 float* out) {
  Backend& be = *step.backend;
  be.mark(Phase::router);
  const int64_t T = step.tokens, K = c.top_k, TK = T * K;
  float* logits = scratch.get<float>(kRouterLogits, T * c.n_experts);
  int32_t* ids = scratch.get<int32_t>(kExpertIds, TK);
  float* weights = scratch.get<float>(kExpertWeights, TK);
  be.linear_f32(x, w.router, logits, T, c.n_experts, c.hidden);
  switch (c.scoring) {
    case RouterScoring::softmax:
      be.softmax_topk({.logits = logits, .expert_ids = ids, .weights = weights, .tokens = T,
                       .n_experts = c.n_experts, .top_k = K, .renormalize = c.renormalize});
      break;
    case RouterScoring::sigmoid:
      be.grouped_topk({.logits = logits, .score_bias = w.score_bias, .expert_ids = ids, .weights = weights,
                       .tokens = T, .n_experts = c.n_experts, .top_k = K, .n_group = c.n_group,
                       .topk_group = c.topk_group, .renormalize = c.renormalize,
                       .scaling = c.routed_scaling_factor});
      break;
  }

  be.moe_experts({.x = x, .expert_ids = ids, .weights = weights, .gate_up = w.gate_up, .down = w.down, .out = out,
                  .tokens = T, .hidden = c.hidden, .inter = c.inter, .n_experts = c.n_experts, .top_k = K});
  if (c.shared_inter > 0) {
    float* shared = scratch.get<float>(kSharedOut, T * c.hidden);
    dense_mlp_forward(step, scratch, w.shared, x, shared);
    be.add(out, shared, T * c.hidden);
  }
}

}  // namespace sy
