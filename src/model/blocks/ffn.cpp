// Dense MLP and softmax-routed MoE blocks.
#include "model/blocks/ffn.h"

#include <algorithm>
#include <vector>

namespace sy {

namespace {
enum ScratchId : int { kGateUp = 200, kAct, kRouterLogits, kExpertIds, kExpertWeights, kRows, kRowWeights, kXe, kYe };
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

void moe_forward(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x,
                 float* out) {
  Backend& be = *step.backend;
  be.mark(Phase::router);
  const int64_t T = step.tokens, K = c.top_k, TK = T * K;
  float* logits = scratch.get<float>(kRouterLogits, T * c.n_experts);
  int32_t* ids = scratch.get<int32_t>(kExpertIds, TK);
  float* weights = scratch.get<float>(kExpertWeights, TK);
  be.linear_f32(x, w.router, logits, T, c.n_experts, c.hidden);
  be.softmax_topk({.logits = logits, .expert_ids = ids, .weights = weights, .tokens = T,
                   .n_experts = c.n_experts, .top_k = K, .renormalize = c.renormalize});

  // Group the (token, k) pairs by expert on the host, tokens in order within each expert.
  std::vector<int32_t> host_ids(static_cast<size_t>(TK));
  std::vector<float> host_w(static_cast<size_t>(TK));
  be.copy_to_host(host_ids.data(), ids, host_ids.size() * sizeof(int32_t));
  be.copy_to_host(host_w.data(), weights, host_w.size() * sizeof(float));
  std::vector<int64_t> offsets(static_cast<size_t>(c.n_experts) + 1, 0);
  for (int32_t e : host_ids) ++offsets[static_cast<size_t>(e) + 1];
  for (size_t e = 0; e < static_cast<size_t>(c.n_experts); ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> rows(static_cast<size_t>(TK));
  std::vector<float> row_w(static_cast<size_t>(TK));
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const auto i = static_cast<size_t>(t * K + k);
      const auto at = static_cast<size_t>(fill[static_cast<size_t>(host_ids[i])]++);
      rows[at] = static_cast<int32_t>(t);
      row_w[at] = host_w[i];
    }
  }
  int32_t* d_rows = scratch.get<int32_t>(kRows, TK);
  float* d_row_w = scratch.get<float>(kRowWeights, TK);
  be.copy_to_device(d_rows, rows.data(), rows.size() * sizeof(int32_t));
  be.copy_to_device(d_row_w, row_w.data(), row_w.size() * sizeof(float));

  int64_t max_rows = 0;
  for (size_t e = 0; e < static_cast<size_t>(c.n_experts); ++e) max_rows = std::max(max_rows, offsets[e + 1] - offsets[e]);
  float* xe = scratch.get<float>(kXe, max_rows * c.hidden);
  float* gate_up = scratch.get<float>(kGateUp, max_rows * 2 * c.inter);
  float* act = scratch.get<float>(kAct, max_rows * c.inter);
  float* ye = scratch.get<float>(kYe, max_rows * c.hidden);
  be.zero(out, static_cast<size_t>(T * c.hidden) * sizeof(float));
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const int64_t begin = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e) + 1] - begin;
    if (n == 0) continue;
    be.mark(Phase::experts);
    be.gather_rows(x, d_rows + begin, xe, n, c.hidden);
    be.linear(xe, weight_at(be, w.gate_up, e * 2 * c.inter * c.hidden), nullptr, gate_up, n, 2 * c.inter, c.hidden);
    be.silu_mul(gate_up, act, n, c.inter);
    be.linear(act, weight_at(be, w.down, e * c.hidden * c.inter), nullptr, ye, n, c.hidden, c.inter);
    be.mark(Phase::combine);
    be.scatter_add_rows(out, d_rows + begin, d_row_w + begin, ye, n, c.hidden);
  }
}

}  // namespace sy
