// bench calibrate's CPU grid as calibration_grid builds it, before any time bound leaves points out.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "apps/bench_calibrate.h"

namespace sy {
namespace {

// moe_experts_cold (dims tokens, top_k, n_experts, hidden, inter): each whole or expert-TP set at a decode step's
// rows, 1 to 64; each expert-parallel slice (top_k 1, a row a received pair) up to 512 pairs (a rank receives 128
// from 64 sequences and 256 from a 128-token prompt at top 4 over ep 2, the busiest more): a query past a cold
// table's rows is priced from the hot table.
TEST(CalibrationGrid, ExpertRanksAreTimedColdAtTheirPairs) {
  const std::vector<OpGrid> grid = calibration_grid(Device::cpu, false);
  const auto it = std::find_if(grid.begin(), grid.end(), [](const OpGrid& g) { return g.op == "moe_experts_cold"; });
  ASSERT_NE(it, grid.end());
  int parallel = 0, whole = 0;
  for (const std::vector<CalibPoint>& series : it->series) {
    ASSERT_FALSE(series.empty());
    std::vector<int64_t> rows;
    for (const CalibPoint& p : series) {
      ASSERT_EQ(p.size(), 5u);
      EXPECT_EQ(p[1], series.front()[1]);  // one expert set a series
      rows.push_back(p[0]);
    }
    if (series.front()[1] == 1) {
      ++parallel;
      EXPECT_EQ(rows, (std::vector<int64_t>{1, 4, 16, 64, 128, 256, 512}));
    } else {
      ++whole;
      EXPECT_EQ(rows, (std::vector<int64_t>{1, 4, 16, 64}));
    }
  }
  EXPECT_GT(parallel, 0);
  EXPECT_GT(whole, 0);
}

// Coverage before repeats (docs/perf-notes.md item 41): a point no pass has timed is timed by the next pass that
// reaches it (the first pass's time ran out before it); one timed cheaply is timed again; one that failed, lies
// past a series' cut or took over kRetimeMaxSeconds is left alone by every later pass.
TEST(CalibrationPasses, LaterPassesRetimeCheapPointsAndReachWhatTheFirstDidNot) {
  PassLedger ledger;
  const CalibPoint small{1, 2048, 256}, large{2048, 2048, 256}, dear{4096, 8192, 8192}, failed{64, 8, 8};
  EXPECT_EQ(ledger.turn("linear", small), PassLedger::Turn::first);
  ledger.timed("linear", small, 0.01);
  ledger.timed("linear", dear, PassLedger::kRetimeMaxSeconds * 4);
  ledger.close("linear", failed);
  EXPECT_EQ(ledger.turn("linear", small), PassLedger::Turn::again);
  EXPECT_EQ(ledger.turn("linear", large), PassLedger::Turn::first) << "not reached by the first pass";
  EXPECT_EQ(ledger.turn("linear", dear), PassLedger::Turn::leave);
  EXPECT_EQ(ledger.turn("linear", failed), PassLedger::Turn::leave);
  EXPECT_EQ(ledger.turn("add_rms_norm", small), PassLedger::Turn::first) << "points are per op";
  // A later timing does not replace the first's cost, so a point cheap once stays cheap to re-time.
  ledger.timed("linear", small, 1.0);
  EXPECT_EQ(ledger.turn("linear", small), PassLedger::Turn::again);
  // Reached by a later pass: timed again by the one after, as a first pass's point would be.
  ledger.timed("linear", large, PassLedger::kRetimeMaxSeconds / 2);
  EXPECT_EQ(ledger.turn("linear", large), PassLedger::Turn::again);
}

// The first pass's share: all of the time for one pass; with N, 1 / (1 + 0.2 (N − 1)), so that a later pass costing
// a fifth of the first (item 36's measurement on two cores) re-times all of its points within the rest.
TEST(CalibrationPasses, TheFirstPassHasTheTimeLessTheRetiming) {
  EXPECT_DOUBLE_EQ(first_pass_share(1), 1.0);
  EXPECT_DOUBLE_EQ(first_pass_share(2), 1.0 / 1.2);
  EXPECT_DOUBLE_EQ(first_pass_share(3), 1.0 / 1.4);
  for (const int n : {2, 3, 5}) {
    const double first = first_pass_share(n);
    EXPECT_NEAR(first + 0.2 * first * (n - 1), 1.0, 1e-12) << n << " passes";
  }
}

// A cold expert point's routings (item 44): n_experts / gcd(n_experts, top_k) of them, each a bijection of the
// first (the same distinct experts a token, the same count touched); one token's top 4 of 32 at 0..3 visits every
// expert exactly once over the 8 rotations.
TEST(CalibrationPoints, ColdExpertRoutingsVisitEveryExpert) {
  const std::vector<int32_t> ids{0, 1, 2, 3};
  const auto rot = expert_rotations(ids, 32, 4);
  ASSERT_EQ(rot.size(), 8U);
  EXPECT_EQ(rot.front(), ids);
  std::vector<int> seen(32, 0);
  for (const auto& r : rot) {
    ASSERT_EQ(r.size(), ids.size());
    for (const int32_t e : r) ++seen[static_cast<size_t>(e)];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 32) << "each of the 32 experts once";
  // Two tokens sharing an expert (touched 3 of 16, top 2): every rotation touches 3 as well.
  const std::vector<int32_t> two{5, 9, 9, 12};
  const auto r2 = expert_rotations(two, 16, 2);
  ASSERT_EQ(r2.size(), 8U);
  for (const auto& r : r2) {
    EXPECT_NE(r[0], r[1]);
    EXPECT_EQ(r[1], r[2]) << "the shared expert stays shared";
    EXPECT_NE(r[3], r[0]);
    EXPECT_NE(r[3], r[1]);
  }
  // top_k 3 of 8 experts: gcd 1, so 8 rotations, each id over all 8 experts once.
  const auto r3 = expert_rotations({7}, 8, 3);
  std::vector<int32_t> visits;
  for (const auto& r : r3) visits.push_back(r[0]);
  std::sort(visits.begin(), visits.end());
  EXPECT_EQ(visits, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// The cold pool is twice the last-level cache, at least 256 MiB, in whole MiB: the GPU host's 300 MB L3 held the
// 256 MiB pool (docs/perf-notes.md, twentieth session).
TEST(CalibrationGrid, TheColdPoolIsTwiceTheLastLevelCache) {
  constexpr size_t kMib = size_t{1} << 20;
  EXPECT_EQ(cold_pool_bytes(0), 256 * kMib);
  EXPECT_EQ(cold_pool_bytes(32 * kMib), 256 * kMib);
  EXPECT_EQ(cold_pool_bytes(300 * kMib), 600 * kMib);
  EXPECT_EQ(cold_pool_bytes(300'000'000), 573 * kMib);  // 600,000,000 bytes is 572.2 MiB
}

// linear_pool's product: 64 Ki f32 weights a thread, at least 256 Ki (1 MiB); its pools from those weights to the
// cold pool. 16 threads (one rank of the GPU host) and a 300 MiB L3: 4 MiB of weights, pools 4 to 512 MiB.
TEST(CalibrationGrid, TheCacheCurvesProductGrowsWithTheThreads) {
  EXPECT_EQ(pool_weight_elems(1), 256 << 10);
  EXPECT_EQ(pool_weight_elems(4), 256 << 10);
  EXPECT_EQ(pool_weight_elems(16), 1 << 20);
  EXPECT_EQ(pool_sizes_mb({.last_level_bytes = 300 * (size_t{1} << 20), .threads = 16}),
            (std::vector<int64_t>{4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}));
  EXPECT_EQ(pool_sizes_mb({.last_level_bytes = 0, .threads = 2}),
            (std::vector<int64_t>{1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256}));
  const std::vector<OpGrid> grid = calibration_grid(Device::cpu, false, {}, {.last_level_bytes = 0, .threads = 16});
  const auto it = std::find_if(grid.begin(), grid.end(), [](const OpGrid& g) { return g.op == "linear_pool"; });
  ASSERT_NE(it, grid.end());
  ASSERT_FALSE(it->series.empty());
  for (const CalibPoint& p : it->series.front()) {
    EXPECT_EQ(p[1] * p[2], 1 << 20);
    EXPECT_GE(p[3], 4);
  }
}

// The experts at every expert-TP slice a layout of up to 8 ranks makes (inter / 2, / 4, / 8): tp8's experts are
// 32 columns of the medium config's 256, priced from the 64-column shape before (docs/perf-notes.md item 47).
TEST(CalibrationGrid, ExpertsAreTimedAtEveryExpertTensorParallelSlice) {
  const std::vector<OpGrid> grid = calibration_grid(Device::cpu, false);
  const auto it = std::find_if(grid.begin(), grid.end(), [](const OpGrid& g) { return g.op == "moe_experts"; });
  ASSERT_NE(it, grid.end());
  std::set<std::pair<int64_t, int64_t>> sets;  // (n_experts, inter) with the model's top_k
  for (const std::vector<CalibPoint>& series : it->series) {
    if (series.front()[1] > 1) sets.insert({series.front()[2], series.front()[4]});
  }
  for (const auto& [experts, inter] : std::vector<std::pair<int64_t, int64_t>>(sets.begin(), sets.end())) {
    if (sets.count({experts, inter * 2}) || sets.count({experts, inter * 4}) || sets.count({experts, inter * 8})) {
      continue;  // a slice
    }
    if (experts == 64 && inter == 512) continue;  // the generic set between the models, whole only
    for (int64_t etp : {2, 4, 8}) {
      EXPECT_TRUE(sets.count({experts, inter / etp})) << experts << " experts, " << inter << " / " << etp;
    }
  }
}

}  // namespace
}  // namespace sy
