// CUDA backend: bf16 weights, bf16 or FP8 E4M3 KV cache (--kv-dtype), fp32 activations; matrix products on cuBLAS (bf16
// inputs, fp32 accumulation and output), everything else in kernels/cuda. All work goes to one stream.
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/grouped_moe.h"
#include "backend/quant_paths.h"
#include "backend/scratch.h"
#include "base/check.h"
#include "kernels/cuda/mla_ops.cuh"
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
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

// Page-locked host memory: device copies to and from it run at the link's rate and need no staging.
class CudaHostBuffer final : public DeviceBuffer {
 public:
  explicit CudaHostBuffer(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMallocHost(&ptr_, bytes == 0 ? 1 : bytes), "cudaMallocHost");
  }
  ~CudaHostBuffer() override { cudaFreeHost(ptr_); }
  void* data() const override { return ptr_; }
  size_t size() const override { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, KvDType kv) : device_(device), kv_dtype_(kv == KvDType::fp8 ? DType::f8_e4m3 : DType::bf16) {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    SY_CHECK(device >= 0 && device < count, "CUDA device {} does not exist; this machine has {} GPU(s)", device, count);
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&cublas_), "cublasCreate");
    check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
    // A fixed cuBLAS workspace, so that captured GEMMs never allocate.
    cublas_workspace_ = std::make_unique<CudaBuffer>(size_t(64) << 20);
    check_cublas(cublasSetWorkspace(cublas_, cublas_workspace_->data(), cublas_workspace_->size()),
                 "cublasSetWorkspace");
  }
  ~CudaBackend() override {
    drop_captures();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string device_name() const override {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    return prop.name;
  }
  // cudaMemGetInfo reports the calling thread's current device, so this backend's is made current first.
  MemoryInfo memory_info() const override {
    MemoryInfo m;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo");
    return m;
  }
  DType weight_dtype() const override { return DType::bf16; }
  DType kv_dtype() const override { return kv_dtype_; }
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes) override { return std::make_unique<CudaBuffer>(bytes); }
  std::unique_ptr<DeviceBuffer> alloc_host(size_t bytes) override { return std::make_unique<CudaHostBuffer>(bytes); }
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
  void zero(void* dst, size_t bytes) override {
    check_cuda(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }

  void linear(const float* x, WeightPtr w, WeightPtr bias, float* y, int64_t m, int64_t n, int64_t k) override {
    if (m == 0 || n == 0) return;
    // cuBLAS wins again from a handful of rows (measured: m = 10 was slower on the GEMV kernel).
    if (m <= 4 && cuda::gemv_supported(m, k) && aligned16(x) && aligned16(w)) {
      return cuda::gemv(x, bf(w), bf(bias), y, m, n, k, stream_);
    }
    bf16_bits* xb = scratch_.get<bf16_bits>(kXBf16, m * k);
    cuda::f32_to_bf16(x, xb, m * k, stream_);
    // Row-major y[m, n] = x[m, k] · w[n, k]^T is column-major y^T[n, m] = w^T' · x^T with w read transposed.
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(
        cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, w, CUDA_R_16BF, static_cast<int>(k), xb, CUDA_R_16BF, static_cast<int>(k), &beta, y,
                     CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx(linear)");
    if (bias) cuda::add_bias(y, bf(bias), m, n, stream_);
  }
  using Backend::linear;
  // Block FP8 as stored whenever a row is whole 16-byte chunks of whole blocks' columns; 4-bit forms
  // whenever a row is whole 16-byte chunks (32 values) and a group whole halves of one.
  bool keeps_quantised(WeightFormat format, int64_t rows, int64_t cols, int64_t block_rows,
                       int64_t block_cols) const override {
    switch (format) {
      case WeightFormat::dense:
        return false;
      case WeightFormat::fp8_block:
        return rows > 0 && block_rows > 0 && cols % 16 == 0 && block_cols % 16 == 0;
      case WeightFormat::int4_group:
      case WeightFormat::nvfp4:
        return keeps_four_bit(rows, cols, block_rows, block_cols);
    }
    return false;
  }
  // Up to kQuantGemvMaxRows (4) rows the FP8 and 4-bit GEMVs read each weight byte once (measured on H200,
  // Qwen3-30B-A3B-FP8 at 8 rows: the GEMV's x reads and register pressure (211 registers, one block per SM) made its
  // attention phase 5.7 ms per step against 4.2 for BF16 on cuBLAS). Up to kFp8TensorCoreRows rows, block-FP8 with
  // 128-column blocks takes the FP8 tensor cores (x quantised per row and 128 columns); more rows, and other forms,
  // widen the matrix to bf16 in scratch and take cuBLAS.
  void linear_quant(const float* x, const Matrix& w, WeightPtr bias, float* y, int64_t m, int64_t n,
                    int64_t k) override {
    SY_CHECK(!w.q.dense(), "CUDA linear_quant: a dense [{}, {}] matrix", n, k);
    if (m == 0 || n == 0) return;
    const auto* q = static_cast<const uint8_t*>(w.w);
    const bool fp8 = w.q.format == WeightFormat::fp8_block;
    if (m <= kQuantGemvMaxRows && aligned16(q) &&
        (fp8 ? cuda::gemv_fp8_supported(m, k, w.q) : cuda::gemv_q4_supported(m, k, w.q))) {
      bf16_bits* xb = scratch_.get<bf16_bits>(kXBf16, m * k);
      cuda::f32_to_bf16(x, xb, m * k, stream_);
      if (fp8) return cuda::gemv_fp8(xb, q, w.q, bf(bias), y, m, n, k, stream_);
      return cuda::gemv_q4(xb, q, w.q, bf(bias), y, m, n, k, stream_);
    }
    if (fp8 && m <= kFp8TensorCoreRows && aligned16(q) && aligned16(x) && aligned16(y) &&
        cuda::fp8_act_supported(w.q, k) && n % 2 == 0) {
      auto* xq = scratch_.get<uint8_t>(kFp8X, m * k);
      auto* xs = scratch_.get<float>(kFp8XScales, m * cuda::fp8_act_scale_cols(k));
      cuda::quantise_fp8_rows(x, m, k, xq, xs, stream_);
      const int64_t partials = cuda::gemm_fp8_partials(m, n, k);
      return cuda::gemm_fp8({.q = xq, .scales = xs}, q, w.q, bf(bias), y,
                            partials > 0 ? scratch_.get<float>(kFp8Partials, partials) : nullptr, m, n, k, stream_);
    }
    bf16_bits* wide = scratch_.get<bf16_bits>(kWideWeight, n * k);
    if (fp8) {
      cuda::fp8_to_bf16(q, w.q, n, k, wide, stream_);
    } else {
      cuda::q4_to_bf16(q, w.q, n, k, wide, stream_);
    }
    linear(x, static_cast<WeightPtr>(wide), bias, y, m, n, k);
  }
  void fill_random_fp8(const RandomFp8Args& a) override {
    cuda::fill_random_fp8(static_cast<uint8_t*>(a.dst), a.n, a.scales, a.n_scales, a.seed, a.stddev, a.scale, stream_);
  }
  void fill_random_q4(const RandomQ4Args& a) override { cuda::fill_random_q4(a, stream_); }
  void linear_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) override {
    if (m == 0 || n == 0) return;
    // A router at decode: one warp per expert row (cuBLAS's fp32 GEMM at m = 1 is a few CTAs).
    if (cuda::gemv_f32_supported(m, k) && aligned16(x) && aligned16(w)) {
      return cuda::gemv_f32(x, w, y, m, n, k, stream_);
    }
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(
        cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, w, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F, static_cast<int>(k), &beta, y,
                     CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
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
  void rope(const RopeArgs& a) override { cuda::rope(a, stream_); }
  void kv_write(const KvWriteArgs& a) override { cuda::kv_write(a, stream_); }
  void qk_norm_rope_kv_write(const QkRopeKvArgs& a) override { cuda::qk_norm_rope_kv_write(a, stream_); }
  void paged_attention(const PagedAttentionArgs& a) override {
    if (!cuda::gqa_attention_supported(a.n_heads, a.kv_heads, a.head_dim, a.v_head_dim)) {
      return cuda::paged_attention(a, stream_);
    }
    // Both kernels take any layout; about one token per sequence is decode, longer runs prefill.
    if (a.tokens > 2 * std::max<int64_t>(a.n_seqs, 1)) return cuda::gqa_prefill_attention(a, stream_);
    cuda::gqa_decode_attention(
        a,
        attention_split(cuda::gqa_decode_splits(a.tokens, a.kv_heads, a.max_blocks * a.block_size),
                        a.tokens * a.n_heads, a.head_dim),
        stream_);
  }
  void softmax_topk(const SoftmaxTopkArgs& a) override { cuda::softmax_topk(a, stream_); }
  void grouped_topk(const GroupedTopkArgs& a) override { cuda::grouped_topk(a, stream_); }
  void add(float* y, const float* x, int64_t n) override { cuda::add(y, x, n, stream_); }

  // Multi-head latent attention and the sparse-attention indexer (kernels/cuda/mla.cu).
  void mla_kv_write(const MlaKvWriteArgs& a) override { cuda::mla_kv_write(a, stream_); }
  // Per-head products as one strided batched GEMM over heads (bf16 inputs, fp32 accumulation and output).
  void head_linear(const HeadLinearArgs& a) override {
    if (a.tokens == 0 || a.heads == 0 || a.out == 0) return;
    if (a.in == 0) {
      for (int64_t t = 0; t < a.tokens; ++t) {
        check_cuda(cudaMemset2DAsync(a.y + t * a.heads * a.y_stride, static_cast<size_t>(a.y_stride) * sizeof(float), 0,
                                     static_cast<size_t>(a.out) * sizeof(float), static_cast<size_t>(a.heads), stream_),
                   "cudaMemset2DAsync(head_linear)");
      }
      return;
    }
    const int64_t n = a.tokens * a.heads * a.x_stride;
    bf16_bits* xb = scratch_.get<bf16_bits>(kXBf16, n);
    cuda::f32_to_bf16(a.x, xb, n, stream_);
    // Column-major per head: y_h^T[out, T] = op(W_h)[out, in] · x_h^T[in, T], with x_h^T read at leading
    // dimension heads * x_stride and W_h as [in, out] (transposed: op N) or [out, in] (op T).
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasGemmStridedBatchedEx(
                     cublas_, a.w_transposed ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(a.out),
                     static_cast<int>(a.tokens), static_cast<int>(a.in), &alpha, a.w, CUDA_R_16BF,
                     static_cast<int>(a.w_transposed ? a.out : a.in), static_cast<long long>(a.w_head_stride), xb,
                     CUDA_R_16BF, static_cast<int>(a.heads * a.x_stride), static_cast<long long>(a.x_stride), &beta,
                     a.y, CUDA_R_32F, static_cast<int>(a.heads * a.y_stride), static_cast<long long>(a.y_stride),
                     static_cast<int>(a.heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx(head_linear)");
  }
  void mla_attention(const MlaAttentionArgs& a) override {
    if (!cuda::mla_flash_supported(a.kv_lora_rank, a.rope_dim)) return cuda::mla_attention(a, stream_);
    const int64_t keys = a.key_positions ? a.n_selected : a.max_blocks * a.block_size;
    cuda::mla_flash_attention(
        a, attention_split(cuda::mla_flash_splits(a.tokens, a.n_heads, keys), a.tokens * a.n_heads, a.kv_lora_rank),
        stream_);
  }
  void indexer_topk(const IndexerTopkArgs& a) override {
    const int64_t keys = std::max<int64_t>(1, a.max_blocks * a.block_size);
    cuda::indexer_topk(a, scratch_.get<float>(kIndexScores, cuda::indexer_score_tokens(a) * keys), stream_);
  }
  void layer_norm(const float* x, WeightPtr weight, WeightPtr bias, float* y, int64_t rows, int64_t dim,
                  float eps) override {
    cuda::layer_norm(x, bf(weight), bf(bias), y, rows, dim, eps, stream_);
  }
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim) override {
    cuda::gather_rows(src, rows, dst, n, dim, stream_);
  }
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n,
                        int64_t dim) override {
    cuda::scatter_add_rows(dst, rows, weights, src, n, dim, stream_);
  }
  bool moe_experts_async(const MoeExpertsArgs& c) const override {
    return small_batch(c) || cuda::moe_grouped_supported(c);
  }

  bool can_capture() const override { return !profiling_; }
  int64_t capture(const std::function<void()>& issue) override {
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      issue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(status, "cudaGraphInstantiate");
    graphs_.push_back(exec);
    return static_cast<int64_t>(graphs_.size()) - 1;
  }
  void replay(int64_t id) override {
    SY_CHECK(id >= 0 && id < static_cast<int64_t>(graphs_.size()), "no captured step {}", id);
    check_cuda(cudaGraphLaunch(graphs_[static_cast<size_t>(id)], stream_), "cudaGraphLaunch");
  }
  void drop_captures() override {
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
    graphs_.clear();
  }
  uint64_t generation() const override { return scratch_.generation(); }

  // Few (token, expert) pairs: GEMVs over each pair's weights. Many: a device-side permutation by
  // expert and grouped tensor-core GEMMs (each touched expert's weights read once per column block).
  // Neither makes a host round trip; shapes neither supports take the portable GroupedMoe.
  void moe_experts(const MoeExpertsArgs& c) override {
    const int64_t pairs = c.tokens * c.top_k;
    if (small_batch(c)) {
      mark(Phase::experts);
      float* act = scratch_.get<float>(kMoeAct, pairs * c.inter);
      return cuda::moe_small_batch(c, act, stream_);
    }
    if (!cuda::moe_grouped_supported(c) || !aligned16(c.gate_up) || !aligned16(c.down)) {
      SY_CHECK(c.gate_up_q.dense() && c.down_q.dense(),
               "CUDA moe_experts: quantised experts of hidden {}, inter {}, {} experts need hidden and inter "
               "multiples of 16 (4-bit: 32) and at most 1024 experts",
               c.hidden, c.inter, c.n_experts);
      return grouped_moe_.run(c);
    }
    if (pairs == 0) return;
    const int tile_m = cuda::moe_grouped_tile_m(pairs, c.n_experts);
    int32_t* route = scratch_.get<int32_t>(kMoeRoute, cuda::moe_grouped_route_ints(pairs, c.n_experts, tile_m));
    cuda::MoeGroupedScratch g{.route = cuda::moe_grouped_route_at(route, pairs, c.n_experts, tile_m),
                              .x_bf16 = nullptr,
                              .act = scratch_.get<bf16_bits>(kMoeActBf16, pairs * c.inter),
                              .y = scratch_.get<float>(kMoeY, pairs * c.hidden),
                              .tile_m = tile_m};
    if (tile_m <= kFp8TensorCoreTileM && cuda::moe_grouped_fp8_act(c)) {  // W8A8 on the FP8 tensor cores
      g.x_fp8 = scratch_.get<uint8_t>(kFp8X, c.tokens * c.hidden);
      g.x_scales = scratch_.get<float>(kFp8XScales, c.tokens * cuda::fp8_act_scale_cols(c.hidden));
      g.act_fp8 = scratch_.get<uint8_t>(kFp8Act, pairs * c.inter);
      g.act_scales = scratch_.get<float>(kFp8ActScales, pairs * cuda::fp8_act_scale_cols(c.inter));
    } else {
      g.x_bf16 = scratch_.get<bf16_bits>(kMoeXBf16, c.tokens * c.hidden);
    }
    mark(Phase::router);
    cuda::moe_grouped_dispatch(c, g, stream_);
    mark(Phase::experts);
    cuda::moe_grouped_gemms(c, g, stream_);
    mark(Phase::combine);
    cuda::moe_grouped_combine(c, g, stream_);
  }

 private:
  // Block-FP8 on the FP8 tensor cores against the same bytes widened to bf16 (measured on H200, bench_kernels
  // --cuda-fp8, Qwen3-30B-A3B shapes, bench/results/fp8-tc-h200/): dense projections 10-13 µs against 17-18
  // up to 32 rows, slower from 128 (q/k/v 35 against 19 µs; the widened product's cuBLAS runs near the matrix rate
  // where these mma.sync tiles reach 60-180 TFLOP/s); routed experts faster up to 2,048 pairs (16 and 32-row
  // tiles: 197 against 287 µs at 512 pairs), slower from 64-row tiles (585 against 435 µs at 4,096 pairs).
  static constexpr int64_t kFp8TensorCoreRows = 64;
  static constexpr int kFp8TensorCoreTileM = 32;
  static bool small_batch(const MoeExpertsArgs& c) {
    return c.tokens * c.top_k <= kMoeSmallBatchPairs && cuda::moe_small_batch_supported(c);
  }

  // The partials of `splits` key splits of `heads` (token, head) outputs of `dim` values (scratch).
  cuda::AttentionSplit attention_split(int64_t splits, int64_t heads, int64_t dim) {
    cuda::AttentionSplit split{.splits = splits};
    if (splits > 1) {
      split.m = scratch_.get<float>(kSplitM, heads * splits);
      split.l = scratch_.get<float>(kSplitL, heads * splits);
      split.acc = scratch_.get<float>(kSplitAcc, heads * splits * dim);
    }
    return split;
  }

  void split_columns(const ColumnSplit& a) override { cuda::split_columns(a, stream_); }
  // Sampling where the logits are: the rows' parameters up, token ids back, one synchronisation. A row the
  // kernel leaves to the host (kSampleOnHost) is copied over and sampled there, with the same draw.
  void sample_tokens(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens) override {
    if (n == 0) return;
    const size_t row_bytes = static_cast<size_t>(n) * sizeof(SampleRow), token_bytes = static_cast<size_t>(n) * 4;
    const size_t bytes = row_bytes + token_bytes;
    if (!sample_dev_ || sample_dev_->size() < bytes) {
      sample_dev_ = std::make_unique<CudaBuffer>(2 * bytes);
      sample_host_ = std::make_unique<CudaHostBuffer>(2 * bytes);
    }
    auto* host = static_cast<char*>(sample_host_->data());
    auto* dev = static_cast<char*>(sample_dev_->data());
    std::memcpy(host, rows, row_bytes);
    check_cuda(cudaMemcpyAsync(dev, host, row_bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(H2D)");
    cuda::sample_rows(logits, vocab, reinterpret_cast<const SampleRow*>(dev), n,
                      reinterpret_cast<int32_t*>(dev + row_bytes), stream_);
    check_cuda(cudaMemcpyAsync(host + row_bytes, dev + row_bytes, token_bytes, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync(D2H)");
    synchronize();
    std::memcpy(tokens, host + row_bytes, token_bytes);
    for (int64_t i = 0; i < n; ++i) {
      if (tokens[i] == cuda::kSampleOnHost) Backend::sample_tokens(logits, vocab, rows + i, 1, tokens + i);
    }
  }

  // Routed-expert counting on the device: one row of flags per reported layer, read back at the take.
  void set_expert_counting(bool on) override {
    counting_experts_ = on;
    touched_layers_.clear();
    if (touched_flags_)
      check_cuda(cudaMemsetAsync(touched_flags_->data(), 0, touched_flags_->size(), stream_), "memset");
  }
  void count_experts(const int32_t* ids, int64_t n, int64_t n_experts) override {
    const size_t offset = touched_used_bytes(), need = offset + static_cast<size_t>(n_experts);
    if (!touched_flags_ || touched_flags_->size() < need) {  // grow, keeping the rows already marked
      auto bigger = std::make_unique<CudaBuffer>(std::max(need, 2 * (touched_flags_ ? touched_flags_->size() : 4096)));
      check_cuda(cudaMemsetAsync(bigger->data(), 0, bigger->size(), stream_), "memset");
      if (offset > 0) copy_on_device(bigger->data(), touched_flags_->data(), offset);
      synchronize();
      touched_flags_ = std::move(bigger);
    }
    cuda::mark_experts(ids, n, static_cast<uint8_t*>(touched_flags_->data()) + offset, n_experts, stream_);
    touched_layers_.push_back(n_experts);
  }
  std::vector<int64_t> take_touched_experts() override {
    std::vector<uint8_t> flags(touched_used_bytes());
    if (!flags.empty()) {
      copy_to_host(flags.data(), touched_flags_->data(), flags.size());
      check_cuda(cudaMemsetAsync(touched_flags_->data(), 0, flags.size(), stream_), "memset");
    }
    std::vector<int64_t> out;
    size_t at = 0;
    for (int64_t n : touched_layers_) {
      out.push_back(std::count(flags.begin() + static_cast<std::ptrdiff_t>(at),
                               flags.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(n)), uint8_t{1}));
      at += static_cast<size_t>(n);
    }
    touched_layers_.clear();
    return out;
  }
  size_t touched_used_bytes() const {
    size_t bytes = 0;
    for (int64_t n : touched_layers_) bytes += static_cast<size_t>(n);
    return bytes;
  }

  // Slots of scratch_: the bf16 copy of a matrix-product input, the expert paths' intermediates and
  // the split attention's partials.
  // kWideWeight: a quantised matrix widened to bf16 for cuBLAS; kIndexScores: the sparse indexer's key scores;
  // kFp8*: inputs quantised for the FP8 tensor cores (E4M3 values and their scales) and split-k partial sums.
  enum ScratchSlot : int {
    kXBf16 = 0,
    kMoeAct,
    kMoeY,
    kSplitM,
    kSplitL,
    kSplitAcc,
    kMoeRoute,
    kMoeXBf16,
    kMoeActBf16,
    kWideWeight,
    kIndexScores,
    kFp8X,
    kFp8XScales,
    kFp8Act,
    kFp8ActScales,
    kFp8Partials
  };

  int device_ = 0;
  DType kv_dtype_;  // the KV cache's elements: bf16, or f8_e4m3 (KvQuant)
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaBuffer> cublas_workspace_;
  std::vector<cudaGraphExec_t> graphs_;
  Scratch scratch_{*this};
  bool profiling_ = false;
  GroupedMoe grouped_moe_{*this};
  std::vector<cudaEvent_t> events_;         // pool, reused across steps
  std::vector<Phase> marks_;                // phase starting at events_[i]
  std::unique_ptr<CudaBuffer> sample_dev_;  // a step's SampleRows, then its tokens
  std::unique_ptr<CudaHostBuffer> sample_host_;
  std::unique_ptr<CudaBuffer> touched_flags_;  // expert counting: [reported layer][expert] flags
  std::vector<int64_t> touched_layers_;        // experts of each reported layer
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, KvDType kv) { return std::make_unique<CudaBackend>(device, kv); }

}  // namespace sy
