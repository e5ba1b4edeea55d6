// The machine profile against mathematics (planner/profile.cpp): files are read strictly, a lookup interpolates
// log-log between measured points and scales by work exactly as documented, noisy CPU points are held to their
// neighbours, the cache curve and the skew interpolate, and collectives extrapolate by bandwidth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "planner/profile.h"
#include "planner_test_util.h"

namespace sy {
namespace {

using nlohmann::json;
using test::profile_json;

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

}  // namespace
}  // namespace sy
