// A host "device" that keeps every quantised weight form as stored (the CUDA backend keeps them; the CPU
// backend dequantises), for tests of the loader's kept-quantised paths without a GPU.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "base/check.h"

namespace sy::test {

class HostBuffer final : public DeviceBuffer {
 public:
  explicit HostBuffer(size_t bytes) : data_(bytes) {}
  void* data() const override { return const_cast<std::byte*>(data_.data()); }
  size_t size() const override { return data_.size(); }

 private:
  std::vector<std::byte> data_;
};

// Host memory that keeps every quantised form as stored; only the loader's calls are served, every op fails.
class KeepsQuantHost final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  MemoryInfo memory_info() const override { return host_memory_info(); }
  DType weight_dtype() const override { return DType::f32; }
  DType kv_dtype() const override { return DType::f32; }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  std::unique_ptr<DeviceBuffer> alloc_host(size_t bytes) override { return alloc(bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  bool keeps_quantised(WeightFormat format, int64_t rows, int64_t cols, int64_t block_rows,
                       int64_t block_cols) const override {
    return format != WeightFormat::dense && rows > 0 && cols > 0 && cols % cols_multiple == 0 && block_rows > 0 &&
           block_cols > 0;
  }
  // Rows whose length is not a multiple of this are not kept (the CUDA backend's 4-bit rule is 32).
  int64_t cols_multiple = 1;
  void set_profiling(bool) override {}
  void mark(Phase) override {}
  PhaseTimes take_phase_times() override { return {}; }
  void fill_random_normal(const RandomFillArgs&) override { fail(); }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void linear(const float*, WeightPtr, WeightPtr, float*, int64_t, int64_t, int64_t) override { fail(); }
  void linear_f32(const float*, const float*, float*, int64_t, int64_t, int64_t) override { fail(); }
  void rms_norm(const float*, WeightPtr, float*, int64_t, int64_t, float) override { fail(); }
  void add_rms_norm(float*, const float*, WeightPtr, float*, int64_t, int64_t, float) override { fail(); }
  void embedding(WeightPtr, const int32_t*, float*, int64_t, int64_t) override { fail(); }
  void silu_mul(const float*, float*, int64_t, int64_t) override { fail(); }
  void rope(const RopeArgs&) override { fail(); }
  void kv_write(const KvWriteArgs&) override { fail(); }
  void paged_attention(const PagedAttentionArgs&) override { fail(); }
  void softmax_topk(const SoftmaxTopkArgs&) override { fail(); }
  void gather_rows(const float*, const int32_t*, float*, int64_t, int64_t) override { fail(); }
  void scatter_add_rows(float*, const int32_t*, const float*, const float*, int64_t, int64_t) override { fail(); }
  void moe_experts(const MoeExpertsArgs&) override { fail(); }
  void grouped_topk(const GroupedTopkArgs&) override { fail(); }
  void add(float*, const float*, int64_t) override { fail(); }
  void mla_kv_write(const MlaKvWriteArgs&) override { fail(); }
  void head_linear(const HeadLinearArgs&) override { fail(); }
  void mla_attention(const MlaAttentionArgs&) override { fail(); }
  void indexer_topk(const IndexerTopkArgs&) override { fail(); }
  void layer_norm(const float*, WeightPtr, WeightPtr, float*, int64_t, int64_t, float) override { fail(); }

 private:
  [[noreturn]] static void fail() { SY_FAIL("KeepsQuantHost runs no ops"); }
};

}  // namespace sy::test
