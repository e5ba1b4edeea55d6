// Tokenizers read from a Hugging Face model folder: tokenizer.json of the `tokenizers` library (BPE with
// byte-level or Metaspace/byte-fallback pre-tokenisation, normalizers, added tokens, post-processor,
// decoder) and tiktoken vocabularies (Kimi K2's tiktoken.model), behind one interface; and the
// incremental detokeniser that streaming output uses.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sy::text {

class Tokenizer {
 public:
  // Reads `dir`/tokenizer.json (with `dir`/tokenizer_config.json when present), or, when there is no
  // tokenizer.json, `dir`/tiktoken.model with `dir`/tokenizer_config.json. A missing, truncated or
  // malformed file throws sy::Error naming the file and what is wrong.
  static Tokenizer load(const std::filesystem::path& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text → ids as `tokenizers` encodes it (added tokens split out first, then normalizer, pre-tokenizer,
  // model; with `add_special_tokens`, the post-processor's BOS/EOS). Invalid UTF-8 in `text` is first
  // replaced as Python's bytes.decode("utf-8", "replace") does (one U+FFFD per maximal invalid subpart).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids → text as `tokenizers` decodes it; an id the tokenizer has no token for (outside [0, vocab_size()),
  // such as the padded rows of a model's vocabulary) decodes to nothing, as in `tokenizers`.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // One past the highest id, added tokens included.
  int64_t vocab_size() const;
  // The id of a vocabulary entry or added token, spelled as in the file ("<|im_end|>", "Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The vocabulary entry of an id as spelled in the file (the inverse of token_id).
  std::string token_text(int32_t id) const;
  // Whether `id` is an added token marked special (skipped by skip_special_tokens).
  bool is_special(int32_t id) const;

  // The state, defined in tokenizer_impl.h; named here so that its loaders can build one.
  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class IncrementalDecoder;
};

// Streaming detokenisation with the semantics of `tokenizers`' DecodeStream: push() returns the text a
// new token adds to the decoded sequence, or "" while the text so far ends in an incomplete UTF-8
// character (held back until complete). The concatenation of every piece equals decode() of all ids.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_index_ = 0;
  std::string prefix_;
};

}  // namespace sy::text
