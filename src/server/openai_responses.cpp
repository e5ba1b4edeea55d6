// JSON shaping of responses, chunks and errors (field order as OpenAI and vLLM write them).
#include "server/openai_responses.h"

#include <cmath>

namespace sy::server {

namespace {

// JSON has no -inf; vLLM writes a token of zero probability as -9999.0.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

std::string token_text(const text::Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[1] = {id};
  return tokenizer.decode(ids, /*skip_special_tokens=*/false);
}

json token_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 408:
      return "RequestTimeoutError";
    case 413:
      return "RequestEntityTooLargeError";
    case 422:
      return "UnprocessableEntityError";
    case 429:
      return "RateLimitError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
  json e = {{"message", message},
            {"type", error_type(status)},
            {"param", nullable(param)},
            {"code", code.empty() ? json(status) : json(code)}};
  return dump(json{{"error", std::move(e)}});
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

json usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"completion_tokens", completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_logprobs(const text::Tokenizer& tokenizer, const std::vector<TokenLogprob>& entries, int64_t& offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const auto& e : entries) {
    const std::string t = token_text(tokenizer, e.token);
    tokens.push_back(t);
    token_logprobs.push_back(finite_logprob(e.logprob));
    json alternatives = json::object();
    for (const auto& [id, lp] : e.top) alternatives[token_text(tokenizer, id)] = finite_logprob(lp);
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.size());
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(token_logprobs)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(top)}};
}

json chat_logprobs_content(const text::Tokenizer& tokenizer, const std::vector<TokenLogprob>& entries) {
  json content = json::array();
  for (const auto& e : entries) {
    const std::string t = token_text(tokenizer, e.token);
    json top = json::array();
    for (const auto& [id, lp] : e.top) {
      const std::string a = token_text(tokenizer, id);
      top.push_back({{"token", a}, {"logprob", finite_logprob(lp)}, {"bytes", token_bytes(a)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", finite_logprob(e.logprob)}, {"bytes", token_bytes(t)}, {"top_logprobs", top}});
  }
  return content;
}

json completion_response(const ResponseHeader& h, const std::vector<FinishedChoice>& choices, const json& usage) {
  json list = json::array();
  for (const auto& c : choices) {
    list.push_back({{"index", c.index},
                    {"text", c.text},
                    {"logprobs", c.logprobs},
                    {"finish_reason", nullable(c.finish_reason)},
                    {"stop_reason", c.stop_reason}});
  }
  return {{"id", h.id},       {"object", "text_completion"}, {"created", h.created},
          {"model", h.model}, {"choices", std::move(list)},  {"usage", usage}};
}

json chat_response(const ResponseHeader& h, const std::vector<FinishedChoice>& choices, const json& usage) {
  json list = json::array();
  for (const auto& c : choices) {
    list.push_back({{"index", c.index},
                    {"message", {{"role", "assistant"}, {"content", c.text}}},
                    {"logprobs", c.logprobs},
                    {"finish_reason", nullable(c.finish_reason)},
                    {"stop_reason", c.stop_reason}});
  }
  return {{"id", h.id},       {"object", "chat.completion"}, {"created", h.created},
          {"model", h.model}, {"choices", std::move(list)},  {"usage", usage}};
}

json completion_chunk(const ResponseHeader& h, int64_t index, const std::string& text, const json& logprobs,
                      const std::string& finish_reason, const json& stop_reason) {
  json choice = {{"index", index},
                 {"text", text},
                 {"logprobs", logprobs},
                 {"finish_reason", nullable(finish_reason)},
                 {"stop_reason", stop_reason}};
  return {{"id", h.id},
          {"object", "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", json::array({std::move(choice)})}};
}

json chat_chunk(const ResponseHeader& h, int64_t index, const json& delta, const json& logprobs,
                const std::string& finish_reason, const json& stop_reason) {
  json choice = {{"index", index},
                 {"delta", delta},
                 {"logprobs", logprobs},
                 {"finish_reason", nullable(finish_reason)},
                 {"stop_reason", stop_reason}};
  return {{"id", h.id},
          {"object", "chat.completion.chunk"},
          {"created", h.created},
          {"model", h.model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk(const ResponseHeader& h, const char* object, const json& usage) {
  return {{"id", h.id},       {"object", object},         {"created", h.created},
          {"model", h.model}, {"choices", json::array()}, {"usage", usage}};
}

json model_list(const std::string& name, const std::string& root, int64_t created, int64_t max_model_len) {
  json model = {{"id", name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "switchyard"},
                {"root", root},
                {"parent", nullptr},
                {"max_model_len", max_model_len}};
  return {{"object", "list"}, {"data", json::array({std::move(model)})}};
}

}  // namespace sy::server
