// The tokenizer's state behind the public interface (Tokenizer::Impl), the added-token matcher, and the
// loaders that build an Impl from tokenizer.json or from a tiktoken vocabulary.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "text/bpe.h"
#include "text/pipeline.h"
#include "text/tokenizer.h"

namespace sy::text::detail {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// Finds added tokens in text as `tokenizers`' AddedVocabulary does: leftmost-longest matches, then the
// single_word / lstrip / rstrip rules.
class AddedTokenMatcher {
 public:
  // `patterns[k]` is what to look for (the content, or the normalized content) of `tokens[k]`.
  void build(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens);
  bool empty() const { return tokens_.empty(); }

  struct Split {
    size_t begin;
    size_t end;
    int32_t id;  // -1: plain text
  };
  // Splits `text` into plain-text and added-token parts, in order, covering it; empty text gives one
  // empty plain part.
  void split(std::string_view text, std::vector<Split>& out) const;

 private:
  // Byte trie: (node << 8 | byte) → child node; terminal[node] is the token index or -1.
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;
  bool first_byte_[256] = {};
  std::vector<const AddedToken*> tokens_;
};

}  // namespace sy::text::detail

namespace sy::text {

struct Tokenizer::Impl {
  std::string origin;  // the file(s) it was read from, for messages
  std::variant<detail::BpeModel, detail::TiktokenModel> model;

  std::vector<detail::AddedToken> added;  // in file order
  std::unordered_map<std::string, int32_t> added_ids;
  std::unordered_map<int32_t, size_t> added_by_id;  // id → index into `added`
  detail::AddedTokenMatcher raw_matcher;            // tokens with normalized == false
  detail::AddedTokenMatcher normalized_matcher;     // tokens with normalized == true, their content normalized

  std::vector<detail::NormalizerStep> normalizer;
  std::vector<detail::PreTokenizerStep> pre_tokenizer;
  bool has_decoder = false;  // without one, tokens are joined with spaces
  std::vector<detail::DecoderStep> decoder;
  // Post-processing of a single sequence when special tokens are added.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  bool clean_up_tokenization_spaces = false;  // transformers' decode-time cleanup
  bool kimi_chunks = false;                   // encode in the parts tokenization_kimi.py makes
  int64_t vocab_size = 0;

  Impl(std::string origin_, std::variant<detail::BpeModel, detail::TiktokenModel> model_)
      : origin(std::move(origin_)), model(std::move(model_)) {}

  // Registers the added tokens and builds the matchers (after the normalizer is set).
  void finish_added_tokens(std::vector<detail::AddedToken> tokens);
  // Appends the ids of `text` (valid UTF-8), without the post-processor's special tokens.
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;
  std::string decode_raw(std::span<const int32_t> ids, bool skip_special_tokens) const;
  std::string model_token(int32_t id) const;  // "" when the model has no such id
};

}  // namespace sy::text

namespace sy::text::detail {

std::unique_ptr<Tokenizer::Impl> load_tokenizer_json(const std::filesystem::path& file,
                                                     const std::optional<nlohmann::json>& config,
                                                     const std::filesystem::path& config_file);
std::unique_ptr<Tokenizer::Impl> load_tiktoken(const std::filesystem::path& model_file, const nlohmann::json& config,
                                               const std::filesystem::path& config_file);

// The parts tokenization_kimi.py encodes separately: chunks of 400,000 code points, each cut so that no
// part holds more than 25,000 consecutive whitespace (Python's str.isspace) or non-whitespace code points.
void split_kimi_parts(std::string_view text, std::vector<std::string_view>& parts);

// JSON helpers shared by the loaders: typed access that throws sy::Error naming the file and key.
const nlohmann::json& json_member(const nlohmann::json& j, std::string_view key, std::string_view where);
std::string json_string(const nlohmann::json& j, std::string_view key, std::string_view where,
                        std::optional<std::string> fallback = std::nullopt);
bool json_bool(const nlohmann::json& j, std::string_view key, std::string_view where, std::optional<bool> fallback);
int64_t json_int(const nlohmann::json& j, std::string_view key, std::string_view where);
// A special-token entry of tokenizer_config.json: a string or an {"content": ...} object; nullopt for null.
std::optional<std::string> config_token(const nlohmann::json& config, std::string_view key, std::string_view where);

}  // namespace sy::text::detail
