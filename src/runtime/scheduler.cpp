// Scheduler.
#include "runtime/scheduler.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace sy {

Scheduler::Scheduler(std::vector<BlockManager*> blocks, const SchedulerConfig& config)
    : blocks_(std::move(blocks)), live_(blocks_.size(), 0), config_(config) {
  SY_CHECK(config.max_batch_tokens > 0 && config.max_seqs > 0,
           "max_batch_tokens and max_seqs must be positive, got {} and {}", config.max_batch_tokens, config.max_seqs);
  SY_CHECK(!blocks_.empty(), "the scheduler needs one KV block manager per dp rank, got none");
  for (size_t d = 0; d < blocks_.size(); ++d) {
    SY_CHECK(blocks_[d] != nullptr, "the KV block manager of dp rank {} (of {}) is null", d, blocks_.size());
  }
}

void Scheduler::add(Sequence* seq) {
  SY_CHECK(!seq->tokens.empty(), "sequence {} has no tokens", seq->id);
  auto dp = static_cast<int32_t>(std::min_element(live_.begin(), live_.end()) - live_.begin());
  if (config_.prefix_placement && seq->prefix_cache && blocks_.size() > 1) {
    const int64_t least = live_[static_cast<size_t>(dp)];
    int64_t best = 0;
    for (size_t d = 0; d < blocks_.size(); ++d) {
      if (live_[d] > least + kPrefixLoadSlack) continue;
      const int64_t cached = blocks_[d]->cached_prefix(seq->tokens, static_cast<int64_t>(seq->tokens.size()) - 1);
      if (cached > best) {
        best = cached;
        dp = static_cast<int32_t>(d);
      }
    }
  }
  const BlockManager& blocks = *blocks_[static_cast<size_t>(dp)];
  SY_CHECK(blocks.blocks_for(static_cast<int64_t>(seq->tokens.size()) + 1) <= blocks.n_blocks(),
           "sequence {} needs {} tokens of KV cache but the whole cache{} holds {}; raise the KV cache size", seq->id,
           seq->tokens.size() + 1, dp_size() > 1 ? " of a dp rank" : "", blocks.n_blocks() * blocks.block_size());
  seq->dp = dp;
  ++live_[static_cast<size_t>(dp)];
  waiting_.push_back(seq);
}

void Scheduler::preempt(Sequence* seq) {
  blocks_of(seq).release(seq->block_table);
  seq->block_hashes.clear();
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
  // table preempts the newest running sequence of its own dp rank (freeing another rank's blocks would
  // not help); that is at worst the sequence itself, and never one already scheduled in this step.
  for (size_t i = 0; i < running_.size() && budget > 0 && static_cast<int64_t>(out.size()) < config_.max_seqs;) {
    Sequence* seq = running_[i];
    const int64_t len = std::min(static_cast<int64_t>(seq->tokens.size()) - seq->computed, budget);
    if (len <= 0) {
      ++i;
      continue;
    }
    BlockManager& blocks = blocks_of(seq);
    if (!blocks.can_grow(seq->block_table, seq->computed + len)) {
      // Found from the back, so `seq` (at i) is reached at the latest; erasing at or after i leaves
      // running_[i] the next sequence to look at.
      const auto victim =
          std::find_if(running_.rbegin(), running_.rend(), [&](const Sequence* s) { return s->dp == seq->dp; });
      preempt(*victim);
      continue;
    }
    blocks.grow(seq->block_table, seq->computed + len);
    out.push_back({.seq = seq, .start = seq->computed, .len = len});
    budget -= len;
    ++i;
  }

  // Then admit waiting sequences, in order, while budget, sequence slots and KV blocks last. The first
  // sequence that does not fit blocks the later ones of its dp rank (first come, first served within a
  // pool) but not those of other dp ranks, whose pools may still have room.
  std::vector<bool> pool_full(blocks_.size(), false);
  for (size_t i = 0; i < waiting_.size() && budget > 0 && static_cast<int64_t>(out.size()) < config_.max_seqs;) {
    Sequence* seq = waiting_[i];
    const auto dp = static_cast<size_t>(seq->dp);
    BlockManager& blocks = *blocks_[dp];
    // Whole cached blocks first; the last token is always computed, since its logits give the next one.
    int64_t matched = 0;
    if (!pool_full[dp] && seq->prefix_cache && seq->computed == 0 && seq->block_table.empty()) {
      matched = blocks.match_prefix(seq->tokens, static_cast<int64_t>(seq->tokens.size()) - 1, seq->block_table,
                                    seq->block_hashes);
      seq->computed = matched;
    }
    const int64_t len = std::min(static_cast<int64_t>(seq->tokens.size()) - seq->computed, budget);
    if (pool_full[dp] || !blocks.can_grow(seq->block_table, seq->computed + len)) {
      if (matched > 0) {  // not admitted: its references go back until it is
        blocks.release(seq->block_table);
        seq->block_hashes.clear();
        seq->computed = 0;
      }
      pool_full[dp] = true;
      if (std::all_of(pool_full.begin(), pool_full.end(), [](bool full) { return full; })) break;
      ++i;
      continue;
    }
    blocks.grow(seq->block_table, seq->computed + len);
    if (seq->cached_tokens < 0) {
      seq->cached_tokens = matched;
      if (blocks.prefix_cache() && seq->prefix_cache) {
        prefix_query_tokens_ += static_cast<int64_t>(seq->tokens.size());
        prefix_hit_tokens_ += matched;
      }
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    running_.push_back(seq);
    out.push_back({.seq = seq, .start = seq->computed, .len = len});
    budget -= len;
  }
  return out;
}

void Scheduler::finish(Sequence* seq) {
  if (seq->finished) return;
  blocks_of(seq).release(seq->block_table);
  seq->block_hashes.clear();
  seq->finished = true;
  --live_[static_cast<size_t>(seq->dp)];
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
}

}  // namespace sy
