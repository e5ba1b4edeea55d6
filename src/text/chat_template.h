// Chat templates of a model folder (tokenizer_config.json's `chat_template`, or chat_template.jinja),
// rendered as Hugging Face transformers' apply_chat_template renders them: Jinja with trim_blocks and
// lstrip_blocks, the special tokens of tokenizer_config.json in the context, `raise_exception`,
// `tojson` as transformers defines it.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace sy::text {

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools;                                       // null, or a list of tool definitions
  bool add_generation_prompt = true;
  // Extra template variables (chat_template_kwargs such as enable_thinking); they override the special
  // tokens of the same name.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // `source` is the template text; `name` says where it came from in error messages
  // ("tokenizer_config.json chat_template"); `special_tokens` ({"bos_token": "<s>", ...}) become
  // template variables. A syntax error throws sy::Error naming `name` and the template line.
  ChatTemplate(const std::string& source, std::string name, nlohmann::ordered_json special_tokens);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // The folder's template: chat_template.jinja, else tokenizer_config.json's chat_template (a string,
  // or a list of {name, template} of which "default" is taken); nullopt when the folder has none.
  static std::optional<ChatTemplate> load(const std::filesystem::path& dir);

  // The special tokens of a tokenizer_config.json that templates see (bos_token, eos_token, unk_token,
  // sep_token, pad_token, cls_token, mask_token, additional_special_tokens; those set to null are left out),
  // as transformers' special_tokens_map gives them. Values may be strings or {"content": ...}.
  static nlohmann::ordered_json special_tokens_of(const nlohmann::ordered_json& tokenizer_config);

  // Renders a conversation. An error raised by the template (raise_exception) or met while rendering
  // throws sy::Error with the message and the template line.
  std::string render(const ChatInputs& inputs) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sy::text
