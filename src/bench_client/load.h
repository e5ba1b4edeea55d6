// The load itself: streaming OpenAI requests sent over loopback or the network by one thread (Asio), at
// most max_concurrency in flight, arriving all at once or as a Poisson process; client-side times per
// request.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "bench_client/dataset.h"
#include "bench_client/http_call.h"

namespace sy::bench {

enum class Backend { completions, chat };

// The route a backend posts to: /v1/completions or /v1/chat/completions.
const char* backend_route(Backend backend);

struct RequestOptions {
  std::string model;
  bool ignore_eos = false;    // sends "ignore_eos": true (vLLM, SGLang and switchyard read it)
  bool stream_usage = true;   // sends stream_options.include_usage, so the server counts the output tokens
  nlohmann::json extra_body;  // an object merged into every request (--extra-request-body)
};

// One streaming request's JSON: greedy (temperature 0), max_tokens = row.output_len; completions sends the
// prompt as it is (ids or text), chat as the one user message.
std::string make_request_body(Backend backend, const PromptRow& row, const RequestOptions& options, int64_t max_tokens);

struct RequestOutcome {
  bool success = false;
  double ttft_s = 0.0;         // request start (connect included when a new connection was needed) to first token
  double latency_s = 0.0;      // request start to the end of the stream
  std::vector<double> itl_s;   // between consecutive chunks that carried text
  int64_t output_tokens = 0;   // usage.completion_tokens when the server sent it, else the chunks with text
  int64_t chunks = 0;          // chunks that carried text
  std::string error;           // why it failed: HTTP status and body, a closed connection, an error event
  bool cut_by_client = false;  // the client closed the stream on purpose (a soak's disconnect), not a failure
};

struct LoadSpec {
  BaseUrl url;
  std::string route;  // "/v1/completions"
  std::string api_key;
  int64_t max_concurrency = 0;                                    // 0: no limit
  double request_rate = std::numeric_limits<double>::infinity();  // requests per second; inf: all at once
  uint64_t seed = 0;                                              // of the Poisson arrivals
  bool progress = false;                                          // a progress bar on stderr
  std::string progress_label;                                     // "c=64"
};

struct LoadResult {
  std::vector<RequestOutcome> outcomes;  // in the order of `bodies`
  double duration_s = 0.0;               // first send to last completion
};

// Sends every body and waits for all of them; a request that fails is recorded, never retried (except a
// send on a kept-alive connection the server had closed, which is resent on a new one).
LoadResult run_load(const LoadSpec& spec, const std::vector<std::string>& bodies);

}  // namespace sy::bench
