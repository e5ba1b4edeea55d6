// bench calibrate's CPU grid as calibration_grid builds it, before any time bound leaves points out.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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

}  // namespace
}  // namespace sy
