// What every block of one forward step shares: the backend and the batch's device-side index arrays
// (scratch memory comes from backend/scratch.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/scratch.h"

namespace sy {

struct StepContext {
  Backend* backend = nullptr;
  int64_t tokens = 0;                     // T
  const int32_t* positions = nullptr;     // device [T]
  const int32_t* token_seq = nullptr;     // device [T]
  const int32_t* slots = nullptr;         // device [T]
  const int32_t* block_tables = nullptr;  // device [n_seqs, max_blocks]
  int64_t n_seqs = 0;
  int64_t max_blocks = 0;
  int64_t block_size = 0;
};

}  // namespace sy
