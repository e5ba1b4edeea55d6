// `switchyard inspect`: what a checkpoint is — architecture, layer kinds, parameters total and active,
// bytes by part, KV bytes per token — from config.json and safetensors headers (no tensor data).
#include <cstdio>

#include "apps/commands.h"
#include "model/model.h"
#include "planner/report.h"

namespace sy {

namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool config_only = false;
};

int run_inspect(const InspectOptions& o) {
  InspectReport r;
  r.shape = load_model_desc(o.model);
  LoadedWeights w = load_weights(o.model, r.shape, o.config_only);
  check_model(o.model, !w.from_checkpoint);  // the architecture's own checks and every tensor, as generate
  r.weights = std::move(w.table);
  r.weights_source = std::move(w.source);
  const std::string out = o.json ? inspect_json(r) + "\n" : format_inspect(r);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

CommandMain add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "what a checkpoint is: architecture, parameters, memory by part");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json, safetensors headers if present)")
      ->required();
  cmd->add_flag("--json", o->json, "print JSON instead of a table");
  cmd->add_flag("--config-only", o->config_only, "size the weights from config.json even if safetensors are present");
  return [o] { return run_inspect(*o); };
}

}  // namespace sy
