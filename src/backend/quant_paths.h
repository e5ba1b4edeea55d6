// Where the CUDA backend keeps 4-bit matrices as stored, and which of its paths widen them exactly (fp32
// registers) or to bf16: one definition for the CUDA backend and for the cpu-bf16 oracle, which mirrors them.
#pragma once

#include <cstdint>

namespace sy {

// Backend::keeps_quantised for int4_group and nvfp4: rows of whole 16-byte loads (32 values), groups of one row
// and of whole halves of a load.
inline bool keeps_four_bit(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols) {
  return rows > 0 && block_rows == 1 && cols % 32 == 0 && block_cols > 0 && block_cols % 16 == 0;
}

// A product of up to this many rows with a kept quantised matrix takes the GEMVs, which widen each weight in fp32
// registers (a 4-bit weight exactly); more rows widen a 4-bit matrix to bf16 for cuBLAS.
inline constexpr int64_t kQuantGemvMaxRows = 4;

// Routed experts of up to this many (token, expert) pairs take the per-pair GEMVs (quantised weights widened in
// fp32 registers); more take the grouped tensor-core GEMMs, which widen 4-bit weights to bf16. Measured on H200
// (bench_kernels --cuda-moe, Qwen3-30B-A3B experts, captured): the per-pair GEMVs win at 8 and 16 pairs (34 vs
// 44 µs, 53 vs 56 µs), the grouped path from 32 (85 vs 92 µs; at 80 pairs 144 vs 204 µs), as soon as pairs
// start sharing experts.
inline constexpr int64_t kMoeSmallBatchPairs = 16;

}  // namespace sy
