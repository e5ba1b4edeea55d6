// The components of a `tokenizers` pipeline as values: normalizers, pre-tokenizers, decoders and the
// post-processor's special tokens. Nested Sequences are flattened into step lists when read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "text/unicode.h"

namespace sy::text::detail {

// A `{"String": ...}` (literal) or `{"Regex": ...}` pattern.
class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(std::string_view pattern, std::string_view origin);
  // Byte ranges of the successive non-overlapping matches.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// --- normalizers -------------------------------------------------------------------------------------
struct UnicodeNormalizer {
  UnicodeForm form;
};
struct PrependNormalizer {
  std::string prepend;  // prepended to a non-empty string
};
struct ReplaceNormalizer {
  Pattern pattern;
  std::string content;
};
struct LowercaseNormalizer {};
struct StripNormalizer {
  bool left;
  bool right;
};
using NormalizerStep =
    std::variant<UnicodeNormalizer, PrependNormalizer, ReplaceNormalizer, LowercaseNormalizer, StripNormalizer>;

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

// --- pre-tokenizers ----------------------------------------------------------------------------------
// A piece of the input on its way to the model. `at_start`: it begins at offset 0 of the original input
// (what Metaspace's prepend_scheme "first" looks at).
struct Piece {
  std::string text;
  bool at_start;
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
enum class PrependScheme { always, first, never };

struct SplitPreTokenizer {
  Pattern pattern;
  SplitBehavior behavior;
  bool invert;
};
struct ByteLevelPreTokenizer {
  bool add_prefix_space;
  bool use_regex;  // GPT-2's pattern
};
struct MetaspacePreTokenizer {
  std::string replacement;  // one character, UTF-8
  PrependScheme prepend_scheme;
  bool split;
};
struct DigitsPreTokenizer {
  bool individual_digits;
};
using PreTokenizerStep =
    std::variant<SplitPreTokenizer, ByteLevelPreTokenizer, MetaspacePreTokenizer, DigitsPreTokenizer>;

// Splits and transforms `pieces` in place; empty pieces are dropped.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces);
const Regex& gpt2_regex();

// --- decoders ----------------------------------------------------------------------------------------
struct ByteLevelDecoder {};
struct ByteFallbackDecoder {};
struct FuseDecoder {};
struct MetaspaceDecoder {
  char32_t replacement;
  bool strip_first;  // prepend_scheme != never: the first token's replacement is dropped, not a space
};
struct StripDecoder {
  char32_t content;
  size_t start;
  size_t stop;
};
struct ReplaceDecoder {
  Pattern pattern;
  std::string content;
};
using DecoderStep =
    std::variant<ByteLevelDecoder, ByteFallbackDecoder, FuseDecoder, MetaspaceDecoder, StripDecoder, ReplaceDecoder>;

// Runs the decoder chain over the token strings and joins the result.
std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

}  // namespace sy::text::detail
