// The parallel mapping of design.md "Parallel layout": sizes, rank <-> coordinates, the members of every
// group, and the resolution of a partly given layout (defaults complete it; nothing is overridden).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sy {

// The seven axes. Attention reads a stage's S ranks as dp × tp, MoE as edp × ep × etp; dense FFN
// layers, shared experts and the LM head as (S / dense_tp) × dense_tp; pp is outermost.
enum class Axis : uint8_t { tp, dp, pp, ep, etp, edp, dense_tp };
inline constexpr std::array<Axis, 7> kAxes = {Axis::tp,  Axis::dp,  Axis::pp,      Axis::ep,
                                              Axis::etp, Axis::edp, Axis::dense_tp};

std::string_view axis_name(Axis a);  // "tp", ..., "dense_tp"
std::string_view axis_flag(Axis a);  // "--tp", ..., "--dense-tp"

struct ParallelSizes {
  int pp = 1;
  int tp = 1;
  int dp = 1;
  int ep = 1;
  int etp = 1;
  int edp = 1;
  int dense_tp = 1;

  int stage_size() const { return dp * tp; }  // S
  int world_size() const { return pp * stage_size(); }
  int get(Axis a) const;
  void set(Axis a, int value);
  bool operator==(const ParallelSizes&) const = default;
};

// Every coordinate of one global rank g = pp_rank·S + s.
struct RankCoords {
  int rank = 0;
  int stage_rank = 0;  // s, the index inside the pipeline stage
  int pp_rank = 0;
  int tp_rank = 0;  // s = tp_rank + tp·dp_rank
  int dp_rank = 0;
  int etp_rank = 0;  // s = etp_rank + etp·(ep_rank + ep·edp_rank)
  int ep_rank = 0;
  int edp_rank = 0;
  int dense_tp_rank = 0;  // s = dense_tp_rank + dense_tp·dense_dp_rank
  int dense_dp_rank = 0;
  int get(Axis a) const;
  bool operator==(const RankCoords&) const = default;
};

// A complete, consistent layout. Pure value type: no communicators, no devices.
class Mapping {
 public:
  // Precondition: every size ≥ 1, dp·tp == edp·ep·etp and dense_tp divides dp·tp (sy::Error otherwise;
  // resolve_layout_sizes reports the same problems as a list, with the reasons).
  explicit Mapping(const ParallelSizes& sizes);

  const ParallelSizes& sizes() const { return sizes_; }
  int stage_size() const { return sizes_.stage_size(); }
  int world_size() const { return sizes_.world_size(); }

  RankCoords coords(int rank) const;
  int rank_of_attention(int pp_rank, int dp_rank, int tp_rank) const;
  int rank_of_moe(int pp_rank, int edp_rank, int ep_rank, int etp_rank) const;

  // The group of `axis` that holds `rank`: ranks that share every other coordinate of that axis' view,
  // ordered by their rank along `axis` (so entry i has axis-rank i).
  std::vector<int> group(Axis axis, int rank) const;
  // All groups of one family; together they partition 0..world_size-1.
  std::vector<std::vector<int>> groups(Axis axis) const;

  bool operator==(const Mapping&) const = default;

 private:
  ParallelSizes sizes_;
};

// A layout as the user wrote it: unset sizes are defaulted or completed.
struct LayoutRequest {
  std::optional<int> pp, tp, dp, ep, etp, edp, dense_tp;
  std::vector<int> pp_layers;  // explicit decoder layers per stage, e.g. {30, 31}; empty = even split

  std::optional<int> get(Axis a) const;
  void set(Axis a, std::optional<int> value);
  bool empty() const;  // no size and no split given
  // The flags that reproduce it, in axis order: "--tp 4 --ep 2".
  std::string flags() const;
};

// The shortest flags that reproduce a resolved layout: tp always, the others when not their default
// (etp is always the completion, so it is never needed).
std::string layout_flags(const ParallelSizes& s);
// "pp 1 · (dp 1 × tp 4) = (edp 1 × ep 2 × etp 2) = 4 ranks, dense_tp 4"
std::string describe_sizes(const ParallelSizes& s);

// One broken rule: a stable id, one line with the values and why the rule exists, the axes it involves,
// and valid layouts that avoid it (filled in by whoever knows the whole problem: the planner).
struct LayoutIssue {
  std::string rule;
  std::string message;
  std::vector<Axis> axes;
  std::vector<std::string> alternatives;
};

// The sizes a request resolves to for `available_ranks`, with every structural rule it breaks
// (size_positive, pp_layers, world_size, derived_zero, stage_product, dense_tp_divides) and plain notes
// (the completions made, fewer ranks than available). A size that cannot be completed is left 0.
struct ResolvedSizes {
  ParallelSizes sizes;
  std::vector<LayoutIssue> issues;
  std::vector<std::string> completions;  // "tp 8 completes W = pp·dp·tp = 8"
  bool uses_fewer_ranks = false;         // valid, but world_size() < available_ranks
};
ResolvedSizes resolve_layout_sizes(const LayoutRequest& request, int available_ranks);

// Decoder layers per pipeline stage: the explicit split, or an even one (the first n_layers % pp stages
// get one more). Precondition: 1 ≤ pp ≤ n_layers when no split is given.
std::vector<int64_t> stage_layer_counts(int64_t n_layers, int pp, const std::vector<int>& explicit_split);

// Ordered factorisations: every (a, b) with a·b == n, and every (a, b, c) with a·b·c == n.
std::vector<std::array<int, 2>> factor_pairs(int n);
std::vector<std::array<int, 3>> factor_triples(int n);

}  // namespace sy
