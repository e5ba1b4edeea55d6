// `switchyard bench calibrate` on one CPU rank (cpu tier): the quick grid writes a profile with every op of the
// contract, exact dims, well-formed points and the machine, rates and step sections; bad flags are refused before
// anything is measured. The collectives over two ranks are the mpi tier's (test_bench_mpi.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "apps/bench_output.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

// The ops of the profile format and their dims (README "bench calibrate").
const std::map<std::string, std::vector<std::string>> kOpDims = {
    {"linear", {"m", "n", "k"}},
    {"linear_f32", {"m", "n", "k"}},
    {"moe_experts", {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"}},
    {"paged_attention", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"}},
    {"qk_norm_rope_kv_write", {"tokens", "n_heads", "kv_heads", "head_dim"}},
    {"mla_attention", {"seqs", "q_len", "context", "n_heads", "kv_lora_rank", "rope_dim"}},
    {"head_linear", {"tokens", "heads", "in", "out"}},
    {"mla_kv_write", {"tokens", "kv_lora_rank", "rope_dim"}},
    {"rope", {"tokens", "n_heads", "head_dim"}},
    {"rms_norm", {"rows", "dim"}},
    {"add_rms_norm", {"rows", "dim"}},
    {"silu_mul", {"rows", "inter"}},
    {"add", {"n"}},
    {"split_columns", {"rows", "width"}},
    {"embedding", {"tokens", "dim"}},
    {"softmax_topk", {"tokens", "n_experts", "top_k"}},
    {"grouped_topk", {"tokens", "n_experts", "top_k", "n_group", "topk_group"}},
    {"sample_tokens", {"rows", "vocab"}},
    {"sample_tokens_random", {"rows", "vocab"}},
    {"copy_to_host", {"bytes"}},
    {"copy_to_device", {"bytes"}},
};

// Every point [d1, ..., dn, us]: integer dims, a finite positive time.
void expect_points(const nlohmann::json& table, size_t n_dims, const std::string& what) {
  ASSERT_TRUE(table["points"].is_array()) << what;
  for (const auto& p : table["points"]) {
    ASSERT_TRUE(p.is_array()) << what << ": " << p.dump();
    ASSERT_EQ(p.size(), n_dims + 1) << what << ": " << p.dump();
    for (size_t i = 0; i < n_dims; ++i) {
      EXPECT_TRUE(p[i].is_number_integer()) << what << ": dim " << i << " of " << p.dump();
      EXPECT_GE(p[i].get<int64_t>(), 0) << what << ": " << p.dump();
    }
    ASSERT_TRUE(p[n_dims].is_number()) << what << ": " << p.dump();
    const auto us = p[n_dims].get<double>();
    EXPECT_TRUE(std::isfinite(us) && us > 0) << what << ": " << p.dump();
  }
}

// An environment variable set for the commands this process starts, and restored after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(BenchCalibrate, QuickProfileHasEveryOpWithItsDims) {
  const fs::path out = fs::temp_directory_path() / "sy_calibrate_quick.json";
  fs::remove(out);
  // One thread: OpenMP threads on a busy 2-core machine (the CI runner, ctest -j2) wait out the scheduler's time
  // slices at every barrier, about 12 ms a call whatever its size, which would drown the linear check below.
  const ScopedEnv one_thread("OMP_NUM_THREADS", "1");
  const auto r = test::run_switchyard("bench calibrate --device cpu --quick --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(out);
  ASSERT_TRUE(j.is_object()) << "no profile in " << out << "\n" << r.out;
  EXPECT_EQ(j["format"], "switchyard-profile");
  EXPECT_EQ(j["version"], 1);

  const auto& m = j["machine"];
  EXPECT_EQ(m["device"], "cpu");
  EXPECT_EQ(m["weight_dtype"], "f32");
  EXPECT_EQ(m["ranks"], 1);
  EXPECT_EQ(m["transport"], "none");
  EXPECT_EQ(m["quick"], true);
  EXPECT_EQ(m["passes"], 1) << "the quick grid is timed once";
  // The recheck's counts (README): integers, at most as many faster as timed again.
  ASSERT_TRUE(m["recheck"].is_object()) << m.dump(1);
  for (const char* key : {"retimed", "faster", "left"}) {
    ASSERT_TRUE(m["recheck"][key].is_number_integer()) << key << " in " << m.dump(1);
    EXPECT_GE(m["recheck"][key].get<int>(), 0) << key;
  }
  EXPECT_LE(m["recheck"]["faster"].get<int>(), m["recheck"]["retimed"].get<int>()) << m.dump(1);
  EXPECT_TRUE(m["name"].is_string() && !m["name"].get<std::string>().empty()) << m.dump(1);
  EXPECT_TRUE(m["host"].is_string()) << m.dump(1);
  EXPECT_TRUE(m["memory_gb"].is_number() && m["memory_gb"].get<double>() > 0) << m.dump(1);
  EXPECT_EQ(m["cpu_threads"], 1) << m.dump(1);
  // ISO 8601 UTC: 2025-01-31T12:00:00Z
  ASSERT_TRUE(m["date"].is_string()) << m.dump(1);
  const auto date = m["date"].get<std::string>();
  EXPECT_TRUE(date.size() == 20 && date[4] == '-' && date[10] == 'T' && date.back() == 'Z') << date;

  for (const char* key : {"copy_gb_s", "matrix_tflop_s"}) {
    ASSERT_TRUE(j["rates"][key].is_number()) << key << " in " << j["rates"].dump();
    EXPECT_GT(j["rates"][key].get<double>(), 0.0) << key;
  }
  for (const char* key : {"launch_us", "sync_us", "graph_launch_us", "copy_to_host_us"}) {
    ASSERT_TRUE(j["step"][key].is_number()) << key << " in " << j["step"].dump();
    EXPECT_GE(j["step"][key].get<double>(), 0.0) << key;
  }
  EXPECT_EQ(j["step"]["graph_launch_us"].get<double>(), 0.0) << "the CPU captures nothing";

  ASSERT_TRUE(j["ops"].is_object()) << j.dump(1);
  EXPECT_EQ(j["ops"].size(), kOpDims.size()) << j["ops"].dump(1);
  for (const auto& [op, dims] : kOpDims) {
    ASSERT_TRUE(j["ops"].contains(op)) << op;
    const auto& t = j["ops"][op];
    EXPECT_EQ(t["dims"].get<std::vector<std::string>>(), dims) << op;
    EXPECT_FALSE(t["points"].empty()) << op;
    expect_points(t, dims.size(), op);
  }
  EXPECT_TRUE(j["collectives"].is_object() && j["collectives"].empty()) << j["collectives"].dump(1);
  EXPECT_TRUE(j["skipped"].is_array()) << j.dump(1);

  // moe_experts: the touched experts are between top_k and min(n_experts, tokens · top_k).
  for (const auto& p : j["ops"]["moe_experts"]["points"]) {
    const auto tokens = p[0].get<int64_t>(), top_k = p[1].get<int64_t>(), experts = p[2].get<int64_t>();
    EXPECT_GE(p[5].get<int64_t>(), top_k) << p.dump();
    EXPECT_LE(p[5].get<int64_t>(), std::min(experts, tokens * top_k)) << p.dump();
  }
  // linear at n = k = 512: m = 64 does 64 times the work of m = 1 (a GEMV against a GEMM that is still small).
  double at_1 = 0, at_64 = 0;
  for (const auto& p : j["ops"]["linear"]["points"]) {
    if (p[1] != 512 || p[2] != 512) continue;
    if (p[0] == 1) at_1 = p[3].get<double>();
    if (p[0] == 64) at_64 = p[3].get<double>();
  }
  ASSERT_GT(at_1, 0.0) << j["ops"]["linear"].dump();
  ASSERT_GT(at_64, 0.0) << j["ops"]["linear"].dump();
  EXPECT_GT(at_64, at_1) << j["ops"]["linear"].dump();
  fs::remove(out);
}

// The points of each op, as sorted dims lists.
std::map<std::string, std::vector<std::vector<double>>> point_sets(const nlohmann::json& profile) {
  std::map<std::string, std::vector<std::vector<double>>> out;
  for (const auto& [op, t] : profile["ops"].items()) {
    for (const auto& p : t["points"]) {
      auto v = p.get<std::vector<double>>();
      v.pop_back();  // the time
      out[op].push_back(v);
    }
    std::sort(out[op].begin(), out[op].end());
  }
  return out;
}

// --passes 3: the grid timed three times and merged into one table per op, each point once (the quick grid fits
// its bound, so every pass times every point: the same points as one pass, none twice, none listed as skipped).
// The bound and the cut are far above what the quick grid needs: under the sanitisers on a loaded runner, a pass
// of the defaults spent an op's share of the 60 s bound, or timed the 128-token attention point at 67 ms, over the
// 50 ms cut, and left the 512-token one out (CI runs); what a pass times must not depend on the runner's speed here.
TEST(BenchCalibrate, PassesMergeIntoOnePointEach) {
  const fs::path one = fs::temp_directory_path() / "sy_calibrate_pass1.json";
  const fs::path three = fs::temp_directory_path() / "sy_calibrate_pass3.json";
  const ScopedEnv one_thread("OMP_NUM_THREADS", "1");
  const auto r1 = test::run_switchyard("bench calibrate --device cpu --quick --max-seconds 600 --cut-ms 10000 --out " +
                                       one.string());
  ASSERT_EQ(r1.code, 0) << r1.out;
  const auto r3 = test::run_switchyard(
      "bench calibrate --device cpu --quick --max-seconds 600 --cut-ms 10000 --passes 3 --out " + three.string());
  ASSERT_EQ(r3.code, 0) << r3.out;
  EXPECT_NE(r3.out.find("pass 3 of 3"), std::string::npos) << r3.out;
  const nlohmann::json j1 = test::read_json(one), j3 = test::read_json(three);
  EXPECT_EQ(j3["machine"]["passes"], 3);
  const auto p1 = point_sets(j1), p3 = point_sets(j3);
  EXPECT_EQ(p3, p1);
  for (const auto& [op, points] : p3) {
    EXPECT_EQ(std::adjacent_find(points.begin(), points.end()), points.end()) << op << ": a point twice";
  }
  EXPECT_TRUE(j1["skipped"].empty()) << j1["skipped"].dump(1);
  EXPECT_TRUE(j3["skipped"].empty()) << j3["skipped"].dump(1);
  for (const auto& [op, t] : j3["ops"].items()) expect_points(t, t["dims"].size(), op);
  fs::remove(one);
  fs::remove(three);
}

fs::path bundled_model() {
  const char* env = std::getenv("SY_SOURCE_DIR");
  return fs::path(env ? env : SY_SOURCE_DIR) / "models" / "pydoc-moe";
}

// The full grid under a bound far too short for it: every op still gets its first point (an op without points
// would make the profile unreadable), the rest is listed as skipped, and `plan --profile` reads the result.
TEST(BenchCalibrate, ATightBoundStillTimesEveryOp) {
  const fs::path out = fs::temp_directory_path() / "sy_calibrate_bounded.json";
  fs::remove(out);
  const ScopedEnv one_thread("OMP_NUM_THREADS", "1");
  const auto r = test::run_switchyard("bench calibrate --device cpu --max-seconds 1 --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(out);
  ASSERT_TRUE(j.is_object()) << "no profile in " << out << "\n" << r.out;
  EXPECT_EQ(j["machine"]["quick"], false);
  EXPECT_EQ(j["machine"]["passes"], 3) << "a CPU's full grid is timed in three passes by default";
  for (const auto& [op, dims] : kOpDims) {
    ASSERT_TRUE(j["ops"].contains(op)) << op;
    EXPECT_FALSE(j["ops"][op]["points"].empty()) << op;
  }
  size_t over_budget = 0;
  for (const auto& s : j["skipped"])
    over_budget += s["why"].get<std::string>().find("time budget") != std::string::npos;
  EXPECT_GT(over_budget, 0U) << "a 1 s bound cannot time the whole grid: " << j["skipped"].dump(1);
  const auto plan = test::run_switchyard("plan --model " + bundled_model().string() +
                                         " --machine h200 --tp 1 --batch 4 --profile " + out.string());
  EXPECT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find(out.string()), std::string::npos) << plan.out;
  fs::remove(out);
}

// --model: the grid is the bundled model's shapes only (hidden 256, experts of inter 320 and its etp slices 160
// and 80, products no larger than its 4096 × 256 LM head, no MLA op), not the built-in models' or the generic ones;
// timed or listed as skipped, every point is one of them, and the LM head is among them.
TEST(BenchCalibrate, AModelsGridHoldsItsShapesOnly) {
  const fs::path out = fs::temp_directory_path() / "sy_calibrate_model.json";
  fs::remove(out);
  const ScopedEnv one_thread("OMP_NUM_THREADS", "1");
  const auto r = test::run_switchyard("bench calibrate --device cpu --max-seconds 2 --model " +
                                      bundled_model().string() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["machine"]["models"], nlohmann::json({bundled_model().string()}));
  for (const char* mla : {"mla_attention", "head_linear", "mla_kv_write"}) {
    EXPECT_FALSE(j["ops"].contains(mla)) << mla << ": the bundled model has no MLA";
  }
  std::vector<nlohmann::json> linear, experts;
  for (const auto& p : j["ops"]["linear"]["points"]) linear.push_back(p);
  for (const auto& p : j["ops"]["moe_experts"]["points"]) experts.push_back(p);
  for (const auto& s : j["skipped"]) {
    if (s["op"] == "linear") linear.push_back(s["point"]);
    if (s["op"] == "moe_experts") experts.push_back(s["point"]);
  }
  ASSERT_FALSE(linear.empty());
  bool lm_head = false;
  int streaming = 0;  // the CPU grid's one product beyond the caches (1 GB of weights, one row)
  for (const auto& p : linear) {
    const int64_t n = p[1].get<int64_t>(), k = p[2].get<int64_t>();
    if (n == 131072 && k == 4096) {
      EXPECT_EQ(p[0], 1) << p.dump();
      ++streaming;
      continue;
    }
    EXPECT_LE(n * k, 4096 * 256) << p.dump();
    lm_head = lm_head || (n == 4096 && k == 256);
  }
  EXPECT_TRUE(lm_head);
  EXPECT_EQ(streaming, 1);
  ASSERT_FALSE(experts.empty());
  for (const auto& p : experts) {
    EXPECT_EQ(p[3], 256) << p.dump();
    const int64_t inter = p[4].get<int64_t>();
    EXPECT_TRUE(inter == 320 || inter == 160 || inter == 80 || inter == 40) << p.dump();
  }
  // The cold tables (weights read from memory each call): the model's own shapes at a decode step's rows, no
  // streaming point; an expert-parallel slice (top_k 1: each row a received pair) up to 512 pairs (the grid's
  // rows: test_calibrate_grid.cpp).
  for (const char* cold : {"linear_cold", "moe_experts_cold"}) {
    std::vector<nlohmann::json> points;
    if (j["ops"].contains(cold)) {
      for (const auto& p : j["ops"][cold]["points"]) points.push_back(p);
    }
    for (const auto& s : j["skipped"]) {
      if (s["op"] == cold) points.push_back(s["point"]);
    }
    ASSERT_FALSE(points.empty()) << cold;
    for (const auto& p : points) {
      const bool pairs = std::string(cold) == "moe_experts_cold" && p[1] == 1;
      EXPECT_LE(p[0].get<int64_t>(), pairs ? 512 : 64) << cold << " " << p.dump();
      if (std::string(cold) == "linear_cold") {
        EXPECT_LE(p[1].get<int64_t>() * p[2].get<int64_t>(), 4096 * 256) << p.dump();
      } else {
        EXPECT_EQ(p[3], 256) << p.dump();
      }
    }
  }
  // Decode attention beyond the caches: the model's heads (4 query, 2 KV heads of 64 and their tp slices), one
  // query token, up to 64 sequences, contexts 128 to 2,048.
  std::vector<nlohmann::json> cold_attention;
  if (j["ops"].contains("paged_attention_cold")) {
    for (const auto& p : j["ops"]["paged_attention_cold"]["points"]) cold_attention.push_back(p);
  }
  for (const auto& s : j["skipped"]) {
    if (s["op"] == "paged_attention_cold") cold_attention.push_back(s["point"]);
  }
  ASSERT_FALSE(cold_attention.empty());
  for (const auto& p : cold_attention) {
    EXPECT_LE(p[0].get<int64_t>(), 64) << p.dump();
    EXPECT_EQ(p[1], 1) << p.dump();
    const int64_t ctx = p[2].get<int64_t>();
    EXPECT_TRUE(ctx == 128 || ctx == 512 || ctx == 2048) << p.dump();
    EXPECT_EQ(p[5], 64) << p.dump();
    EXPECT_LE(p[3].get<int64_t>(), 4) << p.dump();
  }
  // The cold pool: twice the last-level cache the profile names, at least 256 MiB, in whole MiB.
  const double cache_mb = j["machine"].value("cache_mb", 0.0);
  const int64_t cold_mb = j["machine"]["cold_pool_mb"].get<int64_t>();
  EXPECT_EQ(cold_mb, std::max<int64_t>(256, static_cast<int64_t>(std::ceil(2 * cache_mb - 1e-3)))) << cache_mb;
  // The cache curve: one row of f32 weights, 64 Ki a thread and at least 1 MiB (one thread here: 1 MiB), rotating
  // through pools from the weights to the cold pool, whatever the model; timed or skipped, the pools are the first
  // of that list (a series cut by the budget lists its first point left out, and says how many larger ones
  // follow it).
  EXPECT_EQ(j["machine"]["cpu_threads"], 1);
  std::set<int64_t> pools;
  if (j["ops"].contains("linear_pool")) {
    for (const auto& p : j["ops"]["linear_pool"]["points"]) {
      EXPECT_EQ(p[0], 1) << p.dump();
      EXPECT_EQ(p[1].get<int64_t>() * p[2].get<int64_t>(), 256 * 1024) << p.dump();
      pools.insert(p[3].get<int64_t>());
    }
  }
  for (const auto& s : j["skipped"]) {
    if (s["op"] == "linear_pool") pools.insert(s["point"][3].get<int64_t>());
  }
  std::vector<int64_t> all;
  for (int64_t mb : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024}) {
    if (mb <= cold_mb) all.push_back(mb);
  }
  ASSERT_FALSE(pools.empty());
  ASSERT_LE(pools.size(), all.size());
  EXPECT_EQ(pools, std::set<int64_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(pools.size())));
  fs::remove(out);
}

// Two models under a bound far too short for their grid: each series (one shape) gets its part of its op's
// share, so the second model's shapes are timed too (the medium config's experts, hidden 1,024, and its
// products with k = 1,024), not only the first's.
TEST(BenchCalibrate, ATightBoundReachesEveryModelsShapes) {
  const fs::path out = fs::temp_directory_path() / "sy_calibrate_two_models.json";
  fs::remove(out);
  const ScopedEnv one_thread("OMP_NUM_THREADS", "1");
  const fs::path medium = bundled_model().parent_path().parent_path() / "bench" / "configs" / "qwen3-moe-cpu-medium";
  const auto r =
      test::run_switchyard("bench calibrate --device cpu --max-seconds 2 --model " + bundled_model().string() +
                           " --model " + medium.string() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(out);
  ASSERT_TRUE(j.is_object()) << r.out;
  std::set<int64_t> expert_hidden;
  for (const auto& p : j["ops"]["moe_experts"]["points"]) expert_hidden.insert(p[3].get<int64_t>());
  EXPECT_EQ(expert_hidden, (std::set<int64_t>{256, 1024})) << j["ops"]["moe_experts"].dump();
  size_t medium_products = 0;
  for (const auto& p : j["ops"]["linear"]["points"]) medium_products += p[2].get<int64_t>() == 1024;
  EXPECT_GT(medium_products, 0U) << j["ops"]["linear"].dump();
  size_t over_budget = 0;
  for (const auto& s : j["skipped"])
    over_budget += s["why"].get<std::string>().find("time budget") != std::string::npos;
  EXPECT_GT(over_budget, 0U) << "a 2 s bound cannot time both models' grid";
  fs::remove(out);
}

// Refused before anything is measured: one line, exit code 2, nothing written.
TEST(BenchCalibrate, RefusesBadFlagsBeforeMeasuring) {
  const fs::path dir = fs::temp_directory_path() / "sy_calibrate_bad";
  fs::remove_all(dir);
  const std::string missing = (dir / "no-such-folder" / "p.json").string();
  test::expect_refused("bench calibrate",
                       {
                           {"--device tpu --out p.json", "--device must be cpu or cuda, got 'tpu'"},
                           {"--device cpu --out " + missing, "--out " + missing + ": the folder " +
                                                                 (dir / "no-such-folder").string() + " does not exist"},
                           {"--device cpu --ranks 0 --out p.json", "--ranks: Value 0 not in range 1"},
                           {"--device cpu", "--out is required"},
                           {"--device cpu --out p.json --max-seconds nan", "--max-seconds"},
                           {"--device cpu --out p.json --passes 0", "--passes: Value 0 not in range 1"},
                           {"--device cpu --out p.json --cut-ms 0", "--cut-ms"},
                           {"--device cpu --out p.json --cut-ms inf", "--cut-ms"},
                           {"--device cpu --out p.json --model " + missing, "--model"},
                           {"--device cpu --quick --out p.json --model " + bundled_model().string(),
                            "--model and --quick exclude each other"},
                       },
                       "bench calibrate:");
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists("p.json"));
}

}  // namespace
}  // namespace sy
