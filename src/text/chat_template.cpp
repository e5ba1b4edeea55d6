// ChatTemplate: finds a model folder's chat template, parses it once and renders conversations with the
// context transformers' apply_chat_template builds.
#include "text/chat_template.h"

#include "base/check.h"
#include "base/input.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/parser.h"

namespace sy::text {
namespace {

std::string read_file(const std::filesystem::path& path) {
  return read_regular_file(path, kMaxJsonFileBytes, "chat template file");
}

nlohmann::ordered_json read_json(const std::filesystem::path& path) {
  try {
    const std::string text = read_file(path);
    check_json_depth(text, path.string());
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SY_FAIL("{} is not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace

struct ChatTemplate::Impl {
  std::string name;
  jinja::Body body;
  std::vector<std::pair<std::string, jinja::Value>> special_tokens;
};

nlohmann::ordered_json ChatTemplate::special_tokens_of(const nlohmann::ordered_json& tokenizer_config) {
  // transformers' SPECIAL_TOKENS_ATTRIBUTES (4.x, which also passes additional_special_tokens).
  static constexpr const char* kNames[] = {"bos_token", "eos_token", "unk_token",  "sep_token",
                                           "pad_token", "cls_token", "mask_token", "additional_special_tokens"};
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!tokenizer_config.is_object()) return out;
  for (const char* n : kNames) {
    auto it = tokenizer_config.find(n);
    if (it != tokenizer_config.end() && !it->is_null()) out[n] = *it;
  }
  return out;
}

ChatTemplate::ChatTemplate(const std::string& source, std::string name, nlohmann::ordered_json special_tokens)
    : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  impl_->body = jinja::parse_template(source, impl_->name);
  SY_CHECK(special_tokens.is_object() || special_tokens.is_null(), "special tokens must be a JSON object, got {}",
           special_tokens.type_name());
  if (special_tokens.is_null()) return;
  // An AddedToken is written as {"content": "<s>", "lstrip": ...}; templates see its content.
  auto token_string = [](const std::string& key, const nlohmann::ordered_json& value) {
    const auto& token = value.is_object() && value.contains("content") ? value["content"] : value;
    SY_CHECK(token.is_string(), "special token {} must be a string or {{\"content\": string}}, got {}", key,
             value.dump());
    return jinja::Value(token.get<std::string>());
  };
  for (const auto& [key, value] : special_tokens.items()) {
    if (value.is_null()) continue;
    if (value.is_array()) {
      std::vector<jinja::Value> tokens;
      for (const auto& t : value) tokens.push_back(token_string(key, t));
      impl_->special_tokens.emplace_back(key, jinja::Value::list(std::move(tokens)));
    } else {
      impl_->special_tokens.emplace_back(key, token_string(key, value));
    }
  }
}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::optional<ChatTemplate> ChatTemplate::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json config;
  if (std::filesystem::exists(config_path)) config = read_json(config_path);
  auto special = special_tokens_of(config);

  const auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) return ChatTemplate(read_file(jinja_path), "chat_template.jinja", special);

  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
    return std::nullopt;
  }
  const auto& tmpl = config["chat_template"];
  const std::string name = "tokenizer_config.json chat_template";
  if (tmpl.is_string()) return ChatTemplate(tmpl.get<std::string>(), name, special);
  SY_CHECK(tmpl.is_array(), "{}: chat_template must be a string or a list of {{name, template}}, got {}",
           config_path.string(), tmpl.type_name());
  std::string names;
  for (const auto& entry : tmpl) {
    SY_CHECK(entry.is_object() && entry.contains("name") && entry.contains("template") && entry["template"].is_string(),
             "{}: each chat_template entry must be {{\"name\", \"template\"}}", config_path.string());
    if (entry["name"] == "default") {
      return ChatTemplate(entry["template"].get<std::string>(), name + " 'default'", special);
    }
    names += (names.empty() ? "" : ", ") + entry["name"].dump();
  }
  SY_FAIL("{}: chat_template has no template named \"default\" (it has {})", config_path.string(), names);
}

std::string ChatTemplate::render(const ChatInputs& inputs) const {
  std::vector<std::pair<std::string, jinja::Value>> context = impl_->special_tokens;
  SY_CHECK(inputs.messages.is_array(), "messages must be a list, got {}", inputs.messages.type_name());
  SY_CHECK(inputs.kwargs.is_object() || inputs.kwargs.is_null(), "chat template kwargs must be an object, got {}",
           inputs.kwargs.type_name());
  context.emplace_back("messages", jinja::Value::from_json(inputs.messages));
  context.emplace_back("tools", jinja::Value::from_json(inputs.tools));
  context.emplace_back("documents", jinja::Value::none());
  context.emplace_back("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  if (inputs.kwargs.is_object()) {
    for (const auto& [k, v] : inputs.kwargs.items()) context.emplace_back(k, jinja::Value::from_json(v));
  }
  return jinja::render(impl_->body, impl_->name, context);
}

}  // namespace sy::text
