// Scalar references for the row gather / scatter-add kernels.
#include "kernels/ops.h"

namespace sy::ref {

void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) dst[i * dim + j] = src[static_cast<int64_t>(rows[i]) * dim + j];
  }
}

void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    const double w = weights ? weights[i] : 1.0;
    for (int64_t j = 0; j < dim; ++j) {
      float& d = dst[static_cast<int64_t>(rows[i]) * dim + j];
      d = static_cast<float>(static_cast<double>(d) + w * static_cast<double>(src[i * dim + j]));
    }
  }
}

}  // namespace sy::ref
