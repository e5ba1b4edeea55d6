// The engine under a server: requests arrive from other threads while one thread steps the engine; each
// sampled token is handed to the request's sink at once; aborts free a request's KV blocks within one
// step. Under a layout of several ranks, rank 0's loop broadcasts every step's new requests and aborts so
// that every rank's engine runs the same steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace sy {

class Communicator;

struct ServeRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // EOS unless ignore_eos, plus stop_token_ids
  int32_t logprobs = -1;             // -1: none; k >= 0: the sampled token's logprob and the k most likely
};

// One sampled token (or the end of a request without a token: aborted, or refused when queued).
struct TokenEvent {
  int64_t request = 0;
  bool has_token = false;
  int32_t token = -1;
  float logprob = 0.0f;                                 // of `token`, from the model's raw logits (log-softmax)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // the k most likely, highest first, when asked
  FinishReason finish = FinishReason::none;
  std::string error;  // FinishReason::error: the engine's one-line reason
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // so far, this token included
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache supplied (known once the request was scheduled)
  // On the first event after the request was first scheduled: when that step began (queue time ends there).
  std::optional<std::chrono::steady_clock::time_point> scheduled_at;
};

// Called on the loop's thread: keep it short (post to the connection's executor and return). A request's
// sink gets one event per sampled token, in order; exactly one event has finish != none and it is the last:
// the last token's when the request ends by a stop token or its length, an event without a token when it
// is aborted. A sink that throws gets no more tokens; its request is aborted (and it hears that, once).
using TokenSink = std::function<void(const TokenEvent&)>;

// Loop iterations that ran a forward pass, by kind: `decode` when every token of the step was a decode
// token (one per sequence, each sampled), `mixed` when prefill tokens shared the step. Seconds are the
// whole iteration (taking requests in, the forward pass, sampling, handing tokens to the sinks): what a
// streaming client sees between two tokens.
struct StepTotals {
  int64_t steps = 0;
  double seconds = 0.0;
  int64_t tokens = 0;  // forward tokens (decode + prefill)
};

struct ServingStats {
  int64_t running = 0;
  int64_t waiting = 0;    // queued in the engine plus submitted and not yet taken in
  double kv_usage = 0.0;  // fraction of KV blocks in use, all dp ranks
  int64_t kv_capacity_tokens = 0;
  int64_t preemptions = 0;
  // Prefix cache: prompt tokens looked up (at each request's first admission) and found cached.
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t steps = 0;
  StepTotals decode_steps;
  StepTotals mixed_steps;
};

class ServingLoop {
 public:
  // `engine` is stepped only by run() and holds no requests yet (the loop owns every one, so that every
  // rank's engine ids agree). `world` (may be null: one rank) is the world of a multi-rank layout; rank 0
  // takes requests, the other ranks follow.
  ServingLoop(Engine& engine, Communicator* world);
  ~ServingLoop();

  // Thread-safe. Queues a request and returns its id; the sink gets every token and the final event.
  // Throws sy::Error (nothing queued) when the request is invalid for the engine.
  int64_t submit(ServeRequest request, TokenSink sink);
  // Thread-safe. Ends the request at the next step boundary (its sink gets a final event with
  // FinishReason::abort unless it finished first); unknown or finished ids are ignored.
  void abort(int64_t id);
  // Thread-safe snapshot.
  ServingStats stats() const;

  // Steps the engine until stop() (on rank 0) is called and, after it, until every request has ended
  // or `drain_seconds` passed (then the rest are aborted). Sleeps while idle. Runs on one thread; under
  // MPI that must be the thread that initialised it (FUNNELED: the forward's collectives and the
  // boundary broadcasts are MPI calls), so the HTTP server runs on other threads. An error in a step is
  // logged, every request gets its final abort event, and run() rethrows it.
  void run();
  // Thread-safe: stop taking requests (submit then throws) and let run() drain and return.
  void stop(double drain_seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sy
