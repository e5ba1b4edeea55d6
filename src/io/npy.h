// NumPy .npy files of float32 (little-endian, C order): written by --logits-out, read by tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace sy {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

void write_npy_f32(const std::filesystem::path& path, const float* data, const std::vector<int64_t>& shape);
// Accepts '<f4' and '<f8' (converted); anything else, Fortran order or a short file is an error.
NpyArray read_npy_f32(const std::filesystem::path& path);

}  // namespace sy
