// The cost model against mathematics (the profile's reading and lookups: test_profile.cpp): its predictions
// follow the bytes of the layout (tensor parallelism halves the attention weights a rank reads; more sequences
// touch the experts the uniform-routing formula says; a CPU step beyond the caches streams its weights and one
// within them does not; experts serve the tokens their replicas hold; one sequence passes pipeline stages in turn;
// CPU ranks left alone by waiting ones run at their single-rank rate).
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
using test::profile_json;

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

// A 1-rank prefill of one 128-token prompt beyond the caches (Qwen3-30B-A3B: 128 experts top-8, 2048 × 768, 48
// layers) on a CPU profile whose grouped experts ran at 1.5× their work hot (64, 128 and 256 rows) and 1.6× cold (16
// and 64 rows of the whole experts; an expert-parallel slice's 256 rows make the cold table the one to take). Past
// its 64 cold rows the call costs its hot time plus the cold point's excess over the hot one at 64 rows:
// 1.5 W(128) + 0.1 W(64), with W the work at the query's touched experts; the products' FLOPs at the profile's
// 2.5e10 FLOP/s make W(128) about twice W(64). Continuing the cold point by the work at the profile's rates instead
// gave 1.6 W(64) + (W(128) − W(64)), about 16% less.
TEST(CostModel, GroupedExpertsPastTheirColdRowsContinueAsTheHotTableDoes) {
  const std::vector<std::string> dims = {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"};
  const auto touched = [](double t) { return 128.0 * (1.0 - std::pow(1.0 - 8.0 / 128.0, t)); };
  json j = cpu_profile_json();
  j["rates"]["matrix_tflop_s"] = 1e-3;  // the streaming point's 2.5e10 FLOP/s is the best linear rate
  const json linear = {{"dims", {"m", "n", "k"}}, {"points", {{1, 65536, 2048, 2.0 * f32_work(1, 65536, 2048) * 1e6}}}};
  j["ops"] = {{"linear", linear}};
  const MachineProfile rates = parse_profile(j.dump(), "rates.json");
  // The work model of moe_experts (cost_ops.h Works::moe) with f32 weights, at the profile's rates.
  const auto work = [&](double t, double k, double e, double tc) {
    const std::vector<double> v = {t, k, e, 2048, 768, tc};
    const DimView q{&dims, v.data()};
    return rates.work_seconds(
        {.bytes = q["touched"] * 3 * 2048 * 768 * 4 + 8 * t * 2048, .flops = 6 * t * k * 2048 * 768});
  };
  json hot = json::array(), cold = json::array();
  for (double t : {64.0, 128.0, 256.0})
    hot.push_back({t, 8, 128, 2048, 768, touched(t), 1.5 * work(t, 8, 128, touched(t)) * 1e6});
  for (double t : {16.0, 64.0})
    cold.push_back({t, 8, 128, 2048, 768, touched(t), 1.6 * work(t, 8, 128, touched(t)) * 1e6});
  cold.push_back({256, 1, 16, 2048, 768, 16, 1.6 * work(256, 1, 16, 16) * 1e6});
  j["ops"] = {
      {"linear", {{"dims", {"m", "n", "k"}}, {"points", {{1, 65536, 2048, 2.0 * f32_work(1, 65536, 2048) * 1e6}}}}},
      {"moe_experts", {{"dims", dims}, {"points", hot}}},
      {"moe_experts_cold", {{"dims", dims}, {"points", cold}}}};
  PlanTarget t = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 1);
  t.profiles = {parse_profile(j.dump(), "cpu.json")};
  t.decode_context = 16;
  t.decode_batch = 1;
  t.prefill_len = 128;
  LayoutRequest one;
  one.set(Axis::tp, 1);
  const double experts = predict_layout(t, check_layout(t, one)).prefill.phase_seconds[2] / 48;
  const double w128 = work(128, 8, 128, touched(128)), w64 = work(64, 8, 128, touched(128));
  EXPECT_GT(w128, 1.9 * w64);
  EXPECT_NEAR(experts, 1.5 * w128 + 0.1 * w64, 1e-6 * experts);
  EXPECT_GT(experts, 1.15 * (1.6 * w64 + (w128 - w64)));
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
