// BlockManager and KvPool.
#include "runtime/kv_cache.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace sy {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : block_size_(block_size) {
  SY_CHECK(n_blocks > 0 && block_size > 0,
           "KV cache needs at least one block of at least one token, got {} blocks of "
           "{}",
           n_blocks, block_size);
  in_use_.assign(static_cast<size_t>(n_blocks), false);
  // Lowest ids on top of the stack so that allocation order is 0, 1, 2, ...
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

bool BlockManager::can_grow(const std::vector<int32_t>& table, int64_t tokens) const {
  const int64_t needed = blocks_for(tokens) - static_cast<int64_t>(table.size());
  return needed <= free_blocks();
}

void BlockManager::grow(std::vector<int32_t>& table, int64_t tokens) {
  SY_CHECK(can_grow(table, tokens), "KV cache out of blocks: need {} more, {} free",
           blocks_for(tokens) - static_cast<int64_t>(table.size()), free_blocks());
  while (static_cast<int64_t>(table.size()) < blocks_for(tokens)) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b)] = true;
    table.push_back(b);
  }
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    SY_CHECK(in_use_[static_cast<size_t>(b)], "block {} released twice", b);
    in_use_[static_cast<size_t>(b)] = false;
    free_.push_back(b);
  }
  table.clear();
}

int32_t BlockManager::slot(const std::vector<int32_t>& table, int64_t pos) const {
  const auto i = static_cast<size_t>(pos / block_size_);
  SY_CHECK(i < table.size(), "position {} is beyond the sequence's {} blocks", pos, table.size());
  return static_cast<int32_t>(static_cast<int64_t>(table[i]) * block_size_ + pos % block_size_);
}

void BlockManager::check_integrity(const std::vector<const std::vector<int32_t>*>& live_tables) const {
  std::vector<int> owners(in_use_.size(), 0);
  for (int32_t b : free_) ++owners[static_cast<size_t>(b)];
  for (const auto* t : live_tables) {
    for (int32_t b : *t) ++owners[static_cast<size_t>(b)];
  }
  for (size_t b = 0; b < owners.size(); ++b) {
    SY_CHECK(owners[b] == 1, "KV block {} has {} owners (free list + live tables); expected exactly 1", b, owners[b]);
    SY_CHECK(in_use_[b] == (std::find(free_.begin(), free_.end(), static_cast<int32_t>(b)) == free_.end()),
             "KV block {} in-use flag disagrees with the free list", b);
  }
}

size_t kv_bytes_per_token(const KvGeometry& g, DType kv_dtype) {
  const auto per_layer = static_cast<size_t>(g.kv_heads * g.head_dim + g.kv_heads * g.v_head_dim + g.index_head_dim);
  return static_cast<size_t>(g.n_layers) * per_layer * dtype_size(kv_dtype);
}

namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(size_t(1) << 30)); }

}  // namespace

KvSizing size_kv_pool(const KvSizingRequest& r) {
  SY_CHECK(r.block_size >= 1, "the KV block size must be at least 1 token, got {}", r.block_size);
  SY_CHECK(r.max_model_len >= 1, "max_model_len must be at least 1, got {}", r.max_model_len);
  SY_CHECK(r.max_running_requests >= 0, "max_running_requests must be >= 0 (0: no cap), got {}",
           r.max_running_requests);
  SY_CHECK(r.kv_memory_fraction > 0.0 && r.kv_memory_fraction <= 1.0, "kv_memory_fraction must be in (0, 1], got {}",
           r.kv_memory_fraction);
  KvSizing out;
  out.bytes_per_block = kv_bytes_per_token(r.geometry, r.kv_dtype) * static_cast<size_t>(r.block_size);
  const int64_t blocks_per_sequence = (r.max_model_len + r.block_size - 1) / r.block_size;
  const int64_t cap = r.max_running_requests > 0 ? r.max_running_requests * blocks_per_sequence : 0;
  const auto budget = static_cast<double>(r.free_bytes) * r.kv_memory_fraction;
  if (out.bytes_per_block == 0) {
    // No KV on this rank (no attention layers in its stage): blocks are bookkeeping only.
    SY_CHECK(cap > 0, "this rank holds no KV cache, so memory does not bound the pool: give max_running_requests");
    out.blocks = cap;
    out.capped = true;
  } else {
    const auto fit = static_cast<int64_t>(budget / static_cast<double>(out.bytes_per_block));
    SY_CHECK(
        fit >= blocks_per_sequence,
        "the KV cache does not hold one sequence of max_model_len {}: it needs {} blocks of {} tokens ({}), but "
        "kv_memory_fraction {} of the {} left after weights and workspace is {}, {} blocks ({} tokens). {}raise "
        "--kv-memory-fraction, or spread the weights over more ranks (--tp, --pp, --ep)",
        r.max_model_len, blocks_per_sequence, r.block_size,
        gib(static_cast<double>(blocks_per_sequence) * static_cast<double>(out.bytes_per_block)), r.kv_memory_fraction,
        gib(static_cast<double>(r.free_bytes)), gib(budget), fit, fit * r.block_size,
        fit > 0 ? fmt::format("Lower --max-model-len to at most {}, ", fit * r.block_size) : std::string("To fit, "));
    out.blocks = fit;
    if (cap > 0 && cap < fit) {
      out.blocks = cap;
      out.capped = true;
    }
  }
  out.capacity_tokens = out.blocks * r.block_size;
  out.bytes = static_cast<size_t>(out.blocks) * out.bytes_per_block;
  return out;
}

// Its bytes() equals n_blocks * block_size * kv_bytes_per_token(g, backend.kv_dtype()).
KvPool::KvPool(Backend& backend, const KvGeometry& g, int64_t n_blocks, int64_t block_size) {
  const int64_t slots = n_blocks * block_size;
  view_.block_size = block_size;
  view_.n_blocks = n_blocks;
  for (int64_t l = 0; l < g.n_layers; ++l) {
    const size_t elem = dtype_size(backend.kv_dtype());
    const auto k_bytes = static_cast<size_t>(slots * g.kv_heads * g.head_dim) * elem;
    const auto v_bytes = static_cast<size_t>(slots * g.kv_heads * g.v_head_dim) * elem;
    const auto index_bytes = static_cast<size_t>(slots * g.index_head_dim) * elem;
    buffers_.push_back(backend.alloc(k_bytes));
    view_.k.push_back(buffers_.back()->data());
    view_.v.push_back(nullptr);
    if (v_bytes > 0) {
      buffers_.push_back(backend.alloc(v_bytes));
      view_.v.back() = buffers_.back()->data();
    }
    if (index_bytes > 0) {
      buffers_.push_back(backend.alloc(index_bytes));
      view_.index_k.push_back(buffers_.back()->data());
    }
    bytes_ += k_bytes + v_bytes + index_bytes;
  }
}

}  // namespace sy
