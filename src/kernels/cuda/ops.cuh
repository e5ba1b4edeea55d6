// CUDA kernels: plain functions over the ops' argument structs of kernels/ops.h (or raw device pointers
// and sizes for the simple ops) and a stream. Weights and the KV cache are bf16 (uint16_t bit patterns
// here so that host code needs no CUDA headers), activations fp32, accumulation fp32. Each op mirrors the
// CPU op of the same name; tests compare them through the backend interface. One .cu per op family:
// elementwise.cu (norms, rope, embedding, conversions, sums), attention.cu (KV writes, paged attention),
// gqa_attention.cu (tensor-core GQA), gemv.cu, routing.cu (softmax and grouped top-k), moe_small_batch.cu
// and moe_grouped.cu (routed experts), mla.cu (MLA and the sparse indexer), fp8.cu and q4.cu (block-FP8 and
// 4-bit weights kept as stored).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/uniform_route.h"

namespace sy::cuda {

using bf16_bits = uint16_t;

// Throws sy::Error naming the call and the CUDA error when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what);
// Checks the last kernel launch.
void check_launch(const char* kernel);
// Throws sy::Error with `what` when !ok.
void check_supported(bool ok, const char* what);
// Throws when a kernel would need more dynamic shared memory than the device allows.
void check_shared_memory(const char* kernel, size_t bytes, size_t limit);

void fill_random_normal_bf16(bf16_bits* dst, int64_t n, uint64_t seed, float mean, float stddev, cudaStream_t s);
void f32_to_bf16(const float* x, bf16_bits* y, int64_t n, cudaStream_t s);
// y[m, n] += bias[n]
void add_bias(float* y, const bf16_bits* bias, int64_t m, int64_t n, cudaStream_t s);
void rms_norm(const float* x, const bf16_bits* weight, float* y, int64_t rows, int64_t dim, float eps, cudaStream_t s);
void add_rms_norm(float* residual, const float* x, const bf16_bits* weight, float* y, int64_t rows, int64_t dim,
                  float eps, cudaStream_t s);
void embedding(const bf16_bits* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim, cudaStream_t s);
void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter, cudaStream_t s);
// y = (x - mean) / sqrt(var + eps) * weight + bias per row (the sparse indexer's key norm).
void layer_norm(const float* x, const bf16_bits* weight, const bf16_bits* bias, float* y, int64_t rows, int64_t dim,
                float eps, cudaStream_t s);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n, cudaStream_t s);
// Backend::split_columns: dst[i][r, :] = src[r, offset_i : offset_i + width[i]].
void split_columns(const ColumnSplit& a, cudaStream_t s);

void rope(const RopeArgs& a, cudaStream_t s);

void kv_write(const KvWriteArgs& a, cudaStream_t s);

// Per (token, head) in one pass: q and k heads RMS-normalised (when q_norm is not null), rotated and
// stored in place, k and v heads written to the cache (Backend::qk_norm_rope_kv_write).
void qk_norm_rope_kv_write(const QkRopeKvArgs& a, cudaStream_t s);

void paged_attention(const PagedAttentionArgs& a, cudaStream_t s);

// y[m, n] = bf16(x)[m, k] · w[n, k]^T (+ bias) for small m (gemv.cu); needs 1 <= m <= 16, k % 8 == 0,
// x and w 16-byte aligned.
bool gemv_supported(int64_t m, int64_t k);
void gemv(const float* x, const bf16_bits* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
          cudaStream_t s);
// y[m, n] = x[m, k] · w[n, k]^T in fp32 for 1 <= m <= 4 (routers), k % 4 == 0, x and w 16-byte aligned.
bool gemv_f32_supported(int64_t m, int64_t k);
void gemv_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t s);

// Block-FP8 weights kept as stored (fp8.cu; QuantView fp8_block, E4M3 bytes): the matrix-vector
// product for small m, dequantisation to bf16 (larger products go to cuBLAS on the result), and random
// values. The FP8 products read x rounded to bf16 and the weights as float(q) · scale in fp32.
// gemv_fp8 needs 1 <= m <= 16, k % 16 == 0 and block_cols % 16 == 0, x and w 16-byte aligned.
bool gemv_fp8_supported(int64_t m, int64_t k, const QuantView& q);
// x is bf16 here (f32_to_bf16 first), 16-byte aligned.
void gemv_fp8(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t s);
// out[rows, cols] = the matrix in bf16; cols % 16 == 0.
void fp8_to_bf16(const uint8_t* w, const QuantView& q, int64_t rows, int64_t cols, bf16_bits* out, cudaStream_t s);
// dst[i] = e4m3(stddev · N(0, 1)_i) (saturated), every scale `scale`.
void fill_random_fp8(uint8_t* dst, int64_t n, float* scales, int64_t n_scales, uint64_t seed, float stddev, float scale,
                     cudaStream_t s);

// 4-bit weights kept as stored (q4.cu; QuantView int4_group and nvfp4, bytes [rows, cols / 2]): the
// matrix-vector product for 1 <= m <= 4 (k % 32 == 0, groups a multiple of 16 columns, x bf16 and w 16-byte
// aligned), dequantisation to bf16 (cols % 32 == 0) for cuBLAS, and random values.
bool gemv_q4_supported(int64_t m, int64_t k, const QuantView& q);
void gemv_q4(const bf16_bits* x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, int64_t m,
             int64_t n, int64_t k, cudaStream_t s);
void q4_to_bf16(const uint8_t* w, const QuantView& q, int64_t rows, int64_t cols, bf16_bits* out, cudaStream_t s);
void fill_random_q4(const RandomQ4Args& a, cudaStream_t s);

// GQA attention on tensor cores (gqa_attention.cu) for groups of at most 16 query heads per kv head
// and head_dim 32, 64 or 128; paged_attention covers everything else. Both kernels accept any batch
// layout; the decode kernel suits one token per sequence, the prefill kernel runs of tokens of one
// sequence.
bool gqa_attention_supported(int64_t n_heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim);
// Decode: the keys of each (token, kv head) split over `splits` blocks (flash-decoding), merged by a
// second kernel through scratch m, l [tokens, n_heads, splits] and acc [tokens, n_heads, splits, head_dim].
struct AttentionSplit {
  int64_t splits = 1;
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
};
int64_t gqa_decode_splits(int64_t tokens, int64_t kv_heads, int64_t max_keys);
void gqa_decode_attention(const PagedAttentionArgs& p, const AttentionSplit& split, cudaStream_t s);
// Prefill: flash attention over query tiles of consecutive tokens (causal, optional sliding window).
void gqa_prefill_attention(const PagedAttentionArgs& p, cudaStream_t s);

// Routed experts as per-pair GEMVs (gate/up with SiLU·mul, then down with the combine), bf16, block-FP8 or
// 4-bit weights (gate_up_q and down_q alike); needs hidden and inter multiples of the weights per 16-byte
// load (bf16 8, FP8 16, 4-bit 32) and FP8 block_cols (4-bit groups) multiples of 16.
bool moe_small_batch_supported(const MoeExpertsArgs& p);
// act: scratch [tokens * top_k, inter], SiLU(gate)·up by pair.
void moe_small_batch(const MoeExpertsArgs& a, float* act, cudaStream_t s);

// Routed experts for many pairs (moe_grouped.cu), with no host round trip: dispatch (route table and
// x in bf16), grouped tensor-core GEMMs for gate_up (SiLU·mul fused) and down, then the combine.
// Needs hidden and inter multiples of 8, 1 <= n_experts <= 1024, and 16-byte aligned weights.
struct GroupedRoute {
  int32_t* row_pair;     // [pairs] pair (t·top_k + k) of each row; rows grouped by expert, pairs in order
  int32_t* tile_expert;  // [max_tiles] expert of each BM-row tile, -1 past the last real tile
  int32_t* tile_row0;    // [max_tiles] first row of each tile
  int32_t* tile_rows;    // [max_tiles] rows in each tile (<= BM)
};
// The grouped path's scratch, and its rows per GEMM tile.
struct MoeGroupedScratch {
  GroupedRoute route;  // moe_grouped_route_ints() ints laid out by moe_grouped_route_at()
  bf16_bits* x_bf16;   // [tokens, hidden]
  bf16_bits* act;      // [tokens * top_k, inter], SiLU(gate)·up by row
  float* y;            // [tokens * top_k, hidden], expert output by pair
  int tile_m;          // 16, 32, 64 or 128 (moe_grouped_tile_m picks one)
  // Block-FP8 experts on the FP8 tensor cores (moe_grouped_fp8_act): x and act quantised per row and 128
  // columns (E4M3 [rows, k], scales [rows, fp8_act_scale_cols(k)]); null otherwise (x_bf16 is then used).
  uint8_t* x_fp8 = nullptr;
  float* x_scales = nullptr;
  uint8_t* act_fp8 = nullptr;
  float* act_scales = nullptr;
};
// Weights bf16, block FP8 or 4-bit (gate_up_q and down_q alike; as moe_small_batch_supported).
bool moe_grouped_supported(const MoeExpertsArgs& p);
// Rows per tile for this many pairs over n_experts: a function of sizes only, so that launch shapes
// do not depend on the routing.
int moe_grouped_tile_m(int64_t pairs, int64_t n_experts);
// The m-tile bound Σ_e ceil(m_e / tile_m) <= ceil(pairs / tile_m) + n_experts the grouped GEMMs' grids are sized by.
int64_t moe_grouped_max_tiles(int64_t pairs, int64_t n_experts, int tile_m);
int64_t moe_grouped_route_ints(int64_t pairs, int64_t n_experts, int tile_m);
GroupedRoute moe_grouped_route_at(int32_t* base, int64_t pairs, int64_t n_experts, int tile_m);
void moe_grouped_dispatch(const MoeExpertsArgs& a, const MoeGroupedScratch& g, cudaStream_t s);
void moe_grouped_gemms(const MoeExpertsArgs& a, const MoeGroupedScratch& g, cudaStream_t s);
void moe_grouped_combine(const MoeExpertsArgs& a, const MoeGroupedScratch& g, cudaStream_t s);

// Block-FP8 products on the FP8 tensor cores (fp8_gemm.cu, W8A8): activations quantised per row and 128 columns
// to E4M3 with scale amax / 448 (1 for an all-zero block), each value x / scale rounded to nearest, saturated at
// ±448; mma.sync m16n8k32 E4M3 whose 32-column partial products are added into fp32 times the activation row's and
// the weight block's scales.
inline constexpr int64_t kFp8ActCols = 128;
__host__ __device__ constexpr int64_t fp8_act_scale_cols(int64_t k) { return (k + kFp8ActCols - 1) / kFp8ActCols; }
// Rows quantised by quantise_fp8_rows: E4M3 [rows, k] and fp32 scales [rows, fp8_act_scale_cols(k)].
struct Fp8Rows {
  const uint8_t* q;
  const float* scales;
};
// Weights these products read: block-FP8 with blocks of whole multiples of 128 columns and of 8 rows, rows of
// whole 16-byte chunks.
bool fp8_act_supported(const QuantView& q, int64_t k);
void quantise_fp8_rows(const float* x, int64_t rows, int64_t k, uint8_t* q, float* scales, cudaStream_t s);
void quantise_fp8_rows(const bf16_bits* x, int64_t rows, int64_t k, uint8_t* q, float* scales, cudaStream_t s);
// Dense y[m, n] = x · w^T (+ bias) from quantised x; split over k when the output has too few tiles to fill the
// GPU, the slices' sums in `partials` (gemm_fp8_partials floats; 0: none needed) added in a fixed order.
int64_t gemm_fp8_partials(int64_t m, int64_t n, int64_t k);
void gemm_fp8(const Fp8Rows& x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, float* partials,
              int64_t m, int64_t n, int64_t k, cudaStream_t s);
// Whether block-FP8 experts take the FP8 tensor cores (both arrays as fp8_act_supported), and their grouped
// GEMMs (after moe_grouped_dispatch, which then quantises x into g.x_fp8; act quantised between the two).
bool moe_grouped_fp8_act(const MoeExpertsArgs& p);
void moe_grouped_gemms_fp8(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s);

// Routing (routing.cu): softmax top-k; sigmoid group-limited top-k, which needs n_group <= 64 (one warp per
// token up to 512 experts, one thread per token beyond).
void softmax_topk(const SoftmaxTopkArgs& a, cudaStream_t s);
void grouped_topk(const GroupedTopkArgs& a, cudaStream_t s);
// Overwrites expert_ids with uniform_route_row's choice for every token (kernels/uniform_route.h; bench
// latency --routing uniform); top_k <= 64.
void uniform_route(const UniformRouteArgs& a, cudaStream_t s);
// flags[ids[i]] = 1 for every id in [0, n_experts) (bench latency's count of the experts a step touched).
void mark_experts(const int32_t* ids, int64_t n, uint8_t* flags, int64_t n_experts, cudaStream_t s);
// Samples rows[i] of logits [.., vocab] into tokens[i] (rows and tokens device arrays of n) as
// cpu::sample_row does, or writes kSampleNotFinite, or kSampleOnHost for a row this kernel does not sample
// exactly (top-k above 1024, or a top-p nucleus reaching past the 1024 most likely tokens).
inline constexpr int32_t kSampleOnHost = -2;
void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens, cudaStream_t s);
void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim, cudaStream_t s);
void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t dim,
                      cudaStream_t s);

}  // namespace sy::cuda
