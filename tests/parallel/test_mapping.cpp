// The mapping of design.md "Parallel layout": every factorisation of 1..16 ranks partitions into groups
// of the right sizes with round-tripping coordinates, and partly given layouts resolve as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/check.h"
#include "parallel/mapping.h"

namespace sy {
namespace {

std::vector<ParallelSizes> consistent_layouts(int world) {
  std::vector<ParallelSizes> out;
  for (const auto& [pp, S] : factor_pairs(world)) {
    for (const auto& [dp, tp] : factor_pairs(S)) {
      for (const auto& [edp, ep, etp] : factor_triples(S)) {
        for (const auto& [dense_tp, rest] : factor_pairs(S)) {
          out.push_back({.pp = pp, .tp = tp, .dp = dp, .ep = ep, .etp = etp, .edp = edp, .dense_tp = dense_tp});
        }
      }
    }
  }
  return out;
}

TEST(Mapping, FactorisationsAreComplete) {
  EXPECT_EQ(factor_pairs(12).size(), 6u);
  EXPECT_EQ(factor_triples(8).size(), 10u);  // ordered (a, b, c) with a·b·c = 8
  EXPECT_EQ(factor_triples(1).size(), 1u);
  for (const auto& [a, b, c] : factor_triples(16)) EXPECT_EQ(a * b * c, 16);
}

// The coordinates that members of one `a` group share.
std::array<int, 3> fixed_coords(Axis a, const RankCoords& c) {
  switch (a) {
    case Axis::tp:
      return {c.pp_rank, c.dp_rank, 0};
    case Axis::dp:
      return {c.pp_rank, c.tp_rank, 0};
    case Axis::pp:
      return {c.stage_rank, 0, 0};
    case Axis::etp:
      return {c.pp_rank, c.ep_rank, c.edp_rank};
    case Axis::ep:
      return {c.pp_rank, c.etp_rank, c.edp_rank};
    case Axis::edp:
      return {c.pp_rank, c.etp_rank, c.ep_rank};
    case Axis::dense_tp:
      return {c.pp_rank, c.dense_dp_rank, 0};
  }
  return {};
}

// Every consistent layout of 1..16 ranks: every group family partitions the ranks into groups of the
// axis' size, members differ only in that axis' coordinate (ordered by it), and coordinates round-trip
// through both views with the formulas of design.md.
TEST(Mapping, EveryFactorisationOfOneToSixteenRanks) {
  int layouts = 0;
  for (int world = 1; world <= 16; ++world) {
    for (const ParallelSizes& z : consistent_layouts(world)) {
      ++layouts;
      const Mapping m(z);
      ASSERT_EQ(m.world_size(), world);
      const int S = z.dp * z.tp;
      for (int r = 0; r < world; ++r) {
        const RankCoords c = m.coords(r);
        ASSERT_EQ(r, c.pp_rank * S + c.stage_rank);
        ASSERT_EQ(c.stage_rank, c.tp_rank + z.tp * c.dp_rank);
        ASSERT_EQ(c.stage_rank, c.etp_rank + z.etp * (c.ep_rank + z.ep * c.edp_rank));
        ASSERT_EQ(c.stage_rank, c.dense_tp_rank + z.dense_tp * c.dense_dp_rank);
        ASSERT_EQ(m.rank_of_attention(c.pp_rank, c.dp_rank, c.tp_rank), r);
        ASSERT_EQ(m.rank_of_moe(c.pp_rank, c.edp_rank, c.ep_rank, c.etp_rank), r);
      }
      for (Axis a : kAxes) {
        const auto groups = m.groups(a);
        ASSERT_EQ(static_cast<int>(groups.size()) * z.get(a), world) << describe_sizes(z) << " " << axis_name(a);
        std::vector<int> seen(static_cast<size_t>(world), 0);
        for (const auto& g : groups) {
          ASSERT_EQ(static_cast<int>(g.size()), z.get(a));
          const RankCoords first = m.coords(g.front());
          for (size_t i = 0; i < g.size(); ++i) {
            ++seen[static_cast<size_t>(g[i])];
            const RankCoords c = m.coords(g[i]);
            ASSERT_EQ(c.get(a), static_cast<int>(i)) << describe_sizes(z) << " " << axis_name(a);
            ASSERT_EQ(m.group(a, g[i]), g);
            // Members agree on everything their view keeps fixed.
            EXPECT_EQ(fixed_coords(a, c), fixed_coords(a, first)) << describe_sizes(z) << " " << axis_name(a);
          }
        }
        for (int s : seen) ASSERT_EQ(s, 1) << "groups of " << axis_name(a) << " do not partition the ranks";
      }
    }
  }
  EXPECT_GT(layouts, 1000);
}

TEST(Mapping, TensorParallelGroupsAreContiguous) {
  const Mapping m({.pp = 2, .tp = 4, .dp = 2, .ep = 2, .etp = 2, .edp = 2, .dense_tp = 8});
  EXPECT_EQ(m.group(Axis::tp, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m.group(Axis::etp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.group(Axis::ep, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group(Axis::edp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.group(Axis::dp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.group(Axis::pp, 5), (std::vector<int>{5, 13}));
  EXPECT_EQ(m.group(Axis::dense_tp, 12), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(Mapping, InconsistentSizesAreAnError) {
  EXPECT_THROW(Mapping({.tp = 2, .ep = 4}), Error);
  EXPECT_THROW(Mapping({.tp = 4, .etp = 4, .dense_tp = 3}), Error);
  EXPECT_THROW(Mapping({.tp = 0}), Error);
  const Mapping m({.tp = 2, .etp = 2, .dense_tp = 2});
  EXPECT_THROW(m.coords(2), Error);
  EXPECT_THROW(m.rank_of_attention(0, 1, 0), Error);
}

std::set<std::string> rules(const ResolvedSizes& r) {
  std::set<std::string> out;
  for (const auto& i : r.issues) out.insert(i.rule);
  return out;
}

TEST(Resolve, DefaultsCompleteTheLayout) {
  // Nothing given: tp takes every rank.
  auto r = resolve_layout_sizes({}, 8);
  EXPECT_TRUE(r.issues.empty());
  EXPECT_EQ(r.sizes, (ParallelSizes{.pp = 1, .tp = 8, .dp = 1, .ep = 1, .etp = 8, .edp = 1, .dense_tp = 8}));
  // design.md: `--ep 8` on 8 GPUs is attention TP 8 with experts over 8 ranks (etp 1).
  r = resolve_layout_sizes({.ep = 8}, 8);
  EXPECT_EQ(r.sizes, (ParallelSizes{.pp = 1, .tp = 8, .dp = 1, .ep = 8, .etp = 1, .edp = 1, .dense_tp = 8}));
  // design.md: `--tp 2 --dp 2 --ep 2` on 4 ranks gives etp 2.
  r = resolve_layout_sizes({.tp = 2, .dp = 2, .ep = 2}, 4);
  EXPECT_TRUE(r.issues.empty());
  EXPECT_EQ(r.sizes.etp, 2);
  EXPECT_EQ(r.sizes.dense_tp, 2);
  EXPECT_FALSE(r.uses_fewer_ranks);
  // --pp-layers gives pp when --pp is absent.
  r = resolve_layout_sizes({.pp_layers = {30, 31}}, 8);
  EXPECT_EQ(r.sizes.pp, 2);
  EXPECT_EQ(r.sizes.tp, 4);
}

TEST(Resolve, FewerRanksAreAllowedAndSaid) {
  const auto r = resolve_layout_sizes({.tp = 4, .ep = 2}, 8);
  EXPECT_TRUE(r.issues.empty());
  EXPECT_TRUE(r.uses_fewer_ranks);
  EXPECT_EQ(r.sizes.world_size(), 4);
  EXPECT_EQ(r.sizes.etp, 2);
}

TEST(Resolve, NothingIsOverriddenSilently) {
  // Explicit sizes stay as given even when they break rules; the rules say so.
  const auto r = resolve_layout_sizes({.tp = 2, .ep = 4, .etp = 3, .dense_tp = 5}, 2);
  EXPECT_EQ(r.sizes.tp, 2);
  EXPECT_EQ(r.sizes.ep, 4);
  EXPECT_EQ(r.sizes.etp, 3);
  EXPECT_EQ(r.sizes.dense_tp, 5);
  EXPECT_EQ(rules(r), (std::set<std::string>{"stage_product", "dense_tp_divides"}));
}

TEST(Resolve, EachStructuralRule) {
  EXPECT_EQ(rules(resolve_layout_sizes({.tp = 0}, 8)), std::set<std::string>{"size_positive"});
  EXPECT_EQ(rules(resolve_layout_sizes({.tp = 16}, 8)), std::set<std::string>{"world_size"});
  EXPECT_EQ(rules(resolve_layout_sizes({.pp = 3}, 8)), std::set<std::string>{"world_size"});
  EXPECT_EQ(rules(resolve_layout_sizes({.pp = 4, .dp = 4}, 8)), std::set<std::string>{"derived_zero"});
  EXPECT_EQ(rules(resolve_layout_sizes({.tp = 2, .ep = 4}, 8)), std::set<std::string>{"stage_product"});
  EXPECT_EQ(rules(resolve_layout_sizes({.tp = 4, .ep = 2, .etp = 4}, 8)), std::set<std::string>{"stage_product"});
  EXPECT_EQ(rules(resolve_layout_sizes({.tp = 4, .dense_tp = 3}, 8)), std::set<std::string>{"dense_tp_divides"});
  EXPECT_EQ(rules(resolve_layout_sizes({.pp = 3, .pp_layers = {10, 10}}, 6)), std::set<std::string>{"pp_layers"});
  EXPECT_EQ(rules(resolve_layout_sizes({.pp_layers = {10, 0}}, 8)), std::set<std::string>{"pp_layers"});

  const auto r = resolve_layout_sizes({.tp = 2, .ep = 4}, 8);
  ASSERT_EQ(r.issues.size(), 1u);
  EXPECT_NE(r.issues[0].message.find("ep·etp·edp must equal dp·tp"), std::string::npos) << r.issues[0].message;
  EXPECT_NE(r.issues[0].message.find("ep 4"), std::string::npos);
}

TEST(Resolve, FlagsRoundTrip) {
  const LayoutRequest req{.pp = 2, .tp = 4, .ep = 2, .pp_layers = {30, 31}};
  EXPECT_EQ(req.flags(), "--tp 4 --pp 2 --ep 2 --pp-layers 30,31");
  EXPECT_EQ(layout_flags({.pp = 1, .tp = 4, .dp = 2, .ep = 2, .etp = 4, .edp = 1, .dense_tp = 4}),
            "--tp 4 --dp 2 --ep 2");
  EXPECT_EQ(layout_flags({.tp = 2, .dp = 4, .ep = 4, .etp = 1, .edp = 2, .dense_tp = 8}),
            "--tp 2 --dp 4 --ep 4 --edp 2 --dense-tp 8");
  // The shortest flags resolve back to the same sizes.
  for (const ParallelSizes& z : consistent_layouts(8)) {
    LayoutRequest r;
    r.tp = z.tp;
    if (z.dp != 1) r.dp = z.dp;
    if (z.pp != 1) r.pp = z.pp;
    if (z.ep != 1) r.ep = z.ep;
    if (z.edp != 1) r.edp = z.edp;
    if (z.dense_tp != z.tp) r.dense_tp = z.dense_tp;
    EXPECT_EQ(r.flags(), layout_flags(z));
    EXPECT_EQ(resolve_layout_sizes(r, 8).sizes, z) << layout_flags(z);
  }
}

TEST(Resolve, StageLayerSplit) {
  EXPECT_EQ(stage_layer_counts(61, 2, {}), (std::vector<int64_t>{31, 30}));
  EXPECT_EQ(stage_layer_counts(48, 4, {}), (std::vector<int64_t>{12, 12, 12, 12}));
  EXPECT_EQ(stage_layer_counts(61, 2, {30, 31}), (std::vector<int64_t>{30, 31}));
  EXPECT_THROW(stage_layer_counts(4, 5, {}), Error);
}

}  // namespace
}  // namespace sy
