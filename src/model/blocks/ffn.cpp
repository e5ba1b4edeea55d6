// Dense MLP and softmax-routed MoE blocks.
#include "model/blocks/ffn.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace sy {

namespace {
// This file's buffers in the scratch the model's blocks share.
constexpr std::string_view kArea = "ffn";
enum ScratchId : int {
  kGateUp,
  kAct,
  kRouterLogits,
  kExpertIds,
  kExpertWeights,
  kSharedOut,
  // expert parallelism
  kPlanIndex,
  kSendRows,
  kRecvRows,
  kRecvIds,
  kOnes,
  kExpertOut,
  kReturned,
  kOwnOut,
  kGathered
};
}  // namespace

DenseMlpWeights bind_dense_mlp(WeightLoader& loader, const std::string& prefix, const MlpNames& names, int64_t hidden,
                               int64_t inter) {
  const ShardPlan& plan = loader.plan();
  const Share share = even_share(inter, plan.dense_rank, plan.dense, "dense intermediate size");
  const bool split = plan.dense > 1;
  const Slice rows = split ? Slice{.dim = 0, .start = share.start, .count = share.count} : Slice{};
  const Slice cols = split ? Slice{.dim = 1, .start = share.start, .count = share.count} : Slice{};
  const int64_t li = share.count;
  DenseMlpWeights w{.hidden = hidden, .inter = li};
  const MatrixArray gate_up =
      loader.allocate_matrices(prefix + names.gate, {inter, hidden}, 1, 2 * li, hidden, li, rows);
  loader.load_matrix_into(prefix + names.gate, {inter, hidden}, gate_up, 0, 0, rows);
  loader.load_matrix_into(prefix + names.up, {inter, hidden}, gate_up, 0, li, rows);
  w.gate_up = gate_up.first;
  w.down = loader.bind_matrix(prefix + names.down, {hidden, inter}, cols);
  return w;
}

void dense_mlp_forward(const StepContext& step, Scratch& scratch, const DenseMlpWeights& w, const float* x,
                       float* out) {
  Backend& be = *step.backend;
  be.mark(Phase::dense);
  const int64_t T = step.tokens;
  float* gate_up = scratch.area(kArea).get<float>(kGateUp, T * 2 * w.inter);
  float* act = scratch.area(kArea).get<float>(kAct, T * w.inter);
  be.linear(x, w.gate_up, nullptr, gate_up, T, 2 * w.inter, w.hidden);
  be.silu_mul(gate_up, act, T, w.inter);
  be.linear(act, w.down, nullptr, out, T, w.hidden, w.inter);
}

MoeConfig moe_config(const ModelDesc& d) {
  const MoeDesc& m = d.moe;
  return {.hidden = d.hidden,
          .n_experts = m.n_experts,
          .top_k = m.top_k,
          .inter = m.inter,
          .renormalize = m.renormalize,
          .scoring = m.scoring,
          .n_group = m.n_group,
          .topk_group = m.topk_group,
          .routed_scaling_factor = static_cast<float>(m.routed_scaling_factor),
          .shared_inter = m.shared_inter,
          .router_bias = m.router_bias};
}

MoeWeights bind_moe(WeightLoader& loader, const std::string& prefix, const MlpNames& names, const MoeConfig& c) {
  const ShardPlan& plan = loader.plan();
  const Share experts = even_share(c.n_experts, plan.ep_rank, plan.ep, "routed experts");
  const Share inter = even_share(c.inter, plan.etp_rank, plan.etp, "expert intermediate size");
  const bool split = plan.etp > 1;
  const Slice rows = split ? Slice{.dim = 0, .start = inter.start, .count = inter.count} : Slice{};
  const Slice cols = split ? Slice{.dim = 1, .start = inter.start, .count = inter.count} : Slice{};
  MoeWeights w{.expert_begin = experts.start, .local_experts = experts.count, .local_inter = inter.count};
  w.router = loader.bind_f32(prefix + "gate.weight", {c.n_experts, c.hidden});
  if (c.router_bias) w.score_bias = loader.bind_f32(prefix + "gate.e_score_correction_bias", {c.n_experts});
  const int64_t li = inter.count;
  // Every expert is stored as the first one local here (checked as each is loaded).
  const std::string first = prefix + "experts." + std::to_string(experts.start) + ".";
  // The expert kernels take gate_up and down in one form: both kept as stored, or both dense (a rank's slice of
  // the intermediate size can keep one and not the other).
  const bool one_form = loader.kept_format(first + names.gate, {c.inter, c.hidden}, 2 * li, c.hidden, li, rows) ==
                        loader.kept_format(first + names.down, {c.hidden, c.inter}, c.hidden, li, c.hidden, cols);
  const MatrixArray gate_up = loader.allocate_matrices(first + names.gate, {c.inter, c.hidden}, experts.count, 2 * li,
                                                       c.hidden, li, rows, one_form);
  const MatrixArray down = loader.allocate_matrices(first + names.down, {c.hidden, c.inter}, experts.count, c.hidden,
                                                    li, c.hidden, cols, one_form);
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const std::string p = prefix + "experts." + std::to_string(e) + ".";
    const int64_t l = e - experts.start;
    if (l < 0 || l >= experts.count) {  // another ep rank's expert
      loader.skip_prefix(p);
      continue;
    }
    loader.load_matrix_into(p + names.gate, {c.inter, c.hidden}, gate_up, l, 0, rows);
    loader.load_matrix_into(p + names.up, {c.inter, c.hidden}, gate_up, l, li, rows);
    loader.load_matrix_into(p + names.down, {c.hidden, c.inter}, down, l, 0, cols);
  }
  w.gate_up = gate_up.first;
  w.down = down.first;
  if (c.shared_inter > 0) {
    w.shared = bind_dense_mlp(loader, prefix + "shared_experts.", kProjMlpNames, c.hidden, c.shared_inter);
  }
  return w;
}

namespace {
// Routing of T tokens into ids / weights [T, top_k] (device).
void route(Backend& be, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x, int64_t T,
           int32_t* ids, float* weights) {
  be.mark(Phase::router);
  const int64_t K = c.top_k;
  float* logits = scratch.area(kArea).get<float>(kRouterLogits, std::max<int64_t>(T, 1) * c.n_experts);
  be.linear_f32(x, w.router, logits, T, c.n_experts, c.hidden);
  switch (c.scoring) {
    case RouterScoring::softmax:
      be.softmax_topk({.logits = logits,
                       .expert_ids = ids,
                       .weights = weights,
                       .tokens = T,
                       .n_experts = c.n_experts,
                       .top_k = K,
                       .renormalize = c.renormalize,
                       .uniform = be.uniform_routing()});
      break;
    case RouterScoring::sigmoid:
      be.grouped_topk({.logits = logits,
                       .score_bias = w.score_bias,
                       .expert_ids = ids,
                       .weights = weights,
                       .tokens = T,
                       .n_experts = c.n_experts,
                       .top_k = K,
                       .n_group = c.n_group,
                       .topk_group = c.topk_group,
                       .renormalize = c.renormalize,
                       .scaling = c.routed_scaling_factor,
                       .uniform = be.uniform_routing()});
      break;
  }
  if (be.expert_counting()) be.count_experts(ids, T * K, c.n_experts);
}
}  // namespace

void moe_forward(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w, const float* x,
                 float* out) {
  Backend& be = *step.backend;
  const int64_t T = step.tokens, K = c.top_k, TK = T * K;
  int32_t* ids = scratch.area(kArea).get<int32_t>(kExpertIds, TK);
  float* weights = scratch.area(kArea).get<float>(kExpertWeights, TK);
  route(be, scratch, c, w, x, T, ids, weights);
  be.moe_experts({.x = x,
                  .expert_ids = ids,
                  .weights = weights,
                  .gate_up = w.gate_up.w,
                  .down = w.down.w,
                  .gate_up_q = w.gate_up.q,
                  .down_q = w.down.q,
                  .out = out,
                  .tokens = T,
                  .hidden = c.hidden,
                  .inter = w.local_inter,
                  .n_experts = w.local_experts,
                  .top_k = K});
  if (c.shared_inter > 0) {
    float* shared = scratch.area(kArea).get<float>(kSharedOut, T * c.hidden);
    dense_mlp_forward(step, scratch, w.shared, x, shared);
    be.add(out, shared, T * c.hidden);
  }
}

}  // namespace sy

namespace sy {

void moe_forward_parallel(const StepContext& step, Scratch& scratch, const MoeConfig& c, const MoeWeights& w,
                          const float* x, float* out, const ShardPlan& plan, ModelComm& comm) {
  Backend& be = *step.backend;
  Communicator& stage = *plan.groups->stage;
  const int64_t T = step.tokens, H = c.hidden, K = c.top_k;
  const auto S = static_cast<size_t>(stage.size());

  // This rank's share of its attention group's tokens: [own0, own0 + own).
  const int64_t chunk = (T + plan.tp - 1) / plan.tp;
  const int64_t own0 = std::min(T, chunk * plan.tp_rank), own = std::min(T, own0 + chunk) - own0;
  std::vector<int32_t> ids(static_cast<size_t>(own * K));
  std::vector<float> weights(static_cast<size_t>(own * K));
  if (own > 0) {
    int32_t* dev_ids = scratch.area(kArea).get<int32_t>(kExpertIds, own * K);
    float* dev_w = scratch.area(kArea).get<float>(kExpertWeights, own * K);
    route(be, scratch, c, w, x + own0 * H, own, dev_ids, dev_w);
    be.copy_to_host(ids.data(), dev_ids, ids.size() * sizeof(int32_t));
    be.copy_to_host(weights.data(), dev_w, weights.size() * sizeof(float));
  }

  // Each pair goes to its expert's ep rank, every etp rank of it, in this rank's edp replica; the send
  // buffer is ordered by destination.
  const int64_t per_rank = c.n_experts / plan.ep;
  std::vector<int64_t> send_rows(S, 0);
  for (int32_t e : ids) {
    for (int j = 0; j < plan.etp; ++j)
      ++send_rows[static_cast<size_t>(plan.moe_stage_rank(plan.edp_rank, e / static_cast<int32_t>(per_rank), j))];
  }
  std::vector<int64_t> cursor(S, 0);
  for (size_t r = 1; r < S; ++r) cursor[r] = cursor[r - 1] + send_rows[r - 1];
  const int64_t n_send = cursor[S - 1] + send_rows[S - 1];
  // Host plan: [n_send] token row (within the own share), [n_send] local expert id, [n_send] weight bits.
  std::vector<int32_t> token_of(static_cast<size_t>(n_send)), expert_of(static_cast<size_t>(n_send));
  std::vector<float> weight_of(static_cast<size_t>(n_send));
  for (int64_t p = 0; p < own * K; ++p) {
    const int32_t e = ids[static_cast<size_t>(p)];
    const auto ep_r = static_cast<int>(e / per_rank);
    for (int j = 0; j < plan.etp; ++j) {
      const auto i = static_cast<size_t>(cursor[static_cast<size_t>(plan.moe_stage_rank(plan.edp_rank, ep_r, j))]++);
      token_of[i] = static_cast<int32_t>(p / K);
      expert_of[i] = e - static_cast<int32_t>(ep_r * per_rank);
      weight_of[i] = weights[static_cast<size_t>(p)];
    }
  }
  std::vector<int64_t> recv_rows = comm.exchange_counts(stage, send_rows);
  be.mark(Phase::router);  // the dispatch's plan copied over and its rows gathered (the wait above: communication)
  int64_t n_recv = 0;
  for (int64_t v : recv_rows) n_recv += v;

  // Dispatch: the expert ids, then the activations.
  int32_t* dev_plan = scratch.area(kArea).get<int32_t>(kPlanIndex, std::max<int64_t>(2 * n_send, 1));
  if (n_send > 0) {
    be.copy_to_device(dev_plan, token_of.data(), token_of.size() * sizeof(int32_t));
    be.copy_to_device(dev_plan + n_send, expert_of.data(), expert_of.size() * sizeof(int32_t));
  }
  float* send_buf = scratch.area(kArea).get<float>(kSendRows, std::max<int64_t>(n_send, 1) * H);
  if (n_send > 0) be.gather_rows(x + own0 * H, dev_plan, send_buf, n_send, H);
  int32_t* recv_ids = scratch.area(kArea).get<int32_t>(kRecvIds, std::max<int64_t>(n_recv, 1));
  float* recv_buf = scratch.area(kArea).get<float>(kRecvRows, std::max<int64_t>(n_recv, 1) * H);
  comm.all_to_all_v(stage, dev_plan + n_send, send_rows, recv_ids, recv_rows, DType::i32);
  std::vector<int64_t> send_elems(S), recv_elems(S);
  for (size_t r = 0; r < S; ++r) {
    send_elems[r] = send_rows[r] * H;
    recv_elems[r] = recv_rows[r] * H;
  }
  comm.all_to_all_v(stage, send_buf, send_elems, recv_buf, recv_elems, DType::f32);

  // The experts held here, each received row through its one expert with weight 1 (the routing weight is
  // applied where the token lives).
  float* expert_out = scratch.area(kArea).get<float>(kExpertOut, std::max<int64_t>(n_recv, 1) * H);
  if (n_recv > 0) {
    float* ones = scratch.area(kArea).get<float>(kOnes, n_recv);
    const std::vector<float> one(static_cast<size_t>(n_recv), 1.0f);
    be.copy_to_device(ones, one.data(), one.size() * sizeof(float));
    be.mark(Phase::experts);
    be.moe_experts({.x = recv_buf,
                    .expert_ids = recv_ids,
                    .weights = ones,
                    .gate_up = w.gate_up.w,
                    .down = w.down.w,
                    .gate_up_q = w.gate_up.q,
                    .down_q = w.down.q,
                    .out = expert_out,
                    .tokens = n_recv,
                    .hidden = H,
                    .inter = w.local_inter,
                    .n_experts = w.local_experts,
                    .top_k = 1});
  }
  // Combine: the results come back in send order; each adds weight · row onto its token.
  float* returned = scratch.area(kArea).get<float>(kReturned, std::max<int64_t>(n_send, 1) * H);
  comm.all_to_all_v(stage, expert_out, recv_elems, returned, send_elems, DType::f32);
  float* own_out = plan.tp > 1 ? scratch.area(kArea).get<float>(kOwnOut, std::max<int64_t>(chunk, 1) * H) : out;
  be.mark(Phase::combine);
  if (own > 0) be.zero(own_out, static_cast<size_t>(own * H) * sizeof(float));
  if (n_send > 0) {
    float* dev_w = scratch.area(kArea).get<float>(kExpertWeights, n_send);
    be.copy_to_device(dev_w, weight_of.data(), weight_of.size() * sizeof(float));
    be.scatter_add_rows(own_out, dev_plan, dev_w, returned, n_send, H);
  }
  // The tp group's shares back into every tp rank's T rows (share t sits at rows t·chunk).
  if (plan.tp > 1 && T > 0) {
    float* gathered = scratch.area(kArea).get<float>(kGathered, chunk * plan.tp * H);
    comm.all_gather(*plan.groups->tp, own_out, gathered, chunk * H);
    be.copy_on_device(out, gathered, static_cast<size_t>(T * H) * sizeof(float));
  }
}

}  // namespace sy
