// BlockManager and KvPool.
#include "runtime/kv_cache.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace sy {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_cache)
    : block_size_(block_size), prefix_cache_(prefix_cache) {
  SY_CHECK(n_blocks > 0 && block_size > 0,
           "KV cache needs at least one block of at least one token, got {} blocks of "
           "{}",
           n_blocks, block_size);
  const auto n = static_cast<size_t>(n_blocks);
  refs_.assign(n, 0);
  lru_at_.resize(n);
  in_lru_.assign(n, false);
  key_.resize(n);
  // Lowest ids on top of the stack so that allocation order is 0, 1, 2, ...
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

bool BlockManager::can_grow(const std::vector<int32_t>& table, int64_t tokens) const {
  const int64_t needed = blocks_for(tokens) - static_cast<int64_t>(table.size());
  return needed <= free_blocks();
}

void BlockManager::unregister(int32_t b) {
  std::optional<Key>& k = key_[static_cast<size_t>(b)];
  if (!k) return;
  const auto it = cache_.find(k->hash);
  if (it != cache_.end() && it->second == b) cache_.erase(it);
  k.reset();
}

int32_t BlockManager::take_block() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    // The least recently released cached block gives up its content.
    b = lru_.front();
    lru_.pop_front();
    in_lru_[static_cast<size_t>(b)] = false;
    unregister(b);
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockManager::grow(std::vector<int32_t>& table, int64_t tokens) {
  SY_CHECK(can_grow(table, tokens), "KV cache out of blocks: need {} more, {} free",
           blocks_for(tokens) - static_cast<int64_t>(table.size()), free_blocks());
  while (static_cast<int64_t>(table.size()) < blocks_for(tokens)) table.push_back(take_block());
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    const auto i = static_cast<size_t>(b);
    SY_CHECK(refs_[i] > 0, "block {} released more often than it was taken", b);
    if (--refs_[i] > 0) continue;
    if (key_[i]) {
      lru_at_[i] = lru_.insert(lru_.end(), b);
      in_lru_[i] = true;
    } else {
      free_.push_back(b);
    }
  }
  table.clear();
}

int32_t BlockManager::slot(const std::vector<int32_t>& table, int64_t pos) const {
  const auto i = static_cast<size_t>(pos / block_size_);
  SY_CHECK(i < table.size(), "position {} is beyond the sequence's {} blocks", pos, table.size());
  return static_cast<int32_t>(static_cast<int64_t>(table[i]) * block_size_ + pos % block_size_);
}

uint64_t BlockManager::hash_block(uint64_t parent, const int32_t* tokens, int64_t n) {
  // splitmix64 steps over the parent's hash and each token: a well-mixed 64-bit chain; a match is also
  // confirmed on the tokens and the parent's hash, so a collision cannot attach wrong K/V.
  const auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent ^ 0x5bd1e995ULL);
  for (int64_t i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h == 0 ? 1 : h;  // 0 is the empty chain's parent
}

int32_t BlockManager::find(uint64_t parent, const std::vector<int32_t>& tokens, int64_t i, uint64_t* hash) const {
  const int32_t* first = tokens.data() + i * block_size_;
  const uint64_t h = hash_block(parent, first, block_size_);
  *hash = h;
  const auto it = cache_.find(h);
  if (it == cache_.end()) return -1;
  const Key& k = *key_[static_cast<size_t>(it->second)];
  if (k.parent != parent || !std::equal(k.tokens.begin(), k.tokens.end(), first)) return -1;
  return it->second;
}

int64_t BlockManager::cached_prefix(const std::vector<int32_t>& tokens, int64_t max_tokens) const {
  if (!prefix_cache_) return 0;
  const int64_t whole = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / block_size_;
  uint64_t parent = 0;
  int64_t i = 0;
  for (; i < whole; ++i) {
    uint64_t h = 0;
    if (find(parent, tokens, i, &h) < 0) break;
    parent = h;
  }
  return i * block_size_;
}

int64_t BlockManager::match_prefix(const std::vector<int32_t>& tokens, int64_t max_tokens, std::vector<int32_t>& table,
                                   std::vector<uint64_t>& hashes) {
  SY_CHECK(table.empty() && hashes.empty(), "match_prefix needs an empty table, got {} blocks", table.size());
  if (!prefix_cache_) return 0;
  const int64_t whole = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / block_size_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < whole; ++i) {
    uint64_t h = 0;
    const int32_t b = find(parent, tokens, i, &h);
    if (b < 0) break;
    const auto bi = static_cast<size_t>(b);
    if (refs_[bi]++ == 0 && in_lru_[bi]) {
      lru_.erase(lru_at_[bi]);
      in_lru_[bi] = false;
    }
    table.push_back(b);
    hashes.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(table.size()) * block_size_;
}

void BlockManager::commit(const std::vector<int32_t>& tokens, int64_t computed, const std::vector<int32_t>& table,
                          std::vector<uint64_t>& hashes) {
  if (!prefix_cache_) return;
  const int64_t full = std::min<int64_t>(computed / block_size_, static_cast<int64_t>(table.size()));
  for (auto i = static_cast<int64_t>(hashes.size()); i < full; ++i) {
    const uint64_t parent = hashes.empty() ? 0 : hashes.back();
    const int32_t* first = tokens.data() + i * block_size_;
    const uint64_t h = hash_block(parent, first, block_size_);
    hashes.push_back(h);
    const int32_t b = table[static_cast<size_t>(i)];
    if (cache_.count(h) != 0 || key_[static_cast<size_t>(b)]) continue;  // another block holds it already
    key_[static_cast<size_t>(b)] = Key{.hash = h, .parent = parent, .tokens = {first, first + block_size_}};
    cache_.emplace(h, b);
  }
}

void BlockManager::check_integrity(const std::vector<const std::vector<int32_t>*>& live_tables) const {
  std::vector<int> held(refs_.size(), 0);
  for (const auto* t : live_tables) {
    for (int32_t b : *t) {
      SY_CHECK(b >= 0 && static_cast<size_t>(b) < refs_.size(), "a live table holds block {} of a pool of {}", b,
               refs_.size());
      ++held[static_cast<size_t>(b)];
    }
  }
  std::vector<int> listed(refs_.size(), 0);
  for (int32_t b : free_) ++listed[static_cast<size_t>(b)];
  for (int32_t b : lru_) {
    ++listed[static_cast<size_t>(b)];
    SY_CHECK(in_lru_[static_cast<size_t>(b)] && key_[static_cast<size_t>(b)],
             "KV block {} is among the unreferenced cached blocks but not marked cached", b);
  }
  for (size_t b = 0; b < refs_.size(); ++b) {
    SY_CHECK(refs_[b] == held[b], "KV block {} counts {} references but {} live tables hold it", b, refs_[b], held[b]);
    SY_CHECK((refs_[b] == 0) == (listed[b] == 1) && listed[b] <= 1,
             "KV block {} has {} references and is listed {} times as free or cached; an unreferenced block must be "
             "listed exactly once, a referenced one never",
             b, refs_[b], listed[b]);
    SY_CHECK(refs_[b] > 0 || in_lru_[b] == key_[b].has_value(), "unreferenced KV block {} is {} but {}", b,
             in_lru_[b] ? "among the cached blocks" : "free", key_[b] ? "holds cached content" : "holds none");
    if (key_[b]) {
      const auto it = cache_.find(key_[b]->hash);
      SY_CHECK(it != cache_.end() && it->second == static_cast<int32_t>(b),
               "KV block {} holds cached content that the cache's index does not point to", b);
    }
  }
  for (const auto& [h, b] : cache_) {
    SY_CHECK(key_[static_cast<size_t>(b)] && key_[static_cast<size_t>(b)]->hash == h,
             "the cache's index points to KV block {}, which does not hold that content", b);
  }
}

size_t kv_bytes_per_token(const KvGeometry& g, DType kv_dtype, DType index_dtype) {
  const auto kv = static_cast<size_t>(g.kv_heads * g.head_dim + g.kv_heads * g.v_head_dim) * dtype_size(kv_dtype);
  const auto index = static_cast<size_t>(g.index_head_dim) * dtype_size(index_dtype);
  return static_cast<size_t>(g.n_layers) * (kv + index);
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
  out.bytes_per_block = kv_bytes_per_token(r.geometry, r.kv_dtype, r.index_dtype) * static_cast<size_t>(r.block_size);
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

// Its bytes() equals n_blocks * block_size * kv_bytes_per_token(g, backend.kv_storage_dtype(),
// backend.weight_dtype()).
KvPool::KvPool(Backend& backend, const KvGeometry& g, int64_t n_blocks, int64_t block_size) {
  const int64_t slots = n_blocks * block_size;
  view_.block_size = block_size;
  view_.n_blocks = n_blocks;
  for (int64_t l = 0; l < g.n_layers; ++l) {
    const size_t elem = dtype_size(backend.kv_storage_dtype());
    const auto k_bytes = static_cast<size_t>(slots * g.kv_heads * g.head_dim) * elem;
    const auto v_bytes = static_cast<size_t>(slots * g.kv_heads * g.v_head_dim) * elem;
    const auto index_bytes = static_cast<size_t>(slots * g.index_head_dim) * dtype_size(backend.weight_dtype());
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
