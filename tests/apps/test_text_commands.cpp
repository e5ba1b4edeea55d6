// `switchyard tokenize` and `generate --prompt / --chat` as a user runs them: ids, chat renderings and
// decoded text equal Hugging Face transformers' (tests/fixtures/text/cli_cases.json, made by
// tools/text_fixtures/make_cli_cases.py), text streams out as the ids it decodes, EOS ends a sequence,
// and a prompt longer than the context is refused with both numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/fixture.h"
#include "common/run_switchyard.h"

namespace sy {
namespace {

namespace fs = std::filesystem;
using test::run_switchyard;

fs::path source_dir() {
  const char* env = std::getenv("SY_SOURCE_DIR");
  return fs::path(env ? env : SY_SOURCE_DIR);
}

nlohmann::json cli_cases() {
  std::ifstream in(source_dir() / "tests/fixtures/text/cli_cases.json");
  return nlohmann::json::parse(in);
}

// A fresh file holding exactly `text` (so that no shell quoting touches it).
fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("sy_text_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (auto id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The first line that is not a log line ("[switchyard ...]").
std::string first_output_line(const std::string& out) {
  for (size_t pos = 0; pos < out.size();) {
    const std::string line = out.substr(pos, out.find('\n', pos) - pos);
    if (!line.empty() && line[0] != '[') return line;
    pos += line.size() + 1;
  }
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TEST(TokenizeCommand, EncodesAsTransformers) {
  const auto cases = cli_cases();
  for (const auto& [name, tok] : cases["tokenizers"].items()) {
    const std::string folder = (source_dir() / tok["folder"].get<std::string>()).string();
    for (const auto& c : tok["encode"]) {
      const fs::path file = write_temp("encode.txt", c["text"].get<std::string>());
      const auto r = run_switchyard("tokenize --model " + folder + " --file " + file.string(), true);
      ASSERT_EQ(r.code, 0) << name << ": " << r.out;
      EXPECT_EQ(first_line(r.out), join(c["ids"].get<std::vector<int64_t>>())) << name << ": " << c["text"];
      const auto plain =
          run_switchyard("tokenize --no-special-tokens --model " + folder + " --file " + file.string(), true);
      EXPECT_EQ(first_line(plain.out), join(c["ids_no_special"].get<std::vector<int64_t>>())) << name;
      fs::remove(file);
    }
  }
}

TEST(TokenizeCommand, ChatRendersAndEncodesAsApplyChatTemplate) {
  const auto cases = cli_cases();
  for (const auto& [name, tok] : cases["tokenizers"].items()) {
    const std::string folder = (source_dir() / tok["folder"].get<std::string>()).string();
    for (const auto& c : tok["chat"]) {
      const fs::path file = write_temp("user.txt", c["user"].get<std::string>());
      const std::string system = c["system"].get<std::string>();
      const std::string args = "tokenize --chat --model " + folder + " --file " + file.string() +
                               (system.empty() ? "" : " --system " + shell_quote(system));
      const auto rendered = run_switchyard(args + " --render", true);
      ASSERT_EQ(rendered.code, 0) << name << ": " << rendered.out;
      EXPECT_EQ(rendered.out, c["rendered"].get<std::string>()) << name;
      const auto ids = run_switchyard(args, true);
      EXPECT_EQ(first_line(ids.out), join(c["ids"].get<std::vector<int64_t>>())) << name << ": " << c["user"];
      fs::remove(file);
    }
  }
}

TEST(TokenizeCommand, DecodesAsTransformers) {
  const auto cases = cli_cases();
  for (const auto& [name, tok] : cases["tokenizers"].items()) {
    const std::string folder = (source_dir() / tok["folder"].get<std::string>()).string();
    for (const auto& c : tok["decode"]) {
      const std::string ids = join(c["ids"].get<std::vector<int64_t>>());
      const auto all = run_switchyard("tokenize --model " + folder + " --decode " + ids, true);
      ASSERT_EQ(all.code, 0) << name << ": " << all.out;
      EXPECT_EQ(all.out, c["text"].get<std::string>() + "\n") << name;
      const auto skip = run_switchyard("tokenize --model " + folder + " --skip-special-tokens --decode " + ids, true);
      EXPECT_EQ(skip.out, c["text_skip"].get<std::string>() + "\n") << name;
    }
  }
}

TEST(TokenizeCommand, BadInputIsOneLineAndExitTwo) {
  const std::string qwen3 = (source_dir() / "../shared/data/tokenizers/qwen3").string();
  const fs::path empty_dir = fs::temp_directory_path() / ("sy_text_empty_" + std::to_string(getpid()));
  fs::create_directories(empty_dir);
  const fs::path broken_dir = fs::temp_directory_path() / ("sy_text_broken_" + std::to_string(getpid()));
  fs::create_directories(broken_dir);
  std::ofstream(broken_dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0)";
  for (const std::string& args :
       {"tokenize --model " + empty_dir.string() + " --text hi",
        "tokenize --model " + broken_dir.string() + " --text hi", "tokenize --model " + qwen3 + " --decode 1,x",
        "tokenize --model " + qwen3 + " --decode 999999999", "tokenize --model " + qwen3 + " --text a --file b",
        "tokenize --model " + qwen3 + " --text hi --render"}) {
    const auto r = run_switchyard(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("switchyard: error: "), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
  const auto missing = run_switchyard("tokenize --model " + empty_dir.string() + " --text hi");
  EXPECT_NE(missing.out.find("tokenizer.json"), std::string::npos) << missing.out;
  const auto broken = run_switchyard("tokenize --model " + broken_dir.string() + " --text hi");
  EXPECT_NE(broken.out.find((broken_dir / "tokenizer.json").string()), std::string::npos) << broken.out;
  fs::remove_all(empty_dir);
  fs::remove_all(broken_dir);
}

// A tiny Qwen3-MoE config with Qwen3's vocabulary, random weights, and the shared Qwen3 tokenizer.
class GenerateText : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sy_text_model_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ifstream in(test::fixtures_dir() / "qwen3_moe_base/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["vocab_size"] = 151936;
    std::ofstream(dir_ / "config.json") << config.dump(2);
    tokenizer_ = (source_dir() / "../shared/data/tokenizers/qwen3").string();
    model_ = "--model " + dir_.string() + " --random-weights --tokenizer " + tokenizer_;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string tokenizer_;
  std::string model_;
};

TEST_F(GenerateText, StreamedTextIsTheDecodedContinuation) {
  const auto text = run_switchyard("generate " + model_ + " --prompt 'The quick brown fox' --max-tokens 12", true);
  ASSERT_EQ(text.code, 0) << text.out;
  const auto prompt = run_switchyard("tokenize --model " + tokenizer_ + " --text 'The quick brown fox'", true);
  const auto ids =
      run_switchyard("generate " + model_ + " --prompt-ids " + first_line(prompt.out) + " --max-tokens 12");
  ASSERT_EQ(ids.code, 0) << ids.out;
  const std::string continuation = first_output_line(ids.out);
  ASSERT_EQ(std::count(continuation.begin(), continuation.end(), ','), 11) << ids.out;
  const auto decoded =
      run_switchyard("tokenize --model " + tokenizer_ + " --skip-special-tokens --decode " + continuation, true);
  EXPECT_EQ(text.out, decoded.out);
}

TEST_F(GenerateText, StopsAtTheEosOfGenerationConfig) {
  const auto prompt = run_switchyard("tokenize --model " + tokenizer_ + " --text 'Once upon a time'", true);
  const std::string ids_args = "generate " + model_ + " --prompt-ids " + first_line(prompt.out) + " --max-tokens 6";
  const auto free_run = run_switchyard(ids_args);
  ASSERT_EQ(free_run.code, 0) << free_run.out;
  const std::string free_ids = first_output_line(free_run.out);
  const std::string first_token = free_ids.substr(0, free_ids.find(','));
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [)" << first_token << "]}";
  const auto stopped = run_switchyard(ids_args);
  ASSERT_EQ(stopped.code, 0) << stopped.out;
  EXPECT_EQ(first_output_line(stopped.out), first_token) << stopped.out;
  const auto ignored = run_switchyard(ids_args + " --ignore-eos");
  EXPECT_EQ(first_output_line(ignored.out), free_ids);
}

TEST_F(GenerateText, RefusesAPromptLongerThanTheContext) {
  std::string words;
  for (int i = 0; i < 300; ++i) words += " word";
  const auto r = run_switchyard("generate " + model_ + " --prompt '" + words + "' --max-tokens 4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is 300 tokens and --max-tokens is 4: 304 tokens do not fit the model's context of 256"),
            std::string::npos)
      << r.out;
}

TEST_F(GenerateText, ChatWithoutATemplateSaysSo) {
  const fs::path no_template = dir_ / "tok";
  fs::create_directories(no_template);
  fs::copy_file(fs::path(tokenizer_) / "tokenizer.json", no_template / "tokenizer.json");
  const auto r = run_switchyard("generate --model " + dir_.string() + " --random-weights --tokenizer " +
                                no_template.string() + " --chat hi");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no chat template"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sy
