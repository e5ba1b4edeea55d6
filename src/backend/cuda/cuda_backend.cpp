// CUDA backend: bf16 weights and KV cache, fp32 activations; matrix products on cuBLAS (bf16 inputs,
// fp32 accumulation and output), everything else in kernels/cuda. All work goes to one stream.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/check.h"
#include "kernels/cuda/ops.cuh"

namespace sy {

namespace {

using cuda::bf16_bits;
using cuda::check_cuda;

void check_cublas(cublasStatus_t status, const char* what) {
  SY_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuBLAS error in {}: {} ({})", what, cublasGetStatusString(status),
           static_cast<int>(status));
}

const bf16_bits* bf(const void* p) { return static_cast<const bf16_bits*>(p); }

class CudaBuffer final : public DeviceBuffer {
 public:
  explicit CudaBuffer(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~CudaBuffer() override { cudaFree(ptr_); }
  void* data() const override { return ptr_; }
  size_t size() const override { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    SY_CHECK(device >= 0 && device < count, "CUDA device {} does not exist; this machine has {} GPU(s)", device, count);
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&cublas_), "cublasCreate");
    check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
  }
  ~CudaBackend() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  DType weight_dtype() const override { return DType::bf16; }
  DType kv_dtype() const override { return DType::bf16; }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes) override { return std::make_unique<CudaBuffer>(bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(H2D)");
    // The host buffer may be reused as soon as we return.
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(D2H)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync(D2D)");
  }
  void synchronize() override { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  void set_profiling(bool on) override {
    profiling_ = on;
    marks_.clear();
  }
  void mark(Phase phase) override {
    if (!profiling_) return;
    if (marks_.size() == events_.size()) {
      cudaEvent_t e;
      check_cuda(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check_cuda(cudaEventRecord(events_[marks_.size()], stream_), "cudaEventRecord");
    marks_.push_back(phase);
  }
  PhaseTimes take_phase_times() override {
    PhaseTimes out{};
    if (marks_.empty()) return out;
    mark(marks_.back());  // closes the last phase
    check_cuda(cudaEventSynchronize(events_[marks_.size() - 1]), "cudaEventSynchronize");
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0.0f;
      check_cuda(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
      out[static_cast<size_t>(marks_[i])] += ms;
    }
    marks_.clear();
    return out;
  }

  void fill_random_normal(const RandomFillArgs& a) override {
    cuda::fill_random_normal_bf16(static_cast<bf16_bits*>(a.dst), a.n, a.seed, a.mean, a.stddev, stream_);
  }
  void zero(void* dst, size_t bytes) override { check_cuda(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync"); }

  void linear(const float* x, WeightPtr w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) override {
    if (m == 0 || n == 0) return;
    bf16_bits* xb = x_bf16(m * k);
    cuda::f32_to_bf16(x, xb, m * k, stream_);
    // Row-major y[m, n] = x[m, k] · w[n, k]^T is column-major y^T[n, m] = w^T' · x^T with w read transposed.
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), xb, CUDA_R_16BF,
                              static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx(linear)");
    if (bias) cuda::add_bias(y, bf(bias), m, n, stream_);
  }
  void linear_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) override {
    if (m == 0 || n == 0) return;
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(k), &alpha, w, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F,
                              static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F_PEDANTIC,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx(linear_f32)");
  }
  void rms_norm(const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim, float eps) override {
    cuda::rms_norm(x, bf(weight), y, rows, dim, eps, stream_);
  }
  void add_rms_norm(float* residual, const float* x, WeightPtr weight, float* y, int64_t rows, int64_t dim,
                    float eps) override {
    cuda::add_rms_norm(residual, x, bf(weight), y, rows, dim, eps, stream_);
  }
  void embedding(WeightPtr table, const int32_t* ids, float* out, int64_t tokens, int64_t dim) override {
    cuda::embedding(bf(table), ids, out, tokens, dim, stream_);
  }
  void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter) override {
    cuda::silu_mul(gate_up, out, rows, inter, stream_);
  }
  void rope(const RopeArgs& a) override {
    cuda::rope({.x = a.x, .positions = a.positions, .inv_freq = a.inv_freq, .tokens = a.tokens, .heads = a.heads,
                .head_dim = a.head_dim, .rotary_dim = a.rotary_dim, .attention_scale = a.attention_scale,
                .interleaved = a.interleaved},
               stream_);
  }
  void kv_write(const KvWriteCall& a) override {
    cuda::kv_write({.k = a.k, .v = a.v, .slots = a.slots, .k_cache = static_cast<bf16_bits*>(a.k_cache),
                    .v_cache = static_cast<bf16_bits*>(a.v_cache), .tokens = a.tokens, .kv_heads = a.kv_heads,
                    .head_dim = a.head_dim, .v_head_dim = a.v_head_dim},
                   stream_);
  }
  void paged_attention(const AttentionCall& a) override {
    const auto run = cuda::gqa_attention_warp_supported(a.n_heads, a.kv_heads, a.head_dim, a.v_head_dim)
                         ? &cuda::gqa_attention_warp
                         : &cuda::paged_attention;
    run({.q = a.q, .k_cache = bf(a.k_cache), .v_cache = bf(a.v_cache),
                           .block_tables = a.block_tables, .token_seq = a.token_seq, .positions = a.positions,
                           .out = a.out, .tokens = a.tokens, .n_heads = a.n_heads, .kv_heads = a.kv_heads,
                           .head_dim = a.head_dim, .v_head_dim = a.v_head_dim, .block_size = a.block_size,
                           .max_blocks = a.max_blocks, .scale = a.scale, .sliding_window = a.sliding_window},
                          stream_);
  }
  void softmax_topk(const SoftmaxTopkArgs& a) override {
    cuda::softmax_topk(a.logits, a.expert_ids, a.weights, a.tokens, a.n_experts, a.top_k, a.renormalize, stream_);
  }
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) override {
    cuda::gather_rows(src, rows, dst, n, dim, stream_);
  }
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                        int64_t dim) override {
    cuda::scatter_add_rows(dst, rows, weights, src, n, dim, stream_);
  }
  // Few (token, expert) pairs: GEMVs over each pair's weights with no host round trip. Many: grouped
  // GEMMs per expert (each expert's weights read once for all its tokens).
  void moe_experts(const MoeExpertsCall& c) override {
    const int64_t pairs = c.tokens * c.top_k;
    if (pairs > kSmallBatchPairs || !cuda::moe_small_batch_supported(c.hidden, c.inter)) {
      return grouped_moe_.run(*this, c);
    }
    mark(Phase::experts);
    float* act = small_moe_scratch(0, pairs * c.inter);
    float* y = small_moe_scratch(1, pairs * c.hidden);
    cuda::moe_small_batch({.x = c.x, .expert_ids = c.expert_ids, .weights = c.weights, .gate_up = bf(c.gate_up),
                           .down = bf(c.down), .act = act, .y = y, .out = c.out, .tokens = c.tokens,
                           .hidden = c.hidden, .inter = c.inter, .top_k = c.top_k},
                          stream_);
  }

 private:
  static constexpr int64_t kSmallBatchPairs = 128;

  float* small_moe_scratch(int id, int64_t n) {
    auto& buf = small_moe_[static_cast<size_t>(id)];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (!buf || buf->size() < bytes) {
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      buf = std::make_unique<CudaBuffer>(bytes + bytes / 2);
    }
    return buf->as<float>();
  }

  // Scratch for the bf16 copy of a matrix-product input; grows, never shrinks.
  bf16_bits* x_bf16(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(bf16_bits);
    if (!x_bf16_ || x_bf16_->size() < bytes) {
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      x_bf16_ = std::make_unique<CudaBuffer>(bytes + bytes / 2);
    }
    return x_bf16_->as<bf16_bits>();
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaBuffer> x_bf16_;
  std::array<std::unique_ptr<CudaBuffer>, 2> small_moe_;
  bool profiling_ = false;
  GroupedMoe grouped_moe_;
  std::vector<cudaEvent_t> events_;  // pool, reused across steps
  std::vector<Phase> marks_;         // phase starting at events_[i]
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace sy
