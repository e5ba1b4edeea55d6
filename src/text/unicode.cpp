// UTF-8 helpers, normalisation through utf8proc and the PCRE2 regex wrapper.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/unicode.h"

#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "base/check.h"

namespace sy::text::detail {

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_len(b0);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return b0;
  }
  char32_t c = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when invalid; `*bad` gets the length of the maximal
// invalid subpart (the bytes one U+FFFD replaces, per the Unicode "substitution of maximal subparts").
size_t valid_sequence(std::string_view s, size_t i, size_t* bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      *bad = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad = k;
      return 0;
    }
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_sequence(bytes, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad = 0;
    const size_t n = valid_sequence(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

std::string normalize_unicode(std::string_view s, UnicodeForm form) {
  // ASCII is invariant under all four forms.
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(s);
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dest = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &dest,
                   static_cast<utf8proc_option_t>(options));
  SY_CHECK(n >= 0, "Unicode normalisation failed: {}", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dest), static_cast<size_t>(n));
  std::free(dest);
  return out;
}

std::string to_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    const char32_t c = next_code_point(s, i);
    if (c == 0x130) {
      // İ is the one character whose unconditional lower case (Rust's char::to_lowercase) is two: i + U+0307.
      out.append("i\xCC\x87");
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

bool is_white_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85) return true;
  if (c < 0xA0) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D;
  }
}

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    for (auto& v : a.char_to_byte) v = -1;
    // Printable Latin-1 bytes stand for themselves; the others take code points 256, 257, ... in order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(a.byte_to_utf8[b], c);
      a.char_to_byte[c] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return alphabet;
}

namespace {

// Whether `name` in \p{name} is a general category (or PCRE2's own Xan/Xwd/...), not a script.
bool is_category_name(std::string_view name) {
  static constexpr std::string_view categories[] = {
      "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "M",  "Mn",  "Mc",  "Me",  "N",   "Nd",  "Nl", "No",
      "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",   "Sm",  "Sc",  "Sk",  "So",  "Z",  "Zs",
      "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp", "Xwd", "Xuc"};
  if (!name.empty() && name[0] == '^') name.remove_prefix(1);
  for (const std::string_view c : categories) {
    if (c == name) return true;
  }
  return name.find_first_of(":=") != std::string_view::npos;
}

}  // namespace

std::string translate_pattern(std::string_view pattern) {
  static constexpr std::string_view space_items = "\\t-\\r\\x{20}\\x{85}\\p{Z}";
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      const size_t close = pattern.find('}', i + 2);
      if ((e == 'p' || e == 'P') && i + 2 < pattern.size() && pattern[i + 2] == '{' &&
          close != std::string_view::npos && !is_category_name(pattern.substr(i + 3, close - i - 3))) {
        // A script: Oniguruma and Rust regex match the Script property, PCRE2's \p{Han} the wider
        // Script_Extensions (U+3002 "。" is Han there); sc: selects Script.
        std::string_view name = pattern.substr(i + 3, close - i - 3);
        out.append(e == 'p' ? "\\p{" : "\\P{");
        if (name[0] == '^') {
          out.push_back('^');
          name.remove_prefix(1);
        }
        out.append("sc:").append(name).append("}");
        i = close;
        continue;
      }
      if (e == 's' || e == 'S') {
        if (in_class && e == 's') {
          out.append(space_items);
        } else if (in_class) {
          // `\S` inside a class: no tokenizer pattern needs it; keep PCRE2's meaning.
          out.append("\\S");
        } else {
          out.append(e == 's' ? "[" : "[^").append(space_items).append("]");
        }
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A `]` right after `[` or `[^` is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, std::string_view origin) : code_(std::make_unique<Code>()) {
  const std::string translated = translate_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    SY_FAIL(
        "{}: regex /{}/ does not compile ({} at offset {}); the pattern must be Oniguruma / Rust regex syntax "
        "that PCRE2 also accepts",
        origin, pattern, reinterpret_cast<const char*>(message), offset);
  }
  // Without JIT (e.g. an unsupported CPU or SELinux), pcre2_match falls back to the interpreter.
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  // Per-thread match data and JIT stack keep find_all allocation-free and thread-safe. The JIT stack may
  // grow to 64 MiB (reserved, touched only as used): a group repeated over a long run of letters, as in
  // Kimi's pattern, takes a frame per character.
  struct MatchState {
    pcre2_match_data* data = pcre2_match_data_create(64, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~MatchState() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(data);
    }
  };
  thread_local MatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      SY_FAIL(
          "regex match failed on a {}-byte text at offset {}: {} (PCRE2 error {}); split the input into smaller "
          "parts",
          text.size(), start, reinterpret_cast<const char*>(message), rc);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      // Empty match: continue after the next character.
      if (e >= text.size()) break;
      start = e + utf8_len(static_cast<unsigned char>(text[e]));
    }
  }
}

}  // namespace sy::text::detail
