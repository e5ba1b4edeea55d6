// Merging the key splits of flash-decoding attention (gqa_attention.cu, mla_flash.cu): each split leaves an
// unnormalised partial (m in the log2 domain, l, acc) and out = Σ acc_s 2^(m_s − M) / Σ l_s 2^(m_s − M).
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

// Threads of a merge block, and the dynamic shared memory it needs for `splits` splits.
inline constexpr int kMergeThreads = 256;
inline size_t merge_smem_bytes(int64_t splits) { return static_cast<size_t>(splits + kMergeThreads) * sizeof(float); }

// The merged row `row` (a token's head) of `dim` values into out[row * dim ..], by a block of kMergeThreads:
// the splits' weights 2^(m_s − M) (0 for a split with no visible key) and Σ l_s 2^(m_s − M) first, then each
// thread sums its share of the splits for one d (dim < kMergeThreads: kMergeThreads / dim groups of splits,
// combined through shared memory; else every d of a thread's stride over all splits). Unlike one thread per element
// walking every split twice (the form before), the loads of one split row go out together and the splits are spread
// over the groups (flash decoding at long contexts has a hundred splits or more). `smem`: merge_smem_bytes(sp.splits)
// of dynamic shared memory.
__device__ __forceinline__ void merge_split_row(const AttentionSplit& sp, float* out, int64_t row, int64_t dim,
                                                float* smem) {
  __shared__ float red[kMergeThreads / 32];
  const int64_t n = sp.splits;
  const int tid = static_cast<int>(threadIdx.x);
  float* f = smem;
  float* part = smem + n;
  const float* m = sp.m + row * n;
  const float* l = sp.l + row * n;
  float mx = -FLT_MAX;
  for (int64_t s = tid; s < n; s += kMergeThreads) {
    if (l[s] > 0.0f) mx = fmaxf(mx, m[s]);
  }
  mx = block_reduce<kMergeThreads>(mx, true, red);
  float ls = 0.0f;
  for (int64_t s = tid; s < n; s += kMergeThreads) {
    const float w = l[s] > 0.0f ? exp2f(m[s] - mx) : 0.0f;
    f[s] = w;
    ls += l[s] * w;
  }
  ls = block_reduce<kMergeThreads>(ls, false, red);  // synchronises: f is visible to the block
  const float* acc = sp.acc + row * n * dim;
  if (dim >= kMergeThreads) {
    for (int64_t d = tid; d < dim; d += kMergeThreads) {
      float a = 0.0f;
#pragma unroll 4
      for (int64_t s = 0; s < n; ++s) a += acc[s * dim + d] * f[s];
      out[row * dim + d] = ls > 0.0f ? a / ls : 0.0f;
    }
    return;
  }
  const int64_t groups = kMergeThreads / dim, g = tid / dim, d = tid % dim;
  float a = 0.0f;
  if (g < groups) {
#pragma unroll 4
    for (int64_t s = g; s < n; s += groups) a += acc[s * dim + d] * f[s];
  }
  part[tid] = a;
  __syncthreads();
  if (tid < dim) {
    for (int64_t h = 1; h < groups; ++h) a += part[h * dim + d];
    out[row * dim + d] = ls > 0.0f ? a / ls : 0.0f;
  }
}

}  // namespace sy::cuda
