// Routed experts by their rows an expert. A CPU backend runs an expert's rows as one product: one row as a
// matrix-vector product, several as a matrix product, which OpenBLAS does several times slower at a few rows. The
// lookup prices a query whose pairs each have an expert of their own from the points timed so (and the others from
// the rest); the cost model's busiest expert rank gives each of its calls as many distinct experts as one token's
// pairs have at batch 1 (a token's top-k experts are distinct).
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

const std::vector<std::string> kMoeDims = {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"};

// A routed-experts work model of the cost model's kind: each touched expert's three matrices (fp32) and the rows.
OpWork moe_fn(const DimView& v) {
  const double t = v["tokens"], k = v["top_k"], h = v["hidden"], i = v["inter"];
  return {.bytes = v["touched"] * 3 * h * i * 4 + 8 * t * h, .flops = 6 * t * k * h * i};
}

// A profile of `device` whose moe_experts table holds `points` (dims kMoeDims, then µs).
MachineProfile moe_profile(const json& points, const std::string& device) {
  const json j = {{"format", "switchyard-profile"},
                  {"version", 1},
                  {"machine", {{"device", device}, {"name", "test"}, {"ranks", 1}, {"transport", "none"}}},
                  {"rates", {{"copy_gb_s", 20.0}, {"matrix_tflop_s", 1.0}}},
                  {"step", {{"launch_us", 1.0}, {"sync_us", 1.0}, {"graph_launch_us", 1.0}, {"copy_to_host_us", 1.0}}},
                  {"ops", {{"moe_experts", {{"dims", kMoeDims}, {"points", points}}}}},
                  {"collectives", json::object()}};
  return parse_profile(j.dump(), "moe.json");
}

double work_at(const MachineProfile& p, double tokens, double touched) {
  const std::vector<double> v = {tokens, 1, 2, 256, 320, touched};
  return p.work_seconds(moe_fn(DimView{&kMoeDims, v.data()}));
}

double lookup(const MachineProfile& p, double tokens, double touched) {
  const std::vector<double> v = {tokens, 1, 2, 256, 320, touched};
  return p.op_seconds("moe_experts", DimView{&kMoeDims, v.data()}, {"tokens"}, moe_fn);
}

// r19's 4-rank profile of the bundled model's two local experts: one token 12 µs; two tokens that the random
// routing put on one expert 73 µs; 4 and 8 tokens on both.
const json kPoints = {{1, 1, 2, 256, 320, 1, 12.0},
                      {2, 1, 2, 256, 320, 1, 73.0},
                      {4, 1, 2, 256, 320, 2, 105.0},
                      {8, 1, 2, 256, 320, 2, 176.0}};

TEST(ExpertRows, OneRowAnExpertIsPricedFromThePointsTimedSo) {
  const MachineProfile cpu = moe_profile(kPoints, "cpu");
  // Two pairs on two experts: two single-row products, the one-token point's ratio to its work on twice the work
  // (less its fixed part), not the two-rows-on-one point's 73 µs scaled to two experts.
  const double one_row = 12e-6 / work_at(cpu, 1, 1) * work_at(cpu, 2, 2);
  EXPECT_NEAR(lookup(cpu, 2, 2), one_row, 1e-12);
  EXPECT_GT(one_row, 20e-6);
  EXPECT_LT(one_row, 25e-6);
  // Two pairs on one expert: the point timed so.
  EXPECT_NEAR(lookup(cpu, 2, 1), 73e-6, 1e-12);
  // A GPU profile's lookup is as before: every point of the shape, the two-token point's ratio at two tokens.
  const MachineProfile gpu = moe_profile(kPoints, "cuda");
  EXPECT_NEAR(lookup(gpu, 2, 2), 73e-6 / work_at(gpu, 2, 1) * work_at(gpu, 2, 2), 1e-12);
}

// A shape without a point of the query's kind prices it from every point, as before.
TEST(ExpertRows, AShapeWithoutThePointsOfTheQuerysKindKeepsEveryPoint) {
  const json multi = {{2, 1, 2, 256, 320, 1, 73.0}, {4, 1, 2, 256, 320, 2, 105.0}};
  const MachineProfile cpu = moe_profile(multi, "cpu");
  EXPECT_NEAR(lookup(cpu, 2, 2), 73e-6 / work_at(cpu, 2, 1) * work_at(cpu, 2, 2), 1e-12);
  const json single = {{1, 1, 2, 256, 320, 1, 12.0}, {2, 1, 2, 256, 320, 2, 30.0}};
  EXPECT_NEAR(lookup(moe_profile(single, "cpu"), 2, 1), 30e-6 / work_at(cpu, 2, 2) * work_at(cpu, 2, 1), 1e-12);
}

// The routed-experts calls the explanation lists at decode batch `batch` under ep 4 (Qwen3-30B-A3B: 8 of 128
// experts a token, 32 a rank), as (tokens, touched).
std::vector<std::pair<double, double>> expert_calls(int64_t batch) {
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 4);
  t.profiles = {moe_profile(kPoints, "cpu")};
  t.decode_context = 16;
  t.decode_batch = batch;
  LayoutRequest ep4;
  ep4.set(Axis::tp, 4);
  ep4.set(Axis::ep, 4);
  std::vector<std::pair<double, double>> out;
  const std::regex dims(R"(tokens=([0-9.]+) .*touched=([0-9.]+))");
  for (const CostTraceRow& r : explain_layout(t, check_layout(t, ep4)).rows) {
    std::smatch m;
    if (r.op != "moe_experts" || r.pass != "hot") continue;
    EXPECT_TRUE(std::regex_search(r.query, m, dims)) << r.query;
    out.emplace_back(std::stod(m[1]), std::stod(m[2]));
  }
  return out;
}

// At batch 1 the busiest expert rank's pairs come from one token, whose 8 experts are distinct: each of its calls
// (the pairs split between the two whole counts around the expected 3.3 or so) touches as many experts as it has
// pairs. At batch 64 the pairs outnumber the rank's 32 experts: a call touches at most those and at most its pairs,
// and at least one.
TEST(ExpertRows, AtBatchOneEveryPairOfTheBusiestRankHasItsOwnExpert) {
  const auto one = expert_calls(1);
  ASSERT_EQ(one.size(), 2U);
  for (const auto& [tokens, touched] : one) EXPECT_DOUBLE_EQ(touched, tokens);
  EXPECT_EQ(one[1].first, one[0].first + 1);
  const auto many = expert_calls(64);
  ASSERT_FALSE(many.empty());
  for (const auto& [tokens, touched] : many) {
    EXPECT_LE(touched, 32.0);
    EXPECT_LE(touched, tokens);
    EXPECT_GE(touched, 1.0);
  }
}

}  // namespace
}  // namespace sy
