// The speed model: each rank's ops per step, as model/transformer.cpp, blocks/attention.cpp, mla.cpp, ffn.cpp
// and runtime/executor.cpp issue them, priced op by op (cost_ops.cpp); the busiest rank of the slowest stage decides.
#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "base/check.h"
#include "planner/cost_ops.h"
#include "planner/perf.h"

namespace sy {

namespace {

// The op pricing (cost_ops.h): Ops, the phases, the explanation's trace.
using namespace cost;

// Mirrors of the engine's choices (kept equal by hand; each names where it comes from).
constexpr int64_t kStackedQkvMaxTokens = 256;  // blocks/attention.cpp: q, k, v in one product up to this many rows

// A step whose ranks read more than this many bytes in all stays beyond a CPU's last-level cache (tens of MB on
// the machines this runs on): its ops stream their operands from memory (MachineProfile::stream_bytes_per_s).
constexpr double kCpuCacheBytes = 64e6;

// The step's shape on one rank of a stage.
struct RankStep {
  int64_t tokens = 0;        // this dp replica's tokens of the micro-batch (the busiest replica's)
  int64_t micro_tokens = 0;  // the micro-batch's tokens over all dp replicas (fewer than tokens · dp when some idle)
  int64_t seqs = 0;
  int64_t q_len = 1;
  int64_t context = 0;
  int64_t logit_rows = 0;
  bool first_stage = true;
  bool last_stage = true;
  int64_t layers_begin = 0, layers_end = 0;
  double share = 1;          // Busy::share of the stage's ops
  double experts_share = 1;  // of the routed experts under expert parallelism (the ranks that receive pairs)
};

// Expected distinct experts of `n` that `pairs_tokens` tokens touch when each picks k of all E uniformly.
double touched(double local_experts, double k, double e_all, double tokens) {
  if (e_all <= 0) return 0;
  return local_experts * (1.0 - std::pow(1.0 - k / e_all, tokens));
}

// The distinct experts of a call of `p` pairs when the busiest rank averages `pairs` pairs on `touched` distinct
// experts: its share of them in proportion (the mean over the two calls the rank's pairs are split into stays
// `touched`), at least one for a call with pairs and at most the call's pairs and the rank's experts. One token's
// pairs go to distinct experts, so at batch 1 a call of 3 pairs touches 3 (it was priced at the rank's mean,
// 2.04 on the medium config's ep4, and a 2-pair call of the bundled model's ep4 at 1.14: two rows on one expert,
// the BLAS product of several rows, 6 times the single row's time; docs/perf-notes.md item 56).
double touched_of_pairs(double p, double pairs, double touched, int64_t local_experts) {
  if (p <= 0) return 0;
  const double per_pair = pairs > 0 ? std::min(1.0, touched / pairs) : 1.0;
  return std::clamp(p * per_pair, 1.0, std::max(1.0, std::min(p, d(local_experts))));
}

// The expected load of the busiest of `n` ranks holding E/n experts each when `tokens` tokens pick k distinct
// experts of E uniformly. A rank's pairs: a token brings a hypergeometric count (mean k/n, variance
// k·(1/n)(1 − 1/n)(E − k)/(E − 1)); over the tokens, normal. The ranks' loads sum to the pairs, so they deviate
// from their mean as n independent normals do from theirs: the largest lies √(n/(n − 1)) · E[max of n] standard
// deviations above the mean. Against a simulation of the routing (64 tokens × 8 of 64 experts on 8 ranks: 74.98
// pairs; 256 × 4 of 32 on 8: 143.1) this gives 74.7 and 143.3, where mean + √(2 ln n) spreads gave 79.3 and 149.6.
double busiest(double tokens, int64_t k, int64_t e_all, int n) {
  const double pairs = tokens * d(k);
  if (n <= 1) return pairs;
  const double p = 1.0 / n;
  const double fpc = e_all > 1 ? d(e_all - k) / d(e_all - 1) : 1.0;
  const double sd = std::sqrt(pairs * p * (1 - p) * fpc);
  return pairs * p + sd * std::sqrt(static_cast<double>(n) / (n - 1)) * expected_max_normal(n);
}

void attention_ops(Ops& o, const ModelDesc& s, const ParallelSizes& z, const RankStep& r) {
  const AttentionDesc& a = s.attn;
  const int64_t T = r.tokens, H = s.hidden;
  if (a.kind == AttentionKind::gqa) {
    const int64_t nh = a.n_heads / z.tp, kvh = std::max<int64_t>(1, a.kv_heads / z.tp), hd = a.head_dim;
    const int64_t qd = nh * hd, kvd = kvh * hd;
    if (T <= kStackedQkvMaxTokens) {
      o.linear(attention, T, qd + 2 * kvd, H);
      if (T > 1) o.rows_op(attention, "split_columns", "rows", T, {"width"}, {qd + 2 * kvd}, 8);
    } else {
      o.linear(attention, T, qd, H);
      o.linear(attention, T, kvd, H, false, 2);
    }
    o.qk_rope(T, nh, kvh, hd);
    o.gqa_attention(r.seqs, r.q_len, r.context, nh, kvh, hd);
    o.linear(attention, T, H, qd);
    return;
  }
  const int64_t nh = a.n_heads / z.tp, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  if (a.q_lora_rank > 0) {
    o.linear(attention, T, a.q_lora_rank, H);
    o.rows_op(attention, "rms_norm", "rows", T, {"dim"}, {a.q_lora_rank}, 8);
    o.linear(attention, T, nh * qk, a.q_lora_rank);
  } else {
    o.linear(attention, T, nh * qk, H);
  }
  o.linear(attention, T, a.kv_lora_rank + a.qk_rope_head_dim, H);
  o.rows_op(attention, "rope", "tokens", T, {"n_heads", "head_dim"}, {nh, qk}, 8);
  o.rows_op(attention, "rope", "tokens", T, {"n_heads", "head_dim"}, {1, a.kv_lora_rank + a.qk_rope_head_dim}, 8);
  o.rows_op(attention, "mla_kv_write", "tokens", T, {"kv_lora_rank", "rope_dim"}, {a.kv_lora_rank, a.qk_rope_head_dim},
            8);
  if (s.has_indexer()) {
    // The sparse indexer (blocks/indexer.cpp): its products and a top-k over the context, by their work.
    o.linear(attention, T, a.index_n_heads * a.index_head_dim, a.q_lora_rank);
    o.linear(attention, T, a.index_head_dim, H);
    o.linear(attention, T, a.index_n_heads, H);
  }
  o.head_linear(T, nh, a.qk_nope_head_dim, a.kv_lora_rank);
  const int64_t ctx = s.has_indexer() ? std::min(r.context, a.index_topk) : r.context;
  o.mla(r.seqs, r.q_len, ctx, nh, a.kv_lora_rank, a.qk_rope_head_dim);
  o.head_linear(T, nh, a.kv_lora_rank, a.v_head_dim);
  o.linear(attention, T, H, nh * a.v_head_dim);
}

// A SwiGLU MLP sharded over dense_tp on `rows` rows (transformer.cpp dense_block), its reduction included.
void dense_mlp_ops(Ops& o, const ParallelSizes& z, int64_t rows, int64_t T, int64_t H, int64_t inter, bool add,
                   bool gathered) {
  if (rows <= 0) return;
  const int64_t li = inter / z.dense_tp;
  if (gathered) o.collective("all_gather", z.dense_tp, z.dense_tp, d(T * H * 4));
  o.linear(dense, rows, 2 * li, H);
  o.rows_op(dense, "silu_mul", "rows", rows, {"inter"}, {li}, 12);
  o.linear(dense, rows, H, li);
  o.collective(gathered ? "all_gather" : "all_reduce", z.dense_tp, z.dense_tp, d(T * H * 4));
  if (add) o.rows_op(dense, "add", "n", T * H, {}, {}, 12);
}

void moe_ops(Ops& o, const ModelDesc& s, const ParallelSizes& z, const RankStep& r, bool dense_gathered) {
  const MoeDesc& m = s.moe;
  const int64_t T = r.tokens, H = s.hidden, K = m.top_k;
  const int64_t local_e = m.n_experts / z.ep, li = m.inter / z.etp;
  const bool tp_only = z.ep == 1 && z.edp == 1 && z.dp == 1 && z.dense_tp == z.tp;
  const auto route = [&](int64_t tokens) {
    o.linear(router, tokens, m.n_experts, H, true);
    if (m.scoring == RouterScoring::softmax) {
      o.rows_op(router, "softmax_topk", "tokens", tokens, {"n_experts", "top_k"}, {m.n_experts, K}, 4, 1);
    } else {
      o.rows_op(router, "grouped_topk", "tokens", tokens, {"n_experts", "top_k", "n_group", "topk_group"},
                {m.n_experts, K, m.n_group, m.topk_group}, 4, 1);
    }
  };
  if (tp_only) {
    route(T);
    o.moe(experts, T, K, m.n_experts, H, li, touched(d(m.n_experts), d(K), d(m.n_experts), d(T)));
    if (m.shared_inter > 0) dense_mlp_ops(o, z, T, T, H, m.shared_inter, true, false);
    o.collective("all_reduce", z.tp, z.tp, d(T * H * 4));
    return;
  }
  // transformer.cpp moe_forward_parallel: route this rank's share of its tp group's tokens, plan on the host,
  // dispatch, the local experts, return, combine, then the tp group's shares gathered.
  const int64_t own = (T + z.tp - 1) / z.tp;
  route(own);
  o.host_wait(router);
  // The tokens the busiest edp replica's experts serve: its dp replicas' (each at most the busiest's T), no more
  // than the micro-batch holds.
  const double replica_tokens = std::min(d(T) * z.dp / z.edp, d(r.micro_tokens));
  const ExpertLoad load = busiest_expert_rank(replica_tokens, K, m.n_experts, z.ep);  // each etp rank: them all
  const double n_send = d(own * K * z.etp);
  const int stage = z.stage_size();
  o.collective("all_to_all_v", stage, stage, 8.0);  // the counts
  // The dispatch's rows gathered into the send buffer: router, as ffn.cpp marks it.
  o.rows_op(router, "gather_rows", "rows", static_cast<int64_t>(n_send), {"dim"}, {H}, 8);
  o.collective("all_to_all_v", stage, stage, n_send * 4);
  o.collective("all_to_all_v", stage, stage, n_send * d(H) * 4);
  const double share = o.busy_share();
  o.busy(r.experts_share);
  // The busiest rank's pairs and distinct experts (at batch 1 it reads ~2 experts where the mean rank reads
  // 0.5), at least the mean rank's; a fractional count of pairs as the weighted mean of its two neighbours.
  const double busy_touched = std::max(touched(d(local_e), d(K), d(m.n_experts), replica_tokens), load.touched);
  const double lo = std::floor(load.pairs), frac = load.pairs - lo;
  const auto lo_pairs = static_cast<int64_t>(lo);
  o.moe(experts, lo_pairs, 1, local_e, H, li, touched_of_pairs(lo, load.pairs, busy_touched, local_e), 1.0 - frac);
  o.moe(experts, lo_pairs + 1, 1, local_e, H, li, touched_of_pairs(lo + 1, load.pairs, busy_touched, local_e), frac);
  o.busy(share);
  o.collective("all_to_all_v", stage, stage, n_send * d(H) * 4);
  o.rows_op(combine, "scatter_add_rows", "rows", static_cast<int64_t>(n_send), {"dim"}, {H}, 12);
  if (z.tp > 1) o.collective("all_gather", z.tp, z.tp, d(own * H * 4));
  if (m.shared_inter > 0) {
    const int64_t rows = dense_gathered ? T * z.dense_tp : T;
    dense_mlp_ops(o, z, rows, T, H, m.shared_inter, true, dense_gathered);
  }
}

// One micro-batch through this rank's stage (transformer.cpp forward / run_layers / head).
Ops stage_ops(const CostInputs& in, const RankStep& r, bool stream) {
  const ModelDesc& s = *in.shape;
  const ParallelSizes& z = in.sizes;
  Ops o(*in.profile, *in.cluster, d(in.kv_bytes), stream);
  o.busy(r.share);
  const int64_t T = r.tokens, H = s.hidden;
  // dense_tp spanning dp replicas gathers every member's rows (transformer.cpp dense_rows).
  const bool gathered = z.dense_tp > z.tp;
  if (r.first_stage) {
    o.rows_op(other, "embedding", "tokens", T, {"dim"}, {H}, 4 + in.profile->weight_bytes);
    o.collective("all_reduce", z.dense_tp, z.dense_tp, d(T * H * 4));
  }
  o.rows_op(norms, "rms_norm", "rows", T, {"dim"}, {H}, 8);
  // Every layer of a kind costs the same: each kind timed once.
  for (const FfnKind kind : {FfnKind::moe, FfnKind::dense}) {
    int64_t n = 0;
    for (int64_t l = r.layers_begin; l < r.layers_end; ++l) n += s.layer_ffn[static_cast<size_t>(l)] == kind ? 1 : 0;
    if (n == 0) continue;
    Ops layer(*in.profile, *in.cluster, d(in.kv_bytes), stream);
    layer.busy(r.share);
    t_trace.layers = d(n);
    attention_ops(layer, s, z, r);
    layer.collective("all_reduce", z.tp, z.tp, d(T * H * 4));
    layer.rows_op(norms, "add_rms_norm", "rows", T, {"dim"}, {H}, 16);
    if (kind == FfnKind::moe) {
      moe_ops(layer, s, z, r, gathered);
    } else {
      dense_mlp_ops(layer, z, gathered ? T * z.dense_tp : T, T, H, s.dense_inter, false, gathered);
    }
    layer.rows_op(norms, "add_rms_norm", "rows", T, {"dim"}, {H}, 16);
    t_trace.layers = 1;
    o.absorb(layer, d(n));
  }
  if (r.last_stage && r.logit_rows > 0) {
    const int64_t R = r.logit_rows, V = (s.vocab + z.dense_tp - 1) / z.dense_tp;
    o.rows_op(dense, "gather_rows", "rows", R, {"dim"}, {H}, 8);
    o.linear(dense, gathered ? R * z.dense_tp : R, V, H);
    if (z.dense_tp > 1) {
      // transformer.cpp head: the vocabulary shares gathered, copied to the host, reassembled row by row.
      o.collective("all_gather", z.dense_tp, z.dense_tp, d(R * V * 4));
      o.copy(other, "copy_to_host", d(R * V * z.dense_tp * 4));
      o.copy(other, "copy_to_host", d(R * s.vocab * 4));
    }
  }
  return o;
}

// The stage boundary of pipeline stages (executor.cpp run_stage): the residual and the normed rows.
double pp_send_seconds(const CostInputs& in, int64_t tokens) {
  std::vector<CostTraceRow>* const rows = std::exchange(t_trace.rows, nullptr);  // priced as a row of its own
  Ops o(*in.profile, *in.cluster, d(in.kv_bytes));
  o.collective("send_recv", 2, in.sizes.stage_size() + 1, d(tokens * in.shape->hidden * 4 * 2));
  t_trace.rows = rows;
  return o.eager[communication];
}

// How far a rank's stage is from its ops' hot timings (0) to their timings beyond the caches (1, the "_cold"
// tables and the streaming floor). With the profile's cache curve, the curve at the bytes the rank re-reads from
// one step to the next: its stage's weights (every local expert, though a step reads a few) and what its ops read
// (the KV cache). Without (profiles before linear_pool): all or nothing, as the ranks' bytes together pass 64 MB.
double beyond_caches(const MachineProfile& p, const Ops& hot, double ranks_reading, double share) {
  if (p.has_cache_curve()) return p.cache_fraction(hot.bytes + hot.resident, share);
  return p.stream_bytes_per_s > 0 && hot.bytes * ranks_reading > kCpuCacheBytes ? 1.0 : 0.0;
}

// The stage timed `f` of the way from its hot ops to its ops beyond the caches.
Ops mixed(const Ops& hot, const Ops& cold, double f) {
  Ops o = hot;
  o.scale(1 - f);
  o.absorb(cold, f);
  return o;
}

// The step: each micro-batch through every stage, the pipeline filled and drained (executor.cpp
// forward_parallel); one rank: the whole step as one pass.
StepPrediction predict(const CostInputs& in, int64_t batch, int64_t q_len, int64_t context, bool decode) {
  SY_CHECK(in.shape && in.cluster && in.profile, "predict needs a model, a cluster and a profile");
  const ParallelSizes& z = in.sizes;
  StepPrediction out;
  out.batch = batch;
  out.context = context;
  const int64_t M = z.pp > 1 ? std::min<int64_t>(z.pp, batch) : 1;
  const int64_t seqs_micro = (batch + M - 1) / M;
  const int64_t seqs_dp = (seqs_micro + z.dp - 1) / z.dp;
  const bool one_rank = z.world_size() == 1;
  // CPU ranks sharing a host (Busy): the ranks at work at once. A pipeline's M micro-batches keep M·pp of its
  // pp + M - 1 stage slots busy; attention replicas without a sequence wait; under expert parallelism the ranks
  // that receive no pair wait.
  const auto share_of = [&](double ranks) {
    return one_rank ? 1.0 : (ranks - 1) / static_cast<double>(z.world_size() - 1);
  };
  const double stages_busy = d(M) * z.pp / d(z.pp + M - 1);
  const double replicas_busy = std::min(d(z.dp), d(seqs_micro));
  const double pairs_micro = d(seqs_micro * q_len * in.shape->moe.top_k);
  const double expert_ranks = d(z.ep) * z.edp;
  const double expert_ranks_busy = expert_ranks * (1.0 - std::pow(1.0 - 1.0 / expert_ranks, pairs_micro));
  double worst = 0;
  std::array<double, kCostPhaseCount> worst_phases{}, sum_phases{};
  double worst_kernels = 0, sum_kernels = 0;
  int64_t first = 0;
  for (size_t st = 0; st < in.stage_layers.size(); ++st) {
    RankStep r{.tokens = seqs_dp * q_len,
               .micro_tokens = seqs_micro * q_len,
               .seqs = seqs_dp,
               .q_len = q_len,
               .context = context,
               .logit_rows = seqs_dp,
               .first_stage = st == 0,
               .last_stage = st + 1 == in.stage_layers.size(),
               .layers_begin = first,
               .layers_end = first + in.stage_layers[st],
               .share = share_of(stages_busy * z.tp * replicas_busy),
               .experts_share = share_of(stages_busy * z.etp * expert_ranks_busy)};
    first = r.layers_end;
    // The bytes of the ranks at work together beyond a CPU's caches: the ops stream from memory. Attention replicas
    // without a sequence read nothing (one sequence under dp 8: one rank's weights, not eight ranks').
    const double ranks_reading = std::min(d(z.world_size()), d(z.pp) * d(z.tp) * replicas_busy);
    t_trace.stage = static_cast<int>(st);
    t_trace.pass = "hot";
    const size_t hot_rows = t_trace.rows != nullptr ? t_trace.rows->size() : 0;
    const Ops hot = stage_ops(in, r, false);
    const double cold = beyond_caches(*in.profile, hot, ranks_reading, r.share);
    t_trace.pass = "cold";
    const size_t cold_rows = t_trace.rows != nullptr ? t_trace.rows->size() : 0;
    Ops o = cold <= 0 ? hot : cold >= 1 ? stage_ops(in, r, true) : mixed(hot, stage_ops(in, r, true), cold);
    if (t_trace.rows != nullptr) {
      auto& rows = *t_trace.rows;
      for (size_t i = hot_rows; i < rows.size(); ++i) {
        const double f = std::clamp(cold, 0.0, 1.0);
        rows[i].weight = i < cold_rows ? 1 - f : f;
      }
    }
    o.add_skew(std::clamp(cold, 0.0, 1.0), d(r.tokens));
    const double send = z.pp > 1 ? pp_send_seconds(in, r.tokens) : 0.0;
    if (t_trace.rows != nullptr && send > 0 && !r.first_stage) {
      // The step's sum keeps each boundary once, on the receiving stage (the sender's copy counts in its own
      // stage's time when it is the slowest).
      trace_wait("stage boundary", "collectives", "send_recv from the stage before", send);
    }
    if (!r.first_stage) o.eager[communication] += send;
    if (!r.last_stage) o.eager[communication] += send;
    if (o.eager_total() > worst) {
      worst = o.eager_total();
      worst_phases = o.eager;
      worst_kernels = o.kernels;
    }
    for (size_t i = 0; i < sum_phases.size(); ++i) sum_phases[i] += o.eager[i];
    sum_kernels += o.kernels;
    // A stage is busy while it sends and while it receives, but the first micro-batch's pass crosses each boundary
    // once: the sum keeps the receiving side's.
    if (!r.last_stage) sum_phases[communication] -= send;
  }
  const MachineProfile& p = *in.profile;
  // The first micro-batch passes every stage in turn; each later one adds the slowest stage (one stage: M = 1).
  const double more = static_cast<double>(M - 1);
  // Per step on the host and the copies around it (runtime/executor.cpp upload, engine sampling): the inputs
  // uploaded, the sampled ids copied back, one wait for the device.
  const double step_fixed = 4 * p.launch_s + p.copy_to_host_s + p.sync_s;
  t_trace.stage = -1;
  t_trace.pass = "hot";
  Ops tail(p, *in.cluster, d(in.kv_bytes));
  const int64_t V = in.shape->vocab;
  if (one_rank) {
    tail.rows_op(sampling, "sample_tokens", "rows", batch, {"vocab"}, {V}, 4);
  } else {
    // Several ranks (executor.cpp forward_parallel, run_stage): the stage's logits to the host, straight into the
    // step's [batch, V] without dp; under dp into the rank's rows, gathered across dp, each row copied into the
    // step's; to every stage, sampled on the host.
    tail.copy(other, "copy_to_host", d(seqs_dp * V * 4));
    if (z.dp > 1) {
      tail.collective("all_gather", z.dp, z.stage_size(), d(seqs_dp * V * 4));
      tail.copy(other, "copy_to_host", d(batch * V * 4));
    }
    if (z.pp > 1) tail.collective("all_reduce", z.pp, z.world_size(), d(batch * V * 4) / 2);
    tail.rows_op(sampling, "sample_tokens", "rows", batch, {"vocab"}, {V}, 4);
  }
  for (int i = 0; i < kCostPhaseCount; ++i) {
    const auto u = static_cast<size_t>(i);
    out.phase_seconds[u] = sum_phases[u] + worst_phases[u] * more + tail.eager[i];
  }
  out.phase_seconds[other] += step_fixed;
  out.eager_seconds = 0;
  for (double v : out.phase_seconds) out.eager_seconds += v;
  out.graph = decode && one_rank && p.device == "cuda";
  out.seconds =
      out.graph ? sum_kernels + worst_kernels * more + tail.kernels + p.graph_launch_s + step_fixed : out.eager_seconds;
  return out;
}

// The simulation of busiest_expert_rank for t tokens.
ExpertLoad simulate_expert_ranks(int64_t t, int64_t top_k, int64_t n_experts, int ep, int64_t local) {
  constexpr int kTrials = 2000;
  std::mt19937_64 rng(0x243F6A8885A308D3ull);  // fixed seed: the same plan every run
  const auto draw = [&rng](uint64_t bound) { return static_cast<int64_t>(((rng() >> 32) * bound) >> 32); };
  std::vector<int64_t> picks(static_cast<size_t>(top_k));
  std::vector<int> hits(static_cast<size_t>(n_experts)), pairs(static_cast<size_t>(ep)),
      distinct(static_cast<size_t>(ep));
  double sum_pairs = 0, sum_touched = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::fill(hits.begin(), hits.end(), 0);
    for (int64_t tok = 0; tok < t; ++tok) {
      // top_k distinct experts: a draw equal to one of the token's earlier picks is drawn again
      for (int64_t j = 0; j < top_k; ++j) {
        int64_t e = draw(static_cast<uint64_t>(n_experts));
        while (std::find(picks.begin(), picks.begin() + j, e) != picks.begin() + j) {
          e = draw(static_cast<uint64_t>(n_experts));
        }
        picks[static_cast<size_t>(j)] = e;
        ++hits[static_cast<size_t>(e)];
      }
    }
    std::fill(pairs.begin(), pairs.end(), 0);
    std::fill(distinct.begin(), distinct.end(), 0);
    for (int64_t e = 0; e < local * ep; ++e) {
      const auto r = static_cast<size_t>(e / local);
      pairs[r] += hits[static_cast<size_t>(e)];
      distinct[r] += hits[static_cast<size_t>(e)] > 0 ? 1 : 0;
    }
    size_t top = 0;
    for (size_t r = 1; r < pairs.size(); ++r) {
      if (distinct[r] > distinct[top] || (distinct[r] == distinct[top] && pairs[r] > pairs[top])) top = r;
    }
    sum_pairs += pairs[top];
    sum_touched += distinct[top];
  }
  return {.pairs = sum_pairs / kTrials, .touched = sum_touched / kTrials};
}

}  // namespace

ExpertLoad busiest_expert_rank(double tokens, int64_t top_k, int64_t n_experts, int ep) {
  const int64_t local = n_experts / std::max(ep, 1);
  const auto t = static_cast<int64_t>(std::llround(tokens));
  if (t <= 0 || local <= 0) return {};
  if (ep <= 1 || t * top_k > 512) {
    const double pairs = busiest(tokens, top_k, n_experts, ep);
    return {.pairs = pairs, .touched = std::min(d(local), d(local) * (1.0 - std::pow(1.0 - 1.0 / d(local), pairs)))};
  }
  // A plan asks for the same few shapes for every stage, layer kind and layout: each is simulated once.
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int>, ExpertLoad> done;
  const auto key = std::make_tuple(t, top_k, n_experts, ep);
  {
    const std::lock_guard lock(mutex);
    if (const auto it = done.find(key); it != done.end()) return it->second;
  }
  const ExpertLoad load = simulate_expert_ranks(t, top_k, n_experts, ep, local);
  const std::lock_guard lock(mutex);
  return done.emplace(key, load).first->second;
}

StepPrediction predict_decode(const CostInputs& in, int64_t batch, int64_t context) {
  StepPrediction p = predict(in, batch, 1, context, true);
  p.tokens_per_second = p.seconds > 0 ? d(batch) / p.seconds : 0;
  return p;
}

namespace {

// `step` with its ops traced (t_trace) into the explanation's rows.
template <typename Step>
CostExplanation traced(const Step& step) {
  CostExplanation out;
  t_trace = {.rows = &out.rows};
  try {
    out.step = step();
  } catch (...) {
    t_trace = {};
    throw;
  }
  t_trace = {};
  return out;
}

// The whole prompts of `len` tokens a prefill chunk holds (bench latency's prefill); at least one, which a prompt
// longer than max_batch_tokens fills in pieces.
int64_t prompts_a_chunk(const CostInputs& in, int64_t len) {
  return std::max<int64_t>(1, in.max_batch_tokens / std::max<int64_t>(len, 1));
}

}  // namespace

CostExplanation explain_decode(const CostInputs& in, int64_t batch, int64_t context) {
  return traced([&] { return predict(in, batch, 1, context, true); });
}

CostExplanation explain_prefill_chunk(const CostInputs& in, int64_t batch, int64_t len) {
  return traced([&] {
    return len <= in.max_batch_tokens ? predict(in, std::min(prompts_a_chunk(in, len), batch), len, len, false)
                                      : predict(in, 1, in.max_batch_tokens, in.max_batch_tokens, false);
  });
}

StepPrediction predict_prefill(const CostInputs& in, int64_t batch, int64_t len) {
  // Chunks of whole prompts where they fit (bench latency's prefill), else one prompt in pieces.
  const int64_t per_chunk = prompts_a_chunk(in, len);
  StepPrediction total;
  total.batch = batch;
  total.context = len;
  if (len <= in.max_batch_tokens) {
    for (int64_t done = 0; done < batch; done += per_chunk) {
      const StepPrediction c = predict(in, std::min(per_chunk, batch - done), len, len, false);
      total.seconds += c.seconds;
      total.eager_seconds += c.eager_seconds;
      for (size_t i = 0; i < c.phase_seconds.size(); ++i) total.phase_seconds[i] += c.phase_seconds[i];
    }
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t at = 0; at < len; at += in.max_batch_tokens) {
        const int64_t n = std::min(in.max_batch_tokens, len - at);
        const StepPrediction c = predict(in, 1, n, at + n, false);
        total.seconds += c.seconds;
        total.eager_seconds += c.eager_seconds;
        for (size_t i = 0; i < c.phase_seconds.size(); ++i) total.phase_seconds[i] += c.phase_seconds[i];
      }
    }
  }
  total.tokens_per_second = total.seconds > 0 ? d(batch * len) / total.seconds : 0;
  return total;
}

MachineProfile preset_profile(const Machine& m) {
  MachineProfile p;
  p.source = "preset " + m.name + " (default efficiencies: no profile given)";
  p.device = "cuda";
  p.name = m.gpu;
  p.copy_bytes_per_s = m.hbm_tbps * 1e12 * 0.8;
  p.matrix_flops_per_s = std::max(1.0, m.bf16_tflops) * 1e12 * 0.6;
  p.launch_s = 4e-6;
  p.sync_s = 10e-6;
  p.graph_launch_s = 10e-6;
  p.copy_to_host_s = 10e-6;
  return p;
}

}  // namespace sy
