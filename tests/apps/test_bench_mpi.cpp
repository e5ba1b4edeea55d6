// The benchmarks on two CPU ranks, each started by one command that re-runs itself under mpirun (mpi tier):
// `bench latency` with a layout runs the engine on every rank and rank 0 alone prints one table whose
// communication column is positive (and zero on one rank); `bench comm` prints every row with positive
// times and bandwidths; `bench calibrate` writes every collective at group size 2, every op's single-rank
// time and the skew; SY_CPU_PIN=1 gives each rank cores of its own.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <utility>

#include "apps/bench_output.h"
#include "common/fixture.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

std::string qwen3() { return (test::fixtures_dir() / "qwen3_moe_base").string(); }

// NOLINTNEXTLINE(bugprone-exception-escape): the check blames the implicit members of a plain holder of a json.
struct LatencyRun {
  test::CommandResult result;
  test::PhaseTable table;
  nlohmann::json json;
};

LatencyRun bench_latency(const std::string& layout, const std::string& name) {
  const fs::path json = fs::temp_directory_path() / ("sy_bench_latency_" + name + ".json");
  fs::remove(json);
  LatencyRun run;
  run.result = test::run_switchyard("bench latency --model " + qwen3() +
                                    " --batch 1,2 --input-len 3 --output-len 3 --json " + json.string() + " " + layout);
  run.table = test::read_latency_table(run.result.out);
  run.json = test::read_json(json);
  fs::remove(json);
  return run;
}

// The communication cells of the table, as numbers.
std::vector<double> communication(const LatencyRun& run) {
  std::vector<double> v;
  const auto col = run.table.column("communication");
  if (!col) return v;
  for (const auto& row : run.table.rows) v.push_back(*col < row.size() ? std::stod(row[*col]) : -1.0);
  return v;
}

// SY_CPU_PIN=1 (cpu_pin.h): each rank keeps to its own cores, and rank 0 says which; the run is the same run.
TEST(BenchLatencyMpi, CpuPinGivesEachLocalRankItsCores) {
  // The cores this process may use, as SY_CPU_PIN counts them: two hardware threads of one core are one core.
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const fs::path dir = fs::path("/sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "topology";
    std::string package = "0", core = std::to_string(cpu);
    std::ifstream(dir / "physical_package_id") >> package;
    std::ifstream(dir / "core_id") >> core;
    cores.emplace(package, core);
  }
  setenv("SY_CPU_PIN", "1", 1);
  const LatencyRun run = bench_latency("--tp 2", "pin");
  unsetenv("SY_CPU_PIN");
  const std::string& out = run.result.out;
  ASSERT_EQ(run.result.code, 0) << out;
  EXPECT_EQ(run.table.batches, (std::vector<int64_t>{1, 2})) << out;
  if (cores.size() >= 2) {
    EXPECT_NE(out.find("SY_CPU_PIN=1: local rank 0 of 2 on CPUs"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("fewer cores than ranks"), std::string::npos) << out;
  }
  EXPECT_EQ(test::count_lines_starting(out, "[switchyard info] SY_CPU_PIN=1"), 1u) << out;
}

TEST(BenchLatencyMpi, LayoutsReportCommunicationAndOneRankNone) {
  const LatencyRun one = bench_latency("", "one");
  ASSERT_EQ(one.result.code, 0) << one.result.out;
  EXPECT_EQ(communication(one), (std::vector<double>{0.0, 0.0})) << one.result.out;

  ASSERT_TRUE(one.json.is_object()) << one.result.out;
  for (const std::string layout : {"--tp 2", "--ep 2 --dp 2", "--pp 2"}) {
    const LatencyRun run = bench_latency(layout, layout == "--tp 2" ? "tp2" : layout == "--pp 2" ? "pp2" : "ep2dp2");
    const std::string& out = run.result.out;
    ASSERT_EQ(run.result.code, 0) << layout << "\n" << out;
    EXPECT_NE(out.find("starting 2 ranks"), std::string::npos) << layout << "\n" << out;
    // Rank 0 alone reports: one header, one table with a row per batch size.
    EXPECT_EQ(test::count_lines_starting(out, "model "), 1u) << layout << "\n" << out;
    EXPECT_EQ(test::count_lines_starting(out, " batch"), 1u) << layout << "\n" << out;
    EXPECT_EQ(run.table.batches, (std::vector<int64_t>{1, 2})) << layout << "\n" << out;
    const std::vector<double> comm = communication(run);
    ASSERT_EQ(comm.size(), 2u) << layout << "\n" << out;
    for (double c : comm) EXPECT_GT(c, 0.0) << layout << "\n" << out;

    ASSERT_TRUE(run.json.is_object()) << layout << ": rank 0 wrote no JSON\n" << out;
    EXPECT_EQ(run.json["ranks"], 2) << run.json.dump(1);
    EXPECT_FALSE(run.json["layout"]["flags"].get<std::string>().empty()) << run.json.dump(1);
    EXPECT_FALSE(run.json["transport"].get<std::string>().empty()) << run.json.dump(1);
    ASSERT_EQ(run.json["results"].size(), 2u) << run.json.dump(1);
    for (size_t i = 0; i < run.json["results"].size(); ++i) {
      const auto& res = run.json["results"][i];
      EXPECT_GT(res["decode_phase_ms"]["communication"].get<double>(), 0.0) << res.dump(1);
      EXPECT_GT(res["decode_tok_s"].get<double>(), 0.0) << res.dump(1);
      // Every rank reports what a step reads of the whole model (summed over pipeline stages), so the
      // floor's bytes are those of one rank holding everything. A layout's rank 0 routes only its share of
      // the tokens, so its floor takes the experts uniform routing expects (one rank's counts them).
      EXPECT_TRUE(res["decode_experts_per_moe_layer"].is_null()) << res.dump(1);
      const double want = one.json["results"][i]["decode_floor_bytes_uniform"].get<double>();
      EXPECT_NEAR(res["decode_floor_bytes"].get<double>(), want, want * 1e-6) << layout << "\n" << res.dump(1);
    }
  }
}

TEST(BenchCommMpi, TwoRanksMeasureEveryRow) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_comm.json";
  fs::remove(json);
  const auto r =
      test::run_switchyard("bench comm --ranks 2 --model " + qwen3() +
                           " --tokens 1,8 --min-bytes 4K --max-bytes 16K --iters 3 --warmup 1 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, "bench comm: 2 ranks"), 1u) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, "all-reduce  "), 1u) << r.out;  // the table's header
  EXPECT_EQ(test::count_lines_starting(r.out, "tokens/rank"), 1u) << r.out;
  // The table rows: two model step sizes and three sweep sizes, two EP token counts.
  EXPECT_EQ(test::count_lines_starting(r.out, "1 token "), 1u) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, "8 tokens "), 1u) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, "sweep "), 3u) << r.out;

  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << "rank 0 wrote no JSON\n" << r.out;
  ASSERT_EQ(j["all_reduce"].size(), 5u) << j.dump(1);
  for (const auto& row : j["all_reduce"]) {
    EXPECT_GT(row["bytes"].get<int64_t>(), 0) << row.dump(1);
    EXPECT_GT(row["time_us"].get<double>(), 0.0) << row.dump(1);
    EXPECT_GT(row["busbw_gb_s"].get<double>(), 0.0) << row.dump(1);
  }
  ASSERT_EQ(j["ep"]["results"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["ep"]["ep"], 2);
  for (const auto& row : j["ep"]["results"]) {
    EXPECT_EQ(row["pairs_per_rank"].get<int64_t>(),
              row["tokens_per_rank"].get<int64_t>() * j["ep"]["top_k"].get<int64_t>())
        << row.dump(1);
    for (const char* key : {"activation_bytes_per_rank", "counts_us", "ids_us", "dispatch_us", "combine_us", "step_us",
                            "step_busbw_gb_s", "dispatch_busbw_gb_s", "all_to_all_us", "all_to_all_busbw_gb_s"}) {
      EXPECT_GT(row[key].get<double>(), 0.0) << key << " in " << row.dump(1);
    }
    EXPECT_GE(row["recv_rows_max_over_mean"].get<double>(), 1.0) << row.dump(1);
  }
  fs::remove(json);
}

TEST(BenchCalibrateMpi, TwoRanksWriteEveryCollective) {
  const fs::path out = fs::temp_directory_path() / "sy_calibrate_two.json";
  fs::remove(out);
  const auto r = test::run_switchyard("bench calibrate --device cpu --ranks 2 --quick --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("starting 2 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, "bench calibrate: cpu"), 1u) << "rank 0 alone reports\n" << r.out;
  const nlohmann::json j = test::read_json(out);
  ASSERT_TRUE(j.is_object()) << "rank 0 wrote no profile\n" << r.out;
  EXPECT_EQ(j["machine"]["ranks"], 2);
  EXPECT_EQ(j["machine"]["transport"], "mpi");
  // Each op timed with both ranks at it, then by rank 0 alone: the same dims and points in "ops_alone".
  ASSERT_TRUE(j.contains("ops_alone")) << "no single-rank timings\n" << r.out;
  for (const auto& [op, t] : j["ops"].items()) {
    ASSERT_TRUE(j["ops_alone"].contains(op)) << op;
    const auto& a = j["ops_alone"][op];
    EXPECT_EQ(a["dims"], t["dims"]) << op;
    ASSERT_EQ(a["points"].size(), t["points"].size()) << op;
    for (size_t i = 0; i < t["points"].size(); ++i) {
      const auto& pa = a["points"][i];
      const auto& pt = t["points"][i];
      for (size_t d = 0; d + 1 < pt.size(); ++d) EXPECT_EQ(pa[d], pt[d]) << op << " " << pa.dump();
      EXPECT_GT(pa.back().get<double>(), 0.0) << op << " " << pa.dump();
    }
  }
  for (const char* kind : {"all_reduce", "all_gather", "all_to_all_v", "send_recv"}) {
    ASSERT_TRUE(j["collectives"].contains(kind)) << kind << " in " << j["collectives"].dump(1);
    const auto& t = j["collectives"][kind];
    EXPECT_EQ(t["dims"], nlohmann::json({"ranks", "bytes"})) << kind;
    ASSERT_FALSE(t["points"].empty()) << kind;
    for (const auto& p : t["points"]) {
      ASSERT_EQ(p.size(), 3u) << kind << ": " << p.dump();
      EXPECT_EQ(p[0], 2) << kind << ": " << p.dump();
      EXPECT_GE(p[1].get<int64_t>(), 256) << kind << ": " << p.dump();
      EXPECT_GT(p[2].get<double>(), 0.0) << kind << ": " << p.dump();
    }
  }
  // The skew: one size when quick, kept as [segment µs, fraction] and printed with its rounds' fractions.
  ASSERT_TRUE(j["step"].contains("skew")) << j["step"].dump();
  ASSERT_EQ(j["step"]["skew"].size(), 1u) << j["step"].dump();
  EXPECT_GT(j["step"]["skew"][0][0].get<double>(), 0.0);
  EXPECT_GE(j["step"]["skew"][0][1].get<double>(), 0.0);
  EXPECT_NE(r.out.find("calibrate: skew (the median of each size's rounds) "), std::string::npos) << r.out;
  // The skew beyond the caches: one size when quick (products of one row), [rows, segment µs, fraction].
  ASSERT_TRUE(j["step"].contains("skew_cold")) << j["step"].dump();
  ASSERT_EQ(j["step"]["skew_cold"].size(), 1u) << j["step"].dump();
  EXPECT_EQ(j["step"]["skew_cold"][0][0].get<double>(), 1.0);
  EXPECT_GT(j["step"]["skew_cold"][0][1].get<double>(), 0.0);
  EXPECT_GE(j["step"]["skew_cold"][0][2].get<double>(), 0.0);
  EXPECT_NE(r.out.find("calibrate: skew beyond the caches (against the median rank; "), std::string::npos) << r.out;
  fs::remove(out);
}

}  // namespace
}  // namespace sy
