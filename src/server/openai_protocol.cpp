// Parsing and type-checking of the OpenAI request bodies: unknown fields are ignored as OpenAI does, a
// field of the wrong type or out of range is a 400 that names it.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/input.h"

namespace sy::server {

using json = nlohmann::ordered_json;

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "invalid";
  }
  return "invalid";
}

[[noreturn]] void bad_field(const std::string& name, const std::string& what) {
  throw ApiError(400, fmt::format("'{}' {}", name, what), name);
}

[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& got) {
  bad_field(name, fmt::format("must be {}, got {}", expected, type_name(got)));
}

// The field, or nullptr when it is absent or null (OpenAI treats an explicit null as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer, also written as a float without a fraction (5.0), as pydantic's lax mode accepts it.
std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const auto i = as_int(*v);
  if (!i) wrong_type(name, "an integer", *v);
  if (*i < lo || *i > hi) bad_field(name, fmt::format("must be between {} and {}, got {}", lo, hi, *i));
  return i;
}

std::optional<double> get_number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) bad_field(name, fmt::format("must be between {} and {}, got {}", lo, hi, d));
  return d;
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

std::vector<int32_t> token_ids(const json& v, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& t : v) {
    const auto i = as_int(t);
    if (!i || *i < 0 || *i > std::numeric_limits<int32_t>::max()) {
      bad_field(name, fmt::format("must hold token ids (non-negative integers), got {}", t.dump()));
    }
    ids.push_back(static_cast<int32_t>(*i));
  }
  return ids;
}

SamplingFields parse_sampling(const json& body, bool chat) {
  SamplingFields s;
  s.model = get_string(body, "model").value_or("");
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  // max_tokens below 1 is refused with vLLM's wording; max_completion_tokens is chat's newer name.
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    const json* v = field(body, name);
    if (v == nullptr || s.max_tokens) continue;
    const auto i = as_int(*v);
    if (!i) wrong_type(name, "an integer", *v);
    if (*i < 1) bad_field(name, fmt::format("must be at least 1, got {}", *i));
    s.max_tokens = std::min<int64_t>(*i, kMaxInt);
  }
  s.temperature = static_cast<float>(get_number(body, "temperature", 0.0, 100.0).value_or(1.0));
  s.top_p = static_cast<float>(get_number(body, "top_p", 0.0, 1.0).value_or(1.0));
  if (s.top_p <= 0.0f) bad_field("top_p", fmt::format("must be in (0, 1], got {}", s.top_p));
  s.top_k = get_int(body, "top_k", -1, kMaxInt).value_or(0);
  if (s.top_k < 0) s.top_k = 0;  // -1 is vLLM's "off"
  s.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 1.0).value_or(0.0));
  if (const json* v = field(body, "seed")) {
    const auto i = as_int(*v);
    if (!i) wrong_type("seed", "an integer", *v);
    s.seed = static_cast<uint64_t>(*i);
  }
  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      s.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const auto& e : *v) {
        if (!e.is_string()) bad_field("stop", fmt::format("must be a string or a list of strings, got {}", e.dump()));
        s.stop.push_back(e.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or a list of strings", *v);
    }
    std::erase_if(s.stop, [](const std::string& x) { return x.empty(); });
  }
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) wrong_type("stop_token_ids", "a list of token ids", *v);
    s.stop_token_ids = token_ids(*v, "stop_token_ids");
  }
  s.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  s.n = get_int(body, "n", 1, 128).value_or(1);
  s.stream = get_bool(body, "stream").value_or(false);
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (!s.stream) bad_field("stream_options", "is only allowed when 'stream' is true");
    s.include_usage = get_bool(*v, "include_usage").value_or(false);
  }
  if (chat) {
    const bool logprobs = get_bool(body, "logprobs").value_or(false);
    const auto top = get_int(body, "top_logprobs", 0, 20);
    if (top && !logprobs) bad_field("top_logprobs", "needs 'logprobs' set to true");
    if (logprobs) s.logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    if (const json* v = field(body, "logprobs"); v != nullptr && v->is_boolean())
      wrong_type("logprobs", "an integer", *v);
    if (const auto k = get_int(body, "logprobs", 0, 20)) s.logprobs = static_cast<int32_t>(*k);
  }
  return s;
}

void check_object(const json& body) {
  if (!body.is_object())
    throw ApiError(400, fmt::format("the request body must be a JSON object, got {}", type_name(body)));
}

// A message's content as the template sees it: a string; a list of text parts is joined with newlines as
// vLLM's "string" content format does.
json message_content(const json& content, size_t i) {
  const std::string name = fmt::format("messages[{}].content", i);
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) wrong_type(name, "a string or a list of content parts", content);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      bad_field(name, fmt::format("holds a part this server cannot read (only text parts are supported): {}",
                                  part.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 200)));
    }
    if (!text.empty()) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

json parse_messages(const json& body) {
  const json* v = field(body, "messages");
  if (v == nullptr) throw ApiError(400, "'messages' is required", "messages");
  if (!v->is_array()) wrong_type("messages", "a list of messages", *v);
  if (v->empty()) bad_field("messages", "must hold at least one message");
  json messages = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(name, "an object", m);
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_field(name + ".role", "is required and must be a string");
    json copy = m;
    if (const auto c = m.find("content"); c != m.end()) copy["content"] = message_content(*c, i);
    messages.push_back(std::move(copy));
  }
  return messages;
}

void parse_chat_fields(const json& body, ChatRequest& r) {
  r.messages = parse_messages(body);
  if (const json* v = field(body, "tools")) {
    if (!v->is_array()) wrong_type("tools", "a list of tools", *v);
    if (!v->empty()) r.tools = *v;
  }
  if (const json* v = field(body, "chat_template_kwargs")) {
    if (!v->is_object()) wrong_type("chat_template_kwargs", "an object", *v);
    r.chat_template_kwargs = *v;
  }
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
}

}  // namespace

json parse_body(const std::string& body) {
  try {
    check_json_depth(body, "the request body");  // before the parser and any message that prints a value
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {  // a syntax error, or a number beyond double's range (out_of_range)
    throw ApiError(400, fmt::format("the request body is not valid JSON ({})", cut_for_message(e.what())));
  }
  check_object(parsed);
  return parsed;
}

CompletionRequest parse_completion_request(const json& body) {
  CompletionRequest r;
  r.sampling = parse_sampling(body, /*chat=*/false);
  r.echo = get_bool(body, "echo").value_or(false);
  if (r.echo) bad_field("echo", "is not supported by this server");
  const json* p = field(body, "prompt");
  if (p == nullptr) throw ApiError(400, "'prompt' is required", "prompt");
  if (p->is_string()) {
    r.prompt_texts.push_back(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) bad_field("prompt", "must not be empty");
    if ((*p)[0].is_string()) {
      for (const auto& e : *p) {
        if (!e.is_string())
          bad_field("prompt",
                    "must be a string, a list of strings, a list of token ids or a list of lists of token ids");
        r.prompt_texts.push_back(e.get<std::string>());
      }
    } else if ((*p)[0].is_array()) {
      r.prompts_are_ids = true;
      for (const auto& e : *p) {
        if (!e.is_array())
          bad_field("prompt",
                    "must be a string, a list of strings, a list of token ids or a list of lists of token ids");
        r.prompt_ids.push_back(token_ids(e, "prompt"));
      }
    } else {
      r.prompts_are_ids = true;
      r.prompt_ids.push_back(token_ids(*p, "prompt"));
    }
  } else {
    wrong_type("prompt", "a string, a list of strings, a list of token ids or a list of lists of token ids", *p);
  }
  for (const auto& t : r.prompt_texts) {
    if (t.empty()) bad_field("prompt", "must not be empty");
  }
  for (const auto& ids : r.prompt_ids) {
    if (ids.empty()) bad_field("prompt", "must not be empty");
  }
  return r;
}

ChatRequest parse_chat_request(const json& body) {
  ChatRequest r;
  r.sampling = parse_sampling(body, /*chat=*/true);
  parse_chat_fields(body, r);
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  TokenizeRequest r;
  if (field(body, "messages") != nullptr) {
    parse_chat_fields(body, r.chat);
    r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(false);
    return r;
  }
  r.prompt = get_string(body, "prompt");
  if (!r.prompt) throw ApiError(400, "'prompt' (or 'messages') is required", "prompt");
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(true);
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  const json* v = field(body, "tokens");
  if (v == nullptr) throw ApiError(400, "'tokens' is required", "tokens");
  if (!v->is_array()) wrong_type("tokens", "a list of token ids", *v);
  return {.tokens = token_ids(*v, "tokens")};
}

int64_t check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t max_model_len) {
  if (prompt_tokens >= max_model_len) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your request has {} input "
                               "tokens, which leaves no room for the completion. Please reduce the length of the "
                               "input messages.",
                               max_model_len, prompt_tokens),
                   "", "context_length_exceeded");
  }
  if (!max_tokens) return max_model_len - prompt_tokens;
  if (prompt_tokens + *max_tokens > max_model_len) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                               "({} in the messages, {} in the completion). Please reduce the length of the messages "
                               "or completion.",
                               max_model_len, prompt_tokens + *max_tokens, prompt_tokens, *max_tokens),
                   "", "context_length_exceeded");
  }
  return *max_tokens;
}

}  // namespace sy::server
