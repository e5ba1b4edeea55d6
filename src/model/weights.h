// Binds model weights by their checkpoint names: each tensor is declared once with its shape, read
// from the checkpoint (dtype and shape checked, converted to fp32 on the device) or drawn from a
// seeded generator, and at the end every checkpoint tensor must have been used exactly once. Weights
// are stored in the backend's weight dtype (fp32 on the CPU, bf16 on the GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/safetensors.h"

namespace sy {

enum class WeightInit : uint8_t {
  normal,  // random weights: N(0, stddev)
  ones,    // random weights: norm scales
  zeros,   // random weights: biases
};

// Device memory of a model's weights; lives as long as the model.
struct WeightStore {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  size_t bytes = 0;
};

class WeightLoader {
 public:
  // checkpoint == nullptr: random weights drawn from `seed`.
  WeightLoader(const Checkpoint* checkpoint, uint64_t seed, Backend& backend, WeightStore& store);

  // Allocates device memory for the tensor and fills it. Returns the device pointer.
  WeightPtr bind(const std::string& name, const Shape& shape, WeightInit init = WeightInit::normal);
  // Fills `dst` (shape.numel() elements of device memory), e.g. one expert's slice of a fused tensor.
  void load_into(const std::string& name, const Shape& shape, void* dst, WeightInit init = WeightInit::normal);
  // As bind, but stored as fp32 whatever the backend's weight dtype (routers).
  const float* bind_f32(const std::string& name, const Shape& shape);
  // Allocates device memory of `numel` elements without filling it (for fused tensors).
  void* allocate(int64_t numel);
  // Element i of an array allocated here.
  void* at(void* base, int64_t i) const;
  // Tensors under this name prefix are deliberately not used (e.g. layers cut by --layers).
  void skip_prefix(const std::string& prefix);
  bool has(const std::string& name) const;
  // Throws if a checkpoint tensor was neither bound nor skipped.
  void finish();

  bool random() const { return checkpoint_ == nullptr; }

 private:
  void fill(const std::string& name, const Shape& shape, void* dst, WeightInit init, DType target);
  void upload_staging(void* dst, size_t n, DType target);  // staging_ (fp32) → dst in `target`
  const Checkpoint* checkpoint_;
  uint64_t seed_;
  Backend& backend_;
  WeightStore& store_;
  std::set<std::string> used_;
  std::vector<std::string> skipped_prefixes_;
  std::vector<float> staging_;
  std::vector<uint16_t> staging16_;
};

}  // namespace sy
