// Merging the key splits of flash-decoding attention (gqa_attention.cu, mla_flash.cu): each split leaves an
// unnormalised partial (m in the log2 domain, l, acc) and out = Σ acc_s 2^(m_s − M) / Σ l_s 2^(m_s − M).
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

// Element d of the merged output of `head` (dim values a head); a split with no visible key is skipped.
__device__ __forceinline__ float merge_split(const AttentionSplit& sp, int64_t head, int64_t d, int64_t dim) {
  float M = -FLT_MAX;
  for (int64_t s = 0; s < sp.splits; ++s) {
    if (sp.l[head * sp.splits + s] > 0.0f) M = fmaxf(M, sp.m[head * sp.splits + s]);
  }
  float l_sum = 0.0f, a_sum = 0.0f;
  for (int64_t s = 0; s < sp.splits; ++s) {
    const float l = sp.l[head * sp.splits + s];
    if (l == 0.0f) continue;
    const float f = exp2f(sp.m[head * sp.splits + s] - M);
    l_sum += l * f;
    a_sum += sp.acc[(head * sp.splits + s) * dim + d] * f;
  }
  return l_sum > 0.0f ? a_sum / l_sum : 0.0f;
}

}  // namespace sy::cuda
