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
void indexer_topk(const IndexerTopkArgs& a, cudaStream_t s);

}  // namespace sy::cuda
