// The one table from Hugging Face class names to architecture builders, and load_model.
#include <string_view>

#include "base/check.h"
#include "base/input.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "model/archs/archs.h"

namespace sy {

namespace {
struct ArchEntry {
  std::string_view hf_class;
  ArchBuilder build;
};
constexpr ArchEntry kArchitectures[] = {
    {"Qwen3MoeForCausalLM", &build_qwen3_moe},
    {"MixtralForCausalLM", &build_mixtral},
    {"DeepseekV3ForCausalLM", &build_deepseek_v3},  // also Kimi K2 (model_type kimi_k2)
    {"DeepseekV32ForCausalLM", &build_deepseek_v32},
    {"Glm4MoeForCausalLM", &build_glm4_moe},
    {"GlmMoeDsaForCausalLM", &build_glm_moe_dsa},
};
}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchitectures) out.emplace_back(a.hf_class);
  return out;
}

namespace {

const ArchEntry& find_architecture(const ConfigJson& config) {
  const std::string arch = config.architecture();
  for (const auto& a : kArchitectures) {
    if (a.hf_class == arch) return a;
  }
  std::string names;
  for (const auto& s : supported_architectures()) {
    if (!names.empty()) names += ", ";
    names += s;
  }
  SY_FAIL("{}: architecture '{}' is not supported; supported: {}", config.source(), cut_for_message(arch), names);
}

}  // namespace

std::unique_ptr<Model> load_model(const LoadOptions& options, Backend& backend) {
  const ConfigJson config = ConfigJson::load(options.dir);
  const ArchEntry& entry = find_architecture(config);
  std::optional<Checkpoint> checkpoint;
  if (!options.random_weights) checkpoint = Checkpoint::open(options.dir);
  WeightStore store;
  WeightLoader loader(checkpoint ? &*checkpoint : nullptr, options.seed, backend, store, options.parallel);
  auto model = entry.build(config, options, loader, store, backend);
  log_info("loaded {} ({} layers, {:.1f} MiB of fp32 weights{})", entry.hf_class, model->info().n_layers,
           static_cast<double>(model->info().weight_bytes) / (1 << 20),
           options.random_weights ? ", random" : "");
  return model;
}

void check_model(const std::filesystem::path& dir, bool config_only) {
  const ConfigJson config = ConfigJson::load(dir);
  const ArchEntry& entry = find_architecture(config);
  std::optional<Checkpoint> checkpoint;
  if (!config_only) checkpoint = Checkpoint::open(dir);
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store{.checks_only = true};
  WeightLoader loader(checkpoint ? &*checkpoint : nullptr, 0, *backend, store);
  entry.build(config, {.dir = dir, .random_weights = config_only}, loader, store, *backend);
}

}  // namespace sy
