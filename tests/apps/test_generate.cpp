// `switchyard generate` as a user runs it: greedy output equals the transformers reference, logits
// land in a .npy of the documented shape, and bad flags or models give one line and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "common/fixture.h"
#include "common/poisoned_checkpoint.h"
#include "common/run_switchyard.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

using RunResult = test::CommandResult;
RunResult run(const std::string& args) { return test::run_switchyard(args); }

// Lines the program wrote that are not log lines ("[switchyard ...]").
std::vector<std::string> output_lines(const std::string& out) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t nl = std::min(out.find('\n', pos), out.size());
    const std::string line = out.substr(pos, nl - pos);
    if (!line.empty() && line[0] != '[') lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}
std::string first_output_line(const std::string& out) {
  const auto lines = output_lines(out);
  return lines.empty() ? "" : lines[0];
}
int error_lines(const std::string& out) {
  int n = 0;
  for (const auto& l : output_lines(out)) n += l.rfind("switchyard: ", 0) == 0 ? 1 : 100;
  return n;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

TEST(Generate, GreedyOutputAndLogitsMatchTheReference) {
  const auto names = test::fixture_names();
  ASSERT_FALSE(names.empty());
  for (const auto& name : names) {
    const auto f = test::load_fixture(name);
    const auto& prompt = f.prompts[static_cast<size_t>(f.greedy_prompt)];
    const fs::path npy = fs::temp_directory_path() / ("sy_generate_" + name + ".npy");
    const RunResult r = run("generate --model " + f.dir.string() + " --prompt-ids " + join(prompt) + " --max-tokens " +
                            std::to_string(f.greedy_tokens.size()) + " --ignore-eos --logits-out " + npy.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(join(f.greedy_tokens) + "\n"), std::string::npos) << name << ": " << r.out;
    EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
    const NpyArray logits = read_npy_f32(npy);
    const int64_t len = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(f.greedy_tokens.size());
    const int64_t vocab = f.greedy_logits.shape[1];
    ASSERT_EQ(logits.shape, (std::vector<int64_t>{len + steps - 1, vocab}));
    EXPECT_LE(
        test::max_relative_row_error(logits.data.data() + (len - 1) * vocab, f.greedy_logits.data.data(), steps, vocab),
        test::kLogitTolerance);
    fs::remove(npy);
  }
}

// The bundled model as the README's first command runs it: text in, and out the text transformers wrote (its
// greedy continuation of the same prompt, decoded by the model's tokenizer; tests/fixtures/pydoc_moe).
TEST(Generate, BundledModelWritesTheTextOfTransformers) {
  const fs::path refs = test::fixtures_dir() / "pydoc_moe";
  ASSERT_TRUE(fs::exists(refs / "reference.json"))
      << "the bundled model's fixture is missing: run tools/bundled_model/make_reference.py";
  const auto f = test::load_fixture("pydoc_moe");
  std::ifstream in(refs / "reference.json");
  const auto j = nlohmann::json::parse(in);
  const auto prompt = j.at("prompt_texts").at(0).get<std::string>();
  const auto want = j.at("greedy_text").get<std::string>();
  ASSERT_EQ(prompt.find('\''), std::string::npos);
  const RunResult r = run("generate --model " + f.dir.string() + " --prompt '" + prompt + "' --max-tokens " +
                          std::to_string(f.greedy_tokens.size()) + " --ignore-eos");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << "expected the continuation\n" << want << "\ngot\n" << r.out;
}

TEST(Generate, BadInputGivesOneLineAndExitCode2) {
  const std::string model = (test::fixtures_dir() / "qwen3_moe_base").string();
  const std::vector<std::string> bad = {
      "generate --model " + model + " --prompt-ids 1,2,x",
      "generate --model " + model + " --prompt-ids 1,99999",
      "generate --model " + model + " --prompt-ids 1 --temperature -1",
      "generate --model " + model + " --prompt-ids 1 --no-such-flag",
      "generate --model /nonexistent/model --prompt-ids 1",
      "generate --prompt-ids 1",
      "frobnicate",
  };
  for (const auto& args : bad) {
    const RunResult r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(error_lines(r.out), 1) << args << "\n" << r.out;
  }
}

// A NaN in the weights never prints token 0 forever with exit 0: the prompt whose logits went non-finite
// fails the run with one line naming the step, and --check-finite names the block that went non-finite.
TEST(Generate, NonFiniteLogitsAreAnErrorNotAToken) {
  const fs::path dir = fs::temp_directory_path() / "sy_generate_nan";
  test::write_poisoned_copy(test::fixtures_dir() / "qwen3_moe_base", dir, "model.layers.2.mlp.gate.weight", -1,
                            std::numeric_limits<float>::quiet_NaN());
  const std::string base = "generate --model " + dir.string() + " --prompt-ids 17,254,3,99,120 --max-tokens 4";
  const RunResult plain = run(base);
  EXPECT_EQ(plain.code, 2) << plain.out;
  EXPECT_EQ(error_lines(plain.out), 1) << plain.out;
  EXPECT_NE(plain.out.find("prompt 0 of 1: engine step 0: the next-token logits are not finite"), std::string::npos)
      << plain.out;
  const RunResult traced = run(base + " --check-finite");
  EXPECT_EQ(traced.code, 2) << traced.out;
  EXPECT_NE(traced.out.find("was the layer 2 FFN output"), std::string::npos) << traced.out;
  fs::remove_all(dir);
}

TEST(Generate, RandomWeightsNeedOnlyAConfigAndLayersCutsTheModel) {
  const fs::path dir = fs::temp_directory_path() / "sy_generate_random";
  fs::create_directories(dir);
  fs::copy_file(test::fixtures_dir() / "mixtral_base" / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  const std::string args = "generate --model " + dir.string() +
                           " --random-weights --seed 3 --layers 2 "
                           "--prompt-ids 4,5,6 --max-tokens 5 --temperature 0.8 --top-k 20 --top-p 0.9";
  const RunResult a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("first 2 of"), std::string::npos) << a.out;
  const std::string ids = first_output_line(a.out);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ','), 4) << a.out;  // 5 tokens
  EXPECT_EQ(ids, first_output_line(b.out)) << "same seed, same tokens";
  fs::remove_all(dir);
}

// The layout is checked before any weight is read. Runs of more than one rank are the mpi tier's
// (test_launch.cpp); a build without MPI refuses them plainly.
TEST(Generate, LayoutIsCheckedBeforeLoading) {
  const std::string model = (test::fixtures_dir() / "qwen3_moe_base").string();
  const auto timed = [](const std::string& args) {
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = run(args);
    return std::make_pair(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  // A broken layout: every rule, before any weight is read.
  const auto [bad, bad_seconds] = timed("generate --model " + model + " --prompt-ids 1,2,3 --tp 4 --ep 3");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("[heads_divisible]"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("[stage_product]"), std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("loaded"), std::string::npos) << bad.out;
  EXPECT_LT(bad_seconds, 1.0);
  // World size 1 runs as before.
  const RunResult one = run("generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 2 --tp 1 --machine h200");
  EXPECT_EQ(one.code, 0) << one.out;
#ifndef SY_WITH_MPI
  const auto [two, two_seconds] = timed("generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 2 --tp 2");
  EXPECT_EQ(two.code, 2);
  EXPECT_EQ(two.out.rfind("switchyard: error: --tp 2 is a valid layout of 2 ranks", 0), 0u) << two.out;
  EXPECT_NE(two.out.find("this build has no MPI (configure with -DSY_WITH_MPI=ON)"), std::string::npos) << two.out;
  EXPECT_EQ(error_lines(two.out), 1) << two.out;
  EXPECT_LT(two_seconds, 1.0);
#endif
}

// --fail-on-rank, the debugging option of the mpi tier's failure test, on one rank: a plain error.
TEST(Generate, FailOnRankStopsThatRank) {
  const std::string model = (test::fixtures_dir() / "qwen3_moe_base").string();
  const RunResult zero = run("generate --model " + model + " --prompt-ids 1,2,3 --fail-on-rank 0");
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.out.find("switchyard: error: --fail-on-rank 0: rank 0 stops here on purpose"), std::string::npos)
      << zero.out;
  EXPECT_EQ(error_lines(zero.out), 1) << zero.out;
  const RunResult past = run("generate --model " + model + " --prompt-ids 1,2,3 --fail-on-rank 1");
  EXPECT_EQ(past.code, 2);
  EXPECT_NE(past.out.find("switchyard: error: --fail-on-rank 1: the layout runs 1 rank (0 to 0)"), std::string::npos)
      << past.out;
}

}  // namespace
}  // namespace sy
