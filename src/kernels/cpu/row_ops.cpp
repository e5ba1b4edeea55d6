// CPU row gather / weighted scatter-add used to permute tokens to experts and combine them back.
#include <cstring>

#include "kernels/ops.h"

namespace sy::cpu {

void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) {
#pragma omp parallel for if (n * dim > 65536)
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * dim, src + static_cast<int64_t>(rows[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
  }
}

// Serial over i so that the summation order, and so the result, is fixed.
void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    float* d = dst + static_cast<int64_t>(rows[i]) * dim;
    const float* s = src + i * dim;
    const float w = weights ? weights[i] : 1.0f;
    for (int64_t j = 0; j < dim; ++j) d[j] += w * s[j];
  }
}

}  // namespace sy::cpu
