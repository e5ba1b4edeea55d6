// Paged KV cache: the block allocator and per-sequence block tables (pure CPU logic), the device pool
// that holds every layer's K and V blocks, and the pool's size for a server from the memory left.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace sy {

// Fixed-size blocks of `block_size` token slots. A sequence owns a block table (its block ids in
// order); token position p lives in block table[p / block_size] at offset p % block_size.
//
// With the prefix cache on, a block whose slots hold the K/V of a whole block of tokens is registered
// under its content: a hash of the tokens of every block up to and including it (with the tokens
// themselves kept to confirm a match). A later sequence whose prompt starts with the same whole blocks
// takes those blocks into its table (match_prefix) instead of computing them again, so one block may be
// in several tables: each block counts its references. A block nobody references stays cached (and
// matchable) until its slots are needed; then the least recently released cached block is reused.
class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_cache = false);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks a table can take now: free ones and cached ones that nobody references.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  // Cached blocks (referenced or not), and those of them nobody references.
  int64_t cached_blocks() const { return static_cast<int64_t>(cache_.size()); }
  int64_t evictable_blocks() const { return static_cast<int64_t>(lru_.size()); }
  bool prefix_cache() const { return prefix_cache_; }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Whether `table` can be grown to hold `tokens` tokens with the blocks now free.
  bool can_grow(const std::vector<int32_t>& table, int64_t tokens) const;
  // Appends blocks to `table` until it holds `tokens` tokens, taking free blocks first and then the least
  // recently released cached ones (which leave the cache). Precondition: can_grow(table, tokens).
  void grow(std::vector<int32_t>& table, int64_t tokens);
  // Drops the table's reference to each of its blocks and clears it; a block nobody references any more
  // is free again, or stays cached when it is. Releasing an empty table is a no-op.
  void release(std::vector<int32_t>& table);
  // Slot index of position `pos` in a sequence with this table.
  int32_t slot(const std::vector<int32_t>& table, int64_t pos) const;

  // The longest run of whole cached blocks that `tokens` starts with, covering at most `max_tokens`
  // tokens: appended to the empty `table` (each block referenced once more) with their content hashes
  // appended to `hashes`. Returns the tokens covered (a multiple of block_size; 0 with the cache off).
  int64_t match_prefix(const std::vector<int32_t>& tokens, int64_t max_tokens, std::vector<int32_t>& table,
                       std::vector<uint64_t>& hashes);
  // Tokens match_prefix would cover now, without taking anything.
  int64_t cached_prefix(const std::vector<int32_t>& tokens, int64_t max_tokens) const;
  // Registers the blocks of `table` that the first `computed` tokens fill and `hashes` (their hash chain so
  // far, extended here) does not cover yet. A block whose content another block already holds stays
  // unregistered (it is freed on release). No-op with the cache off.
  void commit(const std::vector<int32_t>& tokens, int64_t computed, const std::vector<int32_t>& table,
              std::vector<uint64_t>& hashes);

  // Throws unless the live tables' references, the free list, the unreferenced cached blocks and the
  // cache's index account for every block exactly: each block referenced as often as the tables hold it,
  // or unreferenced and either free (not cached) or cached, never both.
  void check_integrity(const std::vector<const std::vector<int32_t>*>& live_tables) const;

 private:
  struct Key {
    uint64_t hash = 0;    // of every token up to the block's end
    uint64_t parent = 0;  // the previous block's hash (0 for the first)
    std::vector<int32_t> tokens;
  };
  static uint64_t hash_block(uint64_t parent, const int32_t* tokens, int64_t n);
  // The cached block holding block `i` of `tokens` after the chain hash `parent`, or -1.
  int32_t find(uint64_t parent, const std::vector<int32_t>& tokens, int64_t i, uint64_t* hash) const;
  int32_t take_block();
  void unregister(int32_t b);
  int64_t block_size_;
  bool prefix_cache_;
  std::vector<int32_t> refs_;  // per block: tables holding it
  std::vector<int32_t> free_;  // stack of unreferenced, uncached blocks
  std::list<int32_t> lru_;     // unreferenced cached blocks, least recently released first
  std::vector<std::list<int32_t>::iterator> lru_at_;
  std::vector<bool> in_lru_;
  std::vector<std::optional<Key>> key_;          // per block: its content, while cached
  std::unordered_map<uint64_t, int32_t> cache_;  // content hash -> block
};

// Bytes one token's KV takes on this rank, over every layer of `geometry`: K and V in kv_dtype, the indexer's key
// in index_dtype.
size_t kv_bytes_per_token(const KvGeometry& geometry, DType kv_dtype, DType index_dtype);

struct KvSizingRequest {
  KvGeometry geometry;              // this rank's (ModelInfo::kv)
  DType kv_dtype = DType::bf16;     // Backend::kv_storage_dtype()
  DType index_dtype = DType::bf16;  // Backend::weight_dtype(): the sparse indexer's keys
  int64_t block_size = 16;
  size_t free_bytes = 0;            // device memory left after weights and workspace
  double kv_memory_fraction = 0.9;  // the share of free_bytes the KV cache takes, in (0, 1]
  int64_t max_model_len = 0;        // the longest sequence served (prompt + output), >= 1
  // Sequences one pool serves at once (under attention dp: per dp rank); the pool gets no more blocks
  // than they can fill at max_model_len. 0: no cap.
  int64_t max_running_requests = 0;
};

struct KvSizing {
  int64_t blocks = 0;           // of one dp rank's pool (EngineConfig::kv_blocks)
  int64_t capacity_tokens = 0;  // blocks * block_size
  size_t bytes = 0;             // device memory the pool takes
  size_t bytes_per_block = 0;
  bool capped = false;  // limited by max_running_requests rather than by memory
};

// Blocks of the KV pool: what kv_memory_fraction of free_bytes holds, capped by max_running_requests
// sequences of max_model_len. Throws sy::Error with the figures and what to change when not even one
// sequence of max_model_len fits.
KvSizing size_kv_pool(const KvSizingRequest& request);

// Device memory for all layers' K/V blocks.
class KvPool {
 public:
  KvPool(Backend& backend, const KvGeometry& geometry, int64_t n_blocks, int64_t block_size);
  const KvCacheView& view() const { return view_; }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  KvCacheView view_;
  size_t bytes_ = 0;
};

}  // namespace sy
