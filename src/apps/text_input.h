// Text prompts of the commands: the model folder's tokenizer and chat template, a user message rendered
// through the template, and comma-separated token ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace sy {

struct TextModel {
  text::Tokenizer tokenizer;
  std::optional<text::ChatTemplate> chat_template;  // none when the folder has no template
};

// The tokenizer and chat template of a model folder; errors name the file and what is wrong.
TextModel load_text_model(const std::string& dir);

// One user message (after an optional system message) through the chat template with the generation
// prompt, then encoded as transformers' apply_chat_template(tokenize=True) does: no special tokens added
// beyond those the template writes.
std::string render_chat(const TextModel& model, const std::string& system, const std::string& user);
std::vector<int32_t> encode_chat(const TextModel& model, const std::string& system, const std::string& user);

// "1,2,3" → ids; `flag` names the option in the error.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag);

}  // namespace sy
