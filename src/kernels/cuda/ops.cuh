// CUDA kernels: plain functions over raw device pointers, sizes and a stream. Weights and the KV
// cache are bf16 (uint16_t bit patterns here so that host code needs no CUDA headers), activations
// fp32, accumulation fp32. Each op mirrors the CPU op of the same name in kernels/ops.h; tests compare
// them through the backend interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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

struct RopeParams {
  float* x;
  const int32_t* positions;
  const float* inv_freq;
  int64_t tokens, heads, head_dim, rotary_dim;
  float attention_scale;
  bool interleaved;
};
void rope(const RopeParams& p, cudaStream_t s);

struct KvWriteParams {
  const float* k;
  const float* v;
  const int32_t* slots;
  bf16_bits* k_cache;
  bf16_bits* v_cache;
  int64_t tokens, kv_heads, head_dim, v_head_dim;
};
void kv_write(const KvWriteParams& p, cudaStream_t s);

// Per (token, head) in one pass: q and k heads RMS-normalised (when q_norm is not null), rotated and
// stored in place, k and v heads written to the cache (Backend::qk_norm_rope_kv_write).
struct QkRopeKvParams {
  float* q;                 // [tokens, n_heads, head_dim]
  float* k;                 // [tokens, kv_heads, head_dim]
  const float* v;           // [tokens, kv_heads, head_dim]
  const bf16_bits* q_norm;  // [head_dim] or null
  const bf16_bits* k_norm;  // [head_dim], null exactly when q_norm is
  float eps;
  const int32_t* positions;  // [tokens]
  const float* inv_freq;     // [rotary_dim / 2]
  int64_t rotary_dim;
  float attention_scale;
  bool interleaved;
  const int32_t* slots;  // [tokens]
  bf16_bits* k_cache;    // [n_slots, kv_heads, head_dim]
  bf16_bits* v_cache;    // [n_slots, kv_heads, head_dim]
  int64_t tokens, n_heads, kv_heads, head_dim;
};
void qk_norm_rope_kv_write(const QkRopeKvParams& p, cudaStream_t s);

struct AttentionParams {
  const float* q;
  const bf16_bits* k_cache;
  const bf16_bits* v_cache;
  const int32_t* block_tables;
  const int32_t* token_seq;
  const int32_t* positions;
  float* out;
  int64_t tokens, n_heads, kv_heads, head_dim, v_head_dim, block_size, max_blocks;
  float scale;
  int64_t sliding_window;
};
void paged_attention(const AttentionParams& p, cudaStream_t s);

// y[m, n] = bf16(x)[m, k] · w[n, k]^T (+ bias) for small m (gemv.cu); needs 1 <= m <= 16, k % 8 == 0,
// x and w 16-byte aligned.
bool gemv_supported(int64_t m, int64_t k);
void gemv(const float* x, const bf16_bits* w, const bf16_bits* bias, float* y, int64_t m, int64_t n, int64_t k,
          cudaStream_t s);
// y[m, n] = x[m, k] · w[n, k]^T in fp32 for 1 <= m <= 4 (routers), k % 4 == 0, x and w 16-byte aligned.
bool gemv_f32_supported(int64_t m, int64_t k);
void gemv_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t s);

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
void gqa_decode_attention(const AttentionParams& p, const AttentionSplit& split, cudaStream_t s);
// Prefill: flash attention over query tiles of consecutive tokens (causal, optional sliding window).
void gqa_prefill_attention(const AttentionParams& p, cudaStream_t s);

struct MoeSmallBatchParams {
  const float* x;             // [tokens, hidden]
  const int32_t* expert_ids;  // [tokens, top_k]
  const float* weights;       // [tokens, top_k]
  const bf16_bits* gate_up;   // [n_experts, 2 * inter, hidden]
  const bf16_bits* down;      // [n_experts, hidden, inter]
  float* act;                 // scratch [tokens * top_k, inter], SiLU(gate)·up by pair
  float* out;                 // [tokens, hidden]
  int64_t tokens, hidden, inter, top_k;
};
// Routed experts as per-pair GEMVs (gate/up with SiLU·mul, then down with the combine); needs hidden and
// inter multiples of 8 (16-byte weight loads).
bool moe_small_batch_supported(int64_t hidden, int64_t inter);
void moe_small_batch(const MoeSmallBatchParams& p, cudaStream_t s);

// Routed experts for many pairs (moe_grouped.cu), with no host round trip: dispatch (route table and
// x in bf16), grouped tensor-core GEMMs for gate_up (SiLU·mul fused) and down, then the combine.
// Needs hidden and inter multiples of 8, 1 <= n_experts <= 1024, and 16-byte aligned weights.
struct GroupedRoute {
  int32_t* row_pair;     // [pairs] pair (t·top_k + k) of each row; rows grouped by expert, pairs in order
  int32_t* tile_expert;  // [max_tiles] expert of each BM-row tile, -1 past the last real tile
  int32_t* tile_row0;    // [max_tiles] first row of each tile
  int32_t* tile_rows;    // [max_tiles] rows in each tile (<= BM)
};
struct MoeGroupedParams {
  const float* x;             // [tokens, hidden]
  const int32_t* expert_ids;  // [tokens, top_k]
  const float* weights;       // [tokens, top_k]
  const bf16_bits* gate_up;   // [n_experts, 2 * inter, hidden]
  const bf16_bits* down;      // [n_experts, hidden, inter]
  float* out;                 // [tokens, hidden]
  GroupedRoute route;         // scratch, moe_grouped_route_ints() ints laid out by moe_grouped_route_at()
  bf16_bits* x_bf16;          // scratch [tokens, hidden]
  bf16_bits* act;             // scratch [tokens * top_k, inter], SiLU(gate)·up by row
  float* y;                   // scratch [tokens * top_k, hidden], expert output by pair
  int64_t tokens, hidden, inter, n_experts, top_k;
  int tile_m;  // rows per GEMM tile: 16, 32, 64 or 128 (moe_grouped_tile_m picks one)
};
bool moe_grouped_supported(int64_t hidden, int64_t inter, int64_t n_experts);
// Rows per tile for this many pairs over n_experts: a function of sizes only, so that launch shapes
// do not depend on the routing.
int moe_grouped_tile_m(int64_t pairs, int64_t n_experts);
int64_t moe_grouped_route_ints(int64_t pairs, int64_t n_experts, int tile_m);
GroupedRoute moe_grouped_route_at(int32_t* base, int64_t pairs, int64_t n_experts, int tile_m);
void moe_grouped_dispatch(const MoeGroupedParams& p, cudaStream_t s);
void moe_grouped_gemms(const MoeGroupedParams& p, cudaStream_t s);
void moe_grouped_combine(const MoeGroupedParams& p, cudaStream_t s);

void softmax_topk(const float* logits, int32_t* expert_ids, float* weights, int64_t tokens, int64_t n_experts,
                  int64_t top_k, bool renormalize, cudaStream_t s);
void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim, cudaStream_t s);
void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t dim,
                      cudaStream_t s);

}  // namespace sy::cuda
