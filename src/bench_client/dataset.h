// The prompts of a run: random ones of given lengths (token ids, or text through the server's tokenizer)
// or the first two turns of ShareGPT conversations.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/http_call.h"

namespace sy::bench {

struct PromptRow {
  nlohmann::json prompt;   // token ids (a list) or text; chat sends text as the one user message
  int64_t prompt_len = 0;  // tokens of `prompt`, as the server's tokenizer counts them
  int64_t output_len = 0;  // max_tokens asked for
};

// A tokenizer behind HTTP: /tokenize {"prompt", "add_special_tokens": false} -> {"tokens"} and
// /detokenize {"tokens"} -> {"prompt"}, as switchyard, vLLM and SGLang answer them.
class RemoteTokenizer {
 public:
  explicit RemoteTokenizer(HttpSession& session) : session_(session) {}
  std::vector<int64_t> encode(const std::string& text);
  std::string decode(const std::vector<int64_t>& ids);
  const BaseUrl& url() const { return session_.url(); }

 private:
  HttpSession& session_;
};

struct RandomDatasetSpec {
  int64_t num_prompts = 0;
  int64_t input_len = 0;   // most tokens a prompt has
  int64_t output_len = 0;  // most tokens asked for
  // Lengths are drawn uniformly from [ratio * len, len] (at least 1); 1.0 gives every request the same.
  double range_ratio = 0.0;
  int64_t vocab_size = 0;  // ids are drawn from [0, vocab_size)
  uint64_t seed = 0;
  // > 0: every prompt starts with one of num_groups random prefixes of this many tokens (prompt i takes
  // group i % num_groups), followed by its own random suffix of the drawn input length, as system prompts
  // and earlier turns repeat in chat traffic (what a prefix cache serves).
  int64_t shared_prefix_len = 0;
  int64_t num_groups = 1;
};

// Prompts of token ids: exactly the drawn lengths, no tokenizer needed (the completions route takes ids).
std::vector<PromptRow> make_random_id_prompts(const RandomDatasetSpec& spec);
// Prompts of text: random ids decoded, re-encoded and trimmed or topped up until the text encodes to the
// drawn length (or close to it after a few rounds; prompt_len is what the last encode counted).
std::vector<PromptRow> make_random_text_prompts(const RandomDatasetSpec& spec, RemoteTokenizer& tokenizer);

struct SharegptSpec {
  std::string path;  // a JSON list of {"conversations": [{"from", "value"}, ...]} ("conversation" also read)
  int64_t num_prompts = 0;
  std::optional<int64_t> output_len;  // else the tokens of the conversation's second turn
  int64_t max_model_len = 0;          // > 0: conversations longer than this (prompt + output) are left out
  uint64_t seed = 0;
};

// The first turn as the prompt, the second's token count as the output length, in a seeded shuffle of the
// conversations; those under 2 tokens either way are left out. sy::Error when the file is not that layout
// or holds too few usable conversations.
std::vector<PromptRow> read_sharegpt_prompts(const SharegptSpec& spec, RemoteTokenizer& tokenizer);

}  // namespace sy::bench
