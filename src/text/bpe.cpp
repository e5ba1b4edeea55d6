// Vocabulary index, merge table, word cache, and the BPE / tiktoken models over one merge loop.
#include "text/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "base/check.h"
#include "text/unicode.h"

namespace sy::text::detail {

namespace {

size_t hash_bytes(std::string_view s) { return Vocab::hash(s); }

// A symbol of the word being merged: a token id over the byte range [begin, end) of the piece, in a
// doubly linked list (prev/next are indices, -1 at the ends). id == -1 marks a symbol merged away.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t begin;
  uint32_t end;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t id;
  // Lowest rank first, then leftmost (as `tokenizers`' Merge ordering and tiktoken's scan).
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Merges adjacent symbols, lowest-ranked pair first, until no pair has a merge. `lookup(a, b)` gives the
// merge of two adjacent symbols or nullopt. Appends the surviving ids to `out`.
template <class Lookup>
void merge_symbols(std::vector<Symbol>& symbols, const Lookup& lookup, std::vector<int32_t>& out) {
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(symbols.size());
  std::priority_queue<Candidate> queue(std::less<Candidate>{}, std::move(heap_storage));
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (auto m = lookup(symbols[i], symbols[i + 1])) queue.push({m->rank, i, m->id});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    // Skip entries made stale by an earlier merge of either side.
    const auto current = lookup(left, right);
    if (!current || current->id != top.id || current->rank != top.rank) continue;
    symbols[left.next].id = -1;
    left.id = top.id;
    left.end = right.end;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (auto m = lookup(symbols[left.prev], left)) queue.push({m->rank, left.prev, m->id});
    }
    if (left.next >= 0) {
      if (auto m = lookup(left, symbols[left.next])) queue.push({m->rank, top.pos, m->id});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.id >= 0) out.push_back(s.id);
  }
}

}  // namespace

void Vocab::place(size_t hash, int32_t id) {
  const size_t mask = slots_.size() - 1;
  size_t h = hash & mask;
  while (slots_[h].id >= 0) h = (h + 1) & mask;
  slots_[h] = {static_cast<uint32_t>(hash >> 32), id};
}

void Vocab::reserve(size_t tokens, size_t bytes) {
  arena_.reserve(bytes);
  spans_.reserve(tokens);
  size_t cap = 16;
  while (cap < tokens * 2) cap *= 2;
  if (cap > slots_.size()) {
    slots_.assign(cap, Slot{});
    for (int32_t id = 0; id < end_id(); ++id) {
      if (contains_id(id)) place(hash_bytes(token(id)), id);
    }
  }
}

void Vocab::grow() { reserve(std::max<size_t>(count_ * 2, 16), arena_.size()); }

bool Vocab::insert(std::string_view token_text, int32_t id, size_t hash) {
  if (id < 0 || contains_id(id)) return false;
  if ((count_ + 1) * 2 > slots_.size()) grow();
  // One probe sequence both rejects a duplicate and finds the free slot.
  const size_t mask = slots_.size() - 1;
  const auto tag = static_cast<uint32_t>(hash >> 32);
  size_t h = hash & mask;
  for (; slots_[h].id >= 0; h = (h + 1) & mask) {
    if (slots_[h].tag == tag && token(slots_[h].id) == token_text) return false;
  }
  if (size_t(id) >= spans_.size()) spans_.resize(size_t(id) + 1);
  spans_[id] = {static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token_text.size())};
  arena_.append(token_text);
  slots_[h] = {tag, id};
  ++count_;
  return true;
}

int32_t Vocab::find(std::string_view token_text, size_t hash) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  const auto tag = static_cast<uint32_t>(hash >> 32);
  for (size_t h = hash & mask;; h = (h + 1) & mask) {
    const Slot slot = slots_[h];
    if (slot.id < 0) return -1;
    if (slot.tag == tag && token(slot.id) == token_text) return slot.id;
  }
}

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap *= 2;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  count_ = 0;
  for (const Slot& s : old) {
    if (s.key != UINT64_MAX) insert(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.merge);
  }
}

void MergeTable::grow() { reserve(std::max<size_t>(count_ * 2, 16)); }

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t k = key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t h = slot_of(k);; h = (h + 1) & mask) {
    if (slots_[h].key == k) {
      slots_[h].merge = merge;
      return;
    }
    if (slots_[h].key == UINT64_MAX) {
      slots_[h] = {k, merge};
      ++count_;
      return;
    }
  }
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t k = key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t h = slot_of(k);; h = (h + 1) & mask) {
    if (slots_[h].key == k) return &slots_[h].merge;
    if (slots_[h].key == UINT64_MAX) return nullptr;
  }
}

bool WordCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  Shard& s = shard(piece);
  std::shared_lock lock(s.mutex);
  const auto it = s.map.find(piece);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::store(std::string_view piece, const int32_t* ids, size_t n) const {
  if (piece.size() >= kMaxPieceBytes) return;
  Shard& s = shard(piece);
  std::unique_lock lock(s.mutex);
  if (s.map.size() >= kShardCapacity) s.map.clear();
  s.map.try_emplace(std::string(piece), ids, ids + n);
}

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                   BpeOptions options, std::string_view origin)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  const size_t prefix_len = options_.continuing_subword_prefix.size();
  // Merges are resolved in blocks whose hash slots are prefetched first: the three vocabulary lookups per
  // merge are cache misses, and loading a 150k-merge file is bound by their latency.
  constexpr size_t kBlock = 32;
  std::string merged[kBlock];
  size_t hashes[kBlock][3];
  for (size_t block = 0; block < merges.size(); block += kBlock) {
    const size_t n = std::min(kBlock, merges.size() - block);
    for (size_t k = 0; k < n; ++k) {
      const auto& [a, b] = merges[block + k];
      merged[k].assign(a);
      merged[k].append(b.substr(std::min(prefix_len, b.size())));
      hashes[k][0] = Vocab::hash(a);
      hashes[k][1] = Vocab::hash(b);
      hashes[k][2] = Vocab::hash(merged[k]);
      for (const size_t h : hashes[k]) vocab_.prefetch(h);
    }
    int32_t ids[kBlock][3];
    for (size_t k = 0; k < n; ++k) {
      const size_t rank = block + k;
      const auto& [a, b] = merges[rank];
      const int32_t a_id = vocab_.find(a, hashes[k][0]), b_id = vocab_.find(b, hashes[k][1]);
      SY_CHECK(a_id >= 0 && b_id >= 0,
               "{}: merge {} (\"{} {}\") names token \"{}\" that is not in model.vocab; the merges and the "
               "vocabulary must come from the same tokenizer",
               origin, rank, a, b, a_id < 0 ? a : b);
      const int32_t id = vocab_.find(merged[k], hashes[k][2]);
      SY_CHECK(id >= 0, "{}: merge {} (\"{} {}\") makes \"{}\", which is not in model.vocab", origin, rank, a, b,
               merged[k]);
      ids[k][0] = a_id;
      ids[k][1] = b_id;
      ids[k][2] = id;
      merges_.prefetch(a_id, b_id);
    }
    for (size_t k = 0; k < n; ++k) merges_.insert(ids[k][0], ids[k][1], {static_cast<int32_t>(block + k), ids[k][2]});
  }
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
    SY_CHECK(unk_id_ >= 0, "{}: model.unk_token \"{}\" is not in model.vocab", origin, *options_.unk_token);
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b));
}

BpeModel::BpeModel(BpeModel&& o) noexcept
    : vocab_(std::move(o.vocab_)),
      merges_(std::move(o.merges_)),
      options_(std::move(o.options_)),
      unk_id_(o.unk_id_),
      byte_ids_(o.byte_ids_) {}
BpeModel::~BpeModel() = default;

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (const int32_t id = vocab_.find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (cache_.lookup(piece, out)) return;
  const size_t first = out.size();
  merge_word(piece, out);
  cache_.store(piece, out.data() + first, out.size() - first);
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, 0, 0});
    if (n > 0) symbols[n - 1].next = n;
  };
  // A pending unknown run, added when the next known character arrives (or at the end), as `tokenizers`
  // does; byte-fallback characters do not flush it.
  bool have_unk = false;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    const size_t len = utf8_len(static_cast<unsigned char>(w[i]));
    const bool is_first = i == 0, is_last = i + len >= w.size();
    std::string_view c = w.substr(i, len);
    i += len;
    if ((!is_first && !options_.continuing_subword_prefix.empty()) ||
        (is_last && !options_.end_of_word_suffix.empty())) {
      s.clear();
      if (!is_first) s.append(options_.continuing_subword_prefix);
      s.append(c);
      if (is_last) s.append(options_.end_of_word_suffix);
      c = s;
    }
    if (const int32_t id = vocab_.find(c); id >= 0) {
      if (have_unk) add(unk_id_);
      have_unk = false;
      add(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : c) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : c) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (have_unk && !options_.fuse_unk) add(unk_id_);
      have_unk = true;
    }
  }
  if (have_unk) add(unk_id_);
  const auto lookup = [this](const Symbol& a, const Symbol& b) -> std::optional<MergeTable::Merge> {
    if (const auto* m = merges_.find(a.id, b.id)) return *m;
    return std::nullopt;
  };
  merge_symbols(symbols, lookup, out);
}

TiktokenModel::TiktokenModel(Vocab ranks, std::string_view origin) : ranks_(std::move(ranks)) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_ids_[b] = ranks_.find(std::string_view(&c, 1));
    SY_CHECK(byte_ids_[b] >= 0, "{}: byte 0x{:02X} has no rank; a tiktoken vocabulary must rank all 256 single bytes",
             origin, b);
  }
}

TiktokenModel::TiktokenModel(TiktokenModel&& o) noexcept : ranks_(std::move(o.ranks_)), byte_ids_(o.byte_ids_) {}
TiktokenModel::~TiktokenModel() = default;

void TiktokenModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  // tiktoken takes a piece that is itself a token whole.
  if (const int32_t id = ranks_.find(piece); id >= 0) {
    out.push_back(id);
    return;
  }
  if (cache_.lookup(piece, out)) return;
  const size_t first = out.size();
  std::vector<Symbol> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    symbols[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], int32_t(i) - 1,
                  i + 1 < piece.size() ? int32_t(i + 1) : -1, uint32_t(i), uint32_t(i + 1)};
  }
  const auto lookup = [&](const Symbol& a, const Symbol& b) -> std::optional<MergeTable::Merge> {
    const int32_t id = ranks_.find(piece.substr(a.begin, b.end - a.begin));
    if (id < 0) return std::nullopt;
    return MergeTable::Merge{id, id};
  };
  merge_symbols(symbols, lookup, out);
  cache_.store(piece, out.data() + first, out.size() - first);
}

}  // namespace sy::text::detail
