// ConfigJson: the typed view of config.json that every architecture reads its hyperparameters from.
#include "io/model_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/input.h"
#include "io/json_input.h"

namespace sy {

// NOLINTNEXTLINE(bugprone-exception-escape): the check blames the implicit members of a plain holder of a json.
struct ConfigJson::Impl {
  nlohmann::json json;
};

ConfigJson::ConfigJson(std::unique_ptr<Impl> impl, std::string source)
    : impl_(std::move(impl)), source_(std::move(source)) {}
ConfigJson::ConfigJson(ConfigJson&&) noexcept = default;
ConfigJson& ConfigJson::operator=(ConfigJson&&) noexcept = default;
ConfigJson::~ConfigJson() = default;

ConfigJson ConfigJson::load(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  std::error_code ec;
  SY_CHECK(std::filesystem::exists(path, ec), "cannot read {}: a model folder needs a Hugging Face config.json",
           path.string());
  return parse(read_regular_file(path, kMaxJsonFileBytes, "config.json"), path.string());
}

std::optional<ConfigJson> ConfigJson::load_if_present(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return parse(read_regular_file(path, kMaxJsonFileBytes, path.filename().string().c_str()), path.string());
}

ConfigJson ConfigJson::parse(const std::string& text, const std::string& source_name) {
  auto impl = std::make_unique<Impl>();
  impl->json = parse_json_input(text, source_name, "");
  SY_CHECK(impl->json.is_object(), "{} must hold a JSON object, got {}", source_name, impl->json.type_name());
  return ConfigJson(std::move(impl), source_name);
}

std::optional<ConfigJson> ConfigJson::child(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_object(), "{}: '{}' must be an object, got {}", source_, key, json_for_message(v));
  auto impl = std::make_unique<Impl>();
  impl->json = v;
  return ConfigJson(std::move(impl), source_ + " (" + key + ")");
}

std::vector<std::string> ConfigJson::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : impl_->json.items()) out.push_back(k);
  return out;
}

bool ConfigJson::has(const std::string& key) const {
  auto it = impl_->json.find(key);
  return it != impl_->json.end() && !it->is_null();
}

bool ConfigJson::present(const std::string& key) const { return impl_->json.contains(key); }

std::string ConfigJson::architecture() const {
  const auto& j = impl_->json;
  auto it = j.find("architectures");
  SY_CHECK(it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string(),
           "{}: 'architectures' must be a non-empty list naming the model class, e.g. "
           "[\"Qwen3MoeForCausalLM\"]",
           source_);
  return (*it)[0].get<std::string>();
}

std::string ConfigJson::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_string(), "{}: '{}' must be a string, got {}", source_, key, json_for_message(v));
  return v.get<std::string>();
}

namespace {

// Upper bounds of the sizes a config may give, checked before anything is sized from them. Each is far
// above every published model (largest today: 128 layers, hidden 16384, vocab 256k, 512 experts, heads
// of 256, 10M positions) yet keeps products such as experts·inter·hidden·layers inside 64 bits.
struct IntBound {
  const char* key;
  int64_t max;
};
constexpr IntBound kIntBounds[] = {
    {"num_hidden_layers", 4096},
    {"hidden_size", 1 << 18},
    {"intermediate_size", 1 << 20},
    {"moe_intermediate_size", 1 << 20},
    {"vocab_size", 1 << 24},
    {"num_attention_heads", 4096},
    {"num_key_value_heads", 4096},
    {"head_dim", 8192},
    {"v_head_dim", 8192},
    {"qk_rope_head_dim", 8192},
    {"qk_nope_head_dim", 8192},
    {"kv_lora_rank", 1 << 16},
    {"q_lora_rank", 1 << 16},
    {"num_experts", 1 << 14},
    {"num_local_experts", 1 << 14},
    {"n_routed_experts", 1 << 14},
    {"num_experts_per_tok", 1 << 14},
    {"n_shared_experts", 256},
    {"n_group", 1 << 14},
    {"topk_group", 1 << 14},
    {"max_position_embeddings", 1 << 26},
    {"original_max_position_embeddings", 1 << 26},
    {"sliding_window", 1 << 26},
    {"index_n_heads", 4096},
    {"index_head_dim", 8192},
    {"index_topk", 1 << 26},
    {"num_nextn_predict_layers", 4096},
};
// Any other integer (token ids, layer indices, strides) must fit an int.
constexpr int64_t kDefaultIntMax = std::numeric_limits<int32_t>::max();

int64_t int_max(const std::string& key) {
  for (const IntBound& b : kIntBounds) {
    if (key == b.key) return b.max;
  }
  return kDefaultIntMax;
}

// Ranges of real-valued settings: [min, max], or (min, max] where min_open. A value outside is not a
// model that can run (rms_norm_eps 0 divides by zero; a rope factor of 0 or less divides positions by it).
struct DoubleBound {
  const char* key;
  double min;
  bool min_open;
  double max;
};
constexpr DoubleBound kDoubleBounds[] = {
    {"rms_norm_eps", 0.0, true, 1.0},
    {"layer_norm_epsilon", 0.0, true, 1.0},
    {"rope_theta", 0.0, true, 1e15},
    {"partial_rotary_factor", 0.0, true, 1.0},
    {"routed_scaling_factor", 0.0, true, 1e6},
    {"factor", 0.0, true, 1e6},
    {"beta_fast", 0.0, true, 1e6},
    {"beta_slow", 0.0, true, 1e6},
    {"mscale", 0.0, false, 1e6},
    {"mscale_all_dim", 0.0, false, 1e6},
    {"attention_factor", 0.0, true, 1e6},
    {"low_freq_factor", 0.0, true, 1e6},
    {"high_freq_factor", 0.0, true, 1e6},
    {"original_max_position_embeddings", 0.0, false, 1 << 26},
};

int64_t checked_int(const nlohmann::json& v, const std::string& key, int64_t min_value, const std::string& src) {
  const int64_t max_value = int_max(key);
  SY_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", src, key, json_for_message(v));
  SY_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(max_value),
           "{}: '{}' is {}, outside the range [{}, {}] this engine accepts", src, key, json_for_message(v), min_value,
           max_value);
  const int64_t x = v.get<int64_t>();
  SY_CHECK(x >= min_value, "{}: '{}' must be at least {}, got {}", src, key, min_value, x);
  SY_CHECK(x <= max_value, "{}: '{}' is {}, outside the range [{}, {}] this engine accepts", src, key, x, min_value,
           max_value);
  return x;
}

double checked_double(const nlohmann::json& v, const std::string& key, const std::string& src) {
  SY_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", src, key, json_for_message(v));
  const double x = v.get<double>();
  SY_CHECK(std::isfinite(x), "{}: '{}' must be a finite number, got {}", src, key, json_for_message(v));
  for (const DoubleBound& b : kDoubleBounds) {
    if (key != b.key) continue;
    const bool above_min = b.min_open ? x > b.min : x >= b.min;
    SY_CHECK(above_min && x <= b.max, "{}: '{}' is {}, outside the valid range {}{}, {}]", src, key, x,
             b.min_open ? "(" : "[", b.min, b.max);
  }
  return x;
}

}  // namespace

int64_t ConfigJson::get_int(const std::string& key, int64_t min_value) const {
  SY_CHECK(has(key), "{}: required key '{}' is missing", source_, key);
  return checked_int(impl_->json.at(key), key, min_value, source_);
}

int64_t ConfigJson::get_int(const std::string& key, int64_t fallback, int64_t min_value) const {
  if (has(key)) return checked_int(impl_->json.at(key), key, min_value, source_);
  // A default derived from other keys (head_dim = hidden_size / num_attention_heads) can be out of range too.
  SY_CHECK(fallback >= min_value && fallback <= int_max(key),
           "{}: '{}' is absent and its default, {}, is outside [{}, {}]; give '{}' explicitly", source_, key, fallback,
           min_value, int_max(key), key);
  return fallback;
}

double ConfigJson::get_double(const std::string& key) const {
  SY_CHECK(has(key), "{}: required key '{}' is missing", source_, key);
  return checked_double(impl_->json.at(key), key, source_);
}

double ConfigJson::get_double(const std::string& key, double fallback) const {
  return has(key) ? checked_double(impl_->json.at(key), key, source_) : fallback;
}

bool ConfigJson::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_boolean(), "{}: '{}' must be true or false, got {}", source_, key, json_for_message(v));
  return v.get<bool>();
}

std::vector<int64_t> ConfigJson::get_int_list(const std::string& key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_array(), "{}: '{}' must be a list of integers, got {}", source_, key, json_for_message(v));
  for (const auto& e : v) out.push_back(checked_int(e, key, 0, source_));
  return out;
}

std::vector<std::string> ConfigJson::get_string_list(const std::string& key) const {
  std::vector<std::string> out;
  if (!has(key)) return out;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_array(), "{}: '{}' must be a list of strings, got {}", source_, key, json_for_message(v));
  for (const auto& e : v) {
    SY_CHECK(e.is_string(), "{}: '{}' must be a list of strings, got {}", source_, key, json_for_message(v));
    out.push_back(e.get<std::string>());
  }
  return out;
}

int64_t ConfigJson::get_optional_int(const std::string& key) const {
  return has(key) ? checked_int(impl_->json.at(key), key, 1, source_) : 0;
}

RopeConfig ConfigJson::rope(double default_theta) const {
  RopeConfig r;
  const auto& j = impl_->json;
  const nlohmann::json* params = nullptr;
  std::string where;
  if (has("rope_parameters")) {
    params = &j.at("rope_parameters");
    where = "rope_parameters";
  } else if (has("rope_scaling")) {
    params = &j.at("rope_scaling");
    where = "rope_scaling";
  }
  r.theta = get_double("rope_theta", default_theta);
  r.partial_rotary_factor = get_double("partial_rotary_factor", 1.0);
  if (params == nullptr) return r;
  SY_CHECK(params->is_object(), "{}: '{}' must be an object, got {}", source_, where, json_for_message(*params));
  const auto num = [&](const char* key, double fallback) {
    auto it = params->find(key);
    if (it == params->end() || it->is_null()) return fallback;
    return checked_double(*it, key, source_ + " '" + where + "'");
  };
  // HF accepts both "rope_type" and the older "type".
  for (const char* key : {"rope_type", "type"}) {
    auto it = params->find(key);
    if (it != params->end() && !it->is_null()) {
      SY_CHECK(it->is_string(), "{}: '{}.{}' must be a string, got {}", source_, where, key, json_for_message(*it));
      r.type = it->get<std::string>();
      break;
    }
  }
  r.theta = num("rope_theta", r.theta);
  r.factor = num("factor", 1.0);
  // Some configs write it as a float (e.g. 4096.0); checked_double bounds it before the conversion.
  r.original_max_position = static_cast<int64_t>(num("original_max_position_embeddings", 0.0));
  r.beta_fast = num("beta_fast", 32.0);
  r.beta_slow = num("beta_slow", 1.0);
  r.mscale = num("mscale", 1.0);
  r.mscale_all_dim = num("mscale_all_dim", 0.0);
  if (auto it = params->find("attention_factor"); it != params->end() && !it->is_null()) {
    r.attention_factor = num("attention_factor", 1.0);
  }
  if (auto it = params->find("truncate"); it != params->end() && !it->is_null()) {
    SY_CHECK(it->is_boolean(), "{}: '{}.truncate' must be true or false", source_, where);
    r.truncate = it->get<bool>();
  }
  r.low_freq_factor = num("low_freq_factor", 1.0);
  r.high_freq_factor = num("high_freq_factor", 4.0);
  r.partial_rotary_factor = num("partial_rotary_factor", r.partial_rotary_factor);
  return r;
}

}  // namespace sy
