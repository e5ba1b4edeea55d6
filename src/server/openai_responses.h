// The shapes of what the server sends, as OpenAI and vLLM shape them: error bodies, completion and chat
// completion responses and stream chunks, logprobs, usage, the model list, SSE framing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/request_stream.h"
#include "text/tokenizer.h"

namespace sy::server {

using json = nlohmann::ordered_json;

// {"error": {"message", "type", "param", "code"}}; `type` from the status (BadRequestError, ...), `code` the
// given machine-readable code or else the status.
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& code = {});
const char* error_type(int status);

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse(const json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// OpenAI's usage object; prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache supplied.
json usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// What every response and chunk of one request carries.
struct ResponseHeader {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"} for `entries`; text_offset
// counts from `offset` (the text already sent for this choice), which it advances.
json completion_logprobs(const text::Tokenizer& tokenizer, const std::vector<TokenLogprob>& entries, int64_t& offset);
// Chat: [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}] (the value of
// logprobs.content).
json chat_logprobs_content(const text::Tokenizer& tokenizer, const std::vector<TokenLogprob>& entries);

// One finished choice of a non-streamed response.
struct FinishedChoice {
  int64_t index = 0;
  std::string text;
  json logprobs;  // null, or the object of the choice
  std::string finish_reason;
  json stop_reason;
};

json completion_response(const ResponseHeader& h, const std::vector<FinishedChoice>& choices, const json& usage);
json chat_response(const ResponseHeader& h, const std::vector<FinishedChoice>& choices, const json& usage);
// A stream chunk of one choice; `finish_reason` "" while it runs. Chat chunks carry `delta`.
json completion_chunk(const ResponseHeader& h, int64_t index, const std::string& text, const json& logprobs,
                      const std::string& finish_reason, const json& stop_reason);
json chat_chunk(const ResponseHeader& h, int64_t index, const json& delta, const json& logprobs,
                const std::string& finish_reason, const json& stop_reason);
// The last chunk of a stream with include_usage: no choices, the usage of the whole request.
json usage_chunk(const ResponseHeader& h, const char* object, const json& usage);

json model_list(const std::string& name, const std::string& root, int64_t created, int64_t max_model_len);

}  // namespace sy::server
