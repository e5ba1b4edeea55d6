// Subcommands of the switchyard binary; each registers its flags and returns the function to run.
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <functional>
#include <string>

#include "parallel/mapping.h"

namespace sy {

using CommandMain = std::function<int()>;

CommandMain add_generate_command(CLI::App& app);
CommandMain add_plan_command(CLI::App& app);
CommandMain add_inspect_command(CLI::App& app);
CommandMain add_bench_command(CLI::App& app);

// The layout flags (--tp --dp --pp --ep --etp --edp --dense-tp --pp-layers) and the GPUs at hand
// (--gpus --nodes --machine), shared by plan and generate; defined in plan.cpp.
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

// Every layout rule, run before generate reads any weight: a broken layout is refused with its rules and
// alternatives, and a valid one of more than one rank is refused because this build runs one rank.
void check_single_rank_layout(const LayoutFlags& flags, const std::string& model_dir, bool random_weights,
                              int64_t max_layers, int64_t max_batch_tokens, int64_t kv_tokens);

}  // namespace sy
