// Error checks for CUDA calls (host code: fmt does not compile under nvcc, so .cu files call these).
#include "base/check.h"

#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

void check_cuda(cudaError_t status, const char* what) {
  SY_CHECK(status == cudaSuccess, "CUDA error in {}: {} ({})", what, cudaGetErrorString(status),
           static_cast<int>(status));
}

void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

void check_supported(bool ok, const char* what) { SY_CHECK(ok, "unsupported on CUDA: {}", what); }

void check_shared_memory(const char* kernel, size_t bytes, size_t limit) {
  SY_CHECK(bytes <= limit, "{} needs {} bytes of shared memory, above the device's {} bytes; shorten the context",
           kernel, bytes, limit);
}

}  // namespace sy::cuda
