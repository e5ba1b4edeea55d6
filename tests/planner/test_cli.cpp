// `switchyard plan` and `switchyard inspect` as a user runs them: exit codes, the first lines, JSON that
// parses, and refusals that come before any weight is read. (generate's layout check: tests/apps.)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "planner_test_util.h"

namespace sy {
namespace {

struct RunResult {
  int code = -1;
  std::string out;
  double seconds = 0;
};

RunResult run(const std::string& args, bool with_stderr = true) {
  const std::string cmd = std::string(SY_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string config(const std::string& name) { return test::planner_config(name).string(); }

TEST(PlanCli, ListsLayouts) {
  const auto r = run("plan --model " + config("qwen3_30b_a3b") + " --machine h200 --gpus 8");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("model    Qwen3MoeForCausalLM", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("65 of 65 layouts pass the rules, 65 fit"), std::string::npos) << r.out;
  const auto j = run("plan --model " + config("qwen3_30b_a3b") + " --machine h200 --gpus 8 --json", false);
  ASSERT_EQ(j.code, 0);
  EXPECT_EQ(nlohmann::json::parse(j.out).at("layouts").size(), 65u);
}

TEST(PlanCli, DesignExamples) {
  const auto ok = run("plan --model " + config("qwen3_30b_a3b") + " --machine h200 --tp 4 --ep 2");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("note     uses 4 of the 8 GPUs (W = pp·dp·tp = 4); to use all 8: --tp 8 --ep 2, --tp 4 --pp 2 "
                        "--ep 2 or --tp 4 --dp 2 --ep 2"),
            std::string::npos)
      << ok.out;
  const auto bad = run("plan --model " + config("qwen3_30b_a3b") + " --machine h200 --tp 2 --ep 4");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.out.rfind("switchyard: error: layout --tp 2 --ep 4 on 8 × NVIDIA H200 SXM 141GB", 0), 0u) << bad.out;
  EXPECT_NE(bad.out.find("[stage_product] ep·etp·edp must equal dp·tp"), std::string::npos) << bad.out;
  const auto json = run("plan --model " + config("qwen3_30b_a3b") + " --machine h200 --tp 2 --ep 4 --json", false);
  EXPECT_EQ(json.code, 2);
  EXPECT_EQ(nlohmann::json::parse(json.out).at("layout").at("issues")[0].at("rule"), "stage_product");
}

TEST(PlanCli, KimiOnOneH200) {
  const auto r = run("plan --model " + config("kimi_k2") + " --machine h200 --gpus 1 --tp 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("[memory_fit] does not fit in 141.0 GB per NVIDIA H200 SXM 141GB"), std::string::npos) << r.out;
  // The GPU holds the FP8 weights as stored (1.03 TB): eight H200s.
  EXPECT_NE(r.out.find("valid instead: --gpus 8 "), std::string::npos) << r.out;
  const auto listing = run("plan --model " + config("kimi_k2") + " --machine h200 --gpus 1");
  EXPECT_EQ(listing.code, 2);
  EXPECT_NE(listing.out.find("smallest fitting cluster: 8 × NVIDIA H200 SXM 141GB"), std::string::npos) << listing.out;
}

TEST(PlanCli, BadInputIsOneLine) {
  for (const std::string args : {"--machine h300", "--machine h200 --gpus 9", "--machine h200 --pp-layers 1,x",
                                 "--machine h200 --kv-dtype int3", "--machine h200 --explain"}) {
    const auto r = run("plan --model " + config("qwen3_30b_a3b") + " " + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.out.rfind("switchyard: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  const auto missing = run("plan --model /nonexistent --machine h200");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("config.json"), std::string::npos);
}

// One layout's speed lines: the one-sequence decode step and the batch's, each with its floor; at --batch 1 they
// are the same step, printed once.
TEST(PlanCli, ALayoutsDecodeLinesAtBatchOneAreNotRepeated) {
  const std::string base = "plan --model " + config("qwen3_30b_a3b") + " --machine h200 --gpus 1 --tp 1";
  const auto count = [](const std::string& out, const std::string& what) {
    size_t n = 0;
    for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
    return n;
  };
  const auto one = run(base + " --batch 1");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(count(one.out, "\ndecode   batch "), 1u) << one.out;
  EXPECT_EQ(count(one.out, "\nfloor    batch "), 1u) << one.out;
  const auto four = run(base + " --batch 4");
  ASSERT_EQ(four.code, 0) << four.out;
  EXPECT_EQ(count(four.out, "\ndecode   batch 1,"), 1u) << four.out;
  EXPECT_EQ(count(four.out, "\ndecode   batch 4,"), 1u) << four.out;
  EXPECT_EQ(count(four.out, "\nfloor    batch "), 2u) << four.out;
}

// A profile whose bench calibrate recheck left over 30 points still over twice a larger point's time gets a note
// naming it and the count; one that left 30 or fewer, or says nothing (written before the recheck), gets none.
TEST(PlanCli, AProfileTimedOnABusyHostIsNoted) {
  const std::filesystem::path src = std::filesystem::path(SY_SOURCE_DIR) / "bench" / "profiles" / "h200.json";
  std::ifstream in(src);
  ASSERT_TRUE(in) << src;
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_FALSE(j["machine"].contains("recheck")) << "the committed profile predates the recheck";
  const std::string base = "plan --model " + config("qwen3_30b_a3b") + " --machine h200 --gpus 1 --tp 1 --profile ";
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "sy_plan_busy_profile.json";
  for (const int left : {-1, 0, 30, 31, 196}) {
    if (left >= 0) j["machine"]["recheck"] = {{"retimed", 200}, {"faster", 150}, {"left", left}};
    std::ofstream(path) << j.dump();
    const auto r = run(base + path.string());
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string note = "note     " + path.string() + ": " + std::to_string(left) + " points are still over";
    EXPECT_EQ(r.out.find(note) != std::string::npos, left > 30) << left << "\n" << r.out.substr(0, 1500);
    EXPECT_EQ(r.out.find("Calibrate again on a quiet host") != std::string::npos, left > 30) << left;
  }
  j["machine"]["recheck"] = {{"left", -3}};
  std::ofstream(path) << j.dump();
  const auto bad = run(base + path.string());
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("machine.recheck.left is -3"), std::string::npos) << bad.out;
  std::filesystem::remove(path);
}

// --explain: the decode step op by op after the layout, in text and as JSON rows whose ms add up to the step's
// attention phase (the same rows, per phase).
TEST(PlanCli, ExplainListsTheStepsOps) {
  const std::string base = "plan --model " + config("qwen3_30b_a3b") + " --machine h200 --gpus 1 --tp 1 --batch 4";
  const auto r = run(base + " --explain");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("decode step at batch 4, context 1024, op by op"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("paged_attention"), std::string::npos) << r.out;
  const auto j = run(base + " --explain --json", false);
  ASSERT_EQ(j.code, 0) << j.out;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_TRUE(doc.at("explain").is_array());
  double attention = 0;
  for (const auto& row : doc.at("explain")) {
    if (row.at("phase") == "attention") attention += row.at("ms").get<double>();
  }
  const auto& decode = doc.at("layout").at("predicted").at("decode");
  ASSERT_EQ(decode.size(), 2u);
  const double want = decode.at(1).at("phase_ms").at("attention").get<double>();
  EXPECT_GT(attention, 0);
  EXPECT_NEAR(attention, want, 1e-6 * want) << j.out.substr(0, 2000);
}

// --explain-prefill: the prefill's first chunk op by op. Four prompts of 512 tokens fill one chunk of 2,048, so the
// rows' attention adds up to the whole prefill's; a longer prompt's first chunk is its first 2,048 tokens; --explain
// with it is refused.
TEST(PlanCli, ExplainPrefillListsTheFirstChunksOps) {
  const std::string base = "plan --model " + config("qwen3_30b_a3b") +
                           " --machine h200 --gpus 1 --tp 1 --batch 4 --prefill-len 512 --max-batch-tokens 2048";
  const auto r = run(base + " --explain-prefill");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("first prefill chunk of 4 prompts of 512 tokens (2048 at most a chunk), op by op"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("q_len=512 context=512"), std::string::npos) << r.out;
  const auto j = run(base + " --explain-prefill --json", false);
  ASSERT_EQ(j.code, 0) << j.out;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  double attention = 0;
  for (const auto& row : doc.at("explain_prefill")) {
    if (row.at("phase") == "attention") attention += row.at("ms").get<double>();
  }
  const double want = doc.at("layout").at("predicted").at("prefill").at("phase_ms").at("attention").get<double>();
  EXPECT_GT(attention, 0);
  EXPECT_NEAR(attention, want, 1e-6 * want) << j.out.substr(0, 2000);
  // A prompt longer than a chunk: its first 2,048 tokens, over their own keys.
  const auto one = run("plan --model " + config("qwen3_30b_a3b") +
                       " --machine h200 --gpus 1 --tp 1 --batch 1 --prefill-len 4096 --max-batch-tokens 2048"
                       " --explain-prefill");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("first prefill chunk of 1 prompts of 4096 tokens"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("seqs=1 q_len=2048 context=2048"), std::string::npos) << one.out;
  const auto both = run(base + " --explain --explain-prefill");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("--explain and --explain-prefill each explain one step"), std::string::npos) << both.out;
}

TEST(InspectCli, ConfigAndCheckpoint) {
  const auto r = run("inspect --model " + config("mixtral_8x7b"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("46.70 B total, 12.88 B active per token"), std::string::npos) << r.out;
  for (const auto& dir : test::checkpoint_fixtures()) {
    const auto j = run("inspect --json --model " + dir.string(), false);
    ASSERT_EQ(j.code, 0) << dir;
    const auto parsed = nlohmann::json::parse(j.out);
    EXPECT_NE(parsed.at("weights_source").get<std::string>().find("safetensors headers"), std::string::npos);
    EXPECT_TRUE(parsed.at("unrecognised_tensors").empty());
  }
}

}  // namespace
}  // namespace sy
