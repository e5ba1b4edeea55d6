// Helpers of the quantised-checkpoint tests (INT4, NVFP4): loading an edited copy of a fixture to see what
// the loader says of it, and reading a weight and its slices through the loader against values decoded by
// the test from the format's definition.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/weights.h"

namespace sy::test {

using EditTensors = std::function<void(std::vector<TensorToWrite>&)>;
using EditJson = std::function<void(nlohmann::json&)>;

// A copy of `fixture` in `dir` whose tensors `edit` changed and whose JSON files (config.json, and
// hf_quant_config.json where the fixture has one) the editors changed (an editor that sets the document to
// null leaves that file out), loaded on the CPU: the error, or "" when it loads.
inline std::string load_edited_copy(
    const std::filesystem::path& dir, const std::filesystem::path& fixture, const EditTensors& edit,
    const EditJson& edit_config = [](nlohmann::json&) {}, const EditJson& edit_quant = [](nlohmann::json&) {}) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto copy_json = [&](const char* name, const EditJson& editor) {
    if (!fs::exists(fixture / name)) return;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(fixture / name));
    editor(j);
    if (!j.is_null()) std::ofstream(dir / name) << j.dump(2);
  };
  copy_json("config.json", edit_config);
  copy_json("hf_quant_config.json", edit_quant);
  const Checkpoint ck = Checkpoint::open(fixture);
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo* t : ck.tensors()) tensors.push_back({t->name, t->dtype, t->shape, t->data});
  edit(tensors);
  write_safetensors(dir / "model.safetensors", tensors);
  try {
    const std::unique_ptr<Backend> backend = make_cpu_backend();
    load_model({.dir = dir}, *backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An editor that drops tensor `name` and, unless `data` is null, writes it again as dtype `shape` `data`.
inline EditTensors replace_tensor(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  return [=](std::vector<TensorToWrite>& t) {
    std::erase_if(t, [&](const TensorToWrite& x) { return x.name == name; });
    if (data != nullptr) t.push_back({name, dtype, shape, data});
  };
}

// The weight `name` [rows, cols] of `ck` read whole and as each of `slices` under `quant`, element for
// element equal to `want` (the whole weight, row-major).
inline void expect_slices_read(const Checkpoint& ck, const WeightQuant& quant, const std::string& name, int64_t rows,
                               int64_t cols, const std::vector<float>& want, const std::vector<Slice>& slices) {
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  for (const Slice& slice : slices) {
    WeightStore store;
    WeightLoader loader(&ck, 0, *backend, store);
    loader.set_quant(quant);
    const bool by_rows = !slice.whole() && slice.dim == 0, by_cols = !slice.whole() && slice.dim == 1;
    const int64_t r_n = by_rows ? slice.count : rows, c_n = by_cols ? slice.count : cols;
    std::vector<float> got(static_cast<size_t>(r_n * c_n));
    loader.load_into(name, {rows, cols}, got.data(), WeightInit::normal, slice);
    for (int64_t r = 0; r < r_n; ++r) {
      for (int64_t c = 0; c < c_n; ++c) {
        const int64_t src_r = by_rows ? slice.start + r : r, src_c = by_cols ? slice.start + c : c;
        ASSERT_EQ(got[static_cast<size_t>(r * c_n + c)], want[static_cast<size_t>(src_r * cols + src_c)])
            << "slice along " << slice.dim << ", element " << r << ", " << c;
      }
    }
  }
}

// The loader's error for reading the columns [start, start + count) of `name` [rows, cols], or "".
inline std::string column_cut_error(const Checkpoint& ck, const WeightQuant& quant, const std::string& name,
                                    int64_t rows, int64_t cols, int64_t start, int64_t count) {
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store;
  WeightLoader loader(&ck, 0, *backend, store);
  loader.set_quant(quant);
  std::vector<float> got(static_cast<size_t>(rows * count));
  try {
    loader.load_into(name, {rows, cols}, got.data(), WeightInit::normal,
                     Slice{.dim = 1, .start = start, .count = count});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace sy::test
