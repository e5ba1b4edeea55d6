// Subcommands of the switchyard binary; each registers its flags and returns the function to run.
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/mapping.h"
#include "planner/planner.h"

namespace sy {

class Communicator;
class Launch;

using CommandMain = std::function<int()>;

// "1,2,3" → its integers, each in [0, max_value]; a bad item throws sy::Error
// "<flag>: '<item>' is not <noun>; <hint>". Defined in plan.cpp.
std::vector<int64_t> parse_int_list(const std::string& text, int64_t max_value, const std::string& flag,
                                    const std::string& noun, const std::string& hint);

// generate runs as one rank or as a rank of `launch` (which outlives the returned function).
CommandMain add_generate_command(CLI::App& app, Launch& launch);
CommandMain add_plan_command(CLI::App& app);
CommandMain add_inspect_command(CLI::App& app);
CommandMain add_tokenize_command(CLI::App& app);
// serve: the OpenAI-compatible HTTP server (one rank for now).
CommandMain add_serve_command(CLI::App& app, Launch& launch);
// The subcommands of `bench` (`bench_cmd`): latency runs as one rank or as the ranks of a layout, comm as the
// ranks of a launch, each started by itself or by mpirun as generate is.
CommandMain add_bench_latency_command(CLI::App& bench_cmd, Launch& launch);
CommandMain add_bench_comm_command(CLI::App& bench_cmd, Launch& launch);
// bench calibrate: every op, the step costs and the collectives timed on this machine, written as the planner's
// machine profile (one rank, or the ranks of a launch as bench comm).
CommandMain add_bench_calibrate_command(CLI::App& bench_cmd, Launch& launch);
// bench tokenize: encoding throughput of the model's tokenizer on one core, and its load time.
CommandMain add_bench_tokenize_command(CLI::App& bench_cmd);
// bench serve: an HTTP load generator against any OpenAI-compatible server (links no engine code).
CommandMain add_bench_serve_command(CLI::App& bench_cmd);
// bench soak: a server under faults (client disconnects, malformed requests) with its memory watched.
CommandMain add_bench_soak_command(CLI::App& bench_cmd);

// The layout flags (--tp --dp --pp --ep --etp --edp --dense-tp --pp-layers) and the GPUs at hand
// (--gpus --nodes --machine), shared by plan, generate and bench latency; defined in plan.cpp.
struct LayoutFlags {
  std::array<int, kAxes.size()> sizes{};  // by Axis, read only where given
  std::array<CLI::Option*, kAxes.size()> given{};
  std::string pp_layers;  // "30,31"
  int gpus = 0;
  int nodes = 0;
  CLI::Option* gpus_given = nullptr;
  CLI::Option* nodes_given = nullptr;
  std::string machine;

  LayoutRequest request() const;  // sy::Error for a malformed --pp-layers
  bool any_layout_flag() const;
};
void add_layout_flags(CLI::App* cmd, LayoutFlags& flags);
// Bounds of the layout flags: an axis at most 1024 (products of three stay inside an int), --gpus and
// --nodes at most 65536.
inline constexpr int kMaxAxisSize = 1024;
inline constexpr int kMaxGpus = 65536;
// A CLI check for a real-valued flag: a finite number in [min, max] (CLI::Range lets NaN through).
CLI::Validator finite_range(double min, double max);
// --kv-dtype of the commands that run a model (generate, serve, bench latency): auto (the device's own type), bf16
// or fp8 (E4M3 with per-tensor scales from the checkpoint); checked as the flags are parsed (parse_kv_dtype).
void add_kv_dtype_flag(CLI::App* cmd, std::string& kv_dtype);

// What generate's layout is checked against.
struct GenerateLayoutTarget {
  std::string model_dir;
  bool random_weights = false;  // size the weights from config.json
  int64_t max_layers = 0;       // --layers
  int64_t max_batch_tokens = 0;
  int64_t kv_tokens = 0;          // KV tokens the run needs
  std::string kv_dtype = "auto";  // --kv-dtype (auto: bf16 on a GPU)
  int launched_ranks = 0;         // ranks of the mpirun launch this process is one of; 0: none (generate starts them)
};

// Every layout rule, run before generate reads any weight: a broken layout is refused with its rules and
// alternatives; inside an mpirun launch the layout must use exactly its ranks (the error names both
// numbers); a layout of more than one rank needs a build with MPI.
struct GenerateLayout {
  LayoutCheck check;              // resolved and valid; one rank when no layout flag is given outside a launch
  std::optional<Cluster> placed;  // with --machine: the GPUs the ranks are placed on
};
GenerateLayout check_generate_layout(const LayoutFlags& flags, const GenerateLayoutTarget& target);

// Rank 0 prints the layout every rank runs, before any weight is read: the sizes, the completions, the
// stages, and each rank's host, process id, coordinates and groups (with `cluster`: node, GPU, NUMA node).
// Collective over `world` (the hosts and process ids are gathered); defined in generate.cpp.
void print_layout(Communicator& world, const LayoutCheck& check, const Cluster* cluster);

}  // namespace sy
