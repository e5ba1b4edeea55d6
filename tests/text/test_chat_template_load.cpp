// ChatTemplate::load: which file of a model folder holds the template, and how its special tokens reach it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/check.h"
#include "text/chat_template.h"

namespace sy::text {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("sy_chat_template_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  fs::path path_;
};

std::string render_user(const ChatTemplate& t) {
  ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  return t.render(in);
}

TEST(ChatTemplateLoad, PrefersChatTemplateJinja) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "chat_template": "from config"})");
  dir.write("chat_template.jinja", "{{ bos_token }}jinja {{ messages[0].content }}\n");
  auto t = ChatTemplate::load(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(render_user(*t), "<s>jinja hi");
}

TEST(ChatTemplateLoad, TakesTheDefaultOfAListOfTemplates) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": [
      {"name": "tool_use", "template": "tools"},
      {"name": "default", "template": "default {{ messages | length }}{{ eos_token }}"}]})");
  auto t = ChatTemplate::load(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(render_user(*t), "default 1</s>");

  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "tools"}]})");
  try {
    ChatTemplate::load(dir.path());
    ADD_FAILURE() << "a list without a default template was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tool_use"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateLoad, FolderWithoutTemplateGivesNullopt) {
  TempDir dir;
  EXPECT_FALSE(ChatTemplate::load(dir.path()).has_value());
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::load(dir.path()).has_value());
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": null})");
  EXPECT_FALSE(ChatTemplate::load(dir.path()).has_value());
}

TEST(ChatTemplateLoad, MalformedConfigNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "x",)");
  try {
    ChatTemplate::load(dir.path());
    ADD_FAILURE() << "a malformed tokenizer_config.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "tokenizer_config.json").string()), std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplateLoad, SyntaxErrorNamesTheTemplateAndLine) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "line 1\n{% for m in messages %}\n{% endif %}"})");
  try {
    ChatTemplate::load(dir.path());
    ADD_FAILURE() << "a broken template was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer_config.json chat_template, line 3: unexpected 'endif'");
  }
}

TEST(ChatTemplateLoad, SpecialTokensAndKwargsReachTheTemplate) {
  auto special = ChatTemplate::special_tokens_of(nlohmann::ordered_json::parse(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null,
          "additional_special_tokens": ["<a>", {"content": "<b>"}], "model_max_length": 10})"));
  EXPECT_EQ(special.dump(), R"({"bos_token":{"content":"<s>","lstrip":false},"eos_token":"</s>",)"
                            R"("additional_special_tokens":["<a>",{"content":"<b>"}]})");
  ChatTemplate t(
      "{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}{{ additional_special_tokens }}"
      "{{ add_generation_prompt }}{{ tools }}{{ documents }}{{ flag }}",
      "test", special);
  ChatInputs in;
  in.add_generation_prompt = false;
  in.kwargs = {{"flag", "F"}, {"eos_token", "override"}};
  EXPECT_EQ(t.render(in), "<s>overrideFalse['<a>', '<b>']FalseNoneNoneF");
}

}  // namespace
}  // namespace sy::text
