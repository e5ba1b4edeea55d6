// The planner: every rule a layout must pass before any weight I/O, per-rank memory, the valid
// alternatives to a refused layout, and the ranked list of every layout for a model on a machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "arch/model_desc.h"
#include "parallel/machine.h"
#include "parallel/mapping.h"
#include "planner/cost_model.h"
#include "planner/memory.h"
#include "planner/perf.h"
#include "planner/weights.h"

namespace sy {

// What a layout is checked against: the model, its weights, the GPUs at hand, the step to fit.
struct PlanTarget {
  ModelDesc shape;
  WeightTable weights;  // as the checkpoint stores them
  // What the GPU holds of a quantised checkpoint, which the memory check and the decode floor count:
  // block-FP8 matrices as stored (but for the few the backend widens), INT4 and NVFP4 dequantised to the
  // model dtype at load (this build).
  std::optional<WeightTable> device_weights;
  std::string weights_source;  // "safetensors headers of 3 files" or "config.json (no safetensors)"
  bool weights_from_checkpoint = false;
  Cluster cluster;
  MemoryOptions memory;
  bool check_memory = true;    // false where device memory is unknown (a CPU run without --machine)
  int64_t decode_batch = 256;  // the second decode estimate column
  int64_t decode_context = 1024;
  int64_t prefill_len = 0;  // prompt tokens of the predicted prefill (of decode_batch prompts); 0: decode_context
  // Measured machine profiles (plan --profile); a layout of W ranks is timed by the one measured with W ranks, else
  // the nearest. None: the machine preset's default efficiencies.
  std::vector<MachineProfile> profiles;
};

// The speed model's figures for one layout (cost_model.h).
struct LayoutPrediction {
  std::string profile;  // the profile's file, or the preset's description
  StepPrediction decode_one;
  StepPrediction decode_batch;
  StepPrediction prefill;
};

// The weight table from DIR's safetensors headers (never tensor data), or from the config when
// config_only or when the folder holds no .safetensors file; `source` says which.
struct LoadedWeights {
  WeightTable table;
  std::string source;
  bool from_checkpoint = false;  // false: sized from config.json
};
LoadedWeights load_weights(const std::filesystem::path& dir, const ModelDesc& shape, bool config_only);

// Reads DIR/config.json and the weights as load_weights does.
// max_layers > 0 keeps the first layers only (generate --layers).
PlanTarget load_plan_target(const std::filesystem::path& dir, const Cluster& cluster, const MemoryOptions& memory,
                            bool config_only, int64_t max_layers = 0);

struct LayoutCheck {
  LayoutRequest request;
  ParallelSizes sizes;                // resolved; a size that could not be completed is 0
  std::vector<int64_t> stage_layers;  // decoder layers per stage, when pp is usable
  std::vector<LayoutIssue> issues;    // every broken rule
  std::vector<std::string> completions;
  bool uses_fewer_gpus = false;
  std::vector<std::string> use_all_gpus;  // with uses_fewer_gpus: valid layouts that use every GPU
  std::optional<LayoutMemory> memory;     // once every rule but memory_fit passes

  bool valid() const { return issues.empty(); }
  bool rules_pass() const;  // every rule except memory_fit
};

// Every rule: the structural ones of resolve_layout_sizes, group_spans_nodes, experts_divisible,
// heads_divisible, kv_heads_divisible, expert_inter_divisible, dense_inter_divisible,
// shared_inter_divisible, quant_block, quant_group, vocab_divisible, pp_range, pp_layers and memory_fit. No
// alternatives.
LayoutCheck check_layout(const PlanTarget& target, const LayoutRequest& request);
// check_layout plus the valid alternatives for each issue and, when fewer GPUs are used, the ways to
// use them all.
LayoutCheck check_layout_with_alternatives(const PlanTarget& target, const LayoutRequest& request);

// The predictions for a layout whose rules pass (stage_layers known).
LayoutPrediction predict_layout(const PlanTarget& target, const LayoutCheck& check);
// The decode step at the target's batch, op by op, as predict_layout prices it (plan --explain); prefill: the first
// chunk of its prefill of that many prompts instead (plan --explain-prefill).
CostExplanation explain_layout(const PlanTarget& target, const LayoutCheck& check, bool prefill = false);

struct PlanEntry {
  LayoutCheck check;
  DecodeEstimate decode_one;                  // batch 1
  DecodeEstimate decode_batch;                // target.decode_batch
  std::optional<LayoutPrediction> predicted;  // where the rules pass
};

struct RuleSummary {
  std::string rule;
  int layouts = 0;
  std::string example_flags;
  std::string example_message;
};

struct Plan {
  std::vector<PlanEntry> layouts;    // every layout that passes the rules: fitting first, then fastest
  std::vector<RuleSummary> invalid;  // layouts broken by each rule (a layout counts under each rule it breaks)
  int considered = 0;
  int invalid_layouts = 0;
};

// Every factorisation of the cluster's GPUs into pp · dp · tp = pp · edp · ep · etp, with dense_tp = tp
// (or every divisor of the stage with all_dense_tp).
std::vector<ParallelSizes> enumerate_layouts(int world, bool all_dense_tp);
Plan make_plan(const PlanTarget& target, bool all_dense_tp = false);

// When nothing fits on the cluster: the smallest power-of-two GPU count (up to 512) of the same machine
// with a fitting layout, and its best layout.
struct FittingCluster {
  Cluster cluster;
  PlanEntry best;
};
std::optional<FittingCluster> smallest_fitting_cluster(const PlanTarget& target);

}  // namespace sy
