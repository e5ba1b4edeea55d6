// The device a model runs on: memory and op dispatch. Model code calls ops only through this
// interface, with the ops' own argument structs (kernels/ops.h); the CPU backend forwards them to
// kernels/cpu, a CUDA backend to kernels/cuda.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace sy {

// Memory owned by a backend (device memory, or host memory from alloc_host); freed when destroyed.
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

// Weights and the KV cache live in the backend's own element types (weight_dtype(), kv_storage_dtype(): fp32
// on the CPU, bf16 or FP8 E4M3 on the GPU), so their pointers are untyped here. Activations between ops are fp32
// on every backend; a backend may round them to its weight type at matrix-product inputs.
using WeightPtr = const void*;

// A weight matrix as the backend holds it: dense (q.dense(): w in weight_dtype()) or in a quantised
// form the backend computes with directly (q says which; w then points at its packed values).
struct Matrix {
  WeightPtr w = nullptr;
  QuantView q;
  explicit operator bool() const { return w != nullptr; }
};

// Random FP8 block weights: e4m3 values of N(0, stddev / scale) and every scale `scale` (so the weights
// are N(0, stddev) to within the e4m3 rounding).
struct RandomFp8Args {
  void* dst = nullptr;  // [n] e4m3 bytes
  int64_t n = 0;
  float* scales = nullptr;  // [n_scales]
  int64_t n_scales = 0;
  uint64_t seed = 0;
  float stddev = 1.0f;
  float scale = 1.0f;
};

struct RandomFillArgs {
  void* dst = nullptr;  // [n] device memory of weight_dtype()
  int64_t n = 0;
  uint64_t seed = 0;  // the same seed and n give the same values on every backend (before rounding)
  float mean = 0.0f;
  float stddev = 1.0f;
};

// Where a step's device time goes. The model marks the start of each phase; a phase lasts until the
// next mark. communication: collectives between ranks (tensor, expert and pipeline parallelism);
// sampling: sample_tokens on the device (sampling on the host is host time, measured by the caller).
enum class Phase : uint8_t { attention, router, experts, combine, dense, norms, communication, sampling, other };
inline constexpr int kPhaseCount = 9;
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, kPhaseCount>;  // milliseconds per phase

// Memory of the device a backend allocates from, in bytes.
struct MemoryInfo {
  size_t free_bytes = 0;  // allocatable now
  size_t total_bytes = 0;
};

// The host's memory from /proc/meminfo: MemAvailable (free) and MemTotal. Throws sy::Error when unreadable.
MemoryInfo host_memory_info();
// The host CPU's model name from /proc/cpuinfo ("model name", or "CPU part" on Arm), or "unknown CPU".
std::string host_cpu_name();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // What the device is, for reports: the GPU's name (CUDA), host_cpu_name() (CPU).
  virtual std::string device_name() const { return device() == Device::cpu ? host_cpu_name() : "unknown device"; }
  // Free and total memory of the device now (CPU: host_memory_info(); CUDA: cudaMemGetInfo), for sizing
  // the KV cache from what is left after weights and workspace.
  virtual MemoryInfo memory_info() const = 0;
  virtual DType weight_dtype() const = 0;
  // The values the KV cache's K and V (MLA: its latent rows) hold, as --kv-dtype chose them: f32 (the CPU's
  // own), bf16 (the GPU's own and cpu-bf16's), or f8_e4m3 with per-tensor scales (KvQuant in kernels/ops.h).
  // The model reads the checkpoint's KV scales when it is f8_e4m3.
  virtual DType kv_dtype() const = 0;
  // The element type those values are stored in (what KvPool allocates): kv_dtype(), but fp32 on the CPU, which
  // keeps each rounded value in fp32. The sparse indexer's keys are stored in weight_dtype().
  virtual DType kv_storage_dtype() const { return kv_dtype(); }
  virtual std::unique_ptr<DeviceBuffer> alloc(size_t bytes) = 0;
  // Host memory that copy_to_host and copy_to_device move to and from at full speed (page-locked on a
  // GPU); data() is a host pointer.
  virtual std::unique_ptr<DeviceBuffer> alloc_host(size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // Device-to-device copy, asynchronous on the backend's stream (bandwidth measurement, reshuffles).
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;

  // Phase timing (off by default; marks cost nothing then). take_phase_times() waits for the device,
  // returns the time per phase since the last take, and starts over.
  virtual void set_profiling(bool on) = 0;
  virtual void mark(Phase phase) = 0;
  virtual PhaseTimes take_phase_times() = 0;

  // Routed-expert counting (bench latency's decode floor reads the experts a step touched, not the
  // uniform-routing expectation). While on, the MoE blocks report each layer's expert ids in layer order;
  // take_touched_experts() waits for the device, returns the distinct experts of each reported layer
  // since the last take, and starts over. The default reads the ids back to the host (a device round
  // trip per layer); a backend may mark them on the device instead.
  virtual void set_expert_counting(bool on);
  bool expert_counting() const { return counting_experts_; }
  virtual void count_experts(const int32_t* ids, int64_t n, int64_t n_experts);
  virtual std::vector<int64_t> take_touched_experts();
  // Uniform routing (bench latency --routing uniform: the planner's assumption, which random weights do not
  // route by). While on, the MoE blocks ask softmax_topk / grouped_topk for it (their args' .uniform): each
  // token's chosen experts replaced by uniform_route_row's (kernels/uniform_route.h), the routing weights kept.
  void set_uniform_routing(bool on) { uniform_routing_ = on; }
  bool uniform_routing() const { return uniform_routing_; }

  virtual void fill_random_normal(const RandomFillArgs& a) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  // y[m, n] = x[m, k] · w[n, k]^T (+ bias[n])
  virtual void linear(const float* x, WeightPtr w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) = 0;
  // y[m, n] = x[m, k] · w[n, k]^T (+ bias[n]) for a matrix in any form this backend keeps.
  void linear(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) {
    if (w.q.dense()) return linear(x, w.w, bias, y, m, n, k);
    linear_quant(x, w, bias, y, m, n, k);
  }
  // Whether this backend computes with matrices of [rows, cols] stored in `format` with blocks (4-bit
  // forms: groups of one row) of block_rows x block_cols as they are stored (QuantView), in linear and
  // moe_experts; if not, the loader dequantises them to weight_dtype().
  virtual bool keeps_quantised(WeightFormat format, int64_t rows, int64_t cols, int64_t block_rows,
                               int64_t block_cols) const {
    (void)format, (void)rows, (void)cols, (void)block_rows, (void)block_cols;
    return false;
  }
  // linear for a quantised matrix (w.q not dense); only called for forms keeps_* accepted.
  virtual void linear_quant(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k);
  virtual void fill_random_fp8(const RandomFp8Args& a);
  virtual void fill_random_q4(const RandomQ4Args& a);
  // As linear, with fp32 weights and fp32 math on every backend (routers: a flipped expert choice costs
  // far more than the bytes saved).
  virtual void linear_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) = 0;
  virtual void rms_norm(const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim, float eps) = 0;
  virtual void add_rms_norm(float* residual, const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim,
                            float eps) = 0;
  virtual void embedding(WeightPtr table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) = 0;
  virtual void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void kv_write(const KvWriteArgs& a) = 0;
  virtual void qk_norm_rope_kv_write(const QkRopeKvArgs& a);
  virtual void paged_attention(const PagedAttentionArgs& a) = 0;
  virtual void softmax_topk(const SoftmaxTopkArgs& a) = 0;
  virtual void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) = 0;
  virtual void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                                int64_t dim) = 0;
  virtual void moe_experts(const MoeExpertsArgs& c) = 0;
  // Sigmoid group-limited routing (DeepSeek-V3 noaux_tc); every array fp32 on every backend, as routers are.
  virtual void grouped_topk(const GroupedTopkArgs& a) = 0;
  // y[i] += x[i]: the shared experts' output onto the routed experts'.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // Multi-head latent attention and the sparse-attention indexer (model/blocks/mla.cpp, indexer.cpp).
  virtual void mla_kv_write(const MlaKvWriteArgs& a) = 0;
  virtual void head_linear(const HeadLinearArgs& a) = 0;
  virtual void mla_attention(const MlaAttentionArgs& a) = 0;
  virtual void indexer_topk(const IndexerTopkArgs& a) = 0;
  virtual void layer_norm(const float* x, WeightPtr weight, WeightPtr bias, float* y, int64_t rows, int64_t dim,
                          float eps) = 0;
  virtual void split_columns(const ColumnSplit& a);
  // Samples rows of `logits` (this backend's memory, [.., vocab] fp32): tokens[i] (host) is the token drawn from
  // row rows[i].row as cpu::sample_row draws it, or kSampleNotFinite. rows and tokens are host arrays of n.
  // The default copies each row to the host and samples it there.
  virtual void sample_tokens(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens);
  // Whether moe_experts(c) runs without a host round trip, so that it can be captured.
  virtual bool moe_experts_async(const MoeExpertsArgs& c) const {
    (void)c;
    return false;
  }

  // Step capture (CUDA graphs). capture() records what `issue` enqueues without running it and
  // returns an id for replay(); a backend that cannot capture (or not now, e.g. while profiling)
  // says so in can_capture() and the caller runs the ops eagerly. generation() changes whenever the
  // backend reallocates memory that captured ops use; captures taken before are then stale.
  virtual bool can_capture() const { return false; }
  virtual int64_t capture(const std::function<void()>& issue) {
    (void)issue;
    return -1;
  }
  virtual void replay(int64_t id) { (void)id; }
  virtual void drop_captures() {}
  virtual uint64_t generation() const { return 0; }

 protected:
  bool counting_experts_ = false;
  bool uniform_routing_ = false;

 private:
  std::vector<std::vector<uint8_t>> touched_;  // the default counting: [reported layer][expert]
};

// Element `i` of a weight array of the backend's weight dtype.
inline WeightPtr weight_at(const Backend& b, WeightPtr base, int64_t i) {
  return static_cast<const char*>(base) + static_cast<size_t>(i) * dtype_size(b.weight_dtype());
}

// The KV cache a backend is made with (--kv-dtype): the device's own type (fp32 on cpu, bf16 on cpu-bf16 and cuda),
// bf16, or FP8 E4M3 with per-tensor scales.
enum class KvDType : uint8_t { native, bf16, fp8 };
// "auto" (native), "bf16" or "fp8"; anything else is an error naming the allowed values.
KvDType parse_kv_dtype(const std::string& name);

// emulate_bf16: round as the CUDA backend does (see cpu_backend.cpp); the GPU conformance oracle.
std::unique_ptr<Backend> make_cpu_backend(bool emulate_bf16 = false, KvDType kv = KvDType::native);
// "cpu", "cpu-bf16", "cuda" or "cuda:N"; an unknown name, or cuda in a build without it, is an error saying what to do.
std::unique_ptr<Backend> make_backend(const std::string& name, KvDType kv = KvDType::native);

}  // namespace sy
