// Decoders: ByteLevel, ByteFallback, Fuse, Metaspace, Strip and Replace, each a step of `tokenizers`'
// decode_chain over the list of token strings.
#include <type_traits>

#include "text/pipeline.h"

namespace sy::text::detail {

namespace {

using Tokens = std::vector<std::string>;

void apply(const ByteLevelDecoder&, Tokens& tokens) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  for (const std::string& t : tokens) {
    // A token with a character outside the byte alphabet (an added token) contributes its own bytes.
    const size_t mark = bytes.size();
    bool mapped = true;
    for (size_t i = 0; i < t.size() && mapped;) {
      const char32_t c = next_code_point(t, i);
      if (c < 324 && alphabet.char_to_byte[c] >= 0) {
        bytes.push_back(static_cast<char>(alphabet.char_to_byte[c]));
      } else {
        mapped = false;
      }
    }
    if (!mapped) {
      bytes.resize(mark);
      bytes.append(t);
    }
  }
  tokens.assign(1, to_valid_utf8(bytes));
}

void apply(const ByteFallbackDecoder&, Tokens& tokens) {
  Tokens out;
  out.reserve(tokens.size());
  std::string pending;  // bytes of consecutive <0xAB> tokens
  auto flush = [&] {
    if (pending.empty()) return;
    if (is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::string& t : tokens) {
    if (t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
      pending.push_back(static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

void apply(const FuseDecoder&, Tokens& tokens) {
  std::string joined;
  for (const std::string& t : tokens) joined += t;
  tokens.assign(1, std::move(joined));
}

void apply(const MetaspaceDecoder& d, Tokens& tokens) {
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string& t = tokens[k];
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const size_t b = i;
      const char32_t c = next_code_point(t, i);
      if (c == d.replacement) {
        if (!(k == 0 && d.strip_first)) out.push_back(' ');
      } else {
        out.append(t, b, i - b);
      }
    }
    tokens[k] = std::move(out);
  }
}

void apply(const StripDecoder& d, Tokens& tokens) {
  for (std::string& t : tokens) {
    std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
    for (size_t i = 0; i < t.size();) {
      const size_t b = i;
      chars.emplace_back(b, next_code_point(t, i));
    }
    size_t start_cut = 0;
    for (size_t i = 0; i < std::min(d.start, chars.size()) && chars[i].second == d.content; ++i) start_cut = i + 1;
    size_t stop_cut = chars.size();
    for (size_t i = 0; i < std::min(d.stop, chars.size()); ++i) {
      const size_t index = chars.size() - i - 1;
      if (chars[index].second != d.content) break;
      stop_cut = index;
    }
    if (stop_cut <= start_cut) {
      t.clear();
      continue;
    }
    const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
    const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
    t = t.substr(b, e - b);
  }
}

void apply(const ReplaceDecoder& d, Tokens& tokens) {
  std::vector<std::pair<size_t, size_t>> matches;
  for (std::string& t : tokens) {
    matches.clear();
    d.pattern.find_all(t, matches);
    if (matches.empty()) continue;
    std::string out;
    size_t last = 0;
    for (const auto& [b, e] : matches) {
      out.append(t, last, b - last);
      out.append(d.content);
      last = e;
    }
    out.append(t, last);
    t = std::move(out);
  }
}

}  // namespace

std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  for (const DecoderStep& step : steps) {
    std::visit([&](const auto& s) { apply(s, tokens); }, step);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace sy::text::detail
