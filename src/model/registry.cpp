// load_model and check_model: the description of config.json (src/arch/), then its weights bound.
#include <optional>

#include "arch/model_desc.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "model/bind.h"

namespace sy {

std::unique_ptr<Model> load_model(const LoadOptions& options, Backend& backend) {
  const ModelDesc desc = load_model_desc(options.dir);
  std::optional<Checkpoint> checkpoint;
  if (!options.random_weights) checkpoint = Checkpoint::open(options.dir);
  WeightStore store;
  WeightLoader loader(checkpoint ? &*checkpoint : nullptr, options.seed, backend, store, options.parallel);
  auto model = build_model(desc, options, loader, store, backend);
  log_info("loaded {} ({} layers, {:.1f} MiB of weights on the device{})", desc.architecture, model->info().n_layers,
           static_cast<double>(model->info().weight_bytes) / (1 << 20), options.random_weights ? ", random" : "");
  return model;
}

void check_model(const std::filesystem::path& dir, bool config_only) {
  const ModelDesc desc = load_model_desc(dir);
  std::optional<Checkpoint> checkpoint;
  if (!config_only) checkpoint = Checkpoint::open(dir);
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store{.checks_only = true};
  WeightLoader loader(checkpoint ? &*checkpoint : nullptr, 0, *backend, store);
  build_model(desc, {.dir = dir, .random_weights = config_only}, loader, store, *backend);
}

}  // namespace sy
