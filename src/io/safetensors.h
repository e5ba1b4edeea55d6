// Safetensors checkpoints: one file or a sharded set (model.safetensors.index.json), memory-mapped.
// Every header is validated against the file before any tensor is handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "tensor/tensor.h"

namespace sy {

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string file;                 // file name (no directory) holding the tensor
  const std::byte* data = nullptr;  // into the mapping; valid while the owning checkpoint lives
  size_t nbytes = 0;
};

// One memory-mapped .safetensors file. open() throws sy::Error naming the file (and tensor) when the
// header is malformed, a dtype is unknown, offsets overlap, leave gaps, disagree with shape×dtype or
// point past the end of the file.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model folder. Looks for model.safetensors.index.json (sharded), else
// model.safetensors, else exactly the *.safetensors files present. A tensor name present twice,
// an index entry whose file lacks it, or a shard tensor missing from the index is an error.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);

  const TensorInfo* find(const std::string& name) const;                      // nullptr when absent
  const std::vector<const TensorInfo*>& tensors() const { return ordered_; }  // sorted by name
  const std::filesystem::path& dir() const { return dir_; }
  size_t total_bytes() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> by_name_;
  std::vector<const TensorInfo*> ordered_;
};

// Writes a safetensors file (used by tests to build good and broken checkpoints).
struct TensorToWrite {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;  // shape.numel() * dtype_size(dtype) bytes
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace sy
