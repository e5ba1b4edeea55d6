// CUDA kernels for multi-head latent attention, the sparse-attention indexer and its layer norm (mla.cu),
// and for sigmoid group-limited routing and the element-wise sum (routing.cu). Conventions as ops.cuh:
// bf16 weights and KV cache, fp32 activations and accumulation; each mirrors the CPU op of the same name
// in kernels/ops.h, and tests/backend/test_cuda_mla.cpp compares them through the backend interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/ops.cuh"
#include "kernels/ops.h"

namespace sy::cuda {

struct MlaKvWriteParams {
  const float* kv;               // [tokens, kv_lora_rank + rope_dim]
  const bf16_bits* norm_weight;  // [kv_lora_rank]
  const int32_t* slots;          // [tokens]
  bf16_bits* cache;              // [n_slots, kv_lora_rank + rope_dim]
  int64_t tokens, kv_lora_rank, rope_dim;
  float eps;
};
void mla_kv_write(const MlaKvWriteParams& p, cudaStream_t s);

struct MlaAttentionParams {
  const float* q_latent;   // [tokens, n_heads, kv_lora_rank]
  const float* q_rope;     // [tokens, n_heads, q_rope_stride]
  const bf16_bits* cache;  // [n_slots, kv_lora_rank + rope_dim]
  const int32_t* block_tables;
  const int32_t* token_seq;
  const int32_t* positions;
  const int32_t* key_positions;  // [tokens, n_selected] or null
  float* out;                    // [tokens, n_heads, kv_lora_rank]
  int64_t tokens, n_heads, kv_lora_rank, rope_dim, q_rope_stride, n_selected, block_size, max_blocks;
  float scale;
};
void mla_attention(const MlaAttentionParams& p, cudaStream_t s);

struct IndexerTopkParams {
  const float* q;             // [tokens, n_heads, head_dim]
  const float* head_weights;  // [tokens, n_heads]
  const bf16_bits* k_cache;   // [n_slots, head_dim]
  const int32_t* block_tables;
  const int32_t* token_seq;
  const int32_t* positions;
  int32_t* key_positions;  // [tokens, top_k]
  int64_t tokens, n_heads, head_dim, top_k, block_size, max_blocks;
  float scale, weight_scale;
};
void indexer_topk(const IndexerTopkParams& p, cudaStream_t s);

void layer_norm(const float* x, const bf16_bits* weight, const bf16_bits* bias, float* y, int64_t rows, int64_t dim,
                float eps, cudaStream_t s);

// Needs n_group <= 64 (one thread per token keeps its group scores in registers).
void grouped_topk(const GroupedTopkArgs& a, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);

}  // namespace sy::cuda
