// `switchyard bench latency` and `bench comm` on one rank as a user runs them (cpu tier): one table with a
// communication column that one rank leaves at zero, the JSON of the same figures, and flags refused before
// anything starts. Runs of several ranks are the mpi tier's (test_bench_mpi.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "apps/bench_output.h"
#include "common/fixture.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

std::string qwen3() { return (test::fixtures_dir() / "qwen3_moe_base").string(); }

TEST(BenchLatency, OneRankPrintsOneTableWithNoCommunication) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_one.json";
  const auto r = test::run_switchyard("bench latency --model " + qwen3() +
                                      " --batch 1,2 --input-len 3 --output-len 3 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(test::count_lines_starting(r.out, " batch"), 1u) << r.out;
  const test::PhaseTable table = test::read_latency_table(r.out);
  ASSERT_EQ(table.batches, (std::vector<int64_t>{1, 2})) << r.out;
  const auto comm = table.column("communication");
  ASSERT_TRUE(comm.has_value()) << r.out;
  for (const auto& row : table.rows) {
    ASSERT_EQ(row.size(), table.names.size()) << r.out;
    EXPECT_EQ(std::stod(row[*comm]), 0.0) << r.out;
  }

  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << "no JSON in " << json;
  EXPECT_FALSE(j.contains("layout")) << j.dump(1);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& res : j["results"]) {
    EXPECT_EQ(res["decode_phase_ms"]["communication"].get<double>(), 0.0) << res.dump(1);
    EXPECT_GT(res["decode_phase_ms"]["attention"].get<double>(), 0.0) << res.dump(1);
    // One rank holds the whole model, so the floors are there.
    EXPECT_GT(res["decode_floor_ms"].get<double>(), 0.0) << res.dump(1);
    EXPECT_GT(res["prefill_pct_of_limit"].get<double>(), 0.0) << res.dump(1);
    // The fixture routes each token to 2 distinct of 8 experts: a step of B tokens reads between 2 and
    // min(8, 2B) experts a layer (exactly 2 at batch 1); uniform routing expects 8 (1 − (1 − 2/8)^B).
    const auto B = res["batch"].get<double>();
    ASSERT_TRUE(res["decode_experts_per_moe_layer"].is_number()) << res.dump(1);
    const double counted = res["decode_experts_per_moe_layer"].get<double>();
    EXPECT_GE(counted, 2.0) << res.dump(1);
    EXPECT_LE(counted, std::min(8.0, 2.0 * B)) << res.dump(1);
    if (B == 1) {
      EXPECT_EQ(counted, 2.0) << res.dump(1);
    }
    EXPECT_NEAR(res["decode_experts_per_moe_layer_uniform"].get<double>(), 8.0 * (1.0 - std::pow(0.75, B)), 1e-9);
    // The prefill pass is one step of the B prompts' 3B tokens: between 2 and min(8, 6B) experts a layer.
    ASSERT_TRUE(res["prefill_experts_per_moe_layer"].is_number()) << res.dump(1);
    const double prefill = res["prefill_experts_per_moe_layer"].get<double>();
    EXPECT_GE(prefill, 2.0) << res.dump(1);
    EXPECT_LE(prefill, std::min(8.0, 6.0 * B)) << res.dump(1);
    EXPECT_NEAR(res["prefill_experts_per_moe_layer_uniform"].get<double>(), 8.0 * (1.0 - std::pow(0.75, 3 * B)), 1e-9);
  }
  EXPECT_NE(r.out.find("counted"), std::string::npos) << r.out;
  fs::remove(json);
}

// The JSON keeps each decode step's wall time in order: 9 steps at 10 output tokens (the first token comes with the
// prefill), the first 6 profiled, the other 3 timed; the step time is the timed steps' median, the eager figure
// the profiled steps' (the upper of the middle two).
TEST(BenchLatency, JsonKeepsEachDecodeStepInOrder) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_steps.json";
  const auto r = test::run_switchyard("bench latency --model " + qwen3() +
                                      " --batch 1 --input-len 3 --output-len 10 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << r.out;
  const auto& res = j["results"].at(0);
  const auto eager = res["decode_eager_steps_ms"].get<std::vector<double>>();
  const auto steps = res["decode_steps_ms"].get<std::vector<double>>();
  ASSERT_EQ(eager.size(), 6u) << res.dump(1);
  ASSERT_EQ(steps.size(), 3u) << res.dump(1);
  const auto median = [](std::vector<double> v) {  // the upper median of an even count, as bench latency takes it
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (const double ms : eager) EXPECT_GT(ms, 0.0);
  for (const double ms : steps) EXPECT_GT(ms, 0.0);
  EXPECT_DOUBLE_EQ(res["decode_step_ms"].get<double>(), median(steps)) << res.dump(1);
  EXPECT_DOUBLE_EQ(res["decode_eager_step_ms"].get<double>(), median(eager)) << res.dump(1);
  fs::remove(json);
}

// Group-limited sigmoid routing (DeepSeek-V3 fixture: 16 experts, top 4, 2 of 4 groups, MoE in layers 1 and 2)
// is counted too: 4 distinct experts at batch 1, at most min(16, 4B) at batch B, and the uniform figure
// follows the formula.
TEST(BenchLatency, CountsTheExpertsOfGroupLimitedRouting) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_grouped.json";
  const auto r = test::run_switchyard("bench latency --model " + (test::fixtures_dir() / "deepseek_v3_base").string() +
                                      " --batch 1,3 --input-len 3 --output-len 3 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << r.out;
  for (const auto& res : j["results"]) {
    const auto B = res["batch"].get<double>();
    ASSERT_TRUE(res["decode_experts_per_moe_layer"].is_number()) << res.dump(1);
    const double counted = res["decode_experts_per_moe_layer"].get<double>();
    EXPECT_GE(counted, 4.0) << res.dump(1);
    EXPECT_LE(counted, std::min(16.0, 4.0 * B)) << res.dump(1);
    if (B == 1) {
      EXPECT_EQ(counted, 4.0) << res.dump(1);
    }
    EXPECT_NEAR(res["decode_experts_per_moe_layer_uniform"].get<double>(), 16.0 * (1.0 - std::pow(0.75, B)), 1e-9);
  }
  fs::remove(json);
}

// Prompts longer than a step's budget are prefilled over many steps while the first ones already decode; the
// decode steps are still timed over all B sequences at once (the bench stops with an error otherwise), each
// holding its prompt, its first token and at least half of the timed steps' tokens on average, and at most
// the tokens of every prefill step besides (4 sequences × 24 tokens at 4 prompt tokens a step: 24 steps).
TEST(BenchLatency, LongPromptsStillDecodeTheWholeBatch) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_long.json";
  const auto r =
      test::run_switchyard("bench latency --model " + qwen3() +
                           " --batch 4 --input-len 24 --output-len 5 --max-batch-tokens 8 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << r.out;
  const double context = j["results"][0]["decode_context_tokens"].get<double>();
  EXPECT_GE(context, 24 + 1 + 4 / 2.0) << r.out;
  EXPECT_LE(context, 24 + 24 + 1 + 4 / 2.0) << r.out;
  EXPECT_GT(context, 24 + 1 + 4 / 2.0) << "the first prompts decoded while the later ones were prefilled";
  fs::remove(json);
}

// --warmup-prompts: the two untimed prefill passes hold that many prompts (2 × 1 × 24 tokens), the timed pass
// still all 4 (4 × 24); without it the untimed passes hold the batch too (2 × 4 × 24). Each prompt asks for one
// token, which its last prefill chunk samples: no decode step adds to the counts.
TEST(BenchLatency, WarmupPromptsShortenOnlyTheUntimedPasses) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_warmup.json";
  for (const int warm : {0, 1}) {
    const auto r = test::run_switchyard("bench latency --model " + qwen3() +
                                        " --batch 4 --input-len 24 --output-len 3 --max-batch-tokens 8 --json " +
                                        json.string() + (warm > 0 ? " --warmup-prompts 1" : ""));
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = test::read_json(json);
    ASSERT_TRUE(j.is_object()) << r.out;
    const auto& res = j["results"][0];
    EXPECT_EQ(res["prefill_timed_tokens"].get<int64_t>(), 4 * 24) << res.dump(1);
    EXPECT_EQ(res["prefill_warmup_tokens"].get<int64_t>(), 2 * (warm > 0 ? 1 : 4) * 24) << res.dump(1);
    if (warm > 0) {
      EXPECT_EQ(j["warmup_prompts"], 1);
      EXPECT_NE(r.out.find("of at most 1 prompts"), std::string::npos) << r.out;
    } else {
      EXPECT_TRUE(j["warmup_prompts"].is_null()) << j.dump(1);
    }
  }
  const auto bad = test::run_switchyard("bench latency --model " + qwen3() + " --warmup-prompts 0");
  EXPECT_NE(bad.code, 0) << bad.out;
  fs::remove(json);
}

// --decode-only: no prefill passes but the decode sequences' own, so the decode steps are the same work as a full
// run's (the same batch, the same context a sequence holds on average, the same uniform-routing floor), and every
// prefill figure is null rather than a number that was not measured; with --warmup-prompts it is refused.
TEST(BenchLatency, DecodeOnlyTimesTheSameDecodeStepsWithoutPrefill) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_decode_only.json";
  nlohmann::json runs[2];
  for (const bool decode_only : {false, true}) {
    const auto r = test::run_switchyard("bench latency --model " + qwen3() +
                                        " --batch 1,4 --input-len 24 --output-len 6 --max-batch-tokens 8 --json " +
                                        json.string() + (decode_only ? " --decode-only" : ""));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("not measured (--decode-only)") != std::string::npos, decode_only) << r.out;
    runs[decode_only ? 1 : 0] = test::read_json(json);
    ASSERT_TRUE(runs[decode_only ? 1 : 0].is_object()) << r.out;
  }
  const nlohmann::json &full = runs[0], &only = runs[1];
  EXPECT_EQ(full["decode_only"], false);
  EXPECT_EQ(only["decode_only"], true);
  ASSERT_EQ(full["results"].size(), 2u);
  ASSERT_EQ(only["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto &f = full["results"][i], &d = only["results"][i];
    EXPECT_EQ(d["batch"], f["batch"]);
    EXPECT_EQ(d["decode_context_tokens"].get<double>(), f["decode_context_tokens"].get<double>()) << d.dump(1);
    EXPECT_EQ(d["decode_floor_bytes_uniform"].get<double>(), f["decode_floor_bytes_uniform"].get<double>());
    EXPECT_GT(d["decode_step_ms"].get<double>(), 0.0) << d.dump(1);
    EXPECT_GT(d["decode_phase_ms"]["attention"].get<double>(), 0.0) << d.dump(1);
    // Each decode step in order: 5 of them (6 tokens, the first from the prefill), all profiled (the first 6 are);
    // with no timed step left the step time is the profiled steps' median.
    for (const auto* run : {&f, &d}) {
      const auto eager = (*run)["decode_eager_steps_ms"].get<std::vector<double>>();
      ASSERT_EQ(eager.size(), 5u) << run->dump(1);
      EXPECT_TRUE((*run)["decode_steps_ms"].empty()) << run->dump(1);
      std::vector<double> sorted = eager;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_DOUBLE_EQ((*run)["decode_step_ms"].get<double>(), sorted[2]) << run->dump(1);
      EXPECT_DOUBLE_EQ((*run)["decode_eager_step_ms"].get<double>(), sorted[2]) << run->dump(1);
    }
    EXPECT_GT(f["prefill_ms"].get<double>(), 0.0) << f.dump(1);
    for (const auto& [key, value] : d.items()) {
      if (key.starts_with("prefill_")) {
        EXPECT_TRUE(value.is_null()) << key << " " << d.dump(1);
      }
    }
  }
  // --warmup-prompts sizes passes that --decode-only leaves out: the two together are refused before loading.
  const auto both = test::run_switchyard("bench latency --model " + qwen3() + " --decode-only --warmup-prompts 2");
  EXPECT_NE(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("--decode-only"), std::string::npos) << both.out;
  fs::remove(json);
}

// --prefill-max-batch: the prefill is timed at the batches up to it and left out above, as --decode-only leaves it
// out at every batch (its figures null); the decode steps are timed at every batch. With --decode-only it is refused.
TEST(BenchLatency, PrefillMaxBatchTimesThePrefillOnlyUpToThatBatch) {
  const fs::path json = fs::temp_directory_path() / "sy_bench_latency_prefill_max_batch.json";
  const auto r = test::run_switchyard("bench latency --model " + qwen3() +
                                      " --batch 1,4 --input-len 24 --output-len 6 --max-batch-tokens 8 "
                                      "--prefill-max-batch 1 --json " +
                                      json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("at batches up to 1 (--prefill-max-batch)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(not measured: above --prefill-max-batch)"), std::string::npos) << r.out;
  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["decode_only"], false);
  EXPECT_EQ(j["prefill_max_batch"], 1);
  ASSERT_EQ(j["results"].size(), 2u);
  const auto &one = j["results"][0], &four = j["results"][1];
  ASSERT_EQ(one["batch"], 1);
  ASSERT_EQ(four["batch"], 4);
  EXPECT_GT(one["prefill_ms"].get<double>(), 0.0) << one.dump(1);
  EXPECT_GT(one["prefill_eager_ms"].get<double>(), 0.0) << one.dump(1);
  EXPECT_GT(one["prefill_phase_ms"]["attention"].get<double>(), 0.0) << one.dump(1);
  for (const auto& [key, value] : four.items()) {
    if (key.starts_with("prefill_")) {
      EXPECT_TRUE(value.is_null()) << key << " " << four.dump(1);
    }
  }
  for (const auto* row : {&one, &four}) {
    EXPECT_GT((*row)["decode_step_ms"].get<double>(), 0.0) << row->dump(1);
  }
  const auto both = test::run_switchyard("bench latency --model " + qwen3() + " --decode-only --prefill-max-batch 1");
  EXPECT_NE(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("--prefill-max-batch 1"), std::string::npos) << both.out;
  fs::remove(json);
}

// --routing uniform: with 64 experts, 1 a token (the fixture's shapes otherwise, random weights), the experts a
// step touches are uniform sampling's, E (1 - (1 - 1/E)^n) at n tokens: 14.26 at a decode step of 16, 40.64 at a
// prefill of 16 prompts of 4 tokens. Their standard deviations (occupancy; the draws of different tokens and
// layers are independent hashes): 1.13 and 2.50 a layer, so 0.33 for the decode figure (2 layers, 6 steps) and
// 1.77 for the prefill's (one step, 2 layers); the bounds are 4.5 of them. The model's own routing here: 13.9
// and 30.5 — random weights route a prompt's tokens alike, which the prefill bound tells apart.
TEST(BenchLatency, UniformRoutingTouchesTheExpertsUniformSamplingDoes) {
  const fs::path dir = fs::temp_directory_path() / "sy_bench_uniform_routing";
  fs::create_directories(dir);
  nlohmann::json config = test::read_json(fs::path(qwen3()) / "config.json");
  config["num_experts"] = 64;
  config["num_experts_per_tok"] = 1;
  config["num_hidden_layers"] = 2;
  std::ofstream(dir / "config.json") << config.dump(1);
  const fs::path json = dir / "out.json";
  const auto r = test::run_switchyard("bench latency --model " + dir.string() +
                                      " --random-weights --routing uniform --batch 16 --input-len 4 --output-len 8 "
                                      "--json " +
                                      json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("routing: uniform"), std::string::npos) << r.out;
  const nlohmann::json j = test::read_json(json);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["routing"], "uniform");
  const auto& res = j["results"][0];
  const double decode = 64.0 * (1.0 - std::pow(1.0 - 1.0 / 64.0, 16.0));
  const double prefill = 64.0 * (1.0 - std::pow(1.0 - 1.0 / 64.0, 64.0));
  EXPECT_NEAR(res["decode_experts_per_moe_layer_uniform"].get<double>(), decode, 1e-9);
  EXPECT_NEAR(res["decode_experts_per_moe_layer"].get<double>(), decode, 4.5 * 0.33) << res.dump(1);
  EXPECT_NEAR(res["prefill_experts_per_moe_layer"].get<double>(), prefill, 4.5 * 1.77) << res.dump(1);
  fs::remove_all(dir);
}

// Refused before any rank starts or any weight is read: one line, exit code 2.
TEST(BenchLatency, BrokenLayoutIsRefusedBeforeLoading) {
  const auto r = test::run_switchyard("bench latency --model " + qwen3() + " --tp 4 --ep 3 --batch 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[heads_divisible]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("loaded"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("starting"), std::string::npos) << r.out;
}

TEST(BenchComm, RefusesWhatItCannotMeasure) {
  test::expect_refused(
      "bench comm",
      {
          {"--ranks 1", "give --ranks 2 or more (got 1)"},
          {"", "give --ranks W"},
          {"--ranks 3 --model " + qwen3(), "the 8 experts of Qwen3MoeForCausalLM cannot be spread evenly over ep 3"},
          {"--ranks 2 --min-bytes 4X", "--min-bytes '4X' is not a size in bytes"},
          {"--ranks 2 --min-bytes 6 --max-bytes 64", "must be multiples of 4"},
          {"--ranks 2 --min-bytes 8K --max-bytes 4K", "--min-bytes 8 KiB exceeds --max-bytes 4 KiB"},
          {"--ranks 2 --tokens 0", "--tokens must be >= 1, got 0"},
          {"--ranks 2 --model /nonexistent/model", "/nonexistent/model"},
      },
      "starting");
}

}  // namespace
}  // namespace sy
