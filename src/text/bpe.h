// The byte-pair-encoding models: the vocabulary index, HF `tokenizers`' BPE (merges ranked by their line)
// and tiktoken's (merges ranked by the rank of the merged bytes), over one merge loop, with a word cache.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sy::text::detail {

// Token strings in one arena with an open-addressing index by content; ids may be sparse.
class Vocab {
 public:
  // Ids are below this bound (storage is indexed by id; real vocabularies have < 1M entries).
  static constexpr int64_t kMaxId = int64_t(1) << 24;
  void reserve(size_t tokens, size_t bytes);
  // Returns false (and changes nothing) when `token` or `id` is already present.
  bool insert(std::string_view token, int32_t id) { return insert(token, id, hash(token)); }
  bool insert(std::string_view token, int32_t id, size_t token_hash);
  // The id of `token`, or -1.
  int32_t find(std::string_view token) const { return find(token, hash(token)); }
  // The same with hash(token) computed by the caller, which may have prefetched its slot.
  int32_t find(std::string_view token, size_t token_hash) const;
  static size_t hash(std::string_view token) { return std::hash<std::string_view>{}(token); }
  void prefetch(size_t token_hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[token_hash & (slots_.size() - 1)]);
  }
  bool contains_id(int32_t id) const { return id >= 0 && size_t(id) < spans_.size() && spans_[id].len != kAbsent; }
  // Precondition: contains_id(id).
  std::string_view token(int32_t id) const { return {arena_.data() + spans_[id].offset, spans_[id].len}; }
  // One past the highest id.
  int32_t end_id() const { return static_cast<int32_t>(spans_.size()); }
  size_t size() const { return count_; }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  struct Span {
    uint32_t offset = 0;
    uint32_t len = kAbsent;
  };
  void grow();
  std::string arena_;
  // A slot holds an id (-1 when empty) and the high bits of its token's hash, so that a probe rarely
  // touches the token text of another entry.
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;
  };
  void place(size_t token_hash, int32_t id);
  std::vector<Span> spans_;  // by id
  std::vector<Slot> slots_;  // size is a power of two
  size_t count_ = 0;
};

// (left id, right id) → (rank, merged id), open addressing.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // A later insert of the same pair replaces the earlier one (as `tokenizers` does).
  void insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const;
  void prefetch(int32_t left, int32_t right) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[slot_of(key(left, right))]);
  }
  size_t size() const { return count_; }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t slot_of(uint64_t k) const { return ((k * 0x9E3779B97F4A7C15ull) >> 20) & (slots_.size() - 1); }
  void grow();
  struct Slot {
    uint64_t key = UINT64_MAX;
    Merge merge{};
  };
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

// Piece → ids, shared by the threads that encode; sharded by hash so that threads rarely meet on a
// lock; each shard is bounded (cleared when full).
class WordCache {
 public:
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void store(std::string_view piece, const int32_t* ids, size_t n) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 1 << 12;
  static constexpr size_t kMaxPieceBytes = 256;
  struct Shard {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard(std::string_view piece) const { return shards_[Hash{}(piece) % kShards]; }
  mutable std::array<Shard, kShards> shards_;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// HF `tokenizers` BPE over the pre-tokenised piece's characters.
class BpeModel {
 public:
  // Builds the model; `merges` are (left, right) token pairs in rank order. Throws sy::Error naming
  // `origin` for a merge whose tokens (or whose result) are not in the vocabulary.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges, BpeOptions options,
           std::string_view origin);
  BpeModel(BpeModel&&) noexcept;
  ~BpeModel();

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;
  const Vocab& vocab() const { return vocab_; }

 private:
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
  Vocab vocab_;
  MergeTable merges_;
  BpeOptions options_;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};  // "<0xAB>" tokens for byte_fallback, -1 when absent
  WordCache cache_;
};

// tiktoken's byte-pair encoding: ranks are ids; the pair merged next is the adjacent pair whose
// concatenated bytes have the lowest rank.
class TiktokenModel {
 public:
  // `ranks` holds the raw bytes of each token. Throws sy::Error naming `origin` when a single byte
  // has no rank (tiktoken needs all 256).
  TiktokenModel(Vocab ranks, std::string_view origin);
  TiktokenModel(TiktokenModel&&) noexcept;
  ~TiktokenModel();

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;
  const Vocab& ranks() const { return ranks_; }

 private:
  Vocab ranks_;
  std::array<int32_t, 256> byte_ids_{};
  WordCache cache_;
};

}  // namespace sy::text::detail
