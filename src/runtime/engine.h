// The engine of one rank: requests in, tokens out. Each step schedules a batch, runs the model's
// forward pass over the paged KV cache, samples the sequences whose chunk reached their end, and
// retires the finished ones. Every rank of a layout runs the same engine over the same requests; under
// attention data parallelism (model.info().dp_size > 1) it keeps the block accounting of every dp
// rank's KV pool, while the device pool here holds only this rank's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace sy {

struct EngineConfig {
  int64_t block_size = 16;
  int64_t kv_blocks = 256;  // per dp rank: the blocks of this rank's KV pool
  SchedulerConfig scheduler;
};

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;
  // Keep the logits of every prompt position and every generated step ([positions, vocab]).
  bool keep_logits = false;
};

struct RequestResult {
  std::vector<int32_t> output;  // generated tokens
  std::vector<float> logits;    // [prompt_len + steps, vocab] when keep_logits, row i predicts token i + 1
  bool finished = false;
};

class Engine {
 public:
  Engine(Model& model, Backend& backend, const EngineConfig& config);
  ~Engine();

  // Validates and queues a request; returns its id (index into results()).
  int64_t add(Request request);
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
  // Checks the KV block accounting of every dp rank's pool (every block owned exactly once, by a
  // sequence of that dp rank or the free list).
  void check_integrity() const;

 private:
  struct Entry;
  Model& model_;
  std::vector<BlockManager> blocks_;  // per dp rank; the scheduler points into it, so never resized
  KvPool pool_;                       // this rank's: the blocks of its dp rank
  Scheduler scheduler_;
  std::vector<std::unique_ptr<Entry>> entries_;
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
