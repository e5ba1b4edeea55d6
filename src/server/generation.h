// One completion or chat completion request in flight: its choices submitted to the serving loop, each
// engine event turned into text (and stream chunks, sent at once), the reply or the stream's end when
// every choice has finished, metrics and the request log line.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/server_context.h"

namespace sy::server {

enum class ApiKind { completion, chat };

struct GenerationSpec {
  ApiKind kind = ApiKind::completion;
  SamplingFields sampling;
  std::vector<std::vector<int32_t>> prompts;      // each is run `sampling.n` times
  std::vector<int64_t> max_new_tokens;            // per prompt, after the context check
  std::chrono::steady_clock::time_point arrival;  // when the request arrived: latencies count from here
};

// Submits the request's choices and answers through `exchange` as they finish. Throws ApiError (before
// anything is sent) when the loop refuses them: full queue (503), stopping (503), invalid (400).
void start_generation(ServerContext& ctx, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec);

}  // namespace sy::server
