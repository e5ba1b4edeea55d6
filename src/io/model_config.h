// config.json access: typed getters with Hugging Face defaults and errors naming file and key, and the
// rotary-embedding settings in both spellings (published `rope_theta` + `rope_scaling`, and the
// transformers 5.x `rope_parameters`). Architecture-specific fields are read by each arch/ describer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sy {

// Rotary embedding parameters; `type` is HF's rope_type ("default", "linear", "yarn", "llama3", ...).
struct RopeConfig {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_position = 0;       // yarn / llama3: original_max_position_embeddings
  double beta_fast = 32.0;                 // yarn
  double beta_slow = 1.0;                  // yarn
  double mscale = 1.0;                     // yarn (DeepSeek form)
  double mscale_all_dim = 0.0;             // yarn (DeepSeek form)
  std::optional<double> attention_factor;  // yarn: explicit attention scaling
  bool truncate = true;                    // yarn: round the correction range to integers
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  double partial_rotary_factor = 1.0;      // fraction of head_dim that rotates
};

class ConfigJson {
 public:
  // Reads and parses DIR/config.json; errors name the file.
  static ConfigJson load(const std::filesystem::path& dir);
  // Another JSON file of a model folder (hf_quant_config.json), or nothing where the folder has none.
  static std::optional<ConfigJson> load_if_present(const std::filesystem::path& path);
  static ConfigJson parse(const std::string& text, const std::string& source_name);
  ConfigJson(ConfigJson&&) noexcept;
  ConfigJson& operator=(ConfigJson&&) noexcept;
  ~ConfigJson();

  const std::string& source() const { return source_; }
  bool has(const std::string& key) const;      // present and not null
  bool present(const std::string& key) const;  // present, null or not
  // First entry of "architectures" (error if absent or empty).
  std::string architecture() const;
  std::string get_string(const std::string& key, const std::string& fallback) const;

  // A nested object (e.g. quantization_config) with the same getters; errors name it after the file.
  // Absent or null: nullopt; present but not an object: an error.
  std::optional<ConfigJson> child(const std::string& key) const;
  // The keys of this object, sorted (quantization_config's config_groups).
  std::vector<std::string> keys() const;

  // Required / defaulted scalar getters. A present key of the wrong type, or a value outside its range, is
  // an error naming the key, the value, the range and the file. Integers lie in [min_value, bound], where
  // the bound of a size key (num_hidden_layers, hidden_size, vocab_size, head_dim, experts, ...) is stated
  // in model_config.cpp and every other integer fits an int32. Numbers are finite, and keys with a
  // physical range (rms_norm_eps > 0, rope factor > 0, partial_rotary_factor in (0, 1], ...) are in it.
  int64_t get_int(const std::string& key, int64_t min_value = 0) const;
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min_value) const;
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;         // absent or null: empty
  std::vector<std::string> get_string_list(const std::string& key) const;  // absent or null: empty
  // An optional positive integer (e.g. sliding_window); null or absent gives 0.
  int64_t get_optional_int(const std::string& key) const;

  // Rope settings from `rope_parameters` if present, else `rope_theta` + `rope_scaling`.
  RopeConfig rope(double default_theta) const;

 private:
  struct Impl;
  ConfigJson(std::unique_ptr<Impl> impl, std::string source);
  std::unique_ptr<Impl> impl_;
  std::string source_;
};

}  // namespace sy
