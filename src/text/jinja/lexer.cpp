// Jinja lexer (see lexer.h), following Jinja2's lexing rules for data, tags, comments and raw blocks.
#include "text/jinja/lexer.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "base/check.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string source, const std::string& name, const LexOptions& options)
      : s_(std::move(source)), name_(name), opt_(options) {
    for (size_t i = 0; i < s_.size(); ++i)
      if (s_[i] == '\n') newlines_.push_back(i);
  }

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(s_.substr(pos_), pos_);
        break;
      }
      char type = s_[tag + 1];
      char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      size_t raw_body = type == '%' ? match_raw_begin(tag) : std::string::npos;
      std::string text = s_.substr(pos_, tag - pos_);
      emit_data(strip_before(std::move(text), sign, type != '{'), pos_);
      if (raw_body != std::string::npos) {
        lex_raw(tag, raw_body);
      } else if (type == '#') {
        lex_comment(tag + 2 + (sign ? 1 : 0));
      } else {
        lex_tag(tag, type == '{');
      }
    }
    tokens_.push_back(Token{.kind = TokenKind::eof, .line = line_of(s_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(size_t pos) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) - newlines_.begin());
  }

  [[noreturn]] void fail(size_t pos, const std::string& msg) const {
    SY_FAIL("{}, line {}: {}", name_, line_of(pos), msg);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos && i + 1 < s_.size(); i = s_.find('{', i + 1)) {
      char c = s_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
    }
    return std::string::npos;
  }

  // Jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise lstrip_blocks strips the
  // spaces between the start of the line and a block or comment tag.
  std::string strip_before(std::string text, char sign, bool strippable) const {
    if (sign == '-') return str::strip(text, std::nullopt, false, true);
    if (sign == '+' || !opt_.lstrip_blocks || !strippable) return text;
    size_t l_pos = text.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if (l_pos > 0 || line_starting_) {
      std::string_view rest(text.data() + l_pos, text.size() - l_pos);
      bool all_ws = !rest.empty();
      for (char32_t c : str::decode(rest)) all_ws = all_ws && str::is_space(c);
      if (all_ws) text.resize(l_pos);
    }
    return text;
  }

  void emit_data(std::string text, size_t at) {
    if (text.empty()) return;
    tokens_.push_back(Token{.kind = TokenKind::data, .text = std::move(text), .line = line_of(at)});
  }

  size_t skip_ws(size_t p) const {
    while (p < s_.size() && is_ws(s_[p])) ++p;
    return p;
  }

  // Matches the end of a block tag at p: "+%}", "-%}\s*" or "%}" (+ one newline with trim_blocks).
  // Returns the position after it, or npos.
  size_t match_block_end(size_t p, bool trim) const {
    if (s_.compare(p, 3, "+%}") == 0) return p + 3;
    if (s_.compare(p, 3, "-%}") == 0) return skip_ws(p + 3);
    if (s_.compare(p, 2, "%}") == 0) {
      p += 2;
      if (trim && opt_.trim_blocks && p < s_.size() && s_[p] == '\n') ++p;
      return p;
    }
    return std::string::npos;
  }

  void set_line_starting(size_t end) { line_starting_ = end > 0 && s_[end - 1] == '\n'; }

  // "{%[-+]? raw -?%}": returns the start of the raw body, or npos when the tag is not `raw`.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    p = skip_ws(p);
    if (s_.compare(p, 3, "raw") != 0) return std::string::npos;
    p = skip_ws(p + 3);
    if (s_.compare(p, 3, "-%}") == 0) return skip_ws(p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  void lex_raw(size_t tag, size_t body) {
    set_line_starting(body);
    for (size_t k = s_.find("{%", body); k != std::string::npos; k = s_.find("{%", k + 1)) {
      size_t p = k + 2;
      char sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : 0;
      if (sign) ++p;
      p = skip_ws(p);
      if (s_.compare(p, 6, "endraw") != 0) continue;
      size_t end = match_block_end(skip_ws(p + 6), true);
      if (end == std::string::npos) continue;
      emit_data(strip_before(s_.substr(body, k - body), sign, true), body);
      pos_ = end;
      set_line_starting(end);
      return;
    }
    fail(tag, "Missing end of raw directive");
  }

  void lex_comment(size_t from) {
    size_t q = s_.find("#}", from);
    if (q == std::string::npos) fail(from, "Missing end of comment tag");
    size_t end = q + 2;
    if (q > from && s_[q - 1] == '-') {
      end = skip_ws(end);
    } else if (!(q > from && s_[q - 1] == '+') && opt_.trim_blocks && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    pos_ = end;
    set_line_starting(end);
  }

  void lex_tag(size_t tag, bool variable) {
    tokens_.push_back(Token{.kind = variable ? TokenKind::var_begin : TokenKind::block_begin,
                            .text = variable ? "{{" : "{%",
                            .line = line_of(tag)});
    size_t p = tag + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    std::vector<char> balance;
    while (true) {
      p = skip_ws(p);
      if (p >= s_.size())
        fail(p, variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (variable) {
          if (s_.compare(p, 3, "-}}") == 0)
            end = skip_ws(p + 3);
          else if (s_.compare(p, 2, "}}") == 0)
            end = p + 2;
        } else {
          end = match_block_end(p, true);
        }
        if (end != std::string::npos) {
          tokens_.push_back(Token{.kind = variable ? TokenKind::var_end : TokenKind::block_end,
                                  .text = variable ? "}}" : "%}",
                                  .line = line_of(p)});
          pos_ = end;
          set_line_starting(end);
          return;
        }
      }
      p = lex_one(p, balance);
    }
  }

  size_t lex_number(size_t p) {
    auto digits = [&](size_t q) {  // (\d+_)*\d+ ; returns the end or q when none
      size_t r = q;
      while (r < s_.size() && is_digit(s_[r])) {
        while (r < s_.size() && is_digit(s_[r])) ++r;
        if (r + 1 < s_.size() && s_[r] == '_' && is_digit(s_[r + 1])) ++r;
      }
      return r;
    };
    size_t start = p, end = digits(p);
    bool is_float = false;
    size_t q = end;
    if (q + 1 < s_.size() && s_[q] == '.' && is_digit(s_[q + 1]) && !(start > 0 && s_[start - 1] == '.')) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E') && !(start > 0 && s_[start - 1] == '.')) {
      size_t r = q + 1;
      if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
      size_t e = digits(r);
      if (e > r) {
        q = e;
        is_float = true;
      }
    }
    if (is_float) end = q;
    std::string text;
    for (size_t i = start; i < end; ++i)
      if (s_[i] != '_') text.push_back(s_[i]);
    Token t{.kind = is_float ? TokenKind::floating : TokenKind::integer, .text = text, .line = line_of(start)};
    if (is_float) {
      t.float_value = std::stod(text);
    } else {
      try {
        t.int_value = std::stoll(text);
      } catch (const std::out_of_range&) {
        fail(start, "integer literal " + text + " does not fit in 64 bits");
      }
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  size_t lex_string(size_t p) {
    char q = s_[p];
    std::string out;
    size_t i = p + 1;
    while (i < s_.size() && s_[i] != q) {
      if (s_[i] != '\\') {
        out.push_back(s_[i++]);
        continue;
      }
      if (i + 1 >= s_.size()) break;
      char e = s_[i + 1];
      i += 2;
      auto hex = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int k = 0; k < n; ++k, ++i) {
          if (i >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i])))
            fail(p, "truncated escape in string literal");
          char c = s_[i];
          v = v * 16 + static_cast<char32_t>(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          str::append_utf8(out, hex(2));
          break;
        case 'u':
          str::append_utf8(out, hex(4));
          break;
        case 'U':
          str::append_utf8(out, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<char32_t>(s_[i] - '0');
            str::append_utf8(out, v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    if (i >= s_.size()) fail(p, "unexpected end of string literal");
    tokens_.push_back(Token{.kind = TokenKind::string, .text = std::move(out), .line = line_of(p)});
    return i + 1;
  }

  size_t lex_one(size_t p, std::vector<char>& balance) {
    char c = s_[p];
    if (is_name_start(c)) {
      size_t e = p;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      tokens_.push_back(Token{.kind = TokenKind::name, .text = s_.substr(p, e - p), .line = line_of(p)});
      return e;
    }
    if (is_digit(c)) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : kTwo) {
      if (s_.compare(p, 2, op) == 0) {
        tokens_.push_back(Token{.kind = TokenKind::op, .text = std::string(op), .line = line_of(p)});
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail(p, fmt::format("unexpected char '{}'", c));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(p, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) fail(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    tokens_.push_back(Token{.kind = TokenKind::op, .text = std::string(1, c), .line = line_of(p)});
    return p + 1;
  }

  std::string s_;
  const std::string& name_;
  LexOptions opt_;
  std::vector<size_t> newlines_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& name, const LexOptions& options) {
  // Jinja2 normalises newlines to "\n" and drops one trailing newline (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s), name, options).run();
}

}  // namespace sy::text::jinja
