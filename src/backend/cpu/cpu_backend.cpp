// CPU backend: host memory and the kernels in kernels/cpu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/grouped_moe.h"
#include "backend/quant_paths.h"
#include "base/check.h"
#include "kernels/e4m3.h"

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

// Random fills of at least this many elements run on the OpenMP threads (a 1 GB model's fill took 8.7 s on one).
constexpr int64_t kRandomParallelMin = int64_t{1} << 16;

// Weights and KV on the CPU backend are stored as fp32 (weight_dtype() and kv_storage_dtype()).
const float* f32(const void* p) { return static_cast<const float*>(p); }

// With bf16 emulation the CPU backend rounds exactly where the CUDA backend stores or feeds bf16:
// weights as they are used, matrix-product inputs, embedding rows and the KV cache. Accumulation stays
// fp32 on both, so the two differ only in summation order: the oracle for GPU conformance. The KV cache's
// values follow kv_dtype(): bf16 rounds them as they are written (the sparse indexer's keys too, which the GPU
// keeps in bf16 whatever the KV dtype); with f8_e4m3 the kernels round K and V through E4M3 (KvQuant).
// 4-bit matrices (int4_group, nvfp4) are kept as stored where the CUDA backend keeps them (keeps_four_bit) and
// widened as its paths widen them: exactly for its GEMVs, to bf16 for its cuBLAS and grouped GEMMs (quant_paths.h).
float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

std::vector<float> rounded(const float* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = round_bf16(p[i]);
  return v;
}

// A 4-bit matrix [rows, cols] (QuantView int4_group or nvfp4) in fp32, exactly: element c of row r is nibble c % 2
// (the low one first) of byte (r · cols + c) / 2 times its group's scale: (nibble − 8) · bf16 scale, or
// e2m1(nibble) · (e4m3 scale · row_scales[r]), multiplied in that order as the CUDA kernels do.
std::vector<float> dequantised_q4(const Matrix& w, int64_t rows, int64_t cols) {
  const QuantView& q = w.q;
  const auto* bytes = static_cast<const uint8_t*>(w.w);
  const bool int4 = q.format == WeightFormat::int4_group;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g * q.block_cols < cols; ++g) {
      const int64_t s = r * q.scale_cols + g;
      const float scale = int4 ? bf16_to_f32(static_cast<const uint16_t*>(q.group_scales)[s])
                               : f8_e4m3_to_f32(static_cast<const uint8_t*>(q.group_scales)[s]) * q.row_scales[r];
      for (int64_t c = g * q.block_cols; c < std::min(cols, (g + 1) * q.block_cols); ++c) {
        const auto nibble = static_cast<uint8_t>((bytes[(r * cols + c) / 2] >> (4 * (c % 2))) & 0xF);
        const float v = int4 ? static_cast<float>(static_cast<int>(nibble) - 8) : f4_e2m1_to_f32(nibble);
        out[static_cast<size_t>(r * cols + c)] = v * scale;
      }
    }
  }
  return out;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(bool emulate_bf16, KvDType kv)
      : bf16_(emulate_bf16),
        kv_dtype_(kv == KvDType::fp8    ? DType::f8_e4m3
                  : kv == KvDType::bf16 ? DType::bf16
                                        : (emulate_bf16 ? DType::bf16 : DType::f32)) {}
  Device device() const override { return Device::cpu; }
  MemoryInfo memory_info() const override { return host_memory_info(); }
  DType weight_dtype() const override { return DType::f32; }
  DType kv_dtype() const override { return kv_dtype_; }
  DType kv_storage_dtype() const override { return DType::f32; }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes) override { return std::make_unique<HostDeviceBuffer>(bytes); }
  std::unique_ptr<DeviceBuffer> alloc_host(size_t bytes) override { return std::make_unique<HostDeviceBuffer>(bytes); }
  // An empty copy may come with null pointers (an empty vector's data()), which memcpy must not see.
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  void set_profiling(bool on) override {
    profiling_ = on;
    open_ = false;
  }
  void mark(Phase phase) override {
    if (!profiling_) return;
    const auto now = std::chrono::steady_clock::now();
    if (open_) times_[static_cast<size_t>(current_)] += std::chrono::duration<double, std::milli>(now - since_).count();
    current_ = phase;
    since_ = now;
    open_ = true;
  }
  PhaseTimes take_phase_times() override {
    if (open_) mark(current_);
    open_ = false;
    const PhaseTimes out = times_;
    times_ = {};
    return out;
  }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }

  void fill_random_normal(const RandomFillArgs& a) override {
    // Box-Muller on two uniforms drawn from the element's own counter: each element a function of its index
    // alone, so the threads' split changes no value.
#pragma omp parallel for schedule(static) if (a.n >= kRandomParallelMin)
    for (int64_t i = 0; i < a.n; ++i) {
      const uint64_t r1 = mix64(a.seed ^ mix64(static_cast<uint64_t>(2 * i)));
      const uint64_t r2 = mix64(a.seed ^ mix64(static_cast<uint64_t>(2 * i + 1)));
      const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
      const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      static_cast<float*>(a.dst)[i] = a.mean + a.stddev * static_cast<float>(z);
    }
  }
  void linear(const float* x, WeightPtr w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) override {
    if (!bf16_) return cpu::linear(x, f32(w), f32(bias), y, m, n, k);
    const auto xr = rounded(x, m * k), wr = rounded(f32(w), n * k);
    const auto br = bias ? rounded(f32(bias), n) : std::vector<float>{};
    cpu::linear(xr.data(), wr.data(), bias ? br.data() : nullptr, y, m, n, k);
  }
  using Backend::linear;
  bool keeps_quantised(WeightFormat format, int64_t rows, int64_t cols, int64_t block_rows,
                       int64_t block_cols) const override {
    switch (format) {
      case WeightFormat::dense:
      case WeightFormat::fp8_block:  // dequantised at load: the GPU's FP8 paths quantise activations too
        return false;
      case WeightFormat::int4_group:
      case WeightFormat::nvfp4:
        return bf16_ && keeps_four_bit(rows, cols, block_rows, block_cols);
    }
    return false;
  }
  void linear_quant(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n,
                    int64_t k) override {
    linear_q4(x, w, bias, y, m, n, k, /*exact=*/m <= kQuantGemvMaxRows);
  }
  // The CUDA generator's values (cuda::fill_random_q4): byte i is bits 24-31 of mix64(seed ^ mix64(i)).
  void fill_random_q4(const RandomQ4Args& a) override {
    SY_CHECK(a.format == WeightFormat::int4_group || a.format == WeightFormat::nvfp4,
             "fill_random_q4: format {} is not a 4-bit form", static_cast<int>(a.format));
    auto* bytes = static_cast<uint8_t*>(a.dst);
#pragma omp parallel for schedule(static) if (a.n_bytes >= kRandomParallelMin)
    for (int64_t i = 0; i < a.n_bytes; ++i) {
      bytes[i] = static_cast<uint8_t>(mix64(a.seed ^ mix64(static_cast<uint64_t>(i))) >> 24);
    }
    if (a.format == WeightFormat::int4_group) {
      std::fill_n(static_cast<uint16_t*>(a.group_scales), a.n_groups, f32_to_bf16(a.group_scale));
    } else {
      std::fill_n(static_cast<uint8_t*>(a.group_scales), a.n_groups, f32_to_e4m3_satfinite(a.group_scale));
    }
    std::fill_n(a.row_scales, a.n_rows, a.row_scale);
  }
  void linear_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) override {
    cpu::linear(x, w, nullptr, y, m, n, k);
  }
  void rms_norm(const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim, float eps) override {
    if (!bf16_) return cpu::rms_norm(x, f32(weight), y, rows, dim, eps);
    cpu::rms_norm(x, rounded(f32(weight), dim).data(), y, rows, dim, eps);
  }
  void add_rms_norm(float* residual, const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim,
                    float eps) override {
    if (!bf16_) return cpu::add_rms_norm(residual, x, f32(weight), y, rows, dim, eps);
    cpu::add_rms_norm(residual, x, rounded(f32(weight), dim).data(), y, rows, dim, eps);
  }
  void embedding(WeightPtr table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) override {
    cpu::embedding(f32(table), ids, out, tokens, dim);
    if (bf16_) {
      for (int64_t i = 0; i < tokens * dim; ++i) out[i] = bf16_to_f32(f32_to_bf16(out[i]));
    }
  }
  void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) override {
    cpu::silu_mul(gate_up, out, rows, inter);
  }
  void rope(const RopeArgs& a) override { cpu::rope(a); }
  void kv_write(const KvWriteArgs& a) override {
    if (!rounds_kv_to_bf16(a.kv_quant)) return cpu::kv_write(a);
    const auto kr = rounded(a.k, a.tokens * a.kv_heads * a.head_dim);
    const auto vr = rounded(a.v, a.tokens * a.kv_heads * a.v_head_dim);
    KvWriteArgs r = a;
    r.k = kr.data();
    r.v = vr.data();
    cpu::kv_write(r);
  }
  void paged_attention(const PagedAttentionArgs& a) override { cpu::paged_attention(a); }
  void softmax_topk(const SoftmaxTopkArgs& a) override { cpu::softmax_topk(a); }
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) override {
    cpu::gather_rows(src, rows, dst, n, dim);
  }
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                        int64_t dim) override {
    cpu::scatter_add_rows(dst, rows, weights, src, n, dim);
  }
  // 4-bit experts are widened as the CUDA backend's routed-expert path for this many pairs widens them.
  void moe_experts(const MoeExpertsArgs& c) override {
    if (!c.gate_up_q.four_bit()) return grouped_moe_.run(c);
    const bool exact = c.tokens * c.top_k <= kMoeSmallBatchPairs;
    grouped_moe_.run(c, [&](const float* x, const Matrix& w, float* y, int64_t m, int64_t n, int64_t k) {
      linear_q4(x, w, nullptr, y, m, n, k, exact);
    });
  }
  void grouped_topk(const GroupedTopkArgs& a) override { cpu::grouped_topk(a); }
  void add(float* y, const float* x, int64_t n) override { cpu::add(y, x, n); }
  // In place (the logits are host memory), a row per thread: each row has its own draw.
  void sample_tokens(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens) override {
#pragma omp parallel for schedule(dynamic) if (n > 1)
    for (int64_t i = 0; i < n; ++i) tokens[i] = cpu::sample_row(logits + rows[i].row * vocab, vocab, rows[i]);
  }

  // MLA: the CUDA backend stores the latent cache in bf16 and feeds head_linear bf16 inputs.
  void mla_kv_write(const MlaKvWriteArgs& a) override {
    MlaKvWriteArgs r = a;
    std::vector<float> w;
    if (bf16_) {
      w = rounded(f32(a.norm_weight), a.kv_lora_rank);
      r.norm_weight = w.data();
    }
    cpu::mla_kv_write(r);
    if (!rounds_kv_to_bf16(a.kv_quant)) return;
    auto* cache = static_cast<float*>(a.cache);
    const int64_t row = a.kv_lora_rank + a.rope_dim;
    for (int64_t t = 0; t < a.tokens; ++t) {
      float* c = cache + int64_t(a.slots[t]) * row;
      for (int64_t i = 0; i < row; ++i) c[i] = bf16_to_f32(f32_to_bf16(c[i]));
    }
  }
  void head_linear(const HeadLinearArgs& a) override {
    if (!bf16_ || a.tokens == 0 || a.heads == 0) return cpu::head_linear(a);
    const auto xr = rounded(a.x, a.tokens * a.heads * a.x_stride);
    const auto wr = rounded(f32(a.w), (a.heads - 1) * a.w_head_stride + a.in * a.out);
    HeadLinearArgs r = a;
    r.x = xr.data();
    r.w = wr.data();
    cpu::head_linear(r);
  }
  void mla_attention(const MlaAttentionArgs& a) override { cpu::mla_attention(a); }
  void indexer_topk(const IndexerTopkArgs& a) override { cpu::indexer_topk(a); }
  void layer_norm(const float* x, WeightPtr weight, WeightPtr bias, float* y, int64_t rows, int64_t dim,
                  float eps) override {
    if (!bf16_) return cpu::layer_norm(x, f32(weight), f32(bias), y, rows, dim, eps);
    cpu::layer_norm(x, rounded(f32(weight), dim).data(), rounded(f32(bias), dim).data(), y, rows, dim, eps);
  }

 private:
  // Values written to a KV cache that the CUDA backend holds in bf16 (or that --kv-dtype bf16 asks for) are rounded
  // to bf16 here; E4M3 ones are rounded by the kernels.
  bool rounds_kv_to_bf16(const KvQuant& q) const { return !q.e4m3 && (bf16_ || kv_dtype_ == DType::bf16); }

  // linear with a kept 4-bit matrix as the CUDA backend computes it: x and the bias rounded to bf16, the weights
  // dequantised in fp32, exactly (`exact`: its GEMVs widen them in registers) or then rounded to bf16 (its cuBLAS
  // and grouped GEMMs read them widened to bf16).
  void linear_q4(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k,
                 bool exact) {
    SY_CHECK(bf16_ && w.q.four_bit(),
             "cpu linear: a [{}, {}] matrix in format {}, which this backend does not keep (only cpu-bf16 keeps 4-bit "
             "forms)",
             n, k, static_cast<int>(w.q.format));
    if (m == 0 || n == 0) return;
    std::vector<float> wd = dequantised_q4(w, n, k);
    if (!exact) {
      for (float& v : wd) v = round_bf16(v);
    }
    const auto xr = rounded(x, m * k);
    const auto br = bias ? rounded(f32(bias), n) : std::vector<float>{};
    cpu::linear(xr.data(), wd.data(), bias ? br.data() : nullptr, y, m, n, k);
  }

  bool bf16_;
  DType kv_dtype_;  // the values K and V hold (storage is fp32)
  GroupedMoe grouped_moe_{*this};
  bool profiling_ = false;
  bool open_ = false;
  Phase current_ = Phase::other;
  std::chrono::steady_clock::time_point since_;
  PhaseTimes times_{};
};

}  // namespace

MemoryInfo host_memory_info() {
  std::ifstream in("/proc/meminfo");
  SY_CHECK(in.good(), "cannot read /proc/meminfo for the host's free and total memory");
  int64_t available_kb = -1, total_kb = -1;
  std::string key, unit;
  int64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);  // " kB"
    if (key == "MemAvailable:") available_kb = value;
    if (key == "MemTotal:") total_kb = value;
  }
  SY_CHECK(available_kb >= 0 && total_kb > 0, "/proc/meminfo lacks MemAvailable or MemTotal (got {} and {} kB)",
           available_kb, total_kb);
  return {.free_bytes = static_cast<size_t>(available_kb) * 1024, .total_bytes = static_cast<size_t>(total_kb) * 1024};
}

std::string host_cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string part;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(std::min(colon + 2, line.size()));
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key == "model name" && !value.empty()) return value;
    if (key == "CPU part" && part.empty()) part = "CPU part " + value;
  }
  return part.empty() ? "unknown CPU" : part;
}

std::unique_ptr<Backend> make_cpu_backend(bool emulate_bf16, KvDType kv) {
  return std::make_unique<CpuBackend>(emulate_bf16, kv);
}

}  // namespace sy
