// Stop-string holding and the per-choice token → text step.
#include "server/request_stream.h"

#include <algorithm>

namespace sy::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

StopMatcher::Out StopMatcher::push(std::string_view piece) {
  held_ += piece;
  Out out;
  if (stops_.empty()) {
    out.text = std::move(held_);
    held_.clear();
    return out;
  }
  // The earliest occurrence of any stop string. A match cannot start in text already sent: that text
  // ended with no tail that starts a stop string.
  size_t first = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (at < first || (at == first && s.size() > which->size()))) {
      first = at;
      which = &s;
    }
  }
  if (which != nullptr) {
    out.text = held_.substr(0, first);
    out.matched = *which;
    held_.clear();
    return out;
  }
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

ChoiceStream::ChoiceStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop,
                           std::vector<int32_t> stop_token_ids, bool want_logprobs)
    : decoder_(tokenizer, /*skip_special_tokens=*/true),
      stops_(std::move(stop)),
      stop_token_ids_(std::move(stop_token_ids)),
      want_logprobs_(want_logprobs) {}

std::optional<ChoiceDelta> ChoiceStream::on_event(const TokenEvent& event) {
  if (finished_) return std::nullopt;
  ChoiceDelta d;
  if (event.has_token) {
    ++output_tokens_;
    if (want_logprobs_) d.logprobs.push_back({event.token, event.logprob, event.top_logprobs});
    // The token that ends a sequence (EOS, a stop_token_ids entry) adds no text, as in vLLM.
    if (event.finish != FinishReason::stop_token) {
      StopMatcher::Out out = stops_.push(decoder_.push(event.token));
      d.text = std::move(out.text);
      if (out.matched) {
        finished_ = true;
        d.finished = true;
        d.finish_reason = "stop";
        d.stop_reason = *out.matched;
        d.stopped_on_string = event.finish == FinishReason::none;
        return d;
      }
    }
  }
  if (event.finish == FinishReason::none) return d;
  finished_ = true;
  d.finished = true;
  d.text += stops_.flush();
  switch (event.finish) {
    case FinishReason::stop_token:
      d.finish_reason = "stop";
      if (event.has_token &&
          std::find(stop_token_ids_.begin(), stop_token_ids_.end(), event.token) != stop_token_ids_.end()) {
        d.stop_reason = event.token;
      }
      break;
    case FinishReason::length:
      d.finish_reason = "length";
      break;
    case FinishReason::abort:
      d.finish_reason = "abort";
      break;
    case FinishReason::error:
      d.finish_reason = "error";
      d.error = event.error;
      break;
    case FinishReason::none:
      break;
  }
  return d;
}

}  // namespace sy::server
