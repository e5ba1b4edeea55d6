// Attention on a CPU profile. Between shapes of other head counts: the CPU kernels take each query head's dot
// products over its keys in turn, so their time follows query heads × keys, while the kv heads' bytes follow the
// kv heads. A lookup whose nearest shapes have other head counts scales their times by the reads (OpWork::reads),
// not by the bytes: 4 query heads on 2 kv heads cost what 4 on 1 cost, and half what 8 on 2 cost. Beyond the
// caches: the cold table (timed at one query token a sequence) prices decode, not a prefill's many tokens a
// sequence.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "planner_test_util.h"

namespace sy {
namespace {

using nlohmann::json;

const std::vector<std::string> kDims = {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"};

// A decode kernel whose time follows query heads × keys: 0.025 µs a head and key (head_dim 64), every shape.
constexpr double kUsPerHeadKey = 0.025;

// Points of the shapes (n_heads, kv_heads) at one query token, seqs 1 and 4, contexts 128 to 2,048.
json points(const std::vector<std::pair<int, int>>& shapes) {
  json out = json::array();
  for (const auto& [heads, kv] : shapes) {
    for (const int seqs : {1, 4}) {
      for (const int context : {128, 512, 2048}) {
        out.push_back({seqs, 1, context, heads, kv, 64, kUsPerHeadKey * seqs * heads * context});
      }
    }
  }
  return out;
}

MachineProfile attention_profile(const json& pts, const std::string& device, const json& more_ops = json::object()) {
  json ops = more_ops;
  ops["paged_attention"] = {{"dims", kDims}, {"points", pts}};
  const json j = {{"format", "switchyard-profile"},
                  {"version", 1},
                  {"machine", {{"device", device}, {"name", "test"}, {"ranks", 1}, {"transport", "none"}}},
                  {"rates", {{"copy_gb_s", 20.0}, {"matrix_tflop_s", 1.0}}},
                  {"step", {{"launch_us", 1.0}, {"sync_us", 1.0}, {"graph_launch_us", 1.0}, {"copy_to_host_us", 1.0}}},
                  {"ops", ops},
                  {"collectives", json::object()}};
  return parse_profile(j.dump(), "attention.json");
}

// A work model of the cost model's kind: the kv heads' cached rows (fp32) and, where `per_head`, the same rows
// once for each query head.
OpWork attention_work(const DimView& v, bool per_head) {
  const double s = v["seqs"], c = v["context"], hd = v["head_dim"];
  return {.bytes = s * c * v["kv_heads"] * hd * 2 * 4 + 8 * s * v["n_heads"] * hd,
          .flops = 4 * s * v["n_heads"] * hd * c,
          .reads = per_head ? s * c * v["n_heads"] * hd * 2 * 4 : 0};
}

double lookup(const MachineProfile& p, int heads, int kv, double context, bool per_head) {
  const std::vector<double> v = {1, 1, context, static_cast<double>(heads), static_cast<double>(kv), 64};
  return p.op_seconds("paged_attention", DimView{&kDims, v.data()}, {"seqs", "context"},
                      [&](const DimView& d) { return attention_work(d, per_head); });
}

// The three shapes nearest to 4 on 2 (4 on 1, 8 on 2, 2 on 1), none of them that shape: by the reads, each says
// 4 heads × 160 keys; by the bytes, two of the three say twice that, and the median of three takes it.
TEST(AttentionReads, ShapesOfOtherHeadCountsScaleByQueryHeadsTimesKeys) {
  const MachineProfile cpu = attention_profile(points({{4, 1}, {8, 2}, {2, 1}}), "cpu");
  const double truth = kUsPerHeadKey * 4 * 160 * 1e-6;
  EXPECT_NEAR(lookup(cpu, 4, 2, 160, true), truth, 0.05 * truth);
  // Without the reads the same lookup is the bytes' scaling, which the kernel does not follow.
  EXPECT_GT(lookup(cpu, 4, 2, 160, false), 1.5 * truth);
}

// The cost model gives its attention work the reads on a CPU profile: the bundled model's 4 query heads on 2 kv
// heads, priced from the shapes above, take 4 heads × their context.
TEST(AttentionReads, TheCostModelsAttentionOnACpuProfileFollowsQueryHeads) {
  PlanTarget t = test::target_for(std::filesystem::path(SY_SOURCE_DIR) / "models" / "pydoc-moe", "h200", 1);
  t.profiles = {attention_profile(points({{4, 1}, {8, 2}, {2, 1}}), "cpu")};
  t.decode_context = 300;
  t.decode_batch = 1;
  const std::regex context_of(R"(context=([0-9.]+))");
  int rows = 0;
  for (const CostTraceRow& r : explain_layout(t, check_layout(t, LayoutRequest{})).rows) {
    if (r.op != "paged_attention") continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.query, m, context_of)) << r.query;
    const double truth = kUsPerHeadKey * 4 * std::stod(m[1]) * 1e-6;
    EXPECT_NEAR(r.seconds, truth, 0.05 * truth) << r.query;
    ++rows;
  }
  EXPECT_GT(rows, 0);
}

// Qwen3-30B-A3B at one rank is far beyond any cache: the step is priced from the cold tables (a single-row product
// of 537 MB sets the streaming rate). Its attention is 32 query heads on 4 kv heads of 128. The cold table holds
// decode's one token a sequence only; the hot table holds a prefill's 128 tokens at 128 keys, 500 µs.
PlanTarget cold_target(int64_t batch) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  json hot = json::array(), cold = json::array();
  for (const int seqs : {1, 2}) {
    for (const int context : {128, 512}) {
      hot.push_back({seqs, 1, context, 32, 4, 128, 2.0 * seqs * context});
      cold.push_back({seqs, 1, context, 32, 4, 128, 2.1 * seqs * context});
    }
    hot.push_back({seqs, 128, 128, 32, 4, 128, 500.0 * seqs});
  }
  const json more = {
      {"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 16384, 16384, 50000.0}}}}},
      {"paged_attention_cold", {{"dims", kDims}, {"points", cold}}},
  };
  t.profiles = {attention_profile(hot, "cpu", more)};
  t.decode_batch = batch;
  t.decode_context = 256;
  t.prefill_len = 128;
  return t;
}

TEST(ColdAttention, APrefillsQueriesComeFromTheHotTableWhereTheColdOneHasNoneOfTheirLength) {
  PlanTarget t = cold_target(1);
  const LayoutCheck check = check_layout(t, LayoutRequest{});
  int cold_rows = 0;
  for (const CostTraceRow& r : explain_layout(t, check, true).rows) {
    if (r.op != "paged_attention" || r.weight <= 0) continue;
    EXPECT_EQ(r.pass, "cold");
    EXPECT_EQ(r.table, "paged_attention") << r.query;
    EXPECT_NEAR(r.seconds, 500e-6, 1e-9) << r.query;
    ++cold_rows;
  }
  EXPECT_GT(cold_rows, 0);
  // Decode's one token a sequence still comes from the cold table: 2.1 µs a key at 256 keys (within the hot 2 µs
  // and the KV at the streaming rate, 0.19 µs a key).
  int decode_rows = 0;
  for (const CostTraceRow& r : explain_layout(t, check).rows) {
    if (r.op != "paged_attention" || r.weight <= 0) continue;
    EXPECT_EQ(r.table, "paged_attention_cold") << r.query;
    EXPECT_NEAR(r.seconds, 2.1 * 256 * 1e-6, 0.02 * 2.1 * 256 * 1e-6) << r.query;
    ++decode_rows;
  }
  EXPECT_GT(decode_rows, 0);
}

}  // namespace
}  // namespace sy
