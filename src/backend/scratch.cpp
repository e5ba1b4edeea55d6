// Scratch: grow-only device buffers, in areas named by their owners.
#include "backend/scratch.h"

#include "base/check.h"

namespace sy {

int Scratch::checked_slot(int slot, const std::string* owner, int base) {
  SY_CHECK(slot >= 0 && slot < kSlotsPerArea, "scratch slot {} of {} is outside [0, {}) (a code error)", slot,
           owner != nullptr ? "area '" + *owner + "'" : std::string("a backend's scratch"), kSlotsPerArea);
  return base + slot;
}

ScratchArea Scratch::area(std::string_view owner) {
  for (size_t i = 0; i < owners_.size(); ++i) {
    if (*owners_[i] == owner) return {*this, static_cast<int>(i + 1) * kSlotsPerArea, owners_[i].get()};
  }
  owners_.push_back(std::make_unique<std::string>(owner));
  return {*this, static_cast<int>(owners_.size()) * kSlotsPerArea, owners_.back().get()};
}

void* Scratch::get_bytes(int id, size_t bytes) {
  const auto i = static_cast<size_t>(id);
  if (slots_.size() <= i) slots_.resize(i + 1);
  if (!slots_[i] || slots_[i]->size() < bytes) {
    backend_.synchronize();  // queued work may still use the old buffer
    slots_[i] = backend_.alloc(bytes + bytes / 4 + 64);
    ++generation_;
  }
  return slots_[i]->data();
}

}  // namespace sy
