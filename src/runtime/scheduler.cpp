// Scheduler.
#include "runtime/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace sy {

Scheduler::Scheduler(BlockManager& blocks, const SchedulerConfig& config) : blocks_(blocks), config_(config) {
  SY_CHECK(config.max_batch_tokens > 0 && config.max_seqs > 0,
           "max_batch_tokens and max_seqs must be positive, got {} and {}", config.max_batch_tokens, config.max_seqs);
}

void Scheduler::add(Sequence* seq) {
  SY_CHECK(!seq->tokens.empty(), "sequence {} has no tokens", seq->id);
  SY_CHECK(blocks_.blocks_for(static_cast<int64_t>(seq->tokens.size()) + 1) <= blocks_.n_blocks(),
           "sequence {} needs {} tokens of KV cache but the whole cache holds {}; raise the KV cache size",
           seq->id, seq->tokens.size() + 1, blocks_.n_blocks() * blocks_.block_size());
  waiting_.push_back(seq);
}

void Scheduler::preempt(Sequence* seq) {
  blocks_.release(seq->block_table);
  seq->computed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
  ++preemptions_;
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> out;
  int64_t budget = config_.max_batch_tokens;

  // Running sequences first, oldest first: each continues with what it has left (one token when
  // decoding, the rest of its prompt when a prefill was chunked). A sequence that cannot grow its
  // table preempts the newest running sequence.
  for (size_t i = 0; i < running_.size() && budget > 0 && static_cast<int64_t>(out.size()) < config_.max_seqs;) {
    Sequence* seq = running_[i];
    const int64_t len = std::min(static_cast<int64_t>(seq->tokens.size()) - seq->computed, budget);
    if (len <= 0) {
      ++i;
      continue;
    }
    if (!blocks_.can_grow(seq->block_table, seq->computed + len)) {
      Sequence* victim = running_.back();
      preempt(victim);
      if (victim == seq) break;
      continue;
    }
    blocks_.grow(seq->block_table, seq->computed + len);
    out.push_back({.seq = seq, .start = seq->computed, .len = len});
    budget -= len;
    ++i;
  }

  // Then admit waiting sequences while budget, sequence slots and KV blocks last.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(out.size()) < config_.max_seqs) {
    Sequence* seq = waiting_.front();
    const int64_t len = std::min(static_cast<int64_t>(seq->tokens.size()) - seq->computed, budget);
    if (!blocks_.can_grow(seq->block_table, seq->computed + len)) break;
    blocks_.grow(seq->block_table, seq->computed + len);
    waiting_.pop_front();
    running_.push_back(seq);
    out.push_back({.seq = seq, .start = seq->computed, .len = len});
    budget -= len;
  }
  return out;
}

void Scheduler::finish(Sequence* seq) {
  blocks_.release(seq->block_table);
  seq->finished = true;
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
}

}  // namespace sy
