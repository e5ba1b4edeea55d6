// Reads tiktoken vocabularies as Kimi K2 ships them: tiktoken.model ("base64 rank" lines) plus
// tokenizer_config.json (added_tokens_decoder; an optional "pat_str"), with Kimi's split pattern.
#include <map>

#include "base/check.h"
#include "base/input.h"
#include "text/tokenizer_impl.h"

namespace sy::text::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Kimi K2's pat_str (tokenization_kimi.py) with its `[A&&[^B]]` class intersections, which PCRE2 lacks.
constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr int kReservedSpecialTokens = 256;
constexpr size_t kKimiMaxChunkChars = 400'000;  // TIKTOKEN_MAX_ENCODE_CHARS
constexpr size_t kKimiMaxRunChars = 25'000;     // MAX_NO_WHITESPACES_CHARS

// Python's str.isspace: Unicode White_Space plus the separators U+001C..U+001F.
bool python_isspace(char32_t c) { return (c >= 0x1C && c <= 0x1F) || is_white_space(c); }

// Rewrites each class intersection `[ITEMS&&[^EXCLUDED]]` as `(?:(?![EXCLUDED])[ITEMS])`: a character of
// ITEMS that is not in EXCLUDED. Other syntax is left alone.
std::string rewrite_class_intersections(std::string_view p) {
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (p[i] != '[') {
      out.push_back(p[i++]);
      continue;
    }
    // Find this class's `&&[^...]]` before its end, skipping escapes.
    size_t j = i + 1, amp = std::string_view::npos;
    while (j < p.size() && p[j] != ']') {
      if (p[j] == '\\') {
        j += 2;
        continue;
      }
      if (p.compare(j, 4, "&&[^") == 0) {
        amp = j;
        break;
      }
      ++j;
    }
    if (amp == std::string_view::npos) {
      out.push_back(p[i++]);
      continue;
    }
    size_t k = amp + 4;
    while (k < p.size() && p[k] != ']') k += p[k] == '\\' ? 2 : 1;
    if (k + 1 >= p.size() || p[k + 1] != ']') {
      out.push_back(p[i++]);
      continue;
    }
    out.append("(?:(?![").append(p.substr(amp + 4, k - amp - 4)).append("])[").append(p.substr(i + 1, amp - i - 1));
    out.append("])");
    i = k + 2;
  }
  return out;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return false;
      v[k] = base64_value(c);
      if (v[k] < 0) return false;
    }
    const uint32_t n = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(n >> 16));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return true;
}

}  // namespace

void split_kimi_parts(std::string_view text, std::vector<std::string_view>& parts) {
  parts.clear();
  size_t chunk_begin = 0;
  while (chunk_begin < text.size()) {
    // One chunk: up to kKimiMaxChunkChars code points, cut into runs of at most kKimiMaxRunChars.
    size_t i = chunk_begin, chars = 0, slice_begin = chunk_begin, run = 0;
    bool run_is_space = false;
    while (i < text.size() && chars < kKimiMaxChunkChars) {
      const size_t at = i;
      const bool space = python_isspace(next_code_point(text, i));
      if (chars == 0) run_is_space = space;
      ++chars;
      if (space != run_is_space) {
        run = 1;
        run_is_space = space;
      } else if (++run > kKimiMaxRunChars) {
        parts.push_back(text.substr(slice_begin, at - slice_begin));
        slice_begin = at;
        run = 1;
      }
    }
    parts.push_back(text.substr(slice_begin, i - slice_begin));
    chunk_begin = i;
  }
}

std::unique_ptr<Tokenizer::Impl> load_tiktoken(const fs::path& model_file, const json& config,
                                               const fs::path& config_file) {
  const std::string where = model_file.string(), cwhere = config_file.string();
  // Kimi K2's is 2.8 MB; 256 MiB bounds what a file can make us allocate.
  const std::string contents = read_regular_file(model_file, uint64_t{256} << 20, "tiktoken.model");

  Vocab ranks;
  ranks.reserve(contents.size() / 12 + 16, contents.size() / 2);
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    SY_CHECK(space != std::string_view::npos, "{}:{}: expected \"<base64 token> <rank>\", got \"{}\"", where, line_no,
             line.substr(0, 80));
    const std::string_view token = line.substr(0, space), rank_text = line.substr(space + 1);
    SY_CHECK(decode_base64(token, bytes), "{}:{}: \"{}\" is not valid base64", where, line_no, token.substr(0, 80));
    int64_t rank = 0;
    bool ok = !rank_text.empty() && rank_text.size() <= 10;
    for (char c : rank_text) {
      ok = ok && c >= '0' && c <= '9';
      rank = rank * 10 + (c - '0');
    }
    SY_CHECK(ok, "{}:{}: rank \"{}\" is not a non-negative integer", where, line_no, rank_text.substr(0, 20));
    SY_CHECK(rank < Vocab::kMaxId, "{}:{}: rank {} is too large (at most {})", where, line_no, rank, Vocab::kMaxId - 1);
    if (!ranks.insert(bytes, static_cast<int32_t>(rank))) {
      SY_CHECK(ranks.find(bytes) < 0, "{}:{}: token \"{}\" is listed twice", where, line_no, token);
      SY_FAIL("{}:{}: rank {} is given to two tokens; ranks must be unique", where, line_no, rank);
    }
  }
  SY_CHECK(ranks.size() > 0, "{}: no tokens; the file is empty or truncated", where);
  const auto n_base = static_cast<int32_t>(ranks.size());
  SY_CHECK(ranks.end_id() == n_base, "{}: ranks are not 0..{} (the highest is {}); the file is truncated or corrupt",
           where, n_base - 1, ranks.end_id() - 1);

  auto impl = std::make_unique<Tokenizer::Impl>(where, TiktokenModel(std::move(ranks), where));
  impl->vocab_size = n_base;

  // Special tokens: ids n_base .. n_base+255, named by added_tokens_decoder or <|reserved_token_ID|>, as
  // tokenization_kimi.py builds them; further added_tokens_decoder entries are kept as well.
  std::map<int32_t, AddedToken> specials;
  for (int32_t id = n_base; id < n_base + kReservedSpecialTokens; ++id) {
    specials[id] = AddedToken{fmt::format("<|reserved_token_{}|>", id), id, false, false, false, false, true};
  }
  if (const auto it = config.find("added_tokens_decoder"); it != config.end() && !it->is_null()) {
    SY_CHECK(it->is_object(), "{}: \"added_tokens_decoder\" must be an object of id: token", cwhere);
    for (const auto& [key, value] : it->items()) {
      const std::string here = fmt::format("{} added_tokens_decoder[\"{}\"]", cwhere, key);
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      SY_CHECK(id >= 0 && id < Vocab::kMaxId, "{}: the key must be a token id below {}", here, Vocab::kMaxId);
      SY_CHECK(id >= n_base, "{}: id {} is a regular token of {} (which has {} tokens); added tokens come after them",
               here, id, where, n_base);
      AddedToken t;
      t.id = static_cast<int32_t>(id);
      t.content = json_string(value, "content", here);
      t.special = json_bool(value, "special", here, true);
      t.normalized = false;
      specials[t.id] = std::move(t);
    }
  }
  std::vector<AddedToken> added;
  for (auto& [id, t] : specials) added.push_back(std::move(t));
  impl->finish_added_tokens(std::move(added));

  std::string pattern(kKimiPattern);
  if (const auto it = config.find("pat_str"); it != config.end() && !it->is_null()) {
    SY_CHECK(it->is_string(), "{}: \"pat_str\" must be a string", cwhere);
    pattern = it->get<std::string>();
  }
  impl->pre_tokenizer.emplace_back(SplitPreTokenizer{
      Pattern::regex(rewrite_class_intersections(pattern), cwhere + " pat_str"), SplitBehavior::isolated, false});
  impl->kimi_chunks = true;
  impl->origin = where;
  return impl;
}

}  // namespace sy::text::detail
