// The engine of one rank: requests in, tokens out. Each step schedules a batch, runs the model's
// forward pass over the paged KV cache, samples the sequences whose chunk reached their end, and
// retires the finished ones.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace sy {

struct EngineConfig {
  int64_t block_size = 16;
  int64_t kv_blocks = 256;
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
  // Steps until every request has finished.
  void run();

  const RequestResult& result(int64_t id) const;
  int64_t steps() const { return steps_; }
  int64_t tokens_processed() const { return tokens_processed_; }
  // Host time spent choosing next tokens, summed over all steps.
  double sampling_ms() const { return sampling_ms_; }
  const Scheduler& scheduler() const { return scheduler_; }
  // Checks the KV block accounting (every block owned exactly once).
  void check_integrity() const;

 private:
  struct Entry;
  Model& model_;
  BlockManager blocks_;
  KvPool pool_;
  Scheduler scheduler_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<float> logits_;
  int64_t steps_ = 0;
  int64_t tokens_processed_ = 0;
  double sampling_ms_ = 0.0;
};

}  // namespace sy
