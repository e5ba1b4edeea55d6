// Continuous batching with chunked prefill (pure CPU logic): each step takes every running decode
// token, then fills the remaining token budget with prefill chunks, admitting waiting sequences while
// KV blocks last. When decode cannot grow, the newest running sequence is preempted (its blocks freed,
// recomputed later).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "runtime/kv_cache.h"

namespace sy {

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;  // tokens per forward pass (prefill chunks + decode tokens)
  int64_t max_seqs = 64;           // sequences per forward pass
};

// One sequence as the scheduler sees it. `tokens` holds prompt and generated tokens; the first
// `computed` of them have their K/V in the cache.
struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;
  int64_t computed = 0;
  std::vector<int32_t> block_table;
  bool finished = false;
};

// Tokens [start, start + len) of one sequence go through this forward pass.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;
  int64_t len = 0;
  // The chunk reaches the last known token, so its last position yields the next token.
  bool samples_next() const { return start + len == static_cast<int64_t>(seq->tokens.size()); }
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, const SchedulerConfig& config);

  void add(Sequence* seq);  // queued at the back of the waiting list
  // Chunks for the next forward pass (empty when nothing can run). Grows block tables as needed.
  std::vector<ScheduledChunk> schedule();
  // Frees a finished sequence's blocks and forgets it.
  void finish(Sequence* seq);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  const std::deque<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }

 private:
  void preempt(Sequence* seq);
  BlockManager& blocks_;
  SchedulerConfig config_;
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> running_;  // admitted, in admission order
  int64_t preemptions_ = 0;
};

}  // namespace sy
