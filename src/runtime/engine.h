// The engine of one rank: requests in, tokens out. Each step schedules a batch, runs the model's
// forward pass over the paged KV cache, samples the sequences whose chunk reached their end, and
// retires the finished ones. Every rank of a layout runs the same engine over the same requests; under
// attention data parallelism (model.info().dp_size > 1) it keeps the block accounting of every dp
// rank's KV pool, while the device pool here holds only this rank's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/model.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace sy {

struct EngineConfig {
  int64_t block_size = 16;
  int64_t kv_blocks = 256;  // per dp rank: the blocks of this rank's KV pool
  // Reuse the K/V of whole blocks of prompt tokens another request computed (the blocks stay cached until
  // their slots are needed); requests that keep every prompt position's logits always compute them.
  bool prefix_cache = true;
  SchedulerConfig scheduler;
};

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;
  // Keep the logits of every prompt position and every generated step ([positions, vocab]).
  bool keep_logits = false;
  // -1: none; k in [0, kMaxLogprobs]: record each sampled token's logprob and the k most likely tokens'.
  int32_t logprobs = -1;
};

enum class FinishReason {
  none,        // still running
  stop_token,  // sampled one of the request's stop tokens (EOS, stop_token_ids)
  length,      // reached max_new_tokens
  abort,       // aborted: client gone, server stopping, or a stop string found by the caller
  error,       // ended by the engine: its next-token logits were not finite (RequestResult::error says where)
};
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error" (none: "")

struct RequestResult {
  std::vector<int32_t> output;          // generated tokens
  std::vector<float> logits;            // [prompt_len + steps, vocab] when keep_logits, row i predicts token i + 1
  std::vector<TokenLogprobs> logprobs;  // one per output token when the request asked (logprobs >= 0)
  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  int64_t first_step = -1;    // the engine step (0-based) in which the request was first scheduled; -1: not yet
  int64_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache at first admission
  std::string error;          // FinishReason::error: what went wrong, in one line
};

// KV block usage summed over every dp rank's pool.
struct KvUsage {
  int64_t used_blocks = 0;  // referenced by a sequence
  int64_t total_blocks = 0;
  int64_t block_size = 0;
  int64_t cached_blocks = 0;  // holding cached prefix content (referenced or not)
};

class Engine {
 public:
  // Steps `model` through an executor of its own.
  Engine(Model& model, Backend& backend, const EngineConfig& config);
  // Steps `runner` (a test's stand-in for a model and its executor); it must outlive the engine.
  Engine(StepRunner& runner, Backend& backend, const EngineConfig& config);
  ~Engine();

  // Throws sy::Error saying what is wrong when the engine would refuse `request` (empty prompt, ids outside
  // the vocabulary, prompt + max_new_tokens beyond the context or the KV cache of a dp rank, bad sampling
  // parameters). Reads only the model's description: safe from any thread.
  void validate(const Request& request) const;
  // Validates and queues a request; returns its id. Ids are unique and increasing over the engine's life.
  int64_t add(Request request);
  // Finishes a waiting or running request now (its KV blocks are freed) with FinishReason::abort.
  // Returns false, doing nothing, when it had already finished. Precondition: `id` is not released.
  bool abort(int64_t id);
  // Forgets a finished request (result(id) is then an error), so that a long-running engine holds only
  // the requests still in flight. Precondition: result(id).finished.
  void release(int64_t id);
  // Runs one forward pass. Returns false when there was nothing to run.
  bool step();
  // Steps until every request has finished, calling `after_step` (when set) after each forward pass:
  // the place to stream the tokens a step added.
  void run(const std::function<void()>& after_step = {});

  const RequestResult& result(int64_t id) const;
  int64_t steps() const { return steps_; }
  int64_t tokens_processed() const { return tokens_processed_; }
  // Host time spent choosing next tokens, summed over all steps.
  double sampling_ms() const { return sampling_ms_; }
  const Scheduler& scheduler() const { return scheduler_; }
  KvUsage kv_usage() const;
  // Requests added and not released (finished ones included until released).
  int64_t held_requests() const { return static_cast<int64_t>(entries_.size()); }
  // Checks the KV block accounting of every dp rank's pool (every block owned exactly once, by a
  // sequence of that dp rank or the free list).
  void check_integrity() const;

 private:
  // runner null: the executor `owned`.
  Engine(std::unique_ptr<Executor> owned, StepRunner* runner, Backend& backend, const EngineConfig& config);
  // Why the logit row `row` of the last step ended its request: its NaN and infinities, and where they came
  // from when the model checks each block.
  std::string nonfinite_message(const float* row, int64_t vocab) const;
  struct Entry;
  Entry& entry(int64_t id) const;
  std::unique_ptr<Executor> executor_;  // the first constructor's
  StepRunner& runner_;
  std::vector<BlockManager> blocks_;  // per dp rank; the scheduler points into it, so never resized
  KvPool pool_;                       // this rank's: the blocks of its dp rank
  Scheduler scheduler_;
  std::unordered_map<int64_t, std::unique_ptr<Entry>> entries_;  // by id, until released
  int64_t next_id_ = 0;
  Backend& backend_;
  // fp32 [rows, vocab]: the logits of a step, in the backend's host memory (page-locked on a GPU, so
  // the copy from the device needs no staging); sized for one row per sequence of a full batch, grown
  // when a step keeps more.
  std::unique_ptr<DeviceBuffer> logits_;
  int64_t steps_ = 0;
  int64_t tokens_processed_ = 0;
  double sampling_ms_ = 0.0;
};

}  // namespace sy
