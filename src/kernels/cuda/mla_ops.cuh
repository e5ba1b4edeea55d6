// CUDA kernels for multi-head latent attention and the sparse-attention indexer (mla.cu). Conventions as ops.cuh:
// bf16 weights and KV cache, fp32 activations and accumulation; each mirrors the CPU op of the same name
// in kernels/ops.h, and tests/backend/test_cuda_mla.cpp compares them through the backend interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/ops.cuh"
#include "kernels/ops.h"

namespace sy::cuda {

void mla_kv_write(const MlaKvWriteArgs& a, cudaStream_t s);
void mla_attention(const MlaAttentionArgs& a, cudaStream_t s);
// The tensor-core kernel (mla_flash.cu) for the published shapes; mla_attention above serves the rest.
bool mla_flash_supported(int64_t kv_lora_rank, int64_t rope_dim);
int64_t mla_flash_splits(int64_t tokens, int64_t n_heads, int64_t max_keys);
void mla_flash_attention(const MlaAttentionArgs& a, const AttentionSplit& split, cudaStream_t s);
// The indexer's scores go through `scores`: [indexer_score_tokens(a), max_blocks · block_size] floats.
int64_t indexer_score_tokens(const IndexerTopkArgs& a);
void indexer_topk(const IndexerTopkArgs& a, float* scores, cudaStream_t s);

}  // namespace sy::cuda
