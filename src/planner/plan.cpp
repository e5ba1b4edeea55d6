// Loading a plan target, enumerating and ranking layouts, and the valid alternatives to a refused one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/check.h"
#include "planner/planner.h"

namespace sy {

LoadedWeights load_weights(const std::filesystem::path& dir, const ModelDesc& shape, bool config_only) {
  bool has_safetensors = false;
  std::error_code ec;
  if (!config_only && std::filesystem::is_directory(dir, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") has_safetensors = true;
    }
  }
  if (!has_safetensors) {
    return {
        .table = weights_from_config(shape),
        .source = config_only ? "config.json (safetensors not read)" : "config.json (no safetensors in the folder)"};
  }
  const Checkpoint ckpt = Checkpoint::open(dir);
  return {.table = weights_from_checkpoint(shape, ckpt),
          .source = fmt::format("safetensors headers ({} tensors, {})", ckpt.tensors().size(),
                                format_bytes(static_cast<int64_t>(ckpt.total_bytes()))),
          .from_checkpoint = true};
}

PlanTarget load_plan_target(const std::filesystem::path& dir, const Cluster& cluster, const MemoryOptions& memory,
                            bool config_only, int64_t max_layers) {
  PlanTarget t;
  t.shape = load_model_desc(dir).truncated(max_layers);
  t.cluster = cluster;
  t.memory = memory;
  LoadedWeights w = load_weights(dir, t.shape, config_only);
  t.weights = std::move(w.table);
  t.weights_source = std::move(w.source);
  t.weights_from_checkpoint = w.from_checkpoint;
  if (t.shape.quant.block_fp8 || t.shape.quant.int4_group || t.shape.quant.nvfp4) {
    // The CUDA backend keeps quantised matrices as stored (Backend::keeps_quantised: rows of whole 16-byte
    // loads, every published checkpoint's shapes) except those read by per-head products and the sparse
    // indexer, which it widens to the model dtype at load.
    ModelDesc held = t.shape;
    for (const char* widened : {"self_attn.kv_b_proj", "indexer.wq_b", "indexer.wk"}) {
      held.quant.unquantised_suffixes.emplace_back(widened);
    }
    t.device_weights = weights_from_config(held);
  }
  return t;
}

std::vector<ParallelSizes> enumerate_layouts(int world, bool all_dense_tp) {
  std::vector<ParallelSizes> out;
  for (const auto& [pp, S] : factor_pairs(world)) {
    for (const auto& [dp, tp] : factor_pairs(S)) {
      for (const auto& [edp, ep, etp] : factor_triples(S)) {
        std::vector<int> dense = {tp};
        if (all_dense_tp) {
          dense.clear();
          for (const auto& [d, rest] : factor_pairs(S)) dense.push_back(d);
        }
        for (int d : dense) {
          out.push_back({.pp = pp, .tp = tp, .dp = dp, .ep = ep, .etp = etp, .edp = edp, .dense_tp = d});
        }
      }
    }
  }
  return out;
}

namespace {

LayoutRequest explicit_request(const ParallelSizes& s) {
  LayoutRequest r;
  for (Axis a : kAxes) r.set(a, s.get(a));
  return r;
}

int flag_count(const ParallelSizes& s) {
  return (s.dp != 1) + (s.pp != 1) + (s.ep != 1) + (s.edp != 1) + (s.dense_tp != s.tp);
}

bool better(const PlanEntry& x, const PlanEntry& y) {
  const bool fx = x.check.valid(), fy = y.check.valid();
  if (fx != fy) return fx;
  if (x.predicted && y.predicted) {
    const double px = x.predicted->decode_batch.tokens_per_second, py = y.predicted->decode_batch.tokens_per_second;
    if (px != py) return px > py;
  }
  if (x.decode_batch.tokens_per_second != y.decode_batch.tokens_per_second) {
    return x.decode_batch.tokens_per_second > y.decode_batch.tokens_per_second;
  }
  if (x.decode_one.tokens_per_second != y.decode_one.tokens_per_second) {
    return x.decode_one.tokens_per_second > y.decode_one.tokens_per_second;
  }
  return flag_count(x.check.sizes) < flag_count(y.check.sizes);
}

// How far a candidate is from what the user asked: each explicit size it changes costs 1 when the
// broken rule involves that axis (it has to change) and 3 otherwise, plus a little for the distance.
double distance(const LayoutRequest& req, const ParallelSizes& cand, const std::vector<Axis>& involved) {
  double cost = 0;
  for (Axis a : kAxes) {
    const auto want = req.get(a);
    if (!want || *want < 1 || cand.get(a) == *want) continue;
    const bool expected = std::find(involved.begin(), involved.end(), a) != involved.end();
    cost += (expected ? 1.0 : 3.0) + 0.1 * std::fabs(std::log2(static_cast<double>(cand.get(a)) / *want));
  }
  // Sizes the user left to their defaults should stay there unless needed.
  for (Axis a : {Axis::dp, Axis::pp, Axis::ep, Axis::edp}) {
    if (!req.get(a) && cand.get(a) != 1) cost += 0.3;
  }
  if (!req.dense_tp && cand.dense_tp != cand.tp) cost += 0.3;
  return cost;
}

std::vector<std::string> nearest(const Plan& plan, const LayoutRequest& req, const std::vector<Axis>& involved,
                                 size_t count) {
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < plan.layouts.size(); ++i) {
    if (!plan.layouts[i].check.valid()) continue;
    ranked.emplace_back(distance(req, plan.layouts[i].check.sizes, involved), i);  // i: plan order breaks ties
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && out.size() < count; ++i) {
    out.push_back(layout_flags(plan.layouts[ranked[i].second].check.sizes));
  }
  return out;
}

// The profile measured with the rank count nearest the layout's (log scale); null without profiles.
const MachineProfile* nearest_profile(const PlanTarget& t, int world) {
  const MachineProfile* best = nullptr;
  for (const MachineProfile& p : t.profiles) {
    if (best == nullptr || std::abs(std::log2(static_cast<double>(p.ranks) / world)) <
                               std::abs(std::log2(static_cast<double>(best->ranks) / world))) {
      best = &p;
    }
  }
  return best;
}

CostInputs cost_inputs(const PlanTarget& t, const LayoutCheck& c, const MachineProfile& profile) {
  return {.shape = &t.shape,
          .sizes = c.sizes,
          .stage_layers = c.stage_layers,
          .cluster = &t.cluster,
          .profile = &profile,
          .kv_bytes = t.memory.kv_dtype_bytes,
          .max_batch_tokens = t.memory.max_batch_tokens};
}

}  // namespace

CostExplanation explain_layout(const PlanTarget& t, const LayoutCheck& c, bool prefill) {
  const MachineProfile* best = nearest_profile(t, c.sizes.world_size());
  const MachineProfile preset = best == nullptr ? preset_profile(t.cluster.machine) : MachineProfile{};
  const CostInputs in = cost_inputs(t, c, best != nullptr ? *best : preset);
  if (prefill) return explain_prefill_chunk(in, t.decode_batch, t.prefill_len > 0 ? t.prefill_len : t.decode_context);
  return explain_decode(in, t.decode_batch, t.decode_context);
}

LayoutPrediction predict_layout(const PlanTarget& t, const LayoutCheck& c) {
  const MachineProfile* best = nearest_profile(t, c.sizes.world_size());
  const MachineProfile preset = best == nullptr ? preset_profile(t.cluster.machine) : MachineProfile{};
  const CostInputs in = cost_inputs(t, c, best != nullptr ? *best : preset);
  LayoutPrediction out{.profile = in.profile->source};
  out.decode_one = predict_decode(in, 1, t.decode_context);
  out.decode_batch = predict_decode(in, t.decode_batch, t.decode_context);
  out.prefill = predict_prefill(in, t.decode_batch, t.prefill_len > 0 ? t.prefill_len : t.decode_context);
  return out;
}

// Checking one layout maps every rank (node spans), so a plan costs layouts x GPUs; this bound keeps it
// within a few seconds (4096 GPUs: 4,550 layouts; 2520 GPUs, with its many divisors: 79,625).
constexpr int64_t kMaxPlanWork = 50'000'000;

Plan make_plan(const PlanTarget& t, bool all_dense_tp) {
  Plan plan;
  std::map<std::string, RuleSummary> by_rule;
  const std::vector<ParallelSizes> candidates = enumerate_layouts(t.cluster.gpus, all_dense_tp);
  SY_CHECK(static_cast<int64_t>(candidates.size()) * t.cluster.gpus <= kMaxPlanWork,
           "{} GPUs have {} layouts to check, too many to rank in reasonable time (layouts x GPUs is limited to {}); "
           "plan for fewer GPUs (e.g. one node's or a power of two)",
           t.cluster.gpus, candidates.size(), kMaxPlanWork);
  for (const ParallelSizes& s : candidates) {
    ++plan.considered;
    LayoutCheck c = check_layout(t, explicit_request(s));
    if (c.rules_pass() && c.memory) {
      PlanEntry e{.check = std::move(c)};
      e.decode_one = estimate_decode(t.shape, s, *e.check.memory, t.cluster, 1, t.decode_context, t.memory);
      e.decode_batch =
          estimate_decode(t.shape, s, *e.check.memory, t.cluster, t.decode_batch, t.decode_context, t.memory);
      e.predicted = predict_layout(t, e.check);
      plan.layouts.push_back(std::move(e));
      continue;
    }
    if (c.rules_pass()) {  // memory not checked
      plan.layouts.push_back({.check = std::move(c)});
      continue;
    }
    ++plan.invalid_layouts;
    for (const auto& issue : c.issues) {
      RuleSummary& r = by_rule[issue.rule];
      if (r.layouts++ == 0) {
        r.rule = issue.rule;
        r.example_flags = layout_flags(s);
        r.example_message = issue.message;
      }
    }
  }
  std::stable_sort(plan.layouts.begin(), plan.layouts.end(), better);
  for (auto& [rule, summary] : by_rule) plan.invalid.push_back(std::move(summary));
  std::sort(plan.invalid.begin(), plan.invalid.end(),
            [](const RuleSummary& a, const RuleSummary& b) { return a.layouts > b.layouts; });
  return plan;
}

std::optional<FittingCluster> smallest_fitting_cluster(const PlanTarget& t) {
  for (int gpus = 2; gpus <= 512; gpus *= 2) {
    if (gpus <= t.cluster.gpus) continue;
    PlanTarget bigger = t;
    bigger.cluster = make_cluster(t.cluster.machine, gpus, std::nullopt);
    Plan plan = make_plan(bigger);
    if (!plan.layouts.empty() && plan.layouts.front().check.valid()) {
      return FittingCluster{.cluster = bigger.cluster, .best = std::move(plan.layouts.front())};
    }
  }
  return std::nullopt;
}

LayoutCheck check_layout_with_alternatives(const PlanTarget& t, const LayoutRequest& req) {
  LayoutCheck c = check_layout(t, req);
  const int gpus = t.cluster.gpus;
  if (c.uses_fewer_gpus && c.sizes.world_size() > 0 && gpus % c.sizes.world_size() == 0) {
    // Scale one attention axis (tp, pp or dp) up to every GPU, keeping the rest of the request.
    const int factor = gpus / c.sizes.world_size();
    for (Axis a : {Axis::tp, Axis::pp, Axis::dp}) {
      LayoutRequest scaled = req;
      scaled.set(a, c.sizes.get(a) * factor);
      if (check_layout(t, scaled).valid()) c.use_all_gpus.push_back(scaled.flags());
    }
  }
  const bool need_plan = !c.issues.empty() || (c.uses_fewer_gpus && c.use_all_gpus.empty());
  if (!need_plan) return c;
  const Plan plan = make_plan(t);
  if (c.uses_fewer_gpus && c.use_all_gpus.empty()) c.use_all_gpus = nearest(plan, req, {}, 3);
  const bool any_valid = !plan.layouts.empty() && plan.layouts.front().check.valid();
  std::optional<FittingCluster> bigger;
  if (!any_valid && !c.issues.empty()) bigger = smallest_fitting_cluster(t);
  for (auto& issue : c.issues) {
    if (any_valid) {
      issue.alternatives = nearest(plan, req, issue.axes, 3);
    } else if (bigger) {
      const std::string nodes = bigger->cluster.nodes > 1 ? fmt::format(" --nodes {}", bigger->cluster.nodes) : "";
      issue.alternatives.push_back(
          fmt::format("--gpus {}{} {}", bigger->cluster.gpus, nodes, layout_flags(bigger->best.check.sizes)));
    }
  }
  return c;
}

}  // namespace sy
