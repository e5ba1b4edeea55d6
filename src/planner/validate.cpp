// check_layout: every rule of design.md "Parallel layout" against one model and cluster, all reported at once.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/int_math.h"
#include "planner/planner.h"

namespace sy {

namespace {

void add(std::vector<LayoutIssue>& issues, const char* rule, std::vector<Axis> axes, std::string message) {
  issues.push_back({.rule = rule, .message = std::move(message), .axes = std::move(axes)});
}

// Rules that need the model. A size that could not be resolved (0) skips the rules that use it.
void check_model_rules(const PlanTarget& t, const LayoutRequest& req, LayoutCheck& c) {
  const ModelDesc& s = t.shape;
  const ParallelSizes& z = c.sizes;
  const AttentionDesc& a = s.attn;
  const MoeDesc& m = s.moe;
  const int64_t slots = add_sat(m.n_experts, t.memory.shard.redundant_experts);
  if (m.n_experts > 0 && z.ep > 0 && slots % z.ep != 0) {
    add(c.issues, "experts_divisible", {Axis::ep},
        fmt::format("ep {} must divide the {} expert slots ({} routed + {} redundant): each ep rank holds the same "
                    "number of whole experts",
                    z.ep, slots, m.n_experts, t.memory.shard.redundant_experts));
  }
  if (z.tp > 0 && a.n_heads % z.tp != 0) {
    add(c.issues, "heads_divisible", {Axis::tp},
        fmt::format("tp {} must divide the {} attention heads: attention TP gives each rank whole query heads", z.tp,
                    a.n_heads));
  }
  if (z.tp > 0 && a.kind == AttentionKind::gqa && a.kv_heads % z.tp != 0 && z.tp % a.kv_heads != 0) {
    add(c.issues, "kv_heads_divisible", {Axis::tp},
        fmt::format("tp {} and the {} KV heads must divide one another: each rank holds kv_heads/tp heads, or "
                    "tp/kv_heads ranks share one replicated head",
                    z.tp, a.kv_heads));
  }
  // Block-scaled fp8: attention TP cuts the projections by heads (q/k/v rows, o columns; MLA's q_b and kv_b
  // rows); each rank's cut must hold whole scale blocks, as the loader reads blocks whole.
  if (s.quant.block_fp8 && z.tp > 1 && a.n_heads % z.tp == 0) {
    const int64_t heads = a.n_heads / z.tp;
    struct Cut {
      const char* what;
      int64_t per_rank;
      int64_t block;
    };
    std::vector<Cut> cuts;
    if (a.kind == AttentionKind::mla) {
      cuts = {{"q_b_proj / q_proj rows", heads * a.head_dim, s.quant.block_rows},
              {"kv_b_proj rows", heads * (a.qk_nope_head_dim + a.v_head_dim), s.quant.block_rows},
              {"o_proj columns", heads * a.v_head_dim, s.quant.block_cols}};
    } else {
      cuts = {{"q_proj rows", heads * a.head_dim, s.quant.block_rows},
              {"o_proj columns", heads * a.v_head_dim, s.quant.block_cols}};
      if (a.kv_heads % z.tp == 0)
        cuts.push_back({"k_proj / v_proj rows", a.kv_heads / z.tp * a.head_dim, s.quant.block_rows});
    }
    for (const Cut& cut : cuts) {
      if (cut.per_rank % cut.block == 0) continue;
      add(c.issues, "quant_block", {Axis::tp},
          fmt::format("tp {} leaves {} attention heads per rank, {} {} per rank, not a multiple of the fp8 scale block "
                      "{}: each shard must hold whole quantisation blocks",
                      z.tp, heads, cut.per_rank, cut.what, cut.block));
      break;
    }
  }
  // INT4 and NVFP4 group scales: a layout that cuts a quantised weight's input dimension must leave each
  // rank whole groups (INT4: and whole packed words of eight), as the loader reads them: o_proj columns over
  // tp, the routed experts' down_proj over etp, dense and shared-expert down_proj over dense_tp.
  if (s.quant.int4_group || s.quant.nvfp4) {
    const int64_t align = s.quant.nvfp4 ? s.quant.group_size : std::lcm(s.quant.group_size, int64_t{8});
    const std::string groups = s.quant.nvfp4 ? fmt::format("NVFP4 groups of {}", s.quant.group_size)
                                             : fmt::format("INT4 groups of {} in words of 8", s.quant.group_size);
    const auto first_layer = [&](FfnKind kind) {
      const auto it = std::find(s.layer_ffn.begin(), s.layer_ffn.end(), kind);
      return it == s.layer_ffn.end() ? int64_t{-1} : static_cast<int64_t>(it - s.layer_ffn.begin());
    };
    const auto layer = [](int64_t i) { return "model.layers." + std::to_string(i) + "."; };
    struct Cut {
      Axis axis;
      int size;
      int64_t per_rank;
      std::string weight;
    };
    std::vector<Cut> cuts;
    if (z.tp > 1 && a.n_heads % z.tp == 0) {
      cuts.push_back({Axis::tp, z.tp, a.n_heads / z.tp * a.v_head_dim, layer(0) + "self_attn.o_proj.weight"});
    }
    if (const int64_t l = first_layer(FfnKind::moe); l >= 0) {
      const std::string b = layer(l) + s.names.moe_block;
      if (z.etp > 1 && m.inter % z.etp == 0) {
        cuts.push_back({Axis::etp, z.etp, m.inter / z.etp, b + "experts.0." + s.names.expert_down});
      }
      if (z.dense_tp > 1 && m.shared_inter > 0 && m.shared_inter % z.dense_tp == 0) {
        cuts.push_back(
            {Axis::dense_tp, z.dense_tp, m.shared_inter / z.dense_tp, b + "shared_experts.down_proj.weight"});
      }
    }
    if (const int64_t l = first_layer(FfnKind::dense); l >= 0 && z.dense_tp > 1 && s.dense_inter % z.dense_tp == 0) {
      cuts.push_back({Axis::dense_tp, z.dense_tp, s.dense_inter / z.dense_tp, layer(l) + "mlp.down_proj.weight"});
    }
    for (const Cut& cut : cuts) {
      if (cut.per_rank % align == 0 || !s.quant.quantises(cut.weight)) continue;
      add(c.issues, "quant_group", {cut.axis},
          fmt::format("{} {} leaves {} input columns of {} per rank, not a multiple of {} ({}): each shard must hold "
                      "whole quantisation groups",
                      axis_name(cut.axis), cut.size, cut.per_rank, cut.weight, align, groups));
      break;
    }
  }
  const auto check_inter = [&](const char* rule, Axis axis, int size, int64_t inter, const char* what) {
    if (size <= 0 || inter <= 0) return;
    if (inter % size != 0) {
      add(c.issues, rule, {axis},
          fmt::format("{} {} must divide the {} intermediate size {}: each rank holds an equal slice of every {} "
                      "matrix",
                      axis_name(axis), size, what, inter, what));
    } else if (s.quant.block_fp8 && (inter / size) % s.quant.block_rows != 0) {
      add(c.issues, "quant_block", {axis},
          fmt::format("{} {} leaves {} / {} = {} {} rows per rank, not a multiple of the fp8 scale block {}: each "
                      "shard must hold whole quantisation blocks",
                      axis_name(axis), size, inter, size, inter / size, what, s.quant.block_rows));
    }
  };
  if (s.moe_layer_count() > 0) check_inter("expert_inter_divisible", Axis::etp, z.etp, m.inter, "expert");
  if (s.dense_layer_count() > 0)
    check_inter("dense_inter_divisible", Axis::dense_tp, z.dense_tp, s.dense_inter, "dense MLP");
  if (s.moe_layer_count() > 0 && m.shared_inter > 0) {
    check_inter("shared_inter_divisible", Axis::dense_tp, z.dense_tp, m.shared_inter, "shared-expert");
  }
  if (t.memory.shard.vocab_parallel && z.dense_tp > 0 && s.vocab % z.dense_tp != 0) {
    add(c.issues, "vocab_divisible", {Axis::dense_tp},
        fmt::format("dense_tp {} must divide the vocabulary of {}: the embedding and LM head are split by rows over "
                    "dense_tp ranks",
                    z.dense_tp, s.vocab));
  }
  if (z.pp > s.n_layers) {
    add(c.issues, "pp_range", {Axis::pp},
        fmt::format("pp {} exceeds the {} decoder layers: every pipeline stage needs at least one layer", z.pp,
                    s.n_layers));
  }
  if (!req.pp_layers.empty()) {
    const int64_t sum = std::accumulate(req.pp_layers.begin(), req.pp_layers.end(), int64_t{0});
    if (sum != s.n_layers) {
      add(c.issues, "pp_layers", {Axis::pp},
          fmt::format("--pp-layers sums to {} layers but the model has {}: the stages together hold every decoder "
                      "layer exactly once",
                      sum, s.n_layers));
    }
  }
}

}  // namespace

bool LayoutCheck::rules_pass() const {
  for (const auto& i : issues) {
    if (i.rule != "memory_fit") return false;
  }
  return true;
}

LayoutCheck check_layout(const PlanTarget& t, const LayoutRequest& req) {
  LayoutCheck c;
  c.request = req;
  ResolvedSizes r = resolve_layout_sizes(req, t.cluster.gpus);
  c.sizes = r.sizes;
  c.issues = std::move(r.issues);
  c.completions = std::move(r.completions);
  c.uses_fewer_gpus = r.uses_fewer_ranks;
  bool sizes_ok = true;
  for (Axis a : kAxes) sizes_ok = sizes_ok && c.sizes.get(a) >= 1;
  check_model_rules(t, req, c);  // each rule skips the sizes that could not be resolved (0)
  const ParallelSizes& z = c.sizes;
  const bool mappable = sizes_ok && z.dp * z.tp == z.edp * z.ep * z.etp && z.stage_size() % z.dense_tp == 0;
  if (mappable) {
    for (auto& issue : check_node_spans(Mapping(z), t.cluster)) c.issues.push_back(std::move(issue));
  }
  if (!c.issues.empty()) return c;

  c.stage_layers = stage_layer_counts(t.shape.n_layers, c.sizes.pp, req.pp_layers);
  if (!t.check_memory) return c;
  c.memory = estimate_memory(t.shape, t.weights, c.sizes, c.stage_layers, t.cluster.machine.memory_bytes(), t.memory,
                             t.device_weights ? &*t.device_weights : nullptr);
  if (!c.memory->fits) {
    const StageMemory& worst = c.memory->stages[static_cast<size_t>(c.memory->worst_stage)];
    std::vector<int> worst_ranks(static_cast<size_t>(z.stage_size()));
    std::iota(worst_ranks.begin(), worst_ranks.end(), worst.stage * z.stage_size());
    std::string others;
    if (c.memory->stages.size() > 1) {
      for (const auto& st : c.memory->stages) {
        others += fmt::format("{}stage {} {}", others.empty() ? "; per stage: " : ", ", st.stage,
                              format_bytes(add_sat(add_sat(st.weight_bytes, st.activation_bytes), st.fixed_bytes)));
      }
    }
    add(c.issues, "memory_fit", {Axis::tp, Axis::dp, Axis::pp, Axis::ep, Axis::etp, Axis::edp, Axis::dense_tp},
        fmt::format("does not fit in {} per {}: the fullest rank{} {} {} {}{}", format_bytes(worst.capacity_bytes),
                    t.cluster.machine.gpu, z.stage_size() > 1 ? "s" : "", format_ranks(worst_ranks),
                    z.stage_size() > 1 ? "hold" : "holds", describe_stage_memory(worst), others));
  }
  return c;
}

}  // namespace sy
