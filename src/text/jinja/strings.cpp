// Python str operations on UTF-8 strings (see strings.h); case mapping through utf8proc.
#include "text/jinja/strings.h"

#include <utf8proc.h>

#include <algorithm>

#include "base/check.h"

namespace sy::text::jinja::str {

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out.push_back(b);
      ++i;
      continue;
    }
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      c = (c << 6) | (cb & 0x3F);
    }
    if (!ok) {
      out.push_back(b);
      ++i;
      continue;
    }
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  auto cps = decode(s);
  std::vector<char32_t> set;
  if (chars) set = decode(*chars);
  auto strip_it = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    SY_CHECK(!sep->empty(), "empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  auto cps = decode(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = n;
      while (e > i && is_space(cps[e - 1])) --e;
      out.push_back(encode(cps, i, e));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    out.push_back(encode(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> splitlines(std::string_view s) {
  auto cps = decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    if (is_linebreak(cps[i])) {
      out.push_back(encode(cps, start, i));
      if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      start = ++i;
    } else {
      ++i;
    }
  }
  if (start < cps.size()) out.push_back(encode(cps, start, cps.size()));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end.
    auto cps = decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(with);
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub) {
  size_t at = s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, at)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

namespace {

char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t to_title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_utf8(out, f(c));
  return out;
}

}  // namespace

bool is_alpha(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

std::string upper(std::string_view s) { return map_chars(s, to_upper); }
std::string lower(std::string_view s) { return map_chars(s, to_lower); }

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](char32_t c) {
    char32_t r = first ? to_title(c) : to_lower(c);
    first = false;
    return r;
  });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](char32_t c) {
    char32_t r = prev_cased ? to_lower(c) : to_title(c);
    prev_cased = is_cased(c);
    return r;
  });
}

std::string jinja_title(std::string_view s) {
  // Jinja: words start after a run of [-\s({\[<]; each word is item[0].upper() + item[1:].lower().
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c); };
  std::string out;
  bool word_start = true;
  for (char32_t c : decode(s)) {
    if (is_sep(c)) {
      append_utf8(out, c);
      word_start = true;
    } else {
      append_utf8(out, word_start ? to_upper(c) : to_lower(c));
      word_start = false;
    }
  }
  return out;
}

bool is_upper_str(std::string_view s) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (!is_cased(c)) continue;
    if (to_upper(c) != c || to_lower(c) == c) return false;
    any = true;
  }
  return any;
}

bool is_lower_str(std::string_view s) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (!is_cased(c)) continue;
    if (to_lower(c) != c || to_upper(c) == c) return false;
    any = true;
  }
  return any;
}

}  // namespace sy::text::jinja::str
