// The OpenAI request bodies the server accepts (/v1/completions, /v1/chat/completions, /tokenize,
// /detokenize): parsed and type-checked into plain structs; a bad field throws ApiError naming it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sy::server {

// A request the server refuses: the HTTP status and the OpenAI error body's fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // the offending field, "" when none
  const std::string& code() const { return code_; }    // OpenAI's machine-readable code, "" when none

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// The fields shared by completions and chat completions. Unset optionals take the server's defaults.
struct SamplingFields {
  std::string model;                  // "" when not given
  std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
  float temperature = 1.0f;           // OpenAI's default
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0 or -1: off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t logprobs = -1;       // -1: none; k >= 0: the sampled token's logprob and the k most likely
};

struct CompletionRequest {
  SamplingFields sampling;
  // One entry per prompt: text, or token ids.
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  bool prompts_are_ids = false;
  bool echo = false;
};

struct ChatRequest {
  SamplingFields sampling;
  nlohmann::ordered_json messages;  // as given: [{role, content, ...}]
  nlohmann::ordered_json tools;     // null or a list
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
};

// vLLM's /tokenize: a prompt, or chat messages through the template.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  ChatRequest chat;  // when messages are given
  bool add_special_tokens = true;
};

struct DetokenizeRequest {
  std::vector<int32_t> tokens;
};

// Parses a request body; throws ApiError (400) for malformed JSON or a bad field, naming it.
nlohmann::ordered_json parse_body(const std::string& body);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body);
ChatRequest parse_chat_request(const nlohmann::ordered_json& body);
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body);
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body);

// The number of new tokens a request may generate: its max_tokens after the context checks. Throws
// ApiError (400) with OpenAI's wording when the prompt, or the prompt and max_tokens, exceed
// `max_model_len`.
int64_t check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t max_model_len);

}  // namespace sy::server
