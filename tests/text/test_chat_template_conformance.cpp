// Chat templates rendered by ChatTemplate against transformers' apply_chat_template renderings of the same
// conversations (tests/fixtures/text/chat/NAME.jsonl(.gz), made by tools/text_fixtures/chat_fixtures.py).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "text/chat_template.h"

namespace sy::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const fs::path kRepo = SY_SOURCE_DIR;
const fs::path kChatDir = kRepo / "tests/fixtures/text/chat";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_gz(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  if (!f) return {};
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  if (!fs::exists(kChatDir)) return names;
  for (const auto& e : fs::directory_iterator(kChatDir)) {
    std::string f = e.path().filename().string();
    const std::string suffix = ".meta.json";
    if (f.size() > suffix.size() && f.ends_with(suffix)) names.push_back(f.substr(0, f.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Where `a` and `b` first differ, with some text around it.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  auto quote = [](const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); };
  return "first difference at byte " + std::to_string(i) + "\n  want: " + quote(want.substr(from, 120)) +
         "\n  got:  " + quote(got.substr(from, 120));
}

class ChatConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatConformance, RendersAsTransformers) {
  const std::string name = GetParam();
  json meta = json::parse(read_text(kChatDir / (name + ".meta.json")));
  fs::path template_file = kRepo / meta["template_file"].get<std::string>();
  fs::path config_file = kRepo / meta["tokenizer_config"].get<std::string>();
  if (!fs::exists(template_file) || !fs::exists(config_file)) {
    GTEST_SKIP() << "missing " << template_file << " or " << config_file << " (is ../shared present?)";
  }
  std::string source;
  if (template_file.extension() == ".jinja") {
    source = read_text(template_file);
  } else {
    json config = json::parse(read_text(template_file));
    ASSERT_TRUE(config.contains("chat_template") && config["chat_template"].is_string()) << template_file;
    source = config["chat_template"].get<std::string>();
  }
  ChatTemplate tmpl(source, template_file.filename().string(),
                    ChatTemplate::special_tokens_of(json::parse(read_text(config_file))));

  std::string lines = fs::exists(kChatDir / (name + ".jsonl")) ? read_text(kChatDir / (name + ".jsonl"))
                                                               : read_gz(kChatDir / (name + ".jsonl.gz"));
  ASSERT_FALSE(lines.empty()) << "no conversations for " << name;
  std::istringstream in(lines);
  std::string line;
  int index = 0, compared = 0, mismatches = 0, errors = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json rec = json::parse(line);
    ChatInputs inputs;
    inputs.messages = rec["messages"];
    inputs.tools = rec["tools"];
    inputs.add_generation_prompt = rec["add_generation_prompt"].get<bool>();
    inputs.kwargs = rec["kwargs"];
    std::string got, error;
    try {
      got = tmpl.render(inputs);
    } catch (const Error& e) {
      error = e.what();
    }
    ++compared;
    if (rec.contains("error")) {
      ++errors;
      std::string want = rec["error"].get<std::string>();
      // raise_exception's message comes last in ours, after "<name>, line N: ".
      if (error.empty() || !error.ends_with(want)) {
        ++mismatches;
        ADD_FAILURE() << name << " conversation " << index << ": expected the error \"" << want << "\", got "
                      << (error.empty() ? "the rendering " + json(got).dump() : "the error \"" + error + "\"");
      }
    } else {
      std::string want = rec["rendered"].get<std::string>();
      if (!error.empty()) {
        ++mismatches;
        ADD_FAILURE() << name << " conversation " << index << ": unexpected error: " << error;
      } else if (got != want) {
        ++mismatches;
        ADD_FAILURE() << name << " conversation " << index << ": " << first_difference(want, got);
      }
    }
    ++index;
  }
  std::cout << name << ": " << compared << " conversations compared (" << errors << " expected errors), " << mismatches
            << " mismatches\n";
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatConformance, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sy::text
