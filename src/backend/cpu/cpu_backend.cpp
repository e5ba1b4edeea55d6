// CPU backend: host memory and the kernels in kernels/cpu.
#include <cmath>
#include <cstring>

#include "backend/backend.h"

namespace sy {

namespace {

class HostDeviceBuffer final : public DeviceBuffer {
 public:
  explicit HostDeviceBuffer(size_t bytes) : buf_(bytes) {}
  void* data() const override { return buf_.data(); }
  size_t size() const override { return buf_.size(); }

 private:
  HostBuffer buf_;
};

// splitmix64: a counter-based generator, so element i depends only on (seed, i).
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes) override { return std::make_unique<HostDeviceBuffer>(bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }

  void fill_random_normal(const RandomFillArgs& a) override {
    // Box-Muller on two uniforms drawn from the element's own counter.
    for (int64_t i = 0; i < a.n; ++i) {
      const uint64_t r1 = mix64(a.seed ^ mix64(static_cast<uint64_t>(2 * i)));
      const uint64_t r2 = mix64(a.seed ^ mix64(static_cast<uint64_t>(2 * i + 1)));
      const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
      const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      a.dst[i] = a.mean + a.stddev * static_cast<float>(z);
    }
  }
  void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
              int64_t k) override {
    cpu::linear(x, w, bias, y, m, n, k);
  }
  void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) override {
    cpu::rms_norm(x, weight, y, rows, dim, eps);
  }
  void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                    float eps) override {
    cpu::add_rms_norm(residual, x, weight, y, rows, dim, eps);
  }
  void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) override {
    cpu::embedding(table, ids, out, tokens, dim);
  }
  void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) override {
    cpu::silu_mul(gate_up, out, rows, inter);
  }
  void rope(const RopeArgs& a) override { cpu::rope(a); }
  void kv_write(const KvWriteArgs& a) override { cpu::kv_write(a); }
  void paged_attention(const PagedAttentionArgs& a) override { cpu::paged_attention(a); }
  void softmax_topk(const SoftmaxTopkArgs& a) override { cpu::softmax_topk(a); }
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) override {
    cpu::gather_rows(src, rows, dst, n, dim);
  }
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                        int64_t dim) override {
    cpu::scatter_add_rows(dst, rows, weights, src, n, dim);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace sy
