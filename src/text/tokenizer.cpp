// Tokenizer: loading by folder contents, encode (added tokens, normalizer, pre-tokenizer, model,
// post-processor), decode, and the DecodeStream-style incremental decoder.
#include "text/tokenizer.h"

#include "base/check.h"
#include "base/input.h"
#include "text/tokenizer_impl.h"

namespace sy::text {

namespace fs = std::filesystem;
using namespace detail;

namespace {

nlohmann::json read_json_file(const fs::path& file) {
  const std::string text = read_regular_file(file, kMaxJsonFileBytes, "tokenizer file");
  check_json_depth(text, file.string());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  SY_CHECK(!j.is_discarded(), "{}: not valid JSON (truncated or malformed); re-download the tokenizer files",
           file.string());
  SY_CHECK(j.is_object(), "{}: expected a JSON object at the top level, got {}", file.string(), j.type_name());
  return j;
}

bool ends_with_replacement(std::string_view s) { return s.ends_with("\xEF\xBF\xBD"); }

// transformers' clean_up_tokenization (applied by decode when tokenizer_config.json asks for it).
std::string clean_up_tokenization(std::string s) {
  static const std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) {
    std::string out;
    size_t last = 0;
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, last)) {
      out.append(s, last, pos - last).append(to);
      last = pos + from.size();
    }
    out.append(s, last);
    s = std::move(out);
  }
  return s;
}

}  // namespace

Tokenizer Tokenizer::load(const fs::path& dir) {
  SY_CHECK(fs::is_directory(dir), "{}: not a directory; pass the model folder holding tokenizer.json or tiktoken.model",
           dir.string());
  const fs::path json_file = dir / "tokenizer.json", config_file = dir / "tokenizer_config.json",
                 tiktoken_file = dir / "tiktoken.model";
  std::optional<nlohmann::json> config;
  if (fs::exists(config_file)) config = read_json_file(config_file);
  if (fs::exists(json_file)) return Tokenizer(load_tokenizer_json(json_file, config, config_file));
  if (fs::exists(tiktoken_file)) {
    SY_CHECK(config.has_value(), "{}: missing; a tiktoken vocabulary ({}) needs it for its special tokens",
             config_file.string(), tiktoken_file.string());
    return Tokenizer(load_tiktoken(tiktoken_file, *config, config_file));
  }
  SY_FAIL("{}: no tokenizer.json and no tiktoken.model; the model folder must hold one of them", dir.string());
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::Impl::finish_added_tokens(std::vector<AddedToken> tokens) {
  added = std::move(tokens);
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<const AddedToken*> raw_tokens, norm_tokens;
  for (size_t k = 0; k < added.size(); ++k) {
    const AddedToken& t = added[k];
    added_ids[t.content] = t.id;
    added_by_id[t.id] = k;
    vocab_size = std::max<int64_t>(vocab_size, int64_t(t.id) + 1);
    if (t.content.empty()) continue;
    if (t.normalized) {
      norm_patterns.push_back(normalize(normalizer, t.content));
      norm_tokens.push_back(&t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(&t);
    }
  }
  raw_matcher.build(std::move(raw_patterns), std::move(raw_tokens));
  normalized_matcher.build(std::move(norm_patterns), std::move(norm_tokens));
}

std::string Tokenizer::Impl::model_token(int32_t id) const {
  if (const auto* bpe = std::get_if<BpeModel>(&model)) {
    return bpe->vocab().contains_id(id) ? std::string(bpe->vocab().token(id)) : std::string();
  }
  const auto& ranks = std::get<TiktokenModel>(model).ranks();
  if (!ranks.contains_id(id)) return {};
  // Spelled with GPT-2's byte alphabet, as Kimi's tokenizer lists its vocabulary.
  std::string s;
  for (unsigned char b : ranks.token(id)) s += ByteLevelAlphabet::get().byte_to_utf8[b];
  return s;
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<AddedTokenMatcher::Split> raw_splits, norm_splits;
  std::vector<Piece> pieces;
  raw_matcher.split(text, raw_splits);
  for (const auto& rs : raw_splits) {
    if (rs.id >= 0) {
      ids.push_back(rs.id);
      continue;
    }
    const std::string normalized = normalize(normalizer, std::string(text.substr(rs.begin, rs.end - rs.begin)));
    normalized_matcher.split(normalized, norm_splits);
    for (const auto& ns : norm_splits) {
      if (ns.id >= 0) {
        ids.push_back(ns.id);
        continue;
      }
      if (ns.end == ns.begin) continue;
      pieces.clear();
      pieces.push_back({normalized.substr(ns.begin, ns.end - ns.begin), rs.begin == 0 && ns.begin == 0});
      pre_tokenize(pre_tokenizer, pieces);
      std::visit(
          [&](const auto& m) {
            for (const Piece& p : pieces) m.tokenize(p.text, ids);
          },
          model);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const Impl& m = *impl_;
  const std::string text = to_valid_utf8(input);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), m.prefix_ids.begin(), m.prefix_ids.end());
  if (m.kimi_chunks) {
    // tokenization_kimi.py encodes the text in parts, each on its own.
    std::vector<std::string_view> parts;
    split_kimi_parts(text, parts);
    for (const std::string_view part : parts) m.encode_text(part, ids);
  } else {
    m.encode_text(text, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return ids;
}

std::string Tokenizer::Impl::decode_raw(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const bool tiktoken = std::holds_alternative<TiktokenModel>(model);
  std::vector<std::string> tokens;
  std::string bytes;  // tiktoken: the raw bytes of the tokens
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    // An id the tokenizer has no token for (a model's padded vocabulary rows) decodes to nothing, as
    // `tokenizers` drops it.
    if (id < 0 || id >= vocab_size) continue;
    if (const auto it = added_by_id.find(id); it != added_by_id.end()) {
      const AddedToken& t = added[it->second];
      if (skip_special_tokens && t.special) continue;
      if (tiktoken) {
        bytes += t.content;
      } else {
        tokens.push_back(t.content);
      }
      continue;
    }
    if (tiktoken) {
      const auto& ranks = std::get<TiktokenModel>(model).ranks();
      if (ranks.contains_id(id)) bytes.append(ranks.token(id));
      continue;
    }
    const auto& vocab = std::get<BpeModel>(model).vocab();
    if (!vocab.contains_id(id)) continue;  // a gap in the ids: `tokenizers` drops it
    const std::string_view token = vocab.token(id);
    // A vocabulary entry spelled like a special added token counts as special (tokenizers compares text).
    if (skip_special_tokens) {
      if (const auto a = added_ids.find(std::string(token));
          a != added_ids.end() && added[added_by_id.at(a->second)].special) {
        continue;
      }
    }
    tokens.emplace_back(token);
  }
  if (tiktoken) return to_valid_utf8(bytes);
  if (!has_decoder) {
    std::string joined;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k > 0) joined += ' ';
      joined += tokens[k];
    }
    return joined;
  }
  return decode_tokens(decoder, std::move(tokens));
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text = impl_->decode_raw(ids, skip_special_tokens);
  if (impl_->clean_up_tokenization_spaces) text = clean_up_tokenization(std::move(text));
  return text;
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end()) return it->second;
  if (const auto* bpe = std::get_if<BpeModel>(&impl_->model)) {
    const int32_t id = bpe->vocab().find(token);
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  }
  // tiktoken: the token is spelled in the byte alphabet; map it back to bytes.
  std::string bytes;
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (size_t i = 0; i < token.size();) {
    const char32_t c = next_code_point(token, i);
    if (c >= 324 || alphabet.char_to_byte[c] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(alphabet.char_to_byte[c]));
  }
  const int32_t id = std::get<TiktokenModel>(impl_->model).ranks().find(bytes);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::string Tokenizer::token_text(int32_t id) const {
  SY_CHECK(id >= 0 && id < impl_->vocab_size, "token_text: id {} is outside the vocabulary [0, {}) of {}", id,
           impl_->vocab_size, impl_->origin);
  if (const auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
    return impl_->added[it->second].content;
  return impl_->model_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

// `tokenizers`' step_decode_stream: the text is re-decoded from prefix_index_ so that decoders which look
// at neighbouring tokens (Metaspace's first token, ByteLevel's multi-token characters) stay exact.
std::string IncrementalDecoder::push(int32_t id) {
  const Tokenizer::Impl& m = *tokenizer_->impl_;
  // An id without a token adds no text (decode drops it) and does not join the window.
  if (id < 0 || id >= m.vocab_size) return {};
  if (prefix_.empty() && !ids_.empty()) {
    std::string new_prefix = m.decode_raw(ids_, skip_special_tokens_);
    if (!ends_with_replacement(new_prefix)) {
      prefix_ = std::move(new_prefix);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = m.decode_raw(ids_, skip_special_tokens_);
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return {};
  SY_CHECK(text.starts_with(prefix_),
           "incremental decode: the text of the tokens so far (\"{}\") no longer starts with the text already returned "
           "(\"{}\") after token {}; this tokenizer's decoder is not prefix-stable",
           text, prefix_, id);
  std::string piece = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = m.decode_raw(ids_, skip_special_tokens_);
  prefix_index_ = new_prefix_index;
  return piece;
}

}  // namespace sy::text
