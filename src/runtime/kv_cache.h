// Paged KV cache: the block allocator and per-sequence block tables (pure CPU logic), the device pool
// that holds every layer's K and V blocks, and the pool's size for a server from the memory left.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace sy {

// Fixed-size blocks of `block_size` token slots. A sequence owns a block table (its block ids in
// order); token position p lives in block table[p / block_size] at offset p % block_size.
class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Whether `table` can be grown to hold `tokens` tokens with the blocks now free.
  bool can_grow(const std::vector<int32_t>& table, int64_t tokens) const;
  // Appends blocks to `table` until it holds `tokens` tokens. Precondition: can_grow(table, tokens).
  void grow(std::vector<int32_t>& table, int64_t tokens);
  // Returns every block of `table` to the pool and clears it. Releasing an empty table is a no-op.
  void release(std::vector<int32_t>& table);
  // Slot index of position `pos` in a sequence with this table.
  int32_t slot(const std::vector<int32_t>& table, int64_t pos) const;
  // Throws if the free list and the given live tables do not partition the pool exactly.
  void check_integrity(const std::vector<const std::vector<int32_t>*>& live_tables) const;

 private:
  int64_t block_size_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::vector<bool> in_use_;
};

// Bytes one token's KV takes on this rank, over every layer of `geometry` (K, V and the indexer's key).
size_t kv_bytes_per_token(const KvGeometry& geometry, DType kv_dtype);

struct KvSizingRequest {
  KvGeometry geometry;           // this rank's (ModelInfo::kv)
  DType kv_dtype = DType::bf16;  // Backend::kv_dtype()
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
