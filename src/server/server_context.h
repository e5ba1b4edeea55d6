// What the handlers of one server share: the model's text side, the serving loop, the metrics, and the
// settings from the command line.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/serving.h"
#include "server/metrics.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace sy::server {

struct ServerSettings {
  std::string model_name;  // --served-model-name: what `model` must be, and what responses name
  std::string model_root;  // the model folder, shown by /v1/models
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;              // the model's; prompt ids must be below it
  std::vector<int32_t> eos_token_ids;  // stop tokens unless ignore_eos
  std::string api_key;                 // "" when none is required
  int64_t max_queued_requests = 0;     // 0: no limit
};

struct ServerContext {
  const text::Tokenizer& tokenizer;
  const text::ChatTemplate* chat_template;  // null when the model folder has none
  ServingLoop& loop;
  Metrics& metrics;
  ServerSettings settings;
  int64_t started = 0;                          // unix seconds, the `created` of the model
  std::atomic<bool> stopping{false};            // set once shutdown began: new requests get 503
  std::mt19937_64 rng{std::random_device{}()};  // request ids and seeds; used on the io thread only
};

}  // namespace sy::server
