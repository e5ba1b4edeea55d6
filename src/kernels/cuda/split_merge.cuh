// Merging the key splits of flash-decoding attention (gqa_attention.cu, mla_flash.cu): each split leaves an
// unnormalised partial (m in the log2 domain, l, acc); out = Σ acc_s 2^(m_s − M) / Σ l_s 2^(m_s − M). Either a
// merge kernel does it, or the block that finishes a group's last split (last_split_done) merges the group.
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

// Element d of the merged output of `head` (dim values a head); splits with no visible key are skipped.
// Reads bypass L1: other blocks wrote the partials.
__device__ __forceinline__ float merge_split(const AttentionSplit& sp, int64_t head, int64_t d, int64_t dim) {
  float M = -FLT_MAX;
  for (int64_t s = 0; s < sp.splits; ++s) {
    if (__ldcg(sp.l + head * sp.splits + s) > 0.0f) M = fmaxf(M, __ldcg(sp.m + head * sp.splits + s));
  }
  float l_sum = 0.0f, a_sum = 0.0f;
  for (int64_t s = 0; s < sp.splits; ++s) {
    const float l = __ldcg(sp.l + head * sp.splits + s);
    if (l == 0.0f) continue;
    const float f = exp2f(__ldcg(sp.m + head * sp.splits + s) - M);
    l_sum += l * f;
    a_sum += __ldcg(sp.acc + (head * sp.splits + s) * dim + d) * f;
  }
  return l_sum > 0.0f ? a_sum / l_sum : 0.0f;
}

// Called by every thread of a block after it wrote its split's partial of `group`: true in the block that
// finished the group's last split, which may then read every split's partial. That block puts the counter
// back to zero for the next launch.
__device__ __forceinline__ bool last_split_done(int32_t* counters, int64_t group, int64_t splits) {
  __shared__ int last;
  __threadfence();  // this block's partial is visible before its count
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counters + group, 1) == static_cast<int>(splits) - 1;
    if (last) counters[group] = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

}  // namespace sy::cuda
