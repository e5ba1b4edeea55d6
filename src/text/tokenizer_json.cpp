// Reads `tokenizers`' tokenizer.json: simdjson for the file (model.vocab / model.merges read straight into
// the BPE tables), nlohmann::json for the small component objects; plus tokenizer_config.json's BOS/EOS.
#include <simdjson.h>

#include "base/check.h"
#include "base/input.h"
#include "text/tokenizer_impl.h"

namespace sy::text::detail {

namespace fs = std::filesystem;
using nlohmann::json;

const json& json_member(const json& j, std::string_view key, std::string_view where) {
  SY_CHECK(j.is_object(), "{}: expected an object, got {}", where, j.type_name());
  const auto it = j.find(key);
  SY_CHECK(it != j.end(), "{}: missing key \"{}\"", where, key);
  return *it;
}

std::string json_string(const json& j, std::string_view key, std::string_view where,
                        std::optional<std::string> fallback) {
  const auto it = j.find(key);
  if ((it == j.end() || it->is_null()) && fallback) return *fallback;
  SY_CHECK(it != j.end(), "{}: missing key \"{}\"", where, key);
  SY_CHECK(it->is_string(), "{}: \"{}\" must be a string, got {}", where, key, it->type_name());
  return it->get<std::string>();
}

bool json_bool(const json& j, std::string_view key, std::string_view where, std::optional<bool> fallback) {
  const auto it = j.find(key);
  if ((it == j.end() || it->is_null()) && fallback) return *fallback;
  SY_CHECK(it != j.end(), "{}: missing key \"{}\"", where, key);
  SY_CHECK(it->is_boolean(), "{}: \"{}\" must be true or false, got {}", where, key, it->type_name());
  return it->get<bool>();
}

int64_t json_int(const json& j, std::string_view key, std::string_view where) {
  const json& v = json_member(j, key, where);
  SY_CHECK(v.is_number_integer(), "{}: \"{}\" must be an integer, got {}", where, key, v.type_name());
  return v.get<int64_t>();
}

std::optional<std::string> config_token(const json& config, std::string_view key, std::string_view where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  SY_CHECK(it->is_object(), "{}: \"{}\" must be a string or an object with \"content\", got {}", where, key,
           it->type_name());
  return json_string(*it, "content", fmt::format("{} \"{}\"", where, key));
}

namespace {

// The whole DOM element as nlohmann::json (used for everything but the vocabulary and merges).
json to_json(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY: {
      json a = json::array();
      simdjson::dom::array array;
      if (e.get(array) == simdjson::SUCCESS) {
        for (simdjson::dom::element v : array) a.push_back(to_json(v));
      }
      return a;
    }
    case simdjson::dom::element_type::OBJECT: {
      json o = json::object();
      simdjson::dom::object object;
      if (e.get(object) == simdjson::SUCCESS) {
        for (auto field : object) o[std::string(field.key)] = to_json(field.value);
      }
      return o;
    }
    case simdjson::dom::element_type::INT64:
      return e.get_int64().value_unsafe();
    case simdjson::dom::element_type::UINT64:
      return e.get_uint64().value_unsafe();
    case simdjson::dom::element_type::DOUBLE:
      return e.get_double().value_unsafe();
    case simdjson::dom::element_type::STRING:
      return std::string(e.get_string().value_unsafe());
    case simdjson::dom::element_type::BOOL:
      return e.get_bool().value_unsafe();
    case simdjson::dom::element_type::NULL_VALUE:
      return nullptr;
  }
  return nullptr;
}

Pattern read_pattern(const json& j, std::string_view where) {
  const json& p = json_member(j, "pattern", where);
  SY_CHECK(p.is_object() && p.size() == 1 && (p.contains("String") || p.contains("Regex")),
           "{}: \"pattern\" must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where, p.dump());
  if (p.contains("String")) return Pattern::literal(json_string(p, "String", where));
  return Pattern::regex(json_string(p, "Regex", where), where);
}

std::string component_type(const json& j, std::string_view where) {
  SY_CHECK(j.is_object(), "{}: expected an object, got {}", where, j.type_name());
  // Cut for messages: every known type is a short name, so a cut one stays unknown.
  return cut_for_message(json_string(j, "type", where));
}

void read_normalizer(const json& j, std::string_view where, std::vector<NormalizerStep>& steps) {
  if (j.is_null()) return;
  const std::string type = component_type(j, where);
  const std::string here = fmt::format("{} ({})", where, type);
  if (type == "Sequence") {
    const json& list = json_member(j, "normalizers", here);
    SY_CHECK(list.is_array(), "{}: \"normalizers\" must be an array", here);
    for (const json& n : list) read_normalizer(n, here, steps);
  } else if (type == "NFC") {
    steps.emplace_back(UnicodeNormalizer{UnicodeForm::nfc});
  } else if (type == "NFD") {
    steps.emplace_back(UnicodeNormalizer{UnicodeForm::nfd});
  } else if (type == "NFKC") {
    steps.emplace_back(UnicodeNormalizer{UnicodeForm::nfkc});
  } else if (type == "NFKD") {
    steps.emplace_back(UnicodeNormalizer{UnicodeForm::nfkd});
  } else if (type == "Prepend") {
    steps.emplace_back(PrependNormalizer{json_string(j, "prepend", here)});
  } else if (type == "Replace") {
    steps.emplace_back(ReplaceNormalizer{read_pattern(j, here), json_string(j, "content", here)});
  } else if (type == "Lowercase") {
    steps.emplace_back(LowercaseNormalizer{});
  } else if (type == "Strip") {
    steps.emplace_back(
        StripNormalizer{json_bool(j, "strip_left", here, true), json_bool(j, "strip_right", here, true)});
  } else {
    SY_FAIL(
        "{}: normalizer type \"{}\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace, "
        "Lowercase, Strip)",
        where, type);
  }
}

PrependScheme read_prepend_scheme(const json& j, std::string_view where) {
  if (!j.contains("prepend_scheme") && j.contains("add_prefix_space")) {
    return json_bool(j, "add_prefix_space", where, true) ? PrependScheme::always : PrependScheme::never;
  }
  const std::string s = json_string(j, "prepend_scheme", where, "always");
  if (s == "always") return PrependScheme::always;
  if (s == "first") return PrependScheme::first;
  if (s == "never") return PrependScheme::never;
  SY_FAIL("{}: prepend_scheme \"{}\" is not one of always, first, never", where, s);
}

std::string read_char(const json& j, std::string_view key, std::string_view where) {
  const std::string s = json_string(j, key, where);
  size_t i = 0;
  if (!s.empty()) next_code_point(s, i);
  SY_CHECK(!s.empty() && i == s.size(), "{}: \"{}\" must be one character, got \"{}\"", where, key, s);
  return s;
}

void read_pre_tokenizer(const json& j, std::string_view where, std::vector<PreTokenizerStep>& steps) {
  if (j.is_null()) return;
  const std::string type = component_type(j, where);
  const std::string here = fmt::format("{} ({})", where, type);
  if (type == "Sequence") {
    const json& list = json_member(j, "pretokenizers", here);
    SY_CHECK(list.is_array(), "{}: \"pretokenizers\" must be an array", here);
    for (const json& p : list) read_pre_tokenizer(p, here, steps);
  } else if (type == "Split") {
    static const std::pair<std::string_view, SplitBehavior> behaviors[] = {
        {"Removed", SplitBehavior::removed},
        {"Isolated", SplitBehavior::isolated},
        {"MergedWithPrevious", SplitBehavior::merged_with_previous},
        {"MergedWithNext", SplitBehavior::merged_with_next},
        {"Contiguous", SplitBehavior::contiguous}};
    const std::string b = json_string(j, "behavior", here);
    const auto it =
        std::find_if(std::begin(behaviors), std::end(behaviors), [&](const auto& x) { return x.first == b; });
    SY_CHECK(it != std::end(behaviors),
             "{}: behavior \"{}\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
             here, b);
    steps.emplace_back(SplitPreTokenizer{read_pattern(j, here), it->second, json_bool(j, "invert", here, false)});
  } else if (type == "ByteLevel") {
    steps.emplace_back(
        ByteLevelPreTokenizer{json_bool(j, "add_prefix_space", here, true), json_bool(j, "use_regex", here, true)});
  } else if (type == "Metaspace") {
    steps.emplace_back(MetaspacePreTokenizer{read_char(j, "replacement", here), read_prepend_scheme(j, here),
                                             json_bool(j, "split", here, true)});
  } else if (type == "Digits") {
    steps.emplace_back(DigitsPreTokenizer{json_bool(j, "individual_digits", here, false)});
  } else {
    SY_FAIL("{}: pre-tokenizer type \"{}\" is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits)",
            where, type);
  }
}

char32_t first_char(const std::string& s) {
  size_t i = 0;
  return next_code_point(s, i);
}

void read_decoder(const json& j, std::string_view where, std::vector<DecoderStep>& steps) {
  if (j.is_null()) return;
  const std::string type = component_type(j, where);
  const std::string here = fmt::format("{} ({})", where, type);
  if (type == "Sequence") {
    const json& list = json_member(j, "decoders", here);
    SY_CHECK(list.is_array(), "{}: \"decoders\" must be an array", here);
    for (const json& d : list) read_decoder(d, here, steps);
  } else if (type == "ByteLevel") {
    steps.emplace_back(ByteLevelDecoder{});
  } else if (type == "ByteFallback") {
    steps.emplace_back(ByteFallbackDecoder{});
  } else if (type == "Fuse") {
    steps.emplace_back(FuseDecoder{});
  } else if (type == "Metaspace") {
    steps.emplace_back(MetaspaceDecoder{first_char(read_char(j, "replacement", here)),
                                        read_prepend_scheme(j, here) != PrependScheme::never});
  } else if (type == "Strip") {
    const int64_t start = json_int(j, "start", here), stop = json_int(j, "stop", here);
    SY_CHECK(start >= 0 && stop >= 0, "{}: start ({}) and stop ({}) must be >= 0", here, start, stop);
    steps.emplace_back(StripDecoder{first_char(read_char(j, "content", here)), size_t(start), size_t(stop)});
  } else if (type == "Replace") {
    steps.emplace_back(ReplaceDecoder{read_pattern(j, here), json_string(j, "content", here)});
  } else {
    SY_FAIL(
        "{}: decoder type \"{}\" is not supported (supported: Sequence, ByteLevel, ByteFallback, Fuse, Metaspace, "
        "Strip, Replace)",
        where, type);
  }
}

// Adds the post-processor's single-sequence special tokens around `prefix` / `suffix`.
void read_post_processor(const json& j, std::string_view where, std::vector<int32_t>& prefix,
                         std::vector<int32_t>& suffix) {
  if (j.is_null()) return;
  const std::string type = component_type(j, where);
  const std::string here = fmt::format("{} ({})", where, type);
  if (type == "Sequence") {
    const json& list = json_member(j, "processors", here);
    SY_CHECK(list.is_array(), "{}: \"processors\" must be an array", here);
    for (const json& p : list) read_post_processor(p, here, prefix, suffix);
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    const json& single = json_member(j, "single", here);
    const json& specials = json_member(j, "special_tokens", here);
    SY_CHECK(single.is_array(), "{}: \"single\" must be an array", here);
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.contains("Sequence")) {
        SY_CHECK(!seen_sequence, "{}: the single template has two sequences", here);
        seen_sequence = true;
        continue;
      }
      const json& sp = json_member(piece, "SpecialToken", here);
      const std::string name = json_string(sp, "id", here);
      SY_CHECK(specials.contains(name), "{}: the template names special token \"{}\", which special_tokens lacks", here,
               name);
      const json& ids = json_member(specials[name], "ids", here);
      SY_CHECK(ids.is_array(), "{}: special_tokens \"{}\".ids must be an array", here, name);
      for (const json& id : ids) {
        SY_CHECK(id.is_number_integer(), "{}: special_tokens \"{}\".ids must hold integers", here, name);
        (seen_sequence ? after : before).push_back(id.get<int32_t>());
      }
    }
    SY_CHECK(seen_sequence, "{}: the single template has no $A sequence", here);
    prefix.insert(prefix.begin(), before.begin(), before.end());
    suffix.insert(suffix.end(), after.begin(), after.end());
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](std::string_view key) {
      const json& pair = json_member(j, key, here);
      SY_CHECK(pair.is_array() && pair.size() == 2 && pair[1].is_number_integer(), "{}: \"{}\" must be [token, id]",
               here, key);
      return pair[1].get<int32_t>();
    };
    prefix.insert(prefix.begin(), id_of("cls"));
    suffix.push_back(id_of("sep"));
  } else {
    SY_FAIL(
        "{}: post-processor type \"{}\" is not supported (supported: Sequence, ByteLevel, TemplateProcessing, "
        "BertProcessing, RobertaProcessing)",
        where, type);
  }
}

std::string_view error_text(simdjson::error_code e) { return simdjson::error_message(e); }

std::optional<std::string> optional_string(const json& j, std::string_view key, std::string_view where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  SY_CHECK(it->is_string(), "{}: \"{}\" must be a string or null, got {}", where, key, it->type_name());
  return it->get<std::string>();
}

BpeModel read_bpe(simdjson::dom::object model, const json& options_json, const std::string& where) {
  simdjson::dom::element vocab_el, merges_el;
  SY_CHECK(model["vocab"].get(vocab_el) == simdjson::SUCCESS, "{}: model has no \"vocab\"", where);
  simdjson::dom::object vocab_obj;
  SY_CHECK(vocab_el.get(vocab_obj) == simdjson::SUCCESS, "{}: model.vocab must be an object of token: id", where);
  Vocab vocab;
  vocab.reserve(vocab_obj.size(), size_t(vocab_obj.size()) * 8);
  // Inserted in blocks whose hash slots are prefetched first (the inserts are cache misses).
  constexpr size_t kBlock = 32;
  struct Entry {
    std::string_view token;
    int64_t id;
    size_t hash;
  };
  Entry block[kBlock];
  size_t n = 0;
  auto flush = [&] {
    for (size_t k = 0; k < n; ++k) {
      const Entry& e = block[k];
      if (vocab.insert(e.token, static_cast<int32_t>(e.id), e.hash)) continue;
      SY_CHECK(vocab.find(e.token) < 0, "{}: model.vocab lists token \"{}\" twice", where, e.token);
      SY_FAIL("{}: model.vocab gives id {} to both \"{}\" and \"{}\"; ids must be unique", where, e.id,
              vocab.token(static_cast<int32_t>(e.id)), e.token);
    }
    n = 0;
  };
  for (auto field : vocab_obj) {
    int64_t id = -1;
    SY_CHECK(field.value.get_int64().get(id) == simdjson::SUCCESS && id >= 0 && id < Vocab::kMaxId,
             "{}: model.vocab[\"{}\"] must be an integer id in [0, {})", where, field.key, Vocab::kMaxId);
    block[n] = {field.key, id, Vocab::hash(field.key)};
    vocab.prefetch(block[n].hash);
    if (++n == kBlock) flush();
  }
  flush();
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  if (model["merges"].get(merges_el) == simdjson::SUCCESS) {
    simdjson::dom::array list;
    SY_CHECK(merges_el.get(list) == simdjson::SUCCESS, "{}: model.merges must be an array", where);
    merges.reserve(list.size());
    size_t rank = 0;
    for (simdjson::dom::element m : list) {
      std::string_view line;
      simdjson::dom::array pair;
      if (m.get(line) == simdjson::SUCCESS) {
        const size_t space = line.find(' ');
        SY_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
                 "{}: model.merges[{}] \"{}\" must be two tokens separated by one space", where, rank, line);
        merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      } else if (m.get(pair) == simdjson::SUCCESS && pair.size() == 2 && pair.at(0).is_string() &&
                 pair.at(1).is_string()) {
        merges.emplace_back(pair.at(0).get_string().value_unsafe(), pair.at(1).get_string().value_unsafe());
      } else {
        SY_FAIL("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", where, rank);
      }
      ++rank;
    }
  }
  BpeOptions options;
  options.unk_token = optional_string(options_json, "unk_token", where);
  options.continuing_subword_prefix = optional_string(options_json, "continuing_subword_prefix", where).value_or("");
  options.end_of_word_suffix = optional_string(options_json, "end_of_word_suffix", where).value_or("");
  options.fuse_unk = json_bool(options_json, "fuse_unk", where, false);
  options.byte_fallback = json_bool(options_json, "byte_fallback", where, false);
  options.ignore_merges = json_bool(options_json, "ignore_merges", where, false);
  if (const auto it = options_json.find("dropout"); it != options_json.end() && !it->is_null()) {
    SY_CHECK(it->is_number() && it->get<double>() == 0.0,
             "{}: model.dropout {} is not supported (inference tokenizers have dropout null)", where, it->dump());
  }
  return BpeModel(std::move(vocab), merges, std::move(options), where);
}

std::vector<AddedToken> read_added_tokens(const json& list, std::string_view where) {
  std::vector<AddedToken> out;
  if (list.is_null()) return out;
  SY_CHECK(list.is_array(), "{}: \"added_tokens\" must be an array", where);
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string here = fmt::format("{} added_tokens[{}]", where, k);
    const json& t = list[k];
    AddedToken a;
    const int64_t id = json_int(t, "id", here);
    SY_CHECK(id >= 0 && id < Vocab::kMaxId, "{}: id {} is outside [0, {})", here, id, Vocab::kMaxId);
    a.id = static_cast<int32_t>(id);
    a.content = json_string(t, "content", here);
    a.single_word = json_bool(t, "single_word", here, false);
    a.lstrip = json_bool(t, "lstrip", here, false);
    a.rstrip = json_bool(t, "rstrip", here, false);
    a.special = json_bool(t, "special", here, false);
    a.normalized = json_bool(t, "normalized", here, !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

// `tokenizers` re-adds the file's added tokens rather than trusting their ids: a token takes the id its
// content already has (an earlier added token, else the model vocabulary), or else the next id after the
// model's vocabulary; for a repeated content the later entry's flags win. Consistent files keep their ids.
void assign_added_ids(std::vector<AddedToken>& tokens, const Vocab& vocab) {
  std::unordered_map<std::string, size_t> index;  // content → position in `out`
  std::vector<AddedToken> out;
  auto next_id = static_cast<int32_t>(vocab.size());
  for (AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    if (const auto it = index.find(t.content); it != index.end()) {
      t.id = out[it->second].id;
      out[it->second] = std::move(t);
      continue;
    }
    const int32_t id = vocab.find(t.content);
    t.id = id >= 0 ? id : next_id++;
    index.emplace(t.content, out.size());
    out.push_back(std::move(t));
  }
  tokens = std::move(out);
}

// transformers 4.x's LlamaTokenizerFast (and its relatives) replaces the post-processor with one built
// from tokenizer_config.json's add_bos_token / add_eos_token (defaults true / false).
void apply_config_bos_eos(Tokenizer::Impl& impl, const json& config, std::string_view where) {
  static constexpr std::string_view llama_like[] = {"LlamaTokenizerFast",     "LlamaTokenizer",
                                                    "CodeLlamaTokenizerFast", "CodeLlamaTokenizer",
                                                    "GemmaTokenizerFast",     "GemmaTokenizer"};
  const auto cls = config.find("tokenizer_class");
  if (cls == config.end() || !cls->is_string()) return;
  if (std::find(std::begin(llama_like), std::end(llama_like), cls->get<std::string>()) == std::end(llama_like)) return;
  const bool add_bos = json_bool(config, "add_bos_token", where, true);
  const bool add_eos = json_bool(config, "add_eos_token", where, false);
  auto id_of = [&](std::string_view key) -> std::optional<int32_t> {
    const auto token = config_token(config, key, where);
    if (!token) return std::nullopt;
    if (const auto it = impl.added_ids.find(*token); it != impl.added_ids.end()) return it->second;
    const int32_t id = std::get<BpeModel>(impl.model).vocab().find(*token);
    SY_CHECK(id >= 0, "{}: {} \"{}\" is neither an added token nor in the vocabulary", where, key, *token);
    return id;
  };
  impl.prefix_ids.clear();
  impl.suffix_ids.clear();
  if (add_bos) {
    if (const auto id = id_of("bos_token")) impl.prefix_ids.push_back(*id);
  }
  if (add_eos) {
    if (const auto id = id_of("eos_token")) impl.suffix_ids.push_back(*id);
  }
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_tokenizer_json(const fs::path& file, const std::optional<json>& config,
                                                     const fs::path& config_file) {
  const std::string where = file.string();
  // The largest published tokenizer.json files are about 30 MB; 1 GiB bounds what a file makes us allocate.
  const simdjson::padded_string text(read_regular_file(file, uint64_t{1} << 30, "tokenizer.json"));
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto e = parser.parse(text).get(root); e != simdjson::SUCCESS) {
    SY_FAIL("{}: not valid JSON ({}); the file is truncated or malformed, re-download it", where, error_text(e));
  }
  simdjson::dom::object root_obj, model_obj;
  SY_CHECK(root.get(root_obj) == simdjson::SUCCESS, "{}: expected a JSON object at the top level", where);
  SY_CHECK(root_obj["model"].get(model_obj) == simdjson::SUCCESS, "{}: missing \"model\" object", where);

  // Everything except the big tables goes through nlohmann::json.
  json model_options = json::object();
  for (auto field : model_obj) {
    if (field.key != "vocab" && field.key != "merges") model_options[std::string(field.key)] = to_json(field.value);
  }
  const std::string model_type = json_string(model_options, "type", where + " model", "BPE");
  SY_CHECK(model_type == "BPE", "{}: model type \"{}\" is not supported (supported: BPE)", where,
           cut_for_message(model_type));
  auto impl = std::make_unique<Tokenizer::Impl>(where, read_bpe(model_obj, model_options, where));
  impl->vocab_size = std::get<BpeModel>(impl->model).vocab().end_id();

  auto member = [&](std::string_view key) -> json {
    simdjson::dom::element e;
    return root_obj[key].get(e) == simdjson::SUCCESS ? to_json(e) : json(nullptr);
  };
  read_normalizer(member("normalizer"), where + " normalizer", impl->normalizer);
  read_pre_tokenizer(member("pre_tokenizer"), where + " pre_tokenizer", impl->pre_tokenizer);
  const json decoder = member("decoder");
  impl->has_decoder = !decoder.is_null();
  read_decoder(decoder, where + " decoder", impl->decoder);
  read_post_processor(member("post_processor"), where + " post_processor", impl->prefix_ids, impl->suffix_ids);
  std::vector<AddedToken> added = read_added_tokens(member("added_tokens"), where);
  assign_added_ids(added, std::get<BpeModel>(impl->model).vocab());
  impl->finish_added_tokens(std::move(added));
  for (const int32_t id : impl->prefix_ids) {
    SY_CHECK(id >= 0 && id < impl->vocab_size, "{}: post_processor adds id {} outside the vocabulary", where, id);
  }
  for (const int32_t id : impl->suffix_ids) {
    SY_CHECK(id >= 0 && id < impl->vocab_size, "{}: post_processor adds id {} outside the vocabulary", where, id);
  }
  if (config) {
    const std::string cwhere = config_file.string();
    apply_config_bos_eos(*impl, *config, cwhere);
    impl->clean_up_tokenization_spaces = json_bool(*config, "clean_up_tokenization_spaces", cwhere, false);
    impl->origin = where;
  }
  return impl;
}

}  // namespace sy::text::detail
