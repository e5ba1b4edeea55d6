// UTF-8 helpers, Unicode normalisation and case mapping (utf8proc), and the PCRE2 regex wrapper that every
// tokenizer pattern goes through (UTF + UCP, JIT compiled, with `\s` spelled as Rust's White_Space).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sy::text::detail {

// Bytes of the UTF-8 sequence a lead byte starts (1 for a stray continuation byte; input is valid UTF-8).
inline size_t utf8_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// Decodes the code point at `s[i]` (valid UTF-8) and advances `i` past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t c);

// `bytes` with every maximal invalid UTF-8 subpart replaced by U+FFFD, as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do. Returns `bytes` unchanged
// (copied) when it is valid.
std::string to_valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
std::string normalize_unicode(std::string_view s, UnicodeForm form);
// Per code point lower case (utf8proc's simple case mapping).
std::string to_lowercase(std::string_view s);

// Unicode White_Space (Rust's char::is_whitespace, Python's str.isspace minus U+001C..U+001F).
bool is_white_space(char32_t c);
// Rust regex's `\w` (alphabetic, marks, decimal digits, connector punctuation).
bool is_word_char(char32_t c);

// GPT-2's byte ↔ printable character map used by the ByteLevel pre-tokenizer and decoder.
struct ByteLevelAlphabet {
  std::string byte_to_utf8[256];  // the character standing for each byte, UTF-8 encoded
  int16_t char_to_byte[324];      // code point (all < 324) → byte, or -1
  static const ByteLevelAlphabet& get();
};

// A compiled PCRE2 pattern. `find_all` is const and thread-safe (match data is per call).
class Regex {
 public:
  // Compiles `pattern` written for Oniguruma / Rust regex (as tokenizer.json and tiktoken carry them).
  // Throws sy::Error naming `origin` when PCRE2 rejects it.
  Regex(std::string_view pattern, std::string_view origin);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Byte ranges [begin, end) of the successive non-overlapping matches in `text` (valid UTF-8).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// Rewrites `\s` / `\S` (inside and outside classes) to Unicode White_Space, which is what Oniguruma and
// Rust regex match, where PCRE2's UCP `\s` differs (U+0085, U+180E across versions).
std::string translate_pattern(std::string_view pattern);

}  // namespace sy::text::detail
