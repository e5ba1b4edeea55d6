// ConfigJson: the typed view of config.json that every architecture reads its hyperparameters from.
#include "io/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check.h"

namespace sy {

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
  std::ifstream in(path);
  SY_CHECK(in.good(), "cannot read {}: a model folder needs a Hugging Face config.json", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path.string());
}

ConfigJson ConfigJson::parse(const std::string& text, const std::string& source_name) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    SY_FAIL("{} is not valid JSON: {}", source_name, e.what());
  }
  SY_CHECK(impl->json.is_object(), "{} must hold a JSON object, got {}", source_name, impl->json.type_name());
  return ConfigJson(std::move(impl), source_name);
}

bool ConfigJson::has(const std::string& key) const {
  auto it = impl_->json.find(key);
  return it != impl_->json.end() && !it->is_null();
}

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
  SY_CHECK(v.is_string(), "{}: '{}' must be a string, got {}", source_, key, v.dump());
  return v.get<std::string>();
}

namespace {
int64_t checked_int(const nlohmann::json& v, const std::string& key, int64_t min_value, const std::string& src) {
  SY_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", src, key, v.dump());
  const int64_t x = v.get<int64_t>();
  SY_CHECK(x >= min_value, "{}: '{}' must be at least {}, got {}", src, key, min_value, x);
  return x;
}
double checked_double(const nlohmann::json& v, const std::string& key, const std::string& src) {
  SY_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", src, key, v.dump());
  return v.get<double>();
}
}  // namespace

int64_t ConfigJson::get_int(const std::string& key, int64_t min_value) const {
  SY_CHECK(has(key), "{}: required key '{}' is missing", source_, key);
  return checked_int(impl_->json.at(key), key, min_value, source_);
}

int64_t ConfigJson::get_int(const std::string& key, int64_t fallback, int64_t min_value) const {
  return has(key) ? checked_int(impl_->json.at(key), key, min_value, source_) : fallback;
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
  SY_CHECK(v.is_boolean(), "{}: '{}' must be true or false, got {}", source_, key, v.dump());
  return v.get<bool>();
}

std::vector<int64_t> ConfigJson::get_int_list(const std::string& key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_array(), "{}: '{}' must be a list of integers, got {}", source_, key, v.dump());
  for (const auto& e : v) out.push_back(checked_int(e, key, 0, source_));
  return out;
}

std::vector<std::string> ConfigJson::get_string_list(const std::string& key) const {
  std::vector<std::string> out;
  if (!has(key)) return out;
  const auto& v = impl_->json.at(key);
  SY_CHECK(v.is_array(), "{}: '{}' must be a list of strings, got {}", source_, key, v.dump());
  for (const auto& e : v) {
    SY_CHECK(e.is_string(), "{}: '{}' must be a list of strings, got {}", source_, key, v.dump());
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
  SY_CHECK(params->is_object(), "{}: '{}' must be an object, got {}", source_, where, params->dump());
  const auto num = [&](const char* key, double fallback) {
    auto it = params->find(key);
    if (it == params->end() || it->is_null()) return fallback;
    SY_CHECK(it->is_number(), "{}: '{}.{}' must be a number, got {}", source_, where, key, it->dump());
    return it->get<double>();
  };
  // HF accepts both "rope_type" and the older "type".
  for (const char* key : {"rope_type", "type"}) {
    auto it = params->find(key);
    if (it != params->end() && !it->is_null()) {
      SY_CHECK(it->is_string(), "{}: '{}.{}' must be a string, got {}", source_, where, key, it->dump());
      r.type = it->get<std::string>();
      break;
    }
  }
  r.theta = num("rope_theta", r.theta);
  r.factor = num("factor", 1.0);
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
