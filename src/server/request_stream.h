// One generated sequence on its way to the client: each sampled token through the incremental
// detokeniser, text held back while it may still become a stop string and cut at the first one (the stop
// string itself left out, as OpenAI does), the finish reason, and the logprobs asked for.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/serving.h"
#include "text/tokenizer.h"

namespace sy::server {

// Text in, text out, cut at the first stop string. The text held back is the longest tail that is the
// start of some stop string, so a stop string split across tokens is never sent in part.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  struct Out {
    std::string text;                    // safe to send now
    std::optional<std::string> matched;  // the stop string found; nothing more comes after it
  };
  Out push(std::string_view piece);
  // The text held back, at the end of a sequence that did not stop on a string.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // highest first
};

// What one engine event adds to a choice.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // the event's token, when logprobs were asked for
  bool finished = false;
  std::string finish_reason;           // "stop", "length", "abort" or "error" once finished
  std::string error;                   // finish_reason "error": the engine's reason
  nlohmann::ordered_json stop_reason;  // vLLM's: the stop string or stop token id that ended it; null otherwise
  bool stopped_on_string = false;      // the engine request must be aborted: the caller found the end
};

class ChoiceStream {
 public:
  // `eos` are the model's end tokens (their text is never sent); `stop_token_ids` the request's own.
  ChoiceStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop, std::vector<int32_t> stop_token_ids,
               bool want_logprobs);
  // nullopt once the choice has finished (events the engine sends before it sees the abort).
  std::optional<ChoiceDelta> on_event(const TokenEvent& event);
  bool finished() const { return finished_; }
  int64_t output_tokens() const { return output_tokens_; }

 private:
  text::IncrementalDecoder decoder_;
  StopMatcher stops_;
  std::vector<int32_t> stop_token_ids_;
  bool want_logprobs_;
  bool finished_ = false;
  int64_t output_tokens_ = 0;
};

}  // namespace sy::server
