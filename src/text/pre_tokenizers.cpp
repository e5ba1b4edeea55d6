// Pre-tokenizers: Split (with its five delimiter behaviours and invert), ByteLevel, Metaspace and Digits,
// with the exact splitting rules of `tokenizers`' NormalizedString::split.
#include <utf8proc.h>

#include <algorithm>
#include <type_traits>

#include "text/pipeline.h"

namespace sy::text::detail {

namespace {

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

// The whole text as alternating non-match / match segments (as `tokenizers`' find_matches).
void segments_of(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                 std::vector<Segment>& out) {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return;
  }
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
}

// Applies `behavior` to the segments and appends the resulting non-empty pieces of `piece` to `out`.
void split_piece(const Piece& piece, std::vector<Segment>& segs, SplitBehavior behavior, std::vector<Piece>& out) {
  struct Kept {
    size_t begin;
    size_t end;
    bool removed;
  };
  std::vector<Kept> kept;
  kept.reserve(segs.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Segment& s : segs) kept.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::removed:
      for (const Segment& s : segs) kept.push_back({s.begin, s.end, s.is_match});
      break;
    case SplitBehavior::contiguous:
      for (const Segment& s : segs) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t k = segs.size(); k-- > 0;) {
        const Segment& s = segs[k];
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().begin = s.begin;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Kept& k : kept) {
    if (k.removed || k.end == k.begin) continue;
    out.push_back({piece.text.substr(k.begin, k.end - k.begin), piece.at_start && k.begin == 0});
  }
}

// Each character satisfying `pred` is one match (as `tokenizers`' char patterns).
template <class Pred>
void char_matches(std::string_view text, Pred pred, std::vector<std::pair<size_t, size_t>>& out) {
  for (size_t i = 0; i < text.size();) {
    const size_t b = i;
    const char32_t c = next_code_point(text, i);
    if (pred(c)) out.emplace_back(b, i);
  }
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

template <class FindMatches>
void split_all(std::vector<Piece>& pieces, bool invert, SplitBehavior behavior, const FindMatches& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Segment> segs;
  for (const Piece& p : pieces) {
    matches.clear();
    find(p.text, matches);
    segments_of(p.text, matches, invert, segs);
    split_piece(p, segs, behavior, out);
  }
  pieces = std::move(out);
}

void apply(const SplitPreTokenizer& s, std::vector<Piece>& pieces) {
  split_all(pieces, s.invert, s.behavior,
            [&](std::string_view t, std::vector<std::pair<size_t, size_t>>& m) { s.pattern.find_all(t, m); });
}

void apply(const ByteLevelPreTokenizer& s, std::vector<Piece>& pieces) {
  if (s.add_prefix_space) {
    for (Piece& p : pieces) {
      if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    }
  }
  if (s.use_regex) {
    split_all(pieces, false, SplitBehavior::isolated,
              [](std::string_view t, std::vector<std::pair<size_t, size_t>>& m) { gpt2_regex().find_all(t, m); });
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string mapped;
  for (Piece& p : pieces) {
    mapped.clear();
    for (unsigned char b : p.text) mapped.append(alphabet.byte_to_utf8[b]);
    p.text.swap(mapped);
  }
}

void apply(const MetaspacePreTokenizer& s, std::vector<Piece>& pieces) {
  for (Piece& p : pieces) {
    std::string replaced;
    replaced.reserve(p.text.size() + 8);
    for (char c : p.text) {
      if (c == ' ') {
        replaced.append(s.replacement);
      } else {
        replaced.push_back(c);
      }
    }
    const bool starts = replaced.compare(0, s.replacement.size(), s.replacement) == 0;
    if (!starts &&
        (s.prepend_scheme == PrependScheme::always || (s.prepend_scheme == PrependScheme::first && p.at_start))) {
      replaced.insert(0, s.replacement);
    }
    p.text = std::move(replaced);
  }
  if (s.split) {
    size_t i = 0;
    const char32_t rep = next_code_point(s.replacement, i);
    split_all(pieces, false, SplitBehavior::merged_with_next,
              [rep](std::string_view t, std::vector<std::pair<size_t, size_t>>& m) {
                char_matches(
                    t, [rep](char32_t c) { return c == rep; }, m);
              });
  }
}

void apply(const DigitsPreTokenizer& s, std::vector<Piece>& pieces) {
  split_all(pieces, false, s.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous,
            [](std::string_view t, std::vector<std::pair<size_t, size_t>>& m) { char_matches(t, is_numeric, m); });
}

}  // namespace

const Regex& gpt2_regex() {
  static const Regex regex(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                           "ByteLevel pre-tokenizer");
  return regex;
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces) {
  for (const PreTokenizerStep& step : steps) {
    std::visit([&](const auto& s) { apply(s, pieces); }, step);
  }
  std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });
}

}  // namespace sy::text::detail
