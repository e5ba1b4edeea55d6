// Scratch: grow-only device buffers indexed by a block-chosen id.
#include "backend/scratch.h"

namespace sy {

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
