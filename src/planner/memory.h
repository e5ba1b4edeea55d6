// Memory of one rank before loading: weights of its stage and shards, activation and all-to-all buffers
// for the largest step, fixed per-device costs, and what is left for the KV cache.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_desc.h"
#include "parallel/mapping.h"
#include "planner/weights.h"

namespace sy {

struct MemoryOptions {
  int64_t max_batch_tokens = 8192;      // largest step: tokens of one forward pass per dp group
  int64_t max_seqs = 256;               // sequences per step: rows of logits
  int64_t min_kv_tokens = 0;            // the KV cache must hold at least this many tokens; 0 = max_batch_tokens
  int64_t kv_dtype_bytes = 2;           // bf16 KV cache
  int64_t act_dtype_bytes = 2;          // bf16 activations
  double expert_capacity = 2.0;         // MoE buffers hold this many times the balanced share of routed tokens
  int64_t fixed_bytes = 2'000'000'000;  // per device: CUDA context, library workspaces, graphs, communicators
  ShardOptions shard;
};

// All ranks of one pipeline stage hold the same amounts.
struct StageMemory {
  int stage = 0;
  int64_t first_layer = 0;
  int64_t n_layers = 0;
  std::array<int64_t, kPartCount> weights{};  // as the checkpoint stores them (what the loader reads)
  int64_t weight_bytes = 0;
  // What the device holds of them: weight_bytes, or more where the loader dequantises quantised weights
  // (this build does for FP8, INT4 and NVFP4 until its kernels read the quantised forms).
  std::array<int64_t, kPartCount> device_weights{};
  int64_t device_weight_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t fixed_bytes = 0;
  int64_t kv_bytes_per_token = 0;  // this rank's share of one token's K/V over its layers
  int64_t capacity_bytes = 0;      // device memory
  int64_t free_bytes = 0;          // capacity - device weights - activations - fixed (negative: does not fit)
  int64_t kv_tokens = 0;           // tokens of KV the free bytes hold (0 when nothing is free)
  int64_t min_kv_tokens = 0;
  bool fits = false;  // free bytes hold min_kv_tokens of KV
};

struct LayoutMemory {
  std::vector<StageMemory> stages;
  int worst_stage = 0;          // the stage with the least headroom
  int64_t kv_tokens = 0;        // per dp replica: the smallest over stages
  int64_t kv_tokens_total = 0;  // kv_tokens · dp (each dp replica caches its own sequences)
  bool fits = false;
};

// Precondition: `sizes` is a consistent layout and `stage_layers` sums to shape.n_layers. `device_table`,
// where not null, is the table of what the device holds when it differs from `table` (the checkpoint's):
// quantised weights dequantised at load.
LayoutMemory estimate_memory(const ModelDesc& shape, const WeightTable& table, const ParallelSizes& sizes,
                             const std::vector<int64_t>& stage_layers, int64_t device_bytes,
                             const MemoryOptions& options, const WeightTable* device_table = nullptr);

// Activation and all-to-all buffer bytes of one rank for the largest step (an upper-bound estimate).
int64_t activation_bytes(const ModelDesc& shape, const ParallelSizes& sizes, const std::vector<FfnKind>& stage_ffn,
                         bool last_stage, const MemoryOptions& options);

// "12.3 GB" (10^9 bytes), "512 MB", "70.3 kB"
std::string format_bytes(int64_t bytes);
// "1,234,567"
std::string format_count(int64_t v);
// Figures of one stage for an error line: "weights 517.0 GB (experts 507.4, attention 3.1, ...) + ..."
std::string describe_stage_memory(const StageMemory& m);

}  // namespace sy
