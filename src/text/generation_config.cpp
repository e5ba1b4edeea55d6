// End-of-sequence tokens from generation_config.json, config.json and tokenizer_config.json.
#include "text/generation_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/input.h"
#include "text/tokenizer.h"

namespace sy::text {

namespace {

namespace fs = std::filesystem;

// The parsed file, or null when it does not exist.
nlohmann::json read_optional_json(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return nullptr;
  const std::string text = read_regular_file(file, kMaxJsonFileBytes, file.filename().string());
  check_json_depth(text, file.string());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  SY_CHECK(!j.is_discarded() && j.is_object(), "{} is not a JSON object; the file is truncated or malformed",
           file.string());
  return j;
}

// eos_token_id: an id, a list of ids, or null.
void add_ids(const nlohmann::json& value, const fs::path& file, std::vector<int32_t>& out) {
  auto add_one = [&](const nlohmann::json& v) {
    SY_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
             "{}: eos_token_id {} is not a token id (a non-negative integer or a list of them)", file.string(),
             v.dump());
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  };
  if (value.is_null()) return;
  if (value.is_array()) {
    for (const auto& v : value) add_one(v);
  } else {
    add_one(value);
  }
}

}  // namespace

std::vector<int32_t> load_eos_token_ids(const fs::path& model_dir, const fs::path& tokenizer_dir,
                                        const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  const fs::path generation = model_dir / "generation_config.json";
  const nlohmann::json gen = read_optional_json(generation);
  if (gen.is_object() && gen.contains("eos_token_id")) {
    add_ids(gen["eos_token_id"], generation, ids);
  } else {
    const fs::path config = model_dir / "config.json";
    const nlohmann::json cfg = read_optional_json(config);
    if (cfg.is_object() && cfg.contains("eos_token_id")) add_ids(cfg["eos_token_id"], config, ids);
  }
  if (tokenizer != nullptr) {
    const fs::path tok_config = tokenizer_dir / "tokenizer_config.json";
    const nlohmann::json tc = read_optional_json(tok_config);
    if (tc.is_object() && tc.contains("eos_token") && !tc["eos_token"].is_null()) {
      const nlohmann::json& eos = tc["eos_token"];
      const nlohmann::json content = eos.is_object() ? eos.value("content", nlohmann::json()) : eos;
      SY_CHECK(content.is_string(), "{}: eos_token {} is neither a string nor {{\"content\": string}}",
               tok_config.string(), eos.dump());
      const auto id = tokenizer->token_id(content.get<std::string>());
      SY_CHECK(id.has_value(), "{}: eos_token '{}' is not in the tokenizer's vocabulary", tok_config.string(),
               content.get<std::string>());
      ids.push_back(*id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace sy::text
