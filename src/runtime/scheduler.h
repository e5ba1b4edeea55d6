// Continuous batching with chunked prefill (pure CPU logic): each step takes every running decode
// token, then fills the remaining token budget with prefill chunks, admitting waiting sequences while
// KV blocks last. A sequence admitted with the prefix cache on starts from the longest run of whole
// cached blocks its tokens begin with, and prefills only the rest. When decode cannot grow, the newest
// running sequence is preempted (its blocks released, recomputed later). Under attention data
// parallelism each dp rank has its own KV block pool: a sequence lives on one dp rank for its whole
// life, and admission, growth and preemption only look at that rank's pool; the token budget and
// max_seqs are shared by the whole step.
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
  // Under attention DP: place a request on the dp rank holding its longest cached prefix (within the load
  // slack), or (false) always on the least loaded one.
  bool prefix_placement = true;
};

// One sequence as the scheduler sees it. `tokens` holds prompt and generated tokens; the first
// `computed` of them have their K/V in the cache.
struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;
  int64_t computed = 0;
  std::vector<int32_t> block_table;  // block ids of the pool of dp rank `dp`
  int32_t dp = 0;                    // attention-DP rank holding its KV cache; set by Scheduler::add
  bool finished = false;
  // Prefix cache: whether the sequence may start from cached blocks (false when every prompt position's
  // logits are wanted), the content hashes of its whole computed blocks, and the prompt tokens it found
  // cached when first admitted (-1 before).
  bool prefix_cache = true;
  std::vector<uint64_t> block_hashes;
  int64_t cached_tokens = -1;
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
  // One block manager per dp rank (index = dp rank), each outliving the scheduler.
  Scheduler(std::vector<BlockManager*> blocks, const SchedulerConfig& config);
  // A single KV pool (dp size 1).
  Scheduler(BlockManager& blocks, const SchedulerConfig& config) : Scheduler(std::vector{&blocks}, config) {}

  // Places the sequence on a dp rank, then queues it at the back of the waiting list. The rank (with
  // SchedulerConfig::prefix_placement): the one
  // whose cache holds the longest prefix of its tokens, unless that rank has more than
  // kPrefixLoadSlack live (added, not finished) sequences over the least loaded one; otherwise (and with
  // no cached prefix anywhere) the least loaded, the lowest index on ties. Deterministic, so that every
  // rank that runs the same requests places them identically.
  void add(Sequence* seq);
  static constexpr int64_t kPrefixLoadSlack = 4;
  // Chunks for the next forward pass (empty when nothing can run). Grows block tables as needed.
  std::vector<ScheduledChunk> schedule();
  // Frees a finished sequence's blocks and forgets it (waiting or running). Finishing twice is a no-op.
  void finish(Sequence* seq);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  // Prefix cache: prompt tokens looked up at first admission, and those found cached.
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  const std::deque<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  int32_t dp_size() const { return static_cast<int32_t>(blocks_.size()); }
  // Sequences added to dp rank `dp` and not finished yet (waiting or running).
  int64_t live(int32_t dp) const { return live_.at(static_cast<size_t>(dp)); }

 private:
  void preempt(Sequence* seq);
  BlockManager& blocks_of(const Sequence* seq) { return *blocks_[static_cast<size_t>(seq->dp)]; }
  std::vector<BlockManager*> blocks_;  // per dp rank
  std::vector<int64_t> live_;          // per dp rank
  SchedulerConfig config_;
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> running_;  // admitted, in admission order
  int64_t preemptions_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace sy
