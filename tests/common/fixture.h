// Test helpers: the conformance fixtures under tests/fixtures/ (made by tools/fixtures/make_fixtures.py
// with Hugging Face transformers) and the logits comparison every conformance test uses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/npy.h"

namespace sy::test {

// The source tree's fixtures; SY_SOURCE_DIR in the environment overrides the build-time path (for test
// binaries run from a copy of the tree on another machine).
inline std::filesystem::path fixtures_dir() {
  const char* env = std::getenv("SY_SOURCE_DIR");
  return std::filesystem::path(env ? env : SY_SOURCE_DIR) / "tests" / "fixtures";
}

struct Fixture {
  std::string name;
  std::filesystem::path dir;  // the model's folder
  std::vector<std::vector<int32_t>> prompts;
  std::vector<NpyArray> prompt_logits;  // per prompt: [len, vocab]
  std::vector<int32_t> greedy_tokens;   // continuation of prompts[greedy_prompt]
  int greedy_prompt = 0;
  NpyArray greedy_logits;  // [greedy_tokens.size(), vocab]
};

inline std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  if (!std::filesystem::exists(fixtures_dir())) return names;
  for (const auto& e : std::filesystem::directory_iterator(fixtures_dir())) {
    if (std::filesystem::exists(e.path() / "reference.json")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The model folder of fixture `name`: its own, or the one its reference.json names (model_dir, relative to
// tests/fixtures: the bundled model under models/).
inline std::filesystem::path model_dir(const std::string& name) {
  std::filesystem::path refs = fixtures_dir() / name;
  std::ifstream in(refs / "reference.json");
  if (!in) return refs;
  const auto j = nlohmann::json::parse(in);
  return j.contains("model_dir") ? (fixtures_dir() / j.at("model_dir").get<std::string>()).lexically_normal() : refs;
}

inline Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  const std::filesystem::path refs = fixtures_dir() / name;
  std::ifstream in(refs / "reference.json");
  const auto j = nlohmann::json::parse(in);
  f.dir = model_dir(name);
  f.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    f.prompt_logits.push_back(read_npy_f32(refs / ("logits_prompt" + std::to_string(i) + ".npy")));
  }
  f.greedy_prompt = j.at("greedy_prompt_index").get<int>();
  f.greedy_tokens = j.at("greedy_tokens").get<std::vector<int32_t>>();
  f.greedy_logits = read_npy_f32(refs / "logits_greedy.npy");
  return f;
}

// Largest per-row error max_v |got - want| / max_v |want| over `rows` rows of `vocab` logits.
inline double max_relative_row_error(const float* got, const float* want, int64_t rows, int64_t vocab) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double err = 0.0, scale = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      err = std::max(err, std::fabs(double(got[r * vocab + v]) - double(want[r * vocab + v])));
      scale = std::max(scale, std::fabs(double(want[r * vocab + v])));
    }
    worst = std::max(worst, err / std::max(scale, 1e-30));
  }
  return worst;
}

// The conformance bound of the foundation issue: 1e-4 relative (max-abs over the vocab, per position).
inline constexpr double kLogitTolerance = 1e-4;

}  // namespace sy::test
