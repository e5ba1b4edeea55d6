// Text prompts: tokenizer and chat template of a model folder, chat rendering, token id lists.
#include "apps/text_input.h"

#include <climits>
#include <filesystem>

#include "apps/commands.h"
#include "base/check.h"

namespace sy {

TextModel load_text_model(const std::string& dir) {
  const std::filesystem::path d(dir);
  SY_CHECK(std::filesystem::exists(d / "tokenizer.json") || std::filesystem::exists(d / "tiktoken.model"),
           "{} holds no tokenizer (tokenizer.json or tiktoken.model), so text cannot be encoded; give the folder of "
           "the model's tokenizer with --tokenizer DIR, or token ids with --prompt-ids",
           dir);
  return TextModel{.tokenizer = text::Tokenizer::load(dir), .chat_template = text::ChatTemplate::load(dir)};
}

std::string render_chat(const TextModel& model, const std::string& system, const std::string& user) {
  SY_CHECK(model.chat_template.has_value(),
           "the model folder has no chat template (neither chat_template.jinja nor a chat_template in "
           "tokenizer_config.json); use --prompt for plain text");
  text::ChatInputs inputs;
  if (!system.empty()) inputs.messages.push_back({{"role", "system"}, {"content", system}});
  inputs.messages.push_back({{"role", "user"}, {"content", user}});
  inputs.add_generation_prompt = true;
  return model.chat_template->render(inputs);
}

std::vector<int32_t> encode_chat(const TextModel& model, const std::string& system, const std::string& user) {
  return model.tokenizer.encode(render_chat(model, system, user), /*add_special_tokens=*/false);
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  for (int64_t v :
       parse_int_list(text, INT32_MAX, flag, "a token id", "give comma-separated non-negative integers like 1,2,3")) {
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

}  // namespace sy
