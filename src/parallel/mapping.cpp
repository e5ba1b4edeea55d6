// Mapping arithmetic and the resolution of partly given layouts.
#include "parallel/mapping.h"

#include <fmt/format.h>

#include "base/check.h"

namespace sy {

std::string_view axis_name(Axis a) {
  switch (a) {
    case Axis::tp:
      return "tp";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
    case Axis::ep:
      return "ep";
    case Axis::etp:
      return "etp";
    case Axis::edp:
      return "edp";
    case Axis::dense_tp:
      return "dense_tp";
  }
  return "?";
}

std::string_view axis_flag(Axis a) {
  switch (a) {
    case Axis::tp:
      return "--tp";
    case Axis::dp:
      return "--dp";
    case Axis::pp:
      return "--pp";
    case Axis::ep:
      return "--ep";
    case Axis::etp:
      return "--etp";
    case Axis::edp:
      return "--edp";
    case Axis::dense_tp:
      return "--dense-tp";
  }
  return "?";
}

namespace {
// The member of a per-axis struct (ParallelSizes, LayoutRequest) that holds axis `a`.
template <typename Sizes>
auto& axis_field(Sizes& s, Axis a) {
  switch (a) {
    case Axis::tp:
      return s.tp;
    case Axis::dp:
      return s.dp;
    case Axis::pp:
      return s.pp;
    case Axis::ep:
      return s.ep;
    case Axis::etp:
      return s.etp;
    case Axis::edp:
      return s.edp;
    case Axis::dense_tp:
      return s.dense_tp;
  }
  return s.tp;  // unreachable: every Axis is listed
}
}  // namespace

int ParallelSizes::get(Axis a) const { return axis_field(*this, a); }
void ParallelSizes::set(Axis a, int value) { axis_field(*this, a) = value; }

int RankCoords::get(Axis a) const {
  switch (a) {
    case Axis::tp:
      return tp_rank;
    case Axis::dp:
      return dp_rank;
    case Axis::pp:
      return pp_rank;
    case Axis::ep:
      return ep_rank;
    case Axis::etp:
      return etp_rank;
    case Axis::edp:
      return edp_rank;
    case Axis::dense_tp:
      return dense_tp_rank;
  }
  return 0;
}

Mapping::Mapping(const ParallelSizes& s) : sizes_(s) {
  for (Axis a : kAxes) SY_CHECK(s.get(a) >= 1, "parallel size {} must be at least 1, got {}", axis_name(a), s.get(a));
  SY_CHECK(s.dp * s.tp == s.edp * s.ep * s.etp,
           "ep·etp·edp must equal dp·tp: edp {} × ep {} × etp {} = {} but dp {} × tp {} = {}", s.edp, s.ep, s.etp,
           s.edp * s.ep * s.etp, s.dp, s.tp, s.dp * s.tp);
  SY_CHECK(s.stage_size() % s.dense_tp == 0, "dense_tp {} must divide the stage size dp·tp = {}", s.dense_tp,
           s.stage_size());
}

RankCoords Mapping::coords(int rank) const {
  const ParallelSizes& s = sizes_;
  SY_CHECK(rank >= 0 && rank < world_size(), "rank {} is outside 0..{}", rank, world_size() - 1);
  RankCoords c;
  c.rank = rank;
  const int S = stage_size();
  c.pp_rank = rank / S;
  c.stage_rank = rank % S;
  c.tp_rank = c.stage_rank % s.tp;
  c.dp_rank = c.stage_rank / s.tp;
  c.etp_rank = c.stage_rank % s.etp;
  c.ep_rank = (c.stage_rank / s.etp) % s.ep;
  c.edp_rank = c.stage_rank / (s.etp * s.ep);
  c.dense_tp_rank = c.stage_rank % s.dense_tp;
  c.dense_dp_rank = c.stage_rank / s.dense_tp;
  return c;
}

int Mapping::rank_of_attention(int pp_rank, int dp_rank, int tp_rank) const {
  const ParallelSizes& s = sizes_;
  SY_CHECK(pp_rank >= 0 && pp_rank < s.pp && dp_rank >= 0 && dp_rank < s.dp && tp_rank >= 0 && tp_rank < s.tp,
           "attention coordinates (pp {}, dp {}, tp {}) are outside the layout pp {} × dp {} × tp {}", pp_rank, dp_rank,
           tp_rank, s.pp, s.dp, s.tp);
  return pp_rank * stage_size() + tp_rank + s.tp * dp_rank;
}

int Mapping::rank_of_moe(int pp_rank, int edp_rank, int ep_rank, int etp_rank) const {
  const ParallelSizes& s = sizes_;
  SY_CHECK(pp_rank >= 0 && pp_rank < s.pp && edp_rank >= 0 && edp_rank < s.edp && ep_rank >= 0 && ep_rank < s.ep &&
               etp_rank >= 0 && etp_rank < s.etp,
           "MoE coordinates (pp {}, edp {}, ep {}, etp {}) are outside the layout pp {} × edp {} × ep {} × etp {}",
           pp_rank, edp_rank, ep_rank, etp_rank, s.pp, s.edp, s.ep, s.etp);
  return pp_rank * stage_size() + etp_rank + s.etp * (ep_rank + s.ep * edp_rank);
}

std::vector<int> Mapping::group(Axis axis, int rank) const {
  const ParallelSizes& s = sizes_;
  const RankCoords c = coords(rank);
  const int S = stage_size();
  const int stage_base = c.pp_rank * S;
  const int n = s.get(axis);
  std::vector<int> members;
  members.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    switch (axis) {
      case Axis::tp:
        members.push_back(stage_base + i + s.tp * c.dp_rank);
        break;
      case Axis::dp:
        members.push_back(stage_base + c.tp_rank + s.tp * i);
        break;
      case Axis::pp:
        members.push_back(i * S + c.stage_rank);
        break;
      case Axis::etp:
        members.push_back(stage_base + i + s.etp * (c.ep_rank + s.ep * c.edp_rank));
        break;
      case Axis::ep:
        members.push_back(stage_base + c.etp_rank + s.etp * (i + s.ep * c.edp_rank));
        break;
      case Axis::edp:
        members.push_back(stage_base + c.etp_rank + s.etp * (c.ep_rank + s.ep * i));
        break;
      case Axis::dense_tp:
        members.push_back(stage_base + i + s.dense_tp * c.dense_dp_rank);
        break;
    }
  }
  return members;
}

std::vector<std::vector<int>> Mapping::groups(Axis axis) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_size(); ++r) {
    if (coords(r).get(axis) == 0) out.push_back(group(axis, r));
  }
  return out;
}

std::optional<int> LayoutRequest::get(Axis a) const { return axis_field(*this, a); }
void LayoutRequest::set(Axis a, std::optional<int> value) { axis_field(*this, a) = value; }

bool LayoutRequest::empty() const {
  for (Axis a : kAxes) {
    if (get(a)) return false;
  }
  return pp_layers.empty();
}

namespace {
std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(std::to_string(v[i]));
  }
  return out;
}
}  // namespace

std::string LayoutRequest::flags() const {
  std::string out;
  for (Axis a : kAxes) {
    if (const auto v = get(a)) out += fmt::format("{}{} {}", out.empty() ? "" : " ", axis_flag(a), *v);
  }
  if (!pp_layers.empty()) out += fmt::format("{}--pp-layers {}", out.empty() ? "" : " ", join_ints(pp_layers, ","));
  return out.empty() ? "(no layout flags)" : out;
}

std::string layout_flags(const ParallelSizes& s) {
  std::string out = fmt::format("--tp {}", s.tp);
  if (s.dp != 1) out += fmt::format(" --dp {}", s.dp);
  if (s.pp != 1) out += fmt::format(" --pp {}", s.pp);
  if (s.ep != 1) out += fmt::format(" --ep {}", s.ep);
  if (s.edp != 1) out += fmt::format(" --edp {}", s.edp);
  if (s.dense_tp != s.tp) out += fmt::format(" --dense-tp {}", s.dense_tp);
  return out;
}

std::string describe_sizes(const ParallelSizes& s) {
  return fmt::format("pp {} · (dp {} × tp {}) = pp {} · (edp {} × ep {} × etp {}) = {} rank{}, dense_tp {}", s.pp, s.dp,
                     s.tp, s.pp, s.edp, s.ep, s.etp, s.world_size(), s.world_size() == 1 ? "" : "s", s.dense_tp);
}

ResolvedSizes resolve_layout_sizes(const LayoutRequest& req, int available) {
  ResolvedSizes out;
  ParallelSizes& s = out.sizes;
  bool positive = true;
  for (Axis a : kAxes) {
    if (const auto v = req.get(a); v && *v < 1) {
      out.issues.push_back({.rule = "size_positive",
                            .message = fmt::format("{} {} must be at least 1: every axis has one or more ranks; "
                                                   "leave {} out to take its default",
                                                   axis_flag(a), *v, axis_flag(a)),
                            .axes = {a}});
      positive = false;
    }
  }
  for (size_t i = 0; i < req.pp_layers.size(); ++i) {
    if (req.pp_layers[i] < 1) {
      out.issues.push_back({.rule = "pp_layers",
                            .message = fmt::format("--pp-layers {}: stage {} has {} layers; every pipeline stage needs "
                                                   "at least one layer",
                                                   join_ints(req.pp_layers, ","), i, req.pp_layers[i]),
                            .axes = {Axis::pp}});
    }
  }
  if (!positive) {
    for (Axis a : kAxes) s.set(a, 0);
    return out;
  }

  const int split_stages = static_cast<int>(req.pp_layers.size());
  s.pp = req.pp.value_or(split_stages > 0 ? split_stages : 1);
  if (!req.pp && split_stages > 0) out.completions.push_back(fmt::format("pp {} from --pp-layers", s.pp));
  if (split_stages > 0 && split_stages != s.pp) {
    out.issues.push_back({.rule = "pp_layers",
                          .message = fmt::format("--pp-layers {} names {} stages but --pp is {}: give one layer count "
                                                 "per pipeline stage",
                                                 join_ints(req.pp_layers, ","), split_stages, s.pp),
                          .axes = {Axis::pp}});
  }
  s.dp = req.dp.value_or(1);
  s.ep = req.ep.value_or(1);
  s.edp = req.edp.value_or(1);

  if (req.tp) {
    s.tp = *req.tp;
  } else if (s.pp * s.dp > available) {
    s.tp = 0;
    out.issues.push_back(
        {.rule = "derived_zero",
         .message = fmt::format("tp completes W = pp·dp·tp = {} ranks, but pp {} × dp {} = {} already exceeds it, so "
                                "tp would be 0; lower --pp/--dp or use more GPUs",
                                available, s.pp, s.dp, s.pp * s.dp),
         .axes = {Axis::tp, Axis::pp, Axis::dp}});
  } else if (available % (s.pp * s.dp) != 0) {
    s.tp = 0;
    out.issues.push_back(
        {.rule = "world_size",
         .message = fmt::format("tp completes W = pp·dp·tp = {} ranks, but pp {} × dp {} = {} does not divide {}; "
                                "give sizes whose product divides the GPUs",
                                available, s.pp, s.dp, s.pp * s.dp, available),
         .axes = {Axis::tp, Axis::pp, Axis::dp}});
  } else {
    s.tp = available / (s.pp * s.dp);
    out.completions.push_back(fmt::format("tp {} completes W = pp·dp·tp = {}", s.tp, available));
  }

  if (s.tp > 0) {
    const int W = s.world_size();
    if (W > available) {
      out.issues.push_back(
          {.rule = "world_size",
           .message = fmt::format("the layout needs W = pp·dp·tp = {} × {} × {} = {} ranks but only {} GPUs are "
                                  "available; each rank is one GPU",
                                  s.pp, s.dp, s.tp, W, available),
           .axes = {Axis::tp, Axis::pp, Axis::dp}});
    } else if (W < available) {
      out.uses_fewer_ranks = true;
    }
  }

  const int S = s.stage_size();
  const int moe_outer = s.edp * s.ep;
  if (req.etp) {
    s.etp = *req.etp;
    if (S > 0 && s.edp * s.ep * s.etp != S) {
      out.issues.push_back(
          {.rule = "stage_product",
           .message = fmt::format("ep·etp·edp must equal dp·tp: ep {} × etp {} × edp {} = {} but dp {} × tp {} = {}; "
                                  "a stage's ranks are read both as attention (dp × tp) and as MoE (edp × ep × etp) "
                                  "groups",
                                  s.ep, s.etp, s.edp, s.edp * s.ep * s.etp, s.dp, s.tp, S),
           .axes = {Axis::ep, Axis::etp, Axis::edp, Axis::dp, Axis::tp}});
    }
  } else if (S > 0 && S % moe_outer != 0) {
    s.etp = 0;
    out.issues.push_back(
        {.rule = "stage_product",
         .message = fmt::format("ep·etp·edp must equal dp·tp: ep {} × edp {} = {} does not divide dp {} × tp {} = {}, "
                                "so no expert-TP size etp completes it; a stage's ranks are read both as attention "
                                "(dp × tp) and as MoE (edp × ep × etp) groups",
                                s.ep, s.edp, moe_outer, s.dp, s.tp, S),
         .axes = {Axis::ep, Axis::etp, Axis::edp, Axis::dp, Axis::tp}});
  } else if (S > 0) {
    s.etp = S / moe_outer;
    if (s.etp > 1) out.completions.push_back(fmt::format("etp {} completes S = edp·ep·etp = {}", s.etp, S));
  } else {
    s.etp = 0;
  }

  if (req.dense_tp) {
    s.dense_tp = *req.dense_tp;
    if (S > 0 && S % s.dense_tp != 0) {
      out.issues.push_back(
          {.rule = "dense_tp_divides",
           .message = fmt::format("--dense-tp {} must divide the stage size dp·tp = {}: dense layers, shared experts "
                                  "and the LM head run on groups of dense_tp ranks that tile each stage",
                                  s.dense_tp, S),
           .axes = {Axis::dense_tp}});
    }
  } else {
    s.dense_tp = s.tp;
  }
  return out;
}

std::vector<int64_t> stage_layer_counts(int64_t n_layers, int pp, const std::vector<int>& split) {
  std::vector<int64_t> counts;
  if (!split.empty()) {
    for (int c : split) counts.push_back(c);
    return counts;
  }
  SY_CHECK(pp >= 1 && pp <= n_layers, "pp {} must be between 1 and the {} layers", pp, n_layers);
  for (int i = 0; i < pp; ++i) counts.push_back(n_layers / pp + (i < n_layers % pp ? 1 : 0));
  return counts;
}

std::vector<std::array<int, 2>> factor_pairs(int n) {
  std::vector<std::array<int, 2>> out;
  for (int a = 1; a <= n; ++a) {
    if (n % a == 0) out.push_back({a, n / a});
  }
  return out;
}

std::vector<std::array<int, 3>> factor_triples(int n) {
  std::vector<std::array<int, 3>> out;
  for (const auto& [a, rest] : factor_pairs(n)) {
    for (const auto& [b, c] : factor_pairs(rest)) out.push_back({a, b, c});
  }
  return out;
}

}  // namespace sy
