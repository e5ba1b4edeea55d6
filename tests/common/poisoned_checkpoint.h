// Test helper: a copy of a fixture checkpoint with one tensor (or one row of it) set to NaN or infinity,
// for the tests of what the engine, generate and serve do with non-finite numbers.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"
#include "io/safetensors.h"

namespace sy::test {

// Copies src/config.json (and every other non-safetensors file) to dst and writes dst/model.safetensors with
// the tensors of src, `name` rewritten: row `row` of it (every element when row < 0) set to `value`.
inline void write_poisoned_copy(const std::filesystem::path& src, const std::filesystem::path& dst,
                                const std::string& name, int64_t row, float value) {
  namespace fs = std::filesystem;
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.path().extension() != ".safetensors" && e.path().filename() != "model.safetensors.index.json") {
      fs::copy_file(e.path(), dst / e.path().filename());
    }
  }
  const Checkpoint ck = Checkpoint::open(src);
  std::vector<TensorToWrite> tensors;
  std::vector<std::byte> edited;
  bool found = false;
  for (const TensorInfo* t : ck.tensors()) {
    tensors.push_back({t->name, t->dtype, t->shape, t->data});
    if (t->name != name) continue;
    found = true;
    SY_CHECK(t->dtype == DType::bf16 || t->dtype == DType::f32, "{}: poisoning needs bf16 or f32", name);
    const size_t esize = dtype_size(t->dtype);
    edited.assign(t->data, t->data + t->nbytes);
    const int64_t per_row = t->shape.numel() / t->shape[0];
    const int64_t begin = row < 0 ? 0 : row * per_row, end = row < 0 ? t->shape.numel() : begin + per_row;
    for (int64_t i = begin; i < end; ++i) {
      std::byte* p = edited.data() + static_cast<size_t>(i) * esize;
      if (t->dtype == DType::f32) {
        std::memcpy(p, &value, sizeof(float));
      } else {
        uint32_t bits = 0;
        std::memcpy(&bits, &value, sizeof(float));
        const auto half = static_cast<uint16_t>(bits >> 16);  // NaN and infinities keep their class
        std::memcpy(p, &half, sizeof(half));
      }
    }
    tensors.back().data = edited.data();
  }
  SY_CHECK(found, "{} has no tensor {}", src.string(), name);
  write_safetensors(dst / "model.safetensors", tensors);
}

}  // namespace sy::test
