// The speed model's machinery against mathematics: profiles are read strictly, a lookup interpolates log-log
// between measured points and scales by work exactly as documented, collectives extrapolate by bandwidth, and
// the cost model's predictions follow the bytes of the layout (tensor parallelism halves the attention weights
// a rank reads; more sequences touch the experts the uniform-routing formula says; a CPU step beyond the caches
// streams its weights and one within them does not; experts serve the tokens their replicas hold; one sequence
// passes pipeline stages in turn; CPU ranks left alone by waiting ones run at their single-rank rate).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "base/check.h"
#include "planner/cost_model.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "planner_test_util.h"

namespace sy {
namespace {

using nlohmann::json;

// A cuda profile with copies at 1e12 B/s and products at 1e15 FLOP/s; `ops` and `collectives` as given.
json profile_json(const json& ops, const json& collectives = json::object()) {
  return {{"format", "switchyard-profile"},
          {"version", 1},
          {"machine", {{"device", "cuda"}, {"name", "test GPU"}, {"ranks", 1}, {"transport", "none"}}},
          {"rates", {{"copy_gb_s", 1000.0}, {"matrix_tflop_s", 1000.0}}},
          {"step", {{"launch_us", 3.0}, {"sync_us", 5.0}, {"graph_launch_us", 7.0}, {"copy_to_host_us", 9.0}}},
          {"ops", ops},
          {"collectives", collectives}};
}

// The documented work model of `linear` at (m, n, k) with bf16 weights, in seconds: 2 µs plus the larger of the
// bytes (weights 2 bytes, fp32 activations in and out) at 1e12 B/s and 2mnk FLOPs at 1e15/s.
double linear_work(double m, double n, double k, double fixed = 2e-6) {
  const double bytes = 2 * n * k + 4 * (m * k + m * n);
  return fixed + std::max(bytes / 1e12, 2 * m * n * k / 1e15);
}

// The same on a CPU profile: a fixed 0.5 µs.
double cpu_linear_work(double m, double n, double k) { return linear_work(m, n, k, 0.5e-6); }

OpWork linear_fn(const DimView& v) {
  const double m = v["m"], n = v["n"], k = v["k"];
  return {.bytes = 2 * n * k + 4 * (m * k + m * n), .flops = 2 * m * n * k};
}

double lookup(const MachineProfile& p, double m, double n, double k) {
  const std::vector<std::string> names{"m", "n", "k"};
  const std::vector<double> values{m, n, k};
  return p.op_seconds("linear", DimView{&names, values.data()}, {"m"}, linear_fn);
}

TEST(Profile, ReadsEveryFigureInItsUnit) {
  const json ops = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 10.0}}}}}};
  const MachineProfile p = parse_profile(profile_json(ops).dump(), "p.json");
  EXPECT_EQ(p.device, "cuda");
  EXPECT_EQ(p.ranks, 1);
  EXPECT_DOUBLE_EQ(p.copy_bytes_per_s, 1e12);
  EXPECT_DOUBLE_EQ(p.matrix_flops_per_s, 1e15);
  EXPECT_DOUBLE_EQ(p.launch_s, 3e-6);
  EXPECT_DOUBLE_EQ(p.graph_launch_s, 7e-6);
  EXPECT_DOUBLE_EQ(p.copy_to_host_s, 9e-6);
  EXPECT_DOUBLE_EQ(p.weight_bytes, 2);
  ASSERT_TRUE(p.has_op("linear"));
  EXPECT_EQ(p.ops.at("linear").points.size(), 1u);
  EXPECT_EQ(p.busy_points, -1) << "no machine.recheck: not said";
  json j = profile_json(ops);
  j["machine"]["recheck"] = {{"retimed", 12}, {"faster", 9}, {"left", 4}};
  EXPECT_EQ(parse_profile(j.dump(), "p.json").busy_points, 4);
}

void expect_refused(const json& j, const std::string& needle) {
  try {
    parse_profile(j.dump(), "bad.json");
    ADD_FAILURE() << "accepted a profile that should say: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(Profile, RefusesMalformedFilesNamingTheKey) {
  const json ops = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 10.0}}}}}};
  json j = profile_json(ops);
  j["format"] = "something-else";
  expect_refused(j, "format");
  j = profile_json(ops);
  j["version"] = 2;
  expect_refused(j, "version 2");
  j = profile_json(ops);
  j.erase("rates");
  expect_refused(j, "rates");
  j = profile_json(ops);
  j["ops"]["linear"]["points"] = {{1, 1024, 10.0}};
  expect_refused(j, "ops.linear.points[0]");
  j = profile_json(ops);
  j["ops"]["linear"]["points"] = {{1, 1024, 1024, -1.0}};
  expect_refused(j, "positive");
  j = profile_json(ops);
  j["machine"]["device"] = "tpu";
  expect_refused(j, "cuda or cpu");
  j = profile_json(ops);
  j["machine"]["recheck"] = 7;
  expect_refused(j, "machine.recheck must be an object");
  j["machine"]["recheck"] = {{"left", "many"}};
  expect_refused(j, "machine.recheck.left must be a number");
  try {
    parse_profile("{not json", "broken.json");
    ADD_FAILURE() << "accepted broken JSON";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json is not valid JSON"), std::string::npos) << e.what();
  }
}

// Points that equal c times the work model give c times the work model between and below them: the lookup only
// carries the measured-over-work ratio. Beyond the largest point the work past it runs at the better of that
// ratio and the profile's rates: c · W(256) + min(c, 1) · (W(m) - W(256)).
TEST(Profile, LookupScalesByWorkBetweenAndBeyondPoints) {
  for (const double c : {1.5, 0.5}) {
    json pts = json::array();
    for (double m : {1.0, 16.0, 256.0}) pts.push_back({m, 2048, 2048, c * linear_work(m, 2048, 2048) * 1e6});
    const MachineProfile p =
        parse_profile(profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", pts}}}}).dump(), "p.json");
    for (double nk : {512.0, 2048.0, 8192.0}) {
      for (double m : {1.0, 3.0, 16.0, 100.0, 256.0}) {
        EXPECT_NEAR(lookup(p, m, nk, nk), c * linear_work(m, nk, nk), 1e-9 * linear_work(m, nk, nk));
      }
      const double last = linear_work(256, nk, nk), beyond = linear_work(4096, nk, nk);
      const double want = c * last + std::min(c, 1.0) * (beyond - last);
      EXPECT_NEAR(lookup(p, 4096, nk, nk), want, 1e-9 * want) << "c " << c << " nk " << nk;
    }
  }
}

// The ratio interpolates linearly in log(m) between two points: 1× at m = 1, 4× at m = 16 give 2× at m = 4.
TEST(Profile, LookupInterpolatesLogLog) {
  const json pts = {{1, 4096, 4096, 1.0 * linear_work(1, 4096, 4096) * 1e6},
                    {16, 4096, 4096, 4.0 * linear_work(16, 4096, 4096) * 1e6}};
  const MachineProfile p =
      parse_profile(profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", pts}}}}).dump(), "p.json");
  EXPECT_NEAR(lookup(p, 4, 4096, 4096), 2.0 * linear_work(4, 4096, 4096), 1e-12);
  // Beyond m = 16: that point's time, and the work past it at the profile's rates (not 4 times them).
  const double w16 = linear_work(16, 4096, 4096), w64 = linear_work(64, 4096, 4096);
  EXPECT_NEAR(lookup(p, 64, 4096, 4096), 4.0 * w16 + (w64 - w16), 1e-12);
}

// A linear table on a CPU profile (its points noisy: the host's other work) or a GPU one.
MachineProfile linear_profile(const json& points, bool cpu) {
  json j = profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", points}}}});
  if (cpu) j["machine"]["device"] = "cpu";
  return parse_profile(j.dump(), "p.json");
}

// On a CPU profile a point timed slower than a larger point of its shape (more rows: more work by the same kernel)
// caught something else on the machine: it reads as the larger point's time, and the rows between interpolate from
// there. A slow point still faster than every larger one is kept, and a GPU profile's points are kept as timed
// (another kernel at one row than at sixteen).
TEST(Profile, LookupHoldsAPointToTheTimeOfALargerOne) {
  const double w1 = cpu_linear_work(1, 4096, 4096), w4 = cpu_linear_work(4, 4096, 4096);
  const double w16 = cpu_linear_work(16, 4096, 4096), w4096 = cpu_linear_work(4096, 4096, 4096);
  ASSERT_GT(5.0 * w1, w16);
  ASSERT_LT(3.0 * w16, w4096);
  const json pts = {{1, 4096, 4096, 5.0 * w1 * 1e6}, {16, 4096, 4096, w16 * 1e6}, {4096, 4096, 4096, w4096 * 1e6}};
  const MachineProfile p = linear_profile(pts, true);
  EXPECT_NEAR(lookup(p, 1, 4096, 4096), w16, 1e-12);
  // Half way from m = 1 (ratio w16 / w1) to m = 16 (ratio 1) in log m.
  EXPECT_NEAR(lookup(p, 4, 4096, 4096), std::sqrt(w16 / w1) * w4, 1e-12);
  // A GPU profile (2 µs fixed) keeps the point's ratio: 5 × its work there.
  const double w1_gpu = linear_work(1, 4096, 4096), ratio = 5.0 * w1 / w1_gpu;
  EXPECT_NEAR(lookup(linear_profile(pts, false), 1, 4096, 4096), ratio * w1_gpu, 1e-12);
  const json slow = {{1, 4096, 4096, w1 * 1e6}, {16, 4096, 4096, 3.0 * w16 * 1e6}, {4096, 4096, 4096, w4096 * 1e6}};
  const MachineProfile q = linear_profile(slow, true);
  EXPECT_NEAR(lookup(q, 16, 4096, 4096), 3.0 * w16, 1e-12);
  EXPECT_NEAR(lookup(q, 1, 4096, 4096), w1, 1e-12);
}

// The lookup's index of shapes is kept between lookups (a plan makes thousands) and built again when points are
// added: a second shape added after a lookup is the nearest one for a query at its size.
TEST(Profile, LookupSeesPointsAddedAfterAnEarlierLookup) {
  MachineProfile p = parse_profile(
      profile_json(
          {{"linear",
            {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 2.0 * linear_work(1, 1024, 1024) * 1e6}}}}}})
          .dump(),
      "p.json");
  EXPECT_NEAR(lookup(p, 1, 16384, 16384), 2.0 * linear_work(1, 16384, 16384), 1e-12);
  p.ops.at("linear").points.push_back({1, 16384, 16384, 3.0 * linear_work(1, 16384, 16384) * 1e6});
  EXPECT_NEAR(lookup(p, 1, 16384, 16384), 3.0 * linear_work(1, 16384, 16384), 1e-12);
  EXPECT_NEAR(lookup(p, 1, 1024, 1024), 2.0 * linear_work(1, 1024, 1024), 1e-12);
}

// The nearest measured shape in the other dims gives the ratio.
TEST(Profile, LookupTakesTheNearestShape) {
  const json pts = {{1, 1024, 1024, 1.0 * linear_work(1, 1024, 1024) * 1e6},
                    {1, 16384, 16384, 3.0 * linear_work(1, 16384, 16384) * 1e6}};
  const MachineProfile p =
      parse_profile(profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", pts}}}}).dump(), "p.json");
  EXPECT_NEAR(lookup(p, 1, 2048, 2048), linear_work(1, 2048, 2048), 1e-12);
  EXPECT_NEAR(lookup(p, 1, 8192, 16384), 3.0 * linear_work(1, 8192, 16384), 1e-12);
  const std::vector<std::string> names{"m", "n"};
  const std::vector<double> values{1, 2};
  EXPECT_THROW(p.op_seconds("linear", DimView{&names, values.data()}, {"m"}, linear_fn), Error);
  EXPECT_THROW(p.op_seconds("moe_experts", DimView{&names, values.data()}, {"m"}, linear_fn), Error);
}

// On a CPU profile one shape timed slow among near neighbours (each within a factor of two in one dim) caught
// something else on the machine: a query at it takes the median of the three nearest shapes' times (each from its
// own ratio). Far neighbours leave the nearest shape's time alone, as a GPU profile does every shape.
TEST(Profile, LookupTakesTheMedianOfThreeNearShapes) {
  const auto at = [](double n, double ratio) { return json{1, n, 1024, ratio * cpu_linear_work(1, n, 1024) * 1e6}; };
  const json near_points = {at(1024, 1.0), at(1536, 3.0), at(2048, 1.2)};
  const MachineProfile near = linear_profile(near_points, true);
  EXPECT_NEAR(lookup(near, 1, 1536, 1024), 1.2 * cpu_linear_work(1, 1536, 1024), 1e-12);
  EXPECT_NEAR(lookup(near, 1, 1024, 1024), 1.2 * cpu_linear_work(1, 1024, 1024), 1e-12);
  // A GPU profile keeps the nearest shape's ratio (its work there: 2 µs fixed).
  const double ratio = 3.0 * cpu_linear_work(1, 1536, 1024) / linear_work(1, 1536, 1024);
  EXPECT_NEAR(lookup(linear_profile(near_points, false), 1, 1536, 1024), ratio * linear_work(1, 1536, 1024), 1e-12);
  const MachineProfile far = linear_profile({at(256, 1.0), at(1536, 3.0), at(8192, 1.2)}, true);
  EXPECT_NEAR(lookup(far, 1, 1536, 1024), 3.0 * cpu_linear_work(1, 1536, 1024), 1e-12);
}

// A shape measured at one row only says nothing of many rows (where a product turns from reading its weights to
// computing): the lookup takes the nearest shape whose measured rows cover the query's before a nearer one that
// does not.
TEST(Profile, LookupPrefersAShapeMeasuredOverTheQuerysRows) {
  json pts = {{1, 32000, 1024, 1.0 * linear_work(1, 32000, 1024) * 1e6}};
  for (double m : {1.0, 16.0, 256.0}) pts.push_back({m, 4096, 2048, 3.0 * linear_work(m, 4096, 2048) * 1e6});
  const MachineProfile p =
      parse_profile(profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", pts}}}}).dump(), "p.json");
  EXPECT_NEAR(lookup(p, 1, 30000, 1024), linear_work(1, 30000, 1024), 1e-12);
  EXPECT_NEAR(lookup(p, 64, 30000, 1024), 3.0 * linear_work(64, 30000, 1024), 1e-12);
}

// The matrix rate is the best any linear point reached, at least the file's: the largest product can be the single
// row streaming 1 GB, at the memory's rate (8 CPU ranks: 0.007 TFLOP/s written, 0.034 reached at [512, 384, 1024]).
TEST(Profile, MatrixRateIsTheBestLinearPointsRate) {
  json j = profile_json(
      {{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 131072, 4096, 152100.0}, {512, 384, 1024, 11760.0}}}}}});
  j["machine"]["device"] = "cpu";
  j["rates"]["matrix_tflop_s"] = 0.007058;
  EXPECT_NEAR(parse_profile(j.dump(), "cpu.json").matrix_flops_per_s, 2.0 * 512 * 384 * 1024 / 11760e-6, 1.0);
  j["rates"]["matrix_tflop_s"] = 0.5;  // a file's rate above every point's stays
  EXPECT_DOUBLE_EQ(parse_profile(j.dump(), "cpu.json").matrix_flops_per_s, 0.5e12);
}

// A CPU profile's streaming rate is its largest single-row product's, when that reads more than 512 MB of weights
// (f32 on the CPU), or its cache curve's largest pool's where that pool is beyond the caches and read faster; none
// for a GPU profile or without such a point.
TEST(Profile, CpuStreamingRateFromTheLargestSingleRowProduct) {
  json j = profile_json({{"linear",
                          {{"dims", {"m", "n", "k"}},
                           {"points", {{1, 65536, 2048, 10000.0}, {1, 4096, 2048, 100.0}, {64, 65536, 2048, 9e4}}}}}});
  j["machine"]["device"] = "cpu";
  EXPECT_NEAR(parse_profile(j.dump(), "cpu.json").stream_bytes_per_s, 65536.0 * 2048 * 4 / 10000e-6, 1.0);
  j["machine"]["device"] = "cuda";
  EXPECT_EQ(parse_profile(j.dump(), "gpu.json").stream_bytes_per_s, 0.0);
  j["machine"]["device"] = "cpu";
  // The cache curve's largest pool, beyond the caches (512 MiB), read faster: its rate (the median of its rounds);
  // a slower pool or one within 512 MB leaves the streaming point's.
  const auto pool = [](const json& points) { return json{{"dims", {"m", "n", "k", "pool_mb"}}, {"points", points}}; };
  const double point_rate = 65536.0 * 2048 * 4 / 10000e-6;  // 53.7 GB/s
  j["ops"]["linear_pool"] = pool(
      {{1, 1024, 1024, 4, 40.0}, {1, 1024, 1024, 512, 50.0}, {1, 1024, 1024, 512, 46.0}, {1, 1024, 1024, 512, 900.0}});
  EXPECT_NEAR(parse_profile(j.dump(), "cpu.json").stream_bytes_per_s, 1024.0 * 1024 * 4 / 50e-6, 1.0);  // 83.9 GB/s
  j["ops"]["linear_pool"] = pool({{1, 1024, 1024, 4, 40.0}, {1, 1024, 1024, 512, 100.0}});
  EXPECT_NEAR(parse_profile(j.dump(), "cpu.json").stream_bytes_per_s, point_rate, 1.0);
  j["ops"]["linear_pool"] = pool({{1, 1024, 1024, 4, 10.0}, {1, 1024, 1024, 256, 20.0}});
  EXPECT_NEAR(parse_profile(j.dump(), "cpu.json").stream_bytes_per_s, point_rate, 1.0);
  // Without the streaming point no floor, whatever the pool.
  j["ops"]["linear"]["points"] = {{1, 4096, 2048, 100.0}, {64, 65536, 2048, 9e4}};
  j["ops"]["linear_pool"] = pool({{1, 1024, 1024, 4, 40.0}, {1, 1024, 1024, 512, 50.0}});
  EXPECT_EQ(parse_profile(j.dump(), "small.json").stream_bytes_per_s, 0.0);
}

// A linear_pool table (bench calibrate: one product whose weights rotate through pools of growing size) read as the
// cache curve: each pool's time (the median of its rounds) as the fraction of the way from the smallest pool's to the
// largest's, clamped and never decreasing; log-linear in the bytes between pools, 0 below the first, 1 past the last;
// between rank 0 alone and every rank by the share of the ranks at work.
TEST(Profile, CacheCurveFromThePoolTable) {
  const auto pool = [](const json& points) { return json{{"dims", {"m", "n", "k", "pool_mb"}}, {"points", points}}; };
  // Three rounds of the 16 MiB pool (its median, 20, is kept), one of the others.
  json j = profile_json({{"linear_pool", pool({{1, 256, 1024, 4, 10.0},
                                               {1, 256, 1024, 16, 90.0},
                                               {1, 256, 1024, 1, 10.0},
                                               {1, 256, 1024, 16, 20.0},
                                               {1, 256, 1024, 16, 11.0},
                                               {1, 256, 1024, 64, 60.0},
                                               {1, 256, 1024, 256, 50.0}})}});
  j["machine"]["device"] = "cpu";
  const MachineProfile p = parse_profile(j.dump(), "cpu.json");
  ASSERT_TRUE(p.has_cache_curve());
  const double mib = 1048576.0;
  // Fractions (t − 10) / (50 − 10): 0, 0, 0.25, 1 (1.25 clamped), 1.
  const std::vector<std::pair<double, double>> want = {
      {1 * mib, 0.0}, {4 * mib, 0.0}, {16 * mib, 0.25}, {64 * mib, 1.0}, {256 * mib, 1.0}};
  EXPECT_EQ(p.cache_curve, want);
  EXPECT_DOUBLE_EQ(p.cache_fraction(0.5 * mib, 1), 0.0);
  EXPECT_DOUBLE_EQ(p.cache_fraction(8 * mib, 1), 0.125);  // halfway from 4 to 16 MiB in log: 0.25 / 2
  EXPECT_DOUBLE_EQ(p.cache_fraction(32 * mib, 1), 0.625);
  EXPECT_DOUBLE_EQ(p.cache_fraction(1e12, 1), 1.0);

  // Rank 0 alone: 0 up to 16 MiB, then 1 (its cache is the host's); half the way between at share 0.5.
  j["ops_alone"] = {
      {"linear_pool", pool({{1, 256, 1024, 1, 10.0}, {1, 256, 1024, 16, 10.0}, {1, 256, 1024, 64, 30.0}})}};
  const MachineProfile both = parse_profile(j.dump(), "cpu.json");
  EXPECT_DOUBLE_EQ(both.cache_fraction(16 * mib, 0), 0.0);
  EXPECT_DOUBLE_EQ(both.cache_fraction(16 * mib, 0.5), 0.125);
  EXPECT_DOUBLE_EQ(both.cache_fraction(16 * mib, 1), 0.25);

  // A largest pool no slower than the smallest, or less than 10% slower: the probe did not see the caches, no curve.
  j.erase("ops_alone");
  for (const double largest : {9.0, 10.9}) {
    j["ops"]["linear_pool"] = pool({{1, 256, 1024, 1, 10.0}, {1, 256, 1024, 16, 10.8}, {1, 256, 1024, 256, largest}});
    EXPECT_FALSE(parse_profile(j.dump(), "cpu.json").has_cache_curve()) << largest;
  }
  j["ops"]["linear_pool"] = pool({{1, 256, 1024, 1, 10.0}, {1, 256, 1024, 256, 11.0}});
  EXPECT_TRUE(parse_profile(j.dump(), "cpu.json").has_cache_curve());
  // Rank 0 alone's curve flat: the cost model takes every rank's.
  j["ops_alone"] = {{"linear_pool", pool({{1, 256, 1024, 1, 10.0}, {1, 256, 1024, 64, 10.5}})}};
  const MachineProfile flat_alone = parse_profile(j.dump(), "cpu.json");
  EXPECT_TRUE(flat_alone.cache_curve_alone.empty());
  EXPECT_DOUBLE_EQ(flat_alone.cache_fraction(1e12, 0), 1.0);
  j.erase("ops_alone");
  j["ops"].erase("linear_pool");
  EXPECT_FALSE(parse_profile(j.dump(), "cpu.json").has_cache_curve());
}

TEST(Profile, CollectivesInterpolateAndExtrapolateByBandwidth) {
  const json coll = {{"all_reduce", {{"dims", {"ranks", "bytes"}}, {"points", {{2, 1e3, 10.0}, {2, 1e6, 100.0}}}}}};
  const json ops = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 10.0}}}}}};
  const MachineProfile p = parse_profile(profile_json(ops, coll).dump(), "p.json");
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 1, 1e6), 0.0);
  EXPECT_NEAR(p.collective_seconds("all_reduce", 2, std::sqrt(1e3 * 1e6)), std::sqrt(10.0 * 100.0) * 1e-6, 1e-12);
  EXPECT_NEAR(p.collective_seconds("all_reduce", 2, 4e6), 400e-6, 1e-12);
  // Below the smallest size: the latency and rate through the two smallest points, 10 µs at 1 kB and 100 µs at
  // 1 MB (90 µs over 999 kB: a latency of 10 − 1 kB × 90/999000 µs/B).
  const double per_byte = 90.0 / 999e3, latency = 10.0 - 1e3 * per_byte;
  EXPECT_NEAR(p.collective_seconds("all_reduce", 2, 10), (latency + 10 * per_byte) * 1e-6, 1e-12);
  EXPECT_NEAR(p.collective_seconds("all_reduce", 4, 1e6), 100e-6, 1e-12);  // the nearest group measured
  EXPECT_THROW(p.collective_seconds("all_gather", 2, 1e3), Error);
  // Where the two smallest give no positive latency (10 µs at 1 kB, 30 at 2 kB), or a falling time (noise), the
  // smallest point's time: latency-bound below.
  for (const double second : {30.0, 9.0}) {
    const json c = {{"all_reduce", {{"dims", {"ranks", "bytes"}}, {"points", {{2, 1e3, 10.0}, {2, 2e3, second}}}}}};
    const MachineProfile q = parse_profile(profile_json(ops, c).dump(), "q.json");
    EXPECT_NEAR(q.collective_seconds("all_reduce", 2, 10), 10e-6, 1e-12) << second;
  }
}

// A profile without op tables times every op by its work: 2 µs plus bytes over 1e11 B/s (products at 1e18
// FLOP/s, never the bound here); eagerly each op takes at least its 3 µs launch.
MachineProfile work_only_profile() {
  json j = profile_json(json::object());
  j["rates"]["matrix_tflop_s"] = 1e6;
  j["rates"]["copy_gb_s"] = 100.0;
  j["ops"] = {{"unused", {{"dims", {"n"}}, {"points", {{1, 1.0}}}}}};
  return parse_profile(j.dump(), "work.json");
}

TEST(CostModel, TensorParallelismHalvesTheAttentionWeightsARankReads) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  LayoutRequest one, two;
  one.set(Axis::tp, 1);
  two.set(Axis::tp, 2);
  t.cluster = make_cluster(find_machine("h200"), 1, std::nullopt);
  const LayoutPrediction p1 = predict_layout(t, check_layout(t, one));
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  const LayoutPrediction p2 = predict_layout(t, check_layout(t, two));
  // Qwen3-30B-A3B attention per layer: q/k/v/o of 32 + 2·4 heads of 128 over hidden 2048, in bf16 (2 bytes):
  // (4096 + 1024 + 4096)·2048 (q,k,v stacked; o) = 18.9 MB a layer, 48 layers: 0.906 GB at 1e11 B/s = 9.06 ms,
  // plus at most 5 µs (fixed 2, launch 3) for each of the 4 attention ops of a one-token layer; tp 2 halves the
  // bytes (kv heads 4 → 2 a rank).
  const double bytes = (4096.0 + 2 * 512 + 4096.0) * 2048 * 2 * 48;
  const double a1 = p1.decode_one.phase_seconds[0], a2 = p2.decode_one.phase_seconds[0];
  EXPECT_GT(a1, bytes / 1e11);
  EXPECT_LT(a1, bytes / 1e11 + 48 * 4 * 5e-6);
  EXPECT_NEAR(a2 / a1, 0.5, 0.03);
  EXPECT_GT(p2.decode_one.phase_seconds[6], 0.0);  // the all-reduces
  EXPECT_EQ(p1.decode_one.phase_seconds[6], 0.0);
}

TEST(CostModel, ExpertBytesFollowTheUniformRoutingExpectation) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  t.decode_batch = 64;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  const LayoutPrediction p = predict_layout(t, check_layout(t, one));
  // 128 experts top-8: batch 1 touches 8, batch 64 touches 128·(1 − (1 − 8/128)^64) = 126.0 of them; each
  // expert's three matrices of 2048 × 768 in bf16 are 9.44 MB, 48 layers (one grouped op a layer).
  const double expert = 3.0 * 2048 * 768 * 2 * 48;
  const double touched64 = 128.0 * (1.0 - std::pow(1.0 - 8.0 / 128.0, 64));
  EXPECT_NEAR(p.decode_one.phase_seconds[2], 8 * expert / 1e11, 0.01 * 8 * expert / 1e11);
  EXPECT_NEAR(p.decode_batch.phase_seconds[2], touched64 * expert / 1e11, 0.01 * touched64 * expert / 1e11);
  EXPECT_TRUE(p.decode_one.graph);
  EXPECT_LT(p.decode_one.seconds, p.decode_one.eager_seconds);
}

// On a CPU whose step reads far more than its caches hold, every op streams its operands from memory: the
// attention projections are held to their f32 weight bytes at the profile's streaming rate (5e10 B/s, from the
// largest product timed at twice its work), though their own shape was timed four times faster than its work
// (an operand called over and over stays in the caches).
// The f32 work of linear on the CPU profile below: 0.5 µs plus the bytes at 1e11 B/s (FLOPs never the bound).
double f32_work(double m, double n, double k) { return 0.5e-6 + (4 * n * k + 4 * (m * k + m * n)) / 1e11; }

// A CPU profile without ops: copies at 1e11 B/s, products at 1e18 FLOP/s (every op's work its bytes).
json cpu_profile_json() {
  json j = profile_json(json::object());
  j["machine"]["device"] = "cpu";
  j["rates"]["copy_gb_s"] = 100.0;
  j["rates"]["matrix_tflop_s"] = 1e6;
  return j;
}

// A CPU profile whose (m, 4096, 2048) products ran four times faster than their work (from the caches) and, with
// `streaming`, one single-row product of 537 MB at twice its work (5e10 B/s).
MachineProfile cpu_profile(bool streaming) {
  json j = cpu_profile_json();
  json pts = json::array();
  if (streaming) pts.push_back({1, 65536, 2048, 2.0 * f32_work(1, 65536, 2048) * 1e6});
  for (double m : {1.0, 16.0, 256.0}) pts.push_back({m, 4096, 2048, 0.25 * f32_work(m, 4096, 2048) * 1e6});
  j["ops"] = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", pts}}}};
  return parse_profile(j.dump(), "cpu.json");
}

// cpu_profile_json() whose (m, 4096, 2048) products ran at 1.5× their work from the caches and at `cold_times` ×
// their work cold (linear_cold, at 1 and 16 rows) and, with `streaming`, one single-row product of 537 MB at twice
// its work (5e10 B/s).
json hot_and_cold_json(double cold_times, bool streaming = true) {
  json j = cpu_profile_json();
  json hot = json::array(), cold = json::array();
  if (streaming) hot.push_back({1, 65536, 2048, 2.0 * f32_work(1, 65536, 2048) * 1e6});
  for (double m : {1.0, 16.0, 256.0}) hot.push_back({m, 4096, 2048, 1.5 * f32_work(m, 4096, 2048) * 1e6});
  for (double m : {1.0, 16.0}) cold.push_back({m, 4096, 2048, cold_times * f32_work(m, 4096, 2048) * 1e6});
  j["ops"] = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", hot}}},
              {"linear_cold", {{"dims", {"m", "n", "k"}}, {"points", cold}}}};
  return j;
}

// The attention phase of Qwen3-30B-A3B's decode step of one sequence at 16 tokens on one rank, by `profile`.
double one_rank_attention(const json& profile) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {parse_profile(profile.dump(), "cpu.json")};
  t.decode_context = 16;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  return predict_layout(t, check_layout(t, one)).decode_one.phase_seconds[0];
}

TEST(CostModel, CpuStepsBeyondTheCachesStreamTheirWeights) {
  const MachineProfile cpu = cpu_profile(true);
  const double stream = 65536.0 * 2048 * 4 / (2.0 * f32_work(1, 65536, 2048));
  ASSERT_NEAR(cpu.stream_bytes_per_s, stream, 1e-6 * stream);

  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {cpu};
  t.decode_context = 16;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  const LayoutPrediction p = predict_layout(t, check_layout(t, one));
  // q, k, v stacked and o, f32, 48 layers: 3.6 GB, read at the streaming rate; the KV of 16 tokens and the
  // row-wise ops add well under 1%.
  const double bytes = (4096.0 + 2 * 512 + 4096.0) * 2048 * 4 * 48;
  const double a = p.decode_one.phase_seconds[0];
  EXPECT_GT(a, bytes / stream);
  EXPECT_LT(a, 1.01 * bytes / stream);
}

// A CPU step beyond the caches takes the products' cold table (bench calibrate's linear_cold: each call reading its
// weights from memory) where that holds the step's rows: with hot products at 1.5× their work and cold ones at 3×
// (slower than the 2× of the streaming rate, within the hot time plus the streaming) one sequence's attention
// products cost 3× their work, i.e. 3 · bytes / 1e11 (the fixed 0.5 µs a call, the KV of 16 tokens and the
// row-wise ops add well under 2%). A batch of 32 rows per product is beyond the cold table's 16: the hot table and
// the streaming floor as before, no cold rate.
TEST(CostModel, CpuStepsBeyondTheCachesTakeTheColdTables) {
  const MachineProfile with_cold = parse_profile(hot_and_cold_json(3.0).dump(), "cpu.json");

  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.decode_context = 16;
  t.decode_batch = 32;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  t.profiles = {with_cold};
  const LayoutPrediction p = predict_layout(t, check_layout(t, one));
  t.profiles = {cpu_profile(true)};
  const LayoutPrediction hot_only = predict_layout(t, check_layout(t, one));
  const double bytes = (4096.0 + 2 * 512 + 4096.0) * 2048 * 4 * 48;
  const double a = p.decode_one.phase_seconds[0];
  EXPECT_GT(a, 3 * bytes / 1e11);
  EXPECT_LT(a, 1.02 * 3 * bytes / 1e11);
  EXPECT_DOUBLE_EQ(p.decode_batch.phase_seconds[0], hot_only.decode_batch.phase_seconds[0]);
  EXPECT_LT(hot_only.decode_one.phase_seconds[0], 0.7 * a);  // the streaming floor, 2× the work
}

// A cold point is at most the op's hot time and its bytes at the streaming rate one after the other (a point above
// that caught the host busy): cold products at 30× and at 300× their work cost what the hot 1.5× and the 2× of the
// streaming rate add up to, 3.5× their work.
TEST(CostModel, ACpuColdPointCostsAtMostItsHotTimeAndItsBytesAtTheStreamingRate) {
  const auto attention = [](double cold_times) { return one_rank_attention(hot_and_cold_json(cold_times)); };
  const double bytes = (4096.0 + 2 * 512 + 4096.0) * 2048 * 4 * 48;
  const double a30 = attention(30), a300 = attention(300);
  EXPECT_DOUBLE_EQ(a30, a300);
  EXPECT_GT(a30, 3.5 * bytes / 1e11);
  EXPECT_LT(a30, 1.02 * 3.5 * bytes / 1e11);
  // Below the cap the cold point stands: 3× as in CpuStepsBeyondTheCachesTakeTheColdTables.
  EXPECT_LT(attention(3), 1.02 * 3 * bytes / 1e11);
}

// With a cache curve a CPU rank's stage is priced that fraction of the way from its hot tables to its tables beyond
// the caches, at the bytes the rank re-reads each step (Qwen3-30B-A3B in f32 on one rank: about 120 GB, between
// the curve's 2 MiB and 2^39 MiB pools, where it stands at one half): the attention phase of one sequence is the
// mean of the hot pricing and the cold one. A flat pool table (no curve) and a curve at 1 from 2 MiB price it as
// the 64 MB rule with the streaming rate: the cold products, 3× their work (as
// CpuStepsBeyondTheCachesTakeTheColdTables); a profile without a streaming rate prices it hot (1.5×).
// The attention phase of one_rank_attention by hot_and_cold_json(3.0) with a linear_pool table of `points`.
double attention_with_pools(const json& points) {
  json j = hot_and_cold_json(3.0);
  j["ops"]["linear_pool"] = {{"dims", {"m", "n", "k", "pool_mb"}}, {"points", points}};
  return one_rank_attention(j);
}

TEST(CostModel, ACpuStageIsPricedAlongTheCacheCurve) {
  const double far = std::ldexp(1.0, 39), farther = std::ldexp(1.0, 40);
  const double a_hot = one_rank_attention(hot_and_cold_json(3.0, false));
  const double a_rule = one_rank_attention(hot_and_cold_json(3.0));
  // The pools' product read slower than the streaming point (1 MiB in 10-20 ms), so the floor stays the point's.
  const double a_flat = attention_with_pools({{1, 256, 1024, 1, 1e4}, {1, 256, 1024, farther, 1e4}});
  const double a_half = attention_with_pools(
      {{1, 256, 1024, 1, 1e4}, {1, 256, 1024, 2, 1.5e4}, {1, 256, 1024, far, 1.5e4}, {1, 256, 1024, farther, 2e4}});
  const double a_full = attention_with_pools({{1, 256, 1024, 1, 1e4}, {1, 256, 1024, 2, 2e4}});
  EXPECT_DOUBLE_EQ(a_flat, a_rule);  // a flat curve: the probe did not see the caches, the rule by bytes
  EXPECT_DOUBLE_EQ(a_full, a_rule);
  const double bytes = (4096.0 + 2 * 512 + 4096.0) * 2048 * 4 * 48;
  EXPECT_GT(a_full, 3 * bytes / 1e11);
  EXPECT_LT(a_full, 1.02 * 3 * bytes / 1e11);
  EXPECT_LT(a_hot, 0.55 * a_full);
  EXPECT_NEAR(a_half, (a_hot + a_full) / 2, 1e-9 * a_full);
}

// A flat probe with one slow largest pool is no curve: with six pools or more each end of the span is the median of
// its three pools (r20's 1-rank probe: 47.5-52.5 µs from 4 to 384 MB, 55.0 at 512 MB). Eight pools at 10 ms but
// the largest at 11.2 price the stage as without a curve (the 64 MB rule); the same pools rising to 15 and 20 ms
// over the last three are a curve, which puts the stage between its hot and its cold pricing.
TEST(CostModel, AFlatPoolProbeWithOneSlowPoolIsNoCacheCurve) {
  const auto attention = [](const std::vector<double>& pool_us) {
    const std::vector<double> pools = {1, 2, 4, 8, 16, 32, std::ldexp(1.0, 39), std::ldexp(1.0, 40)};
    json points = json::array();
    for (size_t i = 0; i < pools.size(); ++i) points.push_back({1, 256, 1024, pools[i], pool_us[i]});
    return attention_with_pools(points);
  };
  const double a_rule = one_rank_attention(hot_and_cold_json(3.0));
  const double a_blip = attention({1e4, 1e4, 1e4, 1e4, 1e4, 1e4, 1e4, 1.12e4});
  EXPECT_DOUBLE_EQ(a_blip, a_rule);
  const double a_rise = attention({1e4, 1e4, 1e4, 1e4, 1e4, 1.5e4, 1.5e4, 2e4});
  EXPECT_LT(a_rise, 0.99 * a_rule);
}

// Beyond the caches decode attention is timed from paged_attention_cold (bench calibrate: each call reading the next
// copy of the KV caches) where that holds the step's sequences: with every point of the hot table at 20× its work
// and of the cold table at k× (k from 20.1 to 20.5, within the hot time plus the KV at the streaming rate), the
// attention phase is the rest plus k · (the op's work-time) · 48 layers, so it grows by equal steps of k; without
// the cold table, less than with it. Cold points far above are held to the hot time plus the streaming: k = 100
// and 1,000 price the same.
TEST(CostModel, CpuAttentionBeyondTheCachesTakesTheColdTable) {
  json j = cpu_profile_json();
  const auto attention_points = [&](double times_work) {
    const MachineProfile at_work = parse_profile(j.dump(), "cpu.json");
    json pts = json::array();
    for (double s : {1.0, 64.0}) {
      for (double c : {16.0, 1024.0}) {
        const OpWork w{.bytes = s * c * 4 * 128 * 2 * 2 + 8 * s * 32 * 128, .flops = 4 * s * 32 * 128 * c};
        pts.push_back({s, 1, c, 32, 4, 128, times_work * at_work.work_seconds(w) * 1e6});
      }
    }
    return json{{"dims", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"}}, {"points", pts}};
  };
  json linear = json::array();
  linear.push_back({1, 65536, 2048, 2.0 * f32_work(1, 65536, 2048) * 1e6});  // a streaming rate
  for (double m : {1.0, 16.0, 256.0}) linear.push_back({m, 4096, 2048, 0.25 * f32_work(m, 4096, 2048) * 1e6});
  j["ops"] = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", linear}}},
              {"linear_pool",
               {{"dims", {"m", "n", "k", "pool_mb"}}, {"points", {{1, 256, 1024, 1, 10.0}, {1, 256, 1024, 2, 20.0}}}}},
              {"paged_attention", attention_points(20)}};
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.decode_context = 16;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  const auto attention = [&](const json& profile) {
    t.profiles = {parse_profile(profile.dump(), "cpu.json")};
    return predict_layout(t, check_layout(t, one)).decode_one.phase_seconds[0];
  };
  const auto with_cold = [&](double k) {
    json c = j;
    c["ops"]["paged_attention_cold"] = attention_points(k);
    return attention(c);
  };
  const double hot = attention(j), a1 = with_cold(20.1), a2 = with_cold(20.3), a3 = with_cold(20.5);
  EXPECT_LT(hot, a1);
  EXPECT_NEAR((a3 - a2) / (a2 - a1), 1.0, 1e-6);
  const double a100 = with_cold(100);
  EXPECT_GT(a100, a3);
  EXPECT_DOUBLE_EQ(a100, with_cold(1000));
}

// Qwen3-30B-A3B on two ranks of an h200 under `request`, by the work-only profile: the experts phase of one
// sequence's decode step, and one expert's bf16 matrices over the 48 layers in bytes.
double experts_phase_on_two(const LayoutRequest& request, int64_t want_edp) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  const LayoutCheck check = check_layout(t, request);
  EXPECT_EQ(check.sizes.edp, want_edp);
  EXPECT_EQ(check.sizes.etp, 1);
  return predict_layout(t, check).decode_one.phase_seconds[2];
}
constexpr double kQwen3ExpertBytes = 3.0 * 2048 * 768 * 2 * 48;

// Under attention DP a batch smaller than the replicas leaves some idle: one sequence over dp 2 × ep 2 is one token
// for the experts of both ranks (each holds 64 of the 128), not the two tokens one a replica would make. The step
// waits for the busier rank: of the token's 8 experts X fall on one rank (hypergeometric: 8 drawn of 128, 64 of
// them that rank's) and 8 − X on the other, so it reads E[max(X, 8 − X)] = 5.0 experts' weights (the planner's
// 2,000 fixed draws: within 2%), not the mean rank's 4. With the experts replicated instead (dp 2, edp 2), each
// replica serves its own dp replica's tokens: the busiest one's single token touches its 8 of 128.
TEST(CostModel, ExpertsServeTheTokensTheirReplicasHold) {
  LayoutRequest dp_ep, dp_edp;
  dp_ep.set(Axis::dp, 2);
  dp_ep.set(Axis::ep, 2);
  dp_edp.set(Axis::dp, 2);
  dp_edp.set(Axis::edp, 2);
  const double b = kQwen3ExpertBytes / 1e11;
  double busier = 0;
  for (int x = 0; x <= 8; ++x) {
    const double ways = std::exp(std::lgamma(65.0) - std::lgamma(x + 1.0) - std::lgamma(65.0 - x) + std::lgamma(65.0) -
                                 std::lgamma(9.0 - x) - std::lgamma(57.0 + x) - std::lgamma(129.0) + std::lgamma(9.0) +
                                 std::lgamma(121.0));
    busier += std::max(x, 8 - x) * ways;
  }
  ASSERT_NEAR(busier, 5.0, 0.1);
  EXPECT_NEAR(experts_phase_on_two(dp_ep, 1), busier * b, 0.02 * busier * b);
  EXPECT_NEAR(experts_phase_on_two(dp_edp, 2), 8 * b, 0.01 * 8 * b);
}

// One sequence through two pipeline stages is one micro-batch passing each stage in turn: the step is the sum of
// the stages plus the boundary's send, the one-rank step within a few µs, not twice the slower stage (the last,
// which holds the 0.62 GB LM head: that would add ≈ 6 ms at 1e11 B/s).
TEST(CostModel, OneSequencePassesThePipelineStagesInTurn) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  LayoutRequest one, pp2;
  one.set(Axis::tp, 1);
  pp2.set(Axis::pp, 2);
  const double single = predict_layout(t, check_layout(t, one)).decode_one.eager_seconds;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  const double piped = predict_layout(t, check_layout(t, pp2)).decode_one.eager_seconds;
  EXPECT_GT(piped, single);
  EXPECT_LT(piped, single + 1e-3) << "one rank " << single << " s, two stages " << piped << " s";
}

// plan --explain's rows add up to the prediction: per phase, calls x one call x the pass's weight over the rows is
// the decode step's phase time (one stage, and two pipeline stages at batch 1, where no micro-batch repeats the
// slowest stage), the step's fixed host costs aside (in "other").
TEST(CostModel, TheExplainedOpsAddUpToThePrediction) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  t.decode_batch = 1;
  LayoutRequest one, pp2;
  one.set(Axis::tp, 1);
  pp2.set(Axis::pp, 2);
  for (const bool piped : {false, true}) {
    if (piped) t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
    const LayoutCheck c = check_layout(t, piped ? pp2 : one);
    const StepPrediction p = predict_layout(t, c).decode_batch;
    const std::vector<CostTraceRow> rows = explain_layout(t, c).rows;
    ASSERT_FALSE(rows.empty());
    std::array<double, kCostPhaseCount> sums{};
    bool stage1 = false;
    for (const CostTraceRow& r : rows) {
      const auto it = std::find(kCostPhaseNames.begin(), kCostPhaseNames.end(), r.phase);
      ASSERT_NE(it, kCostPhaseNames.end()) << r.op << " has phase '" << r.phase << "'";
      sums[static_cast<size_t>(it - kCostPhaseNames.begin())] += r.calls * r.seconds * r.weight;
      stage1 = stage1 || r.stage == 1;
    }
    EXPECT_EQ(stage1, piped);
    for (size_t i = 0; i < sums.size(); ++i) {
      if (std::string(kCostPhaseNames[i]) == "other") {
        EXPECT_LE(sums[i], p.phase_seconds[i] + 1e-12);
      } else {
        EXPECT_NEAR(sums[i], p.phase_seconds[i], 1e-9 * (1 + p.phase_seconds[i])) << kCostPhaseNames[i];
      }
    }
  }
}

// A model whose step reads less than the caches hold keeps the rates its shapes were timed at: the tiny Qwen3-MoE
// fixture predicts the same with and without a streaming rate in the profile.
TEST(CostModel, CpuStepsWithinTheCachesKeepTheirTimedRates) {
  PlanTarget t =
      test::target_for(std::filesystem::path(SY_SOURCE_DIR) / "tests" / "fixtures" / "qwen3_moe_base", "h200", 1);
  t.decode_context = 16;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  t.profiles = {cpu_profile(true)};
  ASSERT_GT(t.profiles[0].stream_bytes_per_s, 0.0);
  const double with = predict_layout(t, check_layout(t, one)).decode_one.eager_seconds;
  t.profiles = {cpu_profile(false)};
  ASSERT_EQ(t.profiles[0].stream_bytes_per_s, 0.0);
  const double without = predict_layout(t, check_layout(t, one)).decode_one.eager_seconds;
  EXPECT_GT(with, 0.0);
  EXPECT_DOUBLE_EQ(with, without);
}

// Attention replicas without a sequence read no weights: the bundled model under dp 8 × ep 8 at one sequence reads
// one rank's weights (a few MB of f32, within the caches), so the step keeps its timed rates as on one rank; at 64
// sequences every replica reads its copy (eight ranks' weights, beyond the 64 MB the model takes for a CPU's
// caches) and the streaming rate holds it back.
TEST(CostModel, IdleReplicasLeaveTheCachesToTheBusyOnes) {
  PlanTarget t = test::target_for(std::filesystem::path(SY_SOURCE_DIR) / "models" / "pydoc-moe", "h200", 8);
  t.decode_context = 16;
  t.decode_batch = 64;
  LayoutRequest dp_ep;
  dp_ep.set(Axis::dp, 8);
  dp_ep.set(Axis::ep, 8);
  t.profiles = {cpu_profile(true)};
  ASSERT_GT(t.profiles[0].stream_bytes_per_s, 0.0);
  const LayoutPrediction with = predict_layout(t, check_layout(t, dp_ep));
  t.profiles = {cpu_profile(false)};
  const LayoutPrediction without = predict_layout(t, check_layout(t, dp_ep));
  EXPECT_DOUBLE_EQ(with.decode_one.eager_seconds, without.decode_one.eager_seconds);
  EXPECT_GT(with.decode_batch.eager_seconds, 1.1 * without.decode_batch.eager_seconds);
}

// CPU ranks share the host: a profile of two ranks whose products ran twice their work with both ranks at them
// ("ops") and at their work with rank 0 alone ("ops_alone"). One sequence through two pipeline stages keeps one
// rank at work at a time: every product at the alone rate, the attention phase half of what the all-ranks table
// says (its work-timed rope and attention ops add well under 1%). Under tp 2 both ranks work at once: the alone
// table changes nothing.
MachineProfile two_rank_cpu_profile(bool with_alone) {
  json j = cpu_profile_json();
  j["machine"]["ranks"] = 2;
  json all = json::array(), alone = json::array();
  for (double m : {1.0, 16.0, 256.0}) {
    all.push_back({m, 4096, 2048, 2.0 * f32_work(m, 4096, 2048) * 1e6});
    alone.push_back({m, 4096, 2048, f32_work(m, 4096, 2048) * 1e6});
  }
  j["ops"] = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", all}}}};
  if (with_alone) j["ops_alone"] = {{"linear", {{"dims", {"m", "n", "k"}}, {"points", alone}}}};
  return parse_profile(j.dump(), "cpu-r2.json");
}

TEST(CostModel, RanksWaitingForTheOthersLeaveThemTheHost) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.decode_context = 16;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  const auto attention = [&](const LayoutRequest& r, bool with_alone) {
    t.profiles = {two_rank_cpu_profile(with_alone)};
    return predict_layout(t, check_layout(t, r)).decode_one.phase_seconds[0];
  };
  ASSERT_FALSE(two_rank_cpu_profile(true).ops_alone.empty());
  LayoutRequest pp2, tp2;
  pp2.set(Axis::pp, 2);
  tp2.set(Axis::tp, 2);
  EXPECT_NEAR(attention(pp2, true) / attention(pp2, false), 0.5, 0.01);
  EXPECT_DOUBLE_EQ(attention(tp2, true), attention(tp2, false));
}

// A profile's skew: read in seconds and sorted, interpolated log-log between its segments and constant beyond;
// a malformed entry names the key.
TEST(Profile, SkewInterpolatesOverSegments) {
  json j = profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 10.0}}}}}});
  j["step"]["skew"] = {{1000.0, 0.1}, {100.0, 0.4}};
  const MachineProfile p = parse_profile(j.dump(), "p.json");
  ASSERT_EQ(p.skew.size(), 2u);
  EXPECT_DOUBLE_EQ(p.skew[0].first, 100e-6);
  EXPECT_NEAR(p.skew_fraction(std::sqrt(100e-6 * 1000e-6)), 0.2, 1e-12);  // halfway in logs: sqrt(0.4 · 0.1)
  EXPECT_NEAR(p.skew_fraction(10e-6), 0.4, 1e-12);
  EXPECT_NEAR(p.skew_fraction(1.0), 0.1, 1e-12);
  EXPECT_EQ(parse_profile(profile_json(j["ops"]).dump(), "none.json").skew_fraction(1e-3), 0.0);
  j["step"]["skew"] = {{100.0, -0.5}};
  EXPECT_THROW(
      {
        try {
          parse_profile(j.dump(), "bad.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("step.skew[0]"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

// The skew beyond the caches: read as {rows, seconds, fraction} and sorted; at a row count log-log over its
// segments, linear in log rows between row counts (8 rows: halfway between 1 and 64), the nearest count's beyond;
// a malformed entry names the key.
TEST(Profile, SkewColdInterpolatesOverSegmentsAndRows) {
  json j = profile_json({{"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 1024, 1024, 10.0}}}}}});
  j["step"]["skew_cold"] = {{64.0, 1000.0, 0.1}, {64.0, 100.0, 0.4}, {1.0, 100.0, 0.2}};
  const MachineProfile p = parse_profile(j.dump(), "p.json");
  ASSERT_TRUE(p.has_skew_cold());
  ASSERT_EQ(p.skew_cold.size(), 3u);
  EXPECT_EQ(p.skew_cold[0][0], 1.0);
  EXPECT_DOUBLE_EQ(p.skew_cold[0][1], 100e-6);
  EXPECT_EQ(p.skew_cold[0][2], 0.2);
  EXPECT_NEAR(p.skew_cold_fraction(64, std::sqrt(100e-6 * 1000e-6)), 0.2, 1e-12);  // sqrt(0.4 · 0.1)
  EXPECT_NEAR(p.skew_cold_fraction(64, 1.0), 0.1, 1e-12);
  EXPECT_NEAR(p.skew_cold_fraction(1, 1.0), 0.2, 1e-12);
  EXPECT_NEAR(p.skew_cold_fraction(8, 100e-6), 0.3, 1e-12);
  EXPECT_NEAR(p.skew_cold_fraction(4096, 100e-6), 0.4, 1e-12);
  EXPECT_NEAR(p.skew_cold_fraction(0.5, 100e-6), 0.2, 1e-12);
  EXPECT_FALSE(parse_profile(profile_json(j["ops"]).dump(), "none.json").has_skew_cold());
  for (const json& bad : {json{{0.5, 100.0, 0.1}}, json{{1.0, 100.0}}, json{{1.0, 100.0, -0.1}}}) {
    j["step"]["skew_cold"] = bad;
    EXPECT_THROW(
        {
          try {
            parse_profile(j.dump(), "bad.json");
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("step.skew_cold[0]"), std::string::npos) << e.what();
            throw;
          }
        },
        Error)
        << bad.dump();
  }
}

// The skew beyond the caches takes the place of the skew for a step beyond the caches (the 64 MB rule here: a
// streaming rate and Qwen3-30B's weights), and leaves a step in the caches (no streaming rate) as it was: under
// tp 2, a skew of 10% everywhere and a skew beyond the caches of 25% everywhere put 25% of the work between the
// collectives in the communication phase of the first, 10% in the second's.
TEST(CostModel, StepsBeyondTheCachesWaitAsTheSkewBeyondTheCachesSays) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.decode_context = 16;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  LayoutRequest tp2;
  tp2.set(Axis::tp, 2);
  for (const bool beyond : {true, false}) {
    MachineProfile p = two_rank_cpu_profile(false);
    p.stream_bytes_per_s = beyond ? 1e13 : 0.0;
    p.skew = {{1e-6, 0.1}, {1.0, 0.1}};
    t.profiles = {p};
    const StepPrediction without = predict_layout(t, check_layout(t, tp2)).decode_one;
    p.skew_cold = {{1, 1e-6, 0.25}, {1, 1.0, 0.25}, {64, 1e-6, 0.25}, {64, 1.0, 0.25}};
    t.profiles = {p};
    const StepPrediction with = predict_layout(t, check_layout(t, tp2)).decode_one;
    double work = 0;
    for (size_t i = 0; i < without.phase_seconds.size(); ++i) {
      if (i != 6 && i != 7) work += without.phase_seconds[i];  // not communication, not the step's sampling tail
    }
    const double added = with.phase_seconds[6] - without.phase_seconds[6];
    if (beyond) {
      EXPECT_NEAR(added, (0.25 - 0.1) * work, 0.02 * work);
    } else {
      EXPECT_DOUBLE_EQ(added, 0.0);
    }
    for (size_t i = 0; i < without.phase_seconds.size(); ++i) {
      if (i != 6) {
        EXPECT_DOUBLE_EQ(with.phase_seconds[i], without.phase_seconds[i]) << i;
      }
    }
  }
}

// Under tp 2 the ranks meet at every layer's collectives: a profile skew of 25% at every segment length adds a
// quarter of the work of every rank between them to the communication phase; one rank meets no one.
TEST(CostModel, RanksWaitForTheSlowestAtEachCollective) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.decode_context = 16;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  LayoutRequest tp2;
  tp2.set(Axis::tp, 2);
  MachineProfile p = two_rank_cpu_profile(false);
  t.profiles = {p};
  const StepPrediction without = predict_layout(t, check_layout(t, tp2)).decode_one;
  p.skew = {{1e-6, 0.25}, {1.0, 0.25}};
  t.profiles = {p};
  const StepPrediction with = predict_layout(t, check_layout(t, tp2)).decode_one;
  double work = 0;
  for (size_t i = 0; i < without.phase_seconds.size(); ++i) {
    if (i != 6 && i != 7) work += without.phase_seconds[i];  // not communication, not the step's sampling tail
  }
  EXPECT_GT(with.phase_seconds[6], without.phase_seconds[6]);
  EXPECT_NEAR(with.phase_seconds[6] - without.phase_seconds[6], 0.25 * work, 0.02 * work);
  for (size_t i = 0; i < without.phase_seconds.size(); ++i) {
    if (i != 6) {
      EXPECT_DOUBLE_EQ(with.phase_seconds[i], without.phase_seconds[i]) << i;
    }
  }
}

// The skew was measured with every rank at work; a stage with fewer at once waits for the slowest of those: one
// sequence under dp 2 (one replica at work, the other waiting in the collectives) adds no skew, two sequences (both
// at work) the profile's fraction of the work.
TEST(CostModel, TheSkewIsTheSlowestOfTheRanksAtWork) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.decode_context = 16;
  t.decode_batch = 2;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  LayoutRequest dp2;
  dp2.set(Axis::dp, 2);
  dp2.set(Axis::ep, 2);
  MachineProfile p = two_rank_cpu_profile(false);
  t.profiles = {p};
  const LayoutPrediction without = predict_layout(t, check_layout(t, dp2));
  p.skew = {{1e-6, 0.25}, {1.0, 0.25}};
  t.profiles = {p};
  const LayoutPrediction with = predict_layout(t, check_layout(t, dp2));
  EXPECT_DOUBLE_EQ(with.decode_one.phase_seconds[6], without.decode_one.phase_seconds[6]) << "one replica at work";
  double work = 0;
  for (size_t i = 0; i < without.decode_batch.phase_seconds.size(); ++i) {
    if (i != 6 && i != 7 && i != 8) work += without.decode_batch.phase_seconds[i];
  }
  EXPECT_NEAR(with.decode_batch.phase_seconds[6] - without.decode_batch.phase_seconds[6], 0.25 * work, 0.05 * work);
}

// Several ranks' logits cross the host as the executor copies them: under tp 2 (dense TP 2) the vocabulary shares
// to the host, reassembled, and straight into the step's rows — three copies of batch × vocab floats; under dp 2
// (dense TP 1) each replica's half to the host, gathered, and every row into the step's — one and a half. Qwen3's
// 151,936-token vocabulary at batch 64: 38.9 MB a copy, 389 µs at the work-only profile's 1e11 B/s, plus its fixed
// 2 µs; the other phase adds the step's fixed costs (4 launches of 3 µs, a 9 µs read-back, a 5 µs sync) and the
// embedding's rows (T × 2,048 × (4 + 2) bytes, plus 2 µs).
TEST(CostModel, LogitsCrossTheHostAsTheExecutorCopiesThem) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 2);
  t.profiles = {work_only_profile()};
  t.decode_context = 16;
  t.decode_batch = 64;
  t.cluster = make_cluster(find_machine("h200"), 2, std::nullopt);
  const double copy = 64.0 * 151936 * 4 / 1e11;
  LayoutRequest tp2, dp2;
  tp2.set(Axis::tp, 2);
  dp2.set(Axis::dp, 2);
  dp2.set(Axis::ep, 2);
  const double step_fixed = 4 * 3e-6 + 9e-6 + 5e-6;
  const auto embedding = [](double rows) { return 2e-6 + rows * 2048 * 6 / 1e11; };
  EXPECT_NEAR(predict_layout(t, check_layout(t, tp2)).decode_batch.phase_seconds[8],
              3 * (copy + 2e-6) + embedding(64) + step_fixed, 1e-7);
  EXPECT_NEAR(predict_layout(t, check_layout(t, dp2)).decode_batch.phase_seconds[8],
              (0.5 * copy + 2e-6) + (copy + 2e-6) + embedding(32) + step_fixed, 1e-7);
}

// The busiest expert rank at a handful of pairs, against exact expectations. One token routing to 2 of 8 experts
// on 4 ranks of 2: the second pick lands on the first's rank with probability 1/7, so the busiest rank holds
// 1 + 1/7 pairs and as many distinct experts (the simulation's 2,000 draws: standard error 0.008). One token
// routing to 1 of 8: exactly one pair, one expert. Many pairs: every local expert touched.
TEST(CostModel, TheBusiestExpertRankMatchesExactExpectations) {
  const ExpertLoad two = busiest_expert_rank(1, 2, 8, 4);
  EXPECT_NEAR(two.pairs, 8.0 / 7.0, 0.035);
  EXPECT_NEAR(two.touched, 8.0 / 7.0, 0.035);
  const ExpertLoad one = busiest_expert_rank(1, 1, 8, 4);
  EXPECT_DOUBLE_EQ(one.pairs, 1.0);
  EXPECT_DOUBLE_EQ(one.touched, 1.0);
  // 4 tokens × 4 of 32 experts on 8 ranks of 4 (the medium config's ep8 at batch 4): at most 4 distinct experts
  // a rank, at least the mean rank's 16/8 pairs.
  const ExpertLoad four = busiest_expert_rank(4, 4, 32, 8);
  EXPECT_GT(four.pairs, 2.0);
  EXPECT_LE(four.touched, 4.0);
  EXPECT_GE(four.pairs, four.touched);
  const ExpertLoad many = busiest_expert_rank(1024, 8, 64, 8);  // 8,192 pairs: past the simulation
  EXPECT_NEAR(many.touched, 8.0, 1e-9);
  EXPECT_GT(many.pairs, 8192.0 / 8);
  EXPECT_EQ(busiest_expert_rank(0, 8, 64, 8).pairs, 0.0);
}

// Past 512 pairs the busiest rank comes from a formula (normal loads, the hypergeometric variance of k distinct
// picks, the expected largest of n normals), which must continue the simulation below it: 64 tokens × 8 of 64
// experts on 8 ranks is simulated (512 pairs), 65 tokens is not. The simulation's 64 scaled to 65 tokens and the
// formula's 65 agree within 1.5% (mean + √(2 ln n) spreads gave 5.6% more). Two ranks, 1,024 tokens × 2 of 8:
// 1,024 + √(2,048 · 1/4 · 6/7) · √2 / √π, the expected larger of two normals being 1/√π of their spread.
TEST(CostModel, TheBusiestExpertRankPastTheSimulationContinuesIt) {
  const double simulated = busiest_expert_rank(64, 8, 64, 8).pairs;
  const double formula = busiest_expert_rank(65, 8, 64, 8).pairs;
  EXPECT_NEAR(formula, simulated * 65.0 / 64.0, 0.015 * formula) << simulated << " at 64 tokens";
  const double two = 1024 + std::sqrt(2048 * 0.25 * 6.0 / 7.0) * std::sqrt(2.0) / std::sqrt(std::numbers::pi);
  EXPECT_NEAR(busiest_expert_rank(1024, 2, 8, 2).pairs, two, 1e-3);
}

}  // namespace
}  // namespace sy
