// Grow-only device scratch memory, shared by model blocks and backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace sy {

class Scratch;

// One owner's buffers in a Scratch that several owners share (the model's, used by every block): the
// owner numbers its slots 0, 1, ... as it likes, apart from every other owner's.
class ScratchArea {
 public:
  // Slot `slot` (< Scratch::kSlotsPerArea) holds at least `count` elements of T.
  template <typename T>
  T* get(int slot, int64_t count);

 private:
  friend class Scratch;
  ScratchArea(Scratch& scratch, int base, const std::string* owner) : scratch_(scratch), base_(base), owner_(owner) {}
  Scratch& scratch_;
  int base_;
  const std::string* owner_;
};

// Device scratch memory reused across steps; buffers grow when a step needs more and are never
// shrunk, so steady-state steps do not allocate.
class Scratch {
 public:
  static constexpr int kSlotsPerArea = 64;

  explicit Scratch(Backend& backend) : backend_(backend) {}
  // For a Scratch with one owner (a backend's own): slot `id` (< kSlotsPerArea) holds at least `count`
  // elements of T; previous contents are not preserved on growth.
  template <typename T>
  T* get(int id, int64_t count) {
    return static_cast<T*>(get_bytes(checked_slot(id, nullptr, 0), static_cast<size_t>(count) * sizeof(T)));
  }
  // The area of `owner` ("mla", "moe", ...), made on first use: how owners share one Scratch.
  ScratchArea area(std::string_view owner);
  // Changes whenever a buffer is reallocated (captured steps that used the old one are stale).
  uint64_t generation() const { return generation_; }

 private:
  friend class ScratchArea;
  // `slot` of the area at `base` as an index into slots_; sy::Error naming the owner when out of range.
  static int checked_slot(int slot, const std::string* owner, int base);
  void* get_bytes(int id, size_t bytes);
  Backend& backend_;
  std::vector<std::unique_ptr<DeviceBuffer>> slots_;
  std::vector<std::unique_ptr<std::string>> owners_;  // area i (from 1) starts at slot i * kSlotsPerArea
  uint64_t generation_ = 0;
};

template <typename T>
T* ScratchArea::get(int slot, int64_t count) {
  return static_cast<T*>(
      scratch_.get_bytes(Scratch::checked_slot(slot, owner_, base_), static_cast<size_t>(count) * sizeof(T)));
}

}  // namespace sy
