// The one table from Hugging Face class names to architecture builders, and load_model.
#include <string_view>

#include "base/check.h"
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

std::unique_ptr<Model> load_model(const LoadOptions& options, Backend& backend) {
  const ConfigJson config = ConfigJson::load(options.dir);
  const std::string arch = config.architecture();
  const ArchEntry* entry = nullptr;
  for (const auto& a : kArchitectures) {
    if (a.hf_class == arch) entry = &a;
  }
  if (entry == nullptr) {
    std::string names;
    for (const auto& s : supported_architectures()) {
      if (!names.empty()) names += ", ";
      names += s;
    }
    SY_FAIL("{}: architecture '{}' is not supported; supported: {}", config.source(), arch, names);
  }
  std::optional<Checkpoint> checkpoint;
  if (!options.random_weights) checkpoint = Checkpoint::open(options.dir);
  WeightStore store;
  WeightLoader loader(checkpoint ? &*checkpoint : nullptr, options.seed, backend, store, options.parallel);
  auto model = entry->build(config, options, loader, store, backend);
  log_info("loaded {} ({} layers, {:.1f} MiB of fp32 weights{})", arch, model->info().n_layers,
           static_cast<double>(model->info().weight_bytes) / (1 << 20),
           options.random_weights ? ", random" : "");
  return model;
}

}  // namespace sy
