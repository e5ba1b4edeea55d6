// bench calibrate's recheck: which points it names (dominated_points, a rule of the dims and times alone) and, on
// the CPU backend, a point whose time was spoilt after timing comes back to a time of its own.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench_calibrate.h"
#include "backend/backend.h"

namespace sy {
namespace {

MeasuredOp table(const std::vector<std::pair<CalibPoint, double>>& points) {
  MeasuredOp m{.op = "linear", .dims = {"m", "n", "k"}};
  for (const auto& [dims, us] : points) m.points.push_back({.dims = dims, .us = us});
  return m;
}

// Over 2x and over 20 µs slower than a point at least as large in every dim: named. At 1.9x, or 2.5x but 15 µs
// over, or against a point smaller in one dim, or against itself: not.
TEST(CalibrationRecheck, APointSlowerThanTwiceALargerOneIsNamed) {
  const MeasuredOp m = table({
      {{1, 512, 256}, 5000.0},  // 0: over 2x [2, 512, 256] and [1, 1024, 256]
      {{2, 512, 256}, 100.0},   // 1
      {{1, 1024, 256}, 40.0},   // 2
      {{4, 512, 256}, 190.0},   // 3: 1.9x [8, 512, 256]: not named
      {{8, 512, 256}, 100.0},   // 4
      {{1, 64, 64}, 25.0},      // 5: 2.5x [1, 128, 64] but 15 µs over: not named
      {{1, 128, 64}, 10.0},     // 6
      {{16, 64, 64}, 900.0},    // 7: slower than [2, 512, 256] but smaller only in n, k, larger in m: not named
  });
  EXPECT_EQ(dominated_points(m), (std::vector<size_t>{0}));
}

// Equal dims are not compared (a table holds each point once; a second copy is no larger); a dim of 0 or less is
// a point outside the grid's rules and is left out either way.
TEST(CalibrationRecheck, EqualOrEmptyDimsAreNotCompared) {
  EXPECT_TRUE(dominated_points(table({{{4, 256, 256}, 500.0}, {{4, 256, 256}, 10.0}})).empty());
  EXPECT_TRUE(dominated_points(table({{{0, 256, 256}, 500.0}, {{4, 256, 256}, 10.0}})).empty());
  EXPECT_TRUE(dominated_points(table({{{1, 256, 256}, 500.0}, {{4, 0, 256}, 10.0}})).empty());
  // Every dim counts: a larger point that is smaller in the last dim does not bound it.
  EXPECT_TRUE(dominated_points(table({{{1, 256, 512}, 500.0}, {{4, 256, 256}, 10.0}})).empty());
  EXPECT_EQ(dominated_points(table({{{1, 256, 256}, 500.0}, {{4, 256, 256}, 10.0}})), (std::vector<size_t>{0}));
}

// On the CPU backend, the add op at 256, 4,096 and 65,536 elements: the smallest point's time set to 100 ms after
// time_ops (a disturbance no call of 256 adds takes) is named, timed again, and keeps its new time, far below.
TEST(CalibrationRecheck, ASpoiltPointIsTimedAgainAndKeepsTheFasterTime) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const OpsRun run{.be = *be,
                   .timing = {.graphs = false, .batch_us = 300, .repeats = 3},
                   .seconds = 60,
                   .passes = 1,
                   .recheck_share = 0};
  const std::vector<OpGrid> grid{{.op = "add", .weight = 1, .series = {{{256}, {4096}, {65536}}}}};
  std::vector<SkippedPoint> skipped;
  std::vector<MeasuredOp> tables = time_ops(run, grid, skipped);
  ASSERT_EQ(tables.size(), 1u);
  ASSERT_EQ(tables[0].points.size(), 3u) << "skipped " << skipped.size();
  ASSERT_EQ(tables[0].points[0].dims, (CalibPoint{256}));
  constexpr double kSpoilt = 100000;
  tables[0].points[0].us = kSpoilt;
  ASSERT_EQ(dominated_points(tables[0]), (std::vector<size_t>{0}));
  const std::map<std::string, std::vector<CalibPoint>> keys{{"add", {{256}, {4096}, {65536}}}};
  PassLedger ledger;
  const RecheckCount c = recheck_dominated(run, 60, ledger, keys, tables);
  EXPECT_GE(c.retimed, 1);
  EXPECT_GE(c.faster, 1);
  EXPECT_LE(c.faster, c.retimed);
  EXPECT_LT(tables[0].points[0].us, kSpoilt / 10);
  EXPECT_GT(tables[0].points[0].us, 0.0);
  EXPECT_EQ(tables[0].points[1].dims, (CalibPoint{4096})) << "the other points keep their places";
}

// No time left: nothing is timed, the spoilt point stays as it was, and the count says it is still over.
TEST(CalibrationRecheck, NoTimeLeftTimesNothing) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const OpsRun run{.be = *be, .timing = {.graphs = false, .batch_us = 300, .repeats = 3}, .seconds = 60};
  std::vector<MeasuredOp> tables{
      {.op = "add", .dims = {"n"}, .points = {{.dims = {256}, .us = 5000}, {.dims = {4096}, .us = 2}}}};
  const std::map<std::string, std::vector<CalibPoint>> keys{{"add", {{256}, {4096}}}};
  PassLedger ledger;
  const RecheckCount c = recheck_dominated(run, 0, ledger, keys, tables);
  EXPECT_EQ(c.retimed, 0);
  EXPECT_EQ(c.left, 1);
  EXPECT_EQ(tables[0].points[0].us, 5000);
}

}  // namespace
}  // namespace sy
