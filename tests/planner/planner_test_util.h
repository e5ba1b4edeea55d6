// Helpers of the planner tests: the test configs, the fixtures present, and targets to check layouts on.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace sy::test {

// A cuda profile with copies at 1e12 B/s and products at 1e15 FLOP/s; `ops` and `collectives` as given.
inline nlohmann::json profile_json(const nlohmann::json& ops,
                                   const nlohmann::json& collectives = nlohmann::json::object()) {
  return {{"format", "switchyard-profile"},
          {"version", 1},
          {"machine", {{"device", "cuda"}, {"name", "test GPU"}, {"ranks", 1}, {"transport", "none"}}},
          {"rates", {{"copy_gb_s", 1000.0}, {"matrix_tflop_s", 1000.0}}},
          {"step", {{"launch_us", 3.0}, {"sync_us", 5.0}, {"graph_launch_us", 7.0}, {"copy_to_host_us", 9.0}}},
          {"ops", ops},
          {"collectives", collectives}};
}

inline std::filesystem::path planner_configs_dir() {
  return std::filesystem::path(SY_SOURCE_DIR) / "tests" / "planner" / "configs";
}

inline std::filesystem::path planner_config(const std::string& name) { return planner_configs_dir() / name; }

// Tiny checkpoints made by transformers (tests/fixtures/<name>/ with config.json and safetensors).
inline std::vector<std::filesystem::path> checkpoint_fixtures() {
  std::vector<std::filesystem::path> out;
  const auto dir = std::filesystem::path(SY_SOURCE_DIR) / "tests" / "fixtures";
  for (const char* name :
       {"qwen3_moe_base", "qwen3_moe_variant", "mixtral_base", "mixtral_variant", "glm4_moe_base", "glm4_moe_variant",
        "deepseek_v3_base", "deepseek_v3_kimi", "deepseek_v32_base", "glm_moe_dsa_base", "qwen3_moe_fp8",
        "deepseek_v3_kimi_int4", "glm_moe_dsa_nvfp4", "deepseek_v3_kimi_wide", "deepseek_v3_kimi_int4_g32",
        "glm_moe_dsa_wide", "glm_moe_dsa_nvfp4_g16"}) {
    const auto d = dir / name;
    if (std::filesystem::exists(d / "config.json")) out.push_back(d);
  }
  return out;
}

// Every model folder the tests check layouts against: the published-size configs and the fixtures.
inline std::vector<std::filesystem::path> all_model_dirs() {
  std::vector<std::filesystem::path> out;
  for (const char* name : {"qwen3_30b_a3b", "mixtral_8x7b", "kimi_k2", "kimi_k2_thinking", "glm4_5", "deepseek_v32",
                           "qwen3_30b_a3b_fp8", "glm5_nvfp4"}) {
    out.push_back(planner_config(name));
  }
  for (const auto& d : checkpoint_fixtures()) out.push_back(d);
  return out;
}

inline PlanTarget target_for(const std::filesystem::path& dir, const std::string& machine, int gpus,
                             bool check_memory = true, MemoryOptions memory = {}) {
  PlanTarget t = load_plan_target(dir, make_cluster(find_machine(machine), gpus, std::nullopt), memory, false);
  t.check_memory = check_memory;
  return t;
}

inline std::set<std::string> rule_ids(const LayoutCheck& c) {
  std::set<std::string> out;
  for (const auto& i : c.issues) out.insert(i.rule);
  return out;
}

inline const LayoutIssue* find_issue(const LayoutCheck& c, const std::string& rule) {
  for (const auto& i : c.issues) {
    if (i.rule == rule) return &i;
  }
  return nullptr;
}

}  // namespace sy::test
