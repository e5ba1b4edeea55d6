// The device a model runs on: memory and op dispatch. Model code calls ops only through this
// interface; the CPU backend forwards to kernels/cpu, a CUDA backend to kernels/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace sy {

// Memory owned by a backend; freed when destroyed.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
};

struct RandomFillArgs {
  float* dst;          // [n] device memory
  int64_t n = 0;
  uint64_t seed = 0;   // the same seed and n give the same values on every backend
  float mean = 0.0f;
  float stddev = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::unique_ptr<DeviceBuffer> alloc(size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;

  virtual void fill_random_normal(const RandomFillArgs& a) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
                      int64_t k) = 0;
  virtual void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) = 0;
  virtual void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows,
                            int64_t dim, float eps) = 0;
  virtual void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) = 0;
  virtual void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void kv_write(const KvWriteArgs& a) = 0;
  virtual void paged_attention(const PagedAttentionArgs& a) = 0;
  virtual void softmax_topk(const SoftmaxTopkArgs& a) = 0;
  virtual void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) = 0;
  virtual void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                                int64_t dim) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace sy
