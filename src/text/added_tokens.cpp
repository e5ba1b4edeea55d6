// Added-token matching with `tokenizers`' AddedVocabulary semantics: leftmost-longest matches over a byte
// trie, a rejected single_word match still consumes its span, lstrip/rstrip take adjacent White_Space.
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace sy::text::detail {

void AddedTokenMatcher::build(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens) {
  edges_.clear();
  terminal_.assign(1, -1);
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  tokens_ = std::move(tokens);
  for (size_t k = 0; k < patterns.size(); ++k) {
    const std::string& p = patterns[k];
    if (p.empty()) continue;
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (unsigned char b : p) {
      const uint64_t key = (uint64_t(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    // The first token with a given pattern wins, as the first pattern does in Aho-Corasick.
    if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(k);
  }
}

namespace {

char32_t last_code_point(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  size_t i = b;
  return next_code_point(s, i);
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<Split>& out) const {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size() && !tokens_.empty()) {
    // Leftmost start with a match, longest match there.
    size_t match_begin = 0, match_end = 0;
    int32_t match = -1;
    for (; pos < text.size(); ++pos) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
      int32_t node = 0;
      for (size_t i = pos; i < text.size(); ++i) {
        const auto it = edges_.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
        if (it == edges_.end()) break;
        node = it->second;
        if (terminal_[node] >= 0) {
          match = terminal_[node];
          match_end = i + 1;
        }
      }
      if (match >= 0) {
        match_begin = pos;
        break;
      }
    }
    if (match < 0) break;
    pos = match_end;
    const AddedToken& token = *tokens_[match];
    size_t start = match_begin, stop = match_end;
    if (token.single_word) {
      size_t b = 0;
      const bool start_space = start == 0 || !is_word_char(last_code_point(text, start, &b));
      size_t i = stop;
      const bool stop_space = stop == text.size() || !is_word_char(next_code_point(text, i));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t b = 0;
        if (!is_white_space(last_code_point(text, new_start, &b))) break;
        new_start = b;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!is_white_space(next_code_point(text, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace sy::text::detail
