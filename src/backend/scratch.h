// Grow-only device scratch memory, shared by model blocks and backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace sy {

// Device scratch memory reused across steps; buffers grow when a step needs more and are never
// shrunk, so steady-state steps do not allocate.
class Scratch {
 public:
  explicit Scratch(Backend& backend) : backend_(backend) {}
  // Slot `id` holds at least `count` elements of T; previous contents are not preserved on growth.
  template <typename T>
  T* get(int id, int64_t count) {
    return static_cast<T*>(get_bytes(id, static_cast<size_t>(count) * sizeof(T)));
  }
  // Changes whenever a buffer is reallocated (captured steps that used the old one are stale).
  uint64_t generation() const { return generation_; }

 private:
  void* get_bytes(int id, size_t bytes);
  Backend& backend_;
  std::vector<std::unique_ptr<DeviceBuffer>> slots_;
  uint64_t generation_ = 0;
};

}  // namespace sy
