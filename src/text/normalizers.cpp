// Patterns (literal or regex) and the normalizers: NFC/NFD/NFKC/NFKD, Prepend, Replace, Lowercase, Strip.
#include <type_traits>

#include "text/pipeline.h"

namespace sy::text::detail {

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::regex(std::string_view pattern, std::string_view origin) {
  Pattern p;
  p.regex_ = std::make_shared<const Regex>(pattern, origin);
  return p;
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (size_t pos = text.find(literal_); pos != std::string_view::npos; pos = text.find(literal_, pos)) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

namespace {

std::string replace_all(const Pattern& pattern, const std::string& content, std::string text) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.find_all(text, matches);
  if (matches.empty()) return text;
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    out.append(text, last, b - last);
    out.append(content);
    last = e;
  }
  out.append(text, last);
  return out;
}

std::string strip_white_space(std::string text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t i = begin;
      if (!is_white_space(next_code_point(text, i))) break;
      begin = i;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!is_white_space(next_code_point(text, i))) break;
      end = start;
    }
  }
  return text.substr(begin, end - begin);
}

}  // namespace

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const NormalizerStep& step : steps) {
    text = std::visit(
        [&](const auto& s) -> std::string {
          using T = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<T, UnicodeNormalizer>) {
            return normalize_unicode(text, s.form);
          } else if constexpr (std::is_same_v<T, PrependNormalizer>) {
            return text.empty() ? std::move(text) : s.prepend + text;
          } else if constexpr (std::is_same_v<T, ReplaceNormalizer>) {
            return replace_all(s.pattern, s.content, std::move(text));
          } else if constexpr (std::is_same_v<T, LowercaseNormalizer>) {
            return to_lowercase(text);
          } else {
            static_assert(std::is_same_v<T, StripNormalizer>);
            return strip_white_space(std::move(text), s.left, s.right);
          }
        },
        step);
  }
  return text;
}

}  // namespace sy::text::detail
