// Test helpers for comparing backends: host data copied to a backend in its own element types, and
// results copied back; the relative error every backend comparison uses.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "base/dtype.h"
#include "kernels/e4m3.h"

namespace sy::test {

// n draws of N(0, 1).
inline std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::abs(double(a[i]) - b[i]));
    m = std::max(m, std::abs(double(b[i])));
  }
  return e / std::max(m, 1e-30);
}

// Device copies of host data on one backend: activations fp32, weights and cache in the backend's types.
class Dev {
 public:
  explicit Dev(Backend& b) : b_(b) {}
  float* f32(const std::vector<float>& h) {
    bufs_.push_back(b_.alloc(h.size() * 4 + 4));
    b_.copy_to_device(bufs_.back()->data(), h.data(), h.size() * 4);
    return bufs_.back()->as<float>();
  }
  int32_t* i32(const std::vector<int32_t>& h) {
    bufs_.push_back(b_.alloc(h.size() * 4 + 4));
    b_.copy_to_device(bufs_.back()->data(), h.data(), h.size() * 4);
    return bufs_.back()->as<int32_t>();
  }
  void* typed(const std::vector<float>& h, DType t) {
    if (t == DType::f32) return f32(h);
    if (t == DType::f8_e4m3) {  // the raw E4M3 bytes of h (scale 1)
      std::vector<uint8_t> q(h.size());
      for (size_t i = 0; i < h.size(); ++i) q[i] = f32_to_e4m3_satfinite(h[i]);
      bufs_.push_back(b_.alloc(q.size() + 16));
      b_.copy_to_device(bufs_.back()->data(), q.data(), q.size());
      return bufs_.back()->data();
    }
    std::vector<uint16_t> b(h.size());
    for (size_t i = 0; i < h.size(); ++i) b[i] = f32_to_bf16(h[i]);
    bufs_.push_back(b_.alloc(b.size() * 2 + 2));
    b_.copy_to_device(bufs_.back()->data(), b.data(), b.size() * 2);
    return bufs_.back()->data();
  }
  void* weight(const std::vector<float>& h) { return typed(h, b_.weight_dtype()); }
  void* cache(const std::vector<float>& h) { return typed(h, b_.kv_storage_dtype()); }
  std::vector<float> host(const float* d, size_t n) {
    std::vector<float> h(n);
    b_.copy_to_host(h.data(), d, n * 4);
    return h;
  }
  std::vector<int32_t> host_i32(const int32_t* d, size_t n) {
    std::vector<int32_t> h(n);
    b_.copy_to_host(h.data(), d, n * 4);
    return h;
  }
  // The cache's elements as stored (E4M3 ones decoded without their scale).
  std::vector<float> host_cache(const void* d, size_t n) {
    std::vector<float> h(n);
    if (b_.kv_storage_dtype() == DType::f32) {
      b_.copy_to_host(h.data(), d, n * 4);
      return h;
    }
    if (b_.kv_storage_dtype() == DType::f8_e4m3) {
      std::vector<uint8_t> q(n);
      b_.copy_to_host(q.data(), d, n);
      for (size_t i = 0; i < n; ++i) h[i] = f8_e4m3_to_f32(q[i]);
      return h;
    }
    std::vector<uint16_t> b(n);
    b_.copy_to_host(b.data(), d, n * 2);
    for (size_t i = 0; i < n; ++i) h[i] = bf16_to_f32(b[i]);
    return h;
  }
  // Zeroed KV-cache memory of n elements in the backend's kv storage dtype.
  void* kv(size_t n) {
    bufs_.push_back(b_.alloc(n * dtype_size(b_.kv_storage_dtype())));
    b_.zero(bufs_.back()->data(), n * dtype_size(b_.kv_storage_dtype()));
    return bufs_.back()->data();
  }
  float* out(size_t n) { return f32(std::vector<float>(n, 0.0f)); }
  int32_t* out_i32(size_t n) { return i32(std::vector<int32_t>(n, -7)); }

 private:
  Backend& b_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
};

}  // namespace sy::test
