// Kernel signatures shared by the CPU kernels (namespace sy::cpu, kernels/cpu/) and their scalar
// references (namespace sy::ref, kernels/reference/). Plain functions over raw fp32 pointers and sizes.
// Every op is declared once here through SY_KERNEL_OPS so the two sets cannot drift apart.
#pragma once

#include <cstdint>

namespace sy {

struct RopeArgs {
  float* x = nullptr;                 // [tokens, heads, head_dim], rotated in place
  const int32_t* positions = nullptr; // [tokens]
  const float* inv_freq = nullptr;    // [rotary_dim / 2]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;   // first rotary_dim dims of each head rotate, the rest pass through
  float attention_scale = 1.0f;  // cos and sin are multiplied by it (yarn's mscale)
  // false: rotate-half pairs (i, i + rotary_dim/2) as Llama/Qwen/Mixtral; true: adjacent pairs (2i, 2i+1).
  bool interleaved = false;
};

struct PagedAttentionArgs {
  const float* q = nullptr;               // [tokens, n_heads, head_dim]
  const float* k_cache = nullptr;         // [n_slots, kv_heads, head_dim], slot = block * block_size + offset
  const float* v_cache = nullptr;         // [n_slots, kv_heads, v_head_dim]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks] block ids per sequence
  const int32_t* token_seq = nullptr;     // [tokens] row of block_tables that each query token belongs to
  const int32_t* positions = nullptr;     // [tokens] a query at position p sees its sequence's keys 0..p
  float* out = nullptr;                   // [tokens, n_heads, v_head_dim]
  int64_t tokens = 0;
  int64_t n_heads = 0;
  int64_t kv_heads = 0;         // n_heads % kv_heads == 0; query head h reads kv head h / (n_heads / kv_heads)
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t block_size = 0;
  int64_t max_blocks = 0;
  float scale = 1.0f;           // applied to q·k before softmax
  int64_t sliding_window = 0;   // 0: none; else key k visible iff p - k < sliding_window
};

struct KvWriteArgs {
  const float* k = nullptr;               // [tokens, kv_heads, head_dim]
  const float* v = nullptr;               // [tokens, kv_heads, v_head_dim]
  const int32_t* slots = nullptr;         // [tokens] destination slot of each token
  float* k_cache = nullptr;               // [n_slots, kv_heads, head_dim]
  float* v_cache = nullptr;               // [n_slots, kv_heads, v_head_dim]
  int64_t tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
};

struct SoftmaxTopkArgs {
  const float* logits = nullptr;     // [tokens, n_experts] router logits
  int32_t* expert_ids = nullptr;     // [tokens, top_k] chosen experts, highest probability first (ties: lower id)
  float* weights = nullptr;          // [tokens, top_k] their softmax probabilities (fp32), renormalised if asked
  int64_t tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  bool renormalize = false;  // divide the top-k probabilities by their sum
};

#define SY_KERNEL_OPS                                                                              \
  /* y[m, n] = x[m, k] · w[n, k]^T (+ bias[n] when bias is not null); w in nn.Linear layout */       \
  void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,   \
              int64_t k);                                                                          \
  /* y = x / sqrt(mean(x^2) + eps) * weight, per row of dim; y may alias x */                       \
  void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps); \
  /* residual += x, then y = rms_norm(residual) */                                                 \
  void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows,  \
                    int64_t dim, float eps);                                                       \
  /* out[t] = table[ids[t]]; table [vocab, dim]. Precondition: 0 <= ids[t] < vocab */               \
  void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim);  \
  /* out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up [rows, 2*inter] */            \
  void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter);                    \
  void rope(const RopeArgs& a);                                                                    \
  void kv_write(const KvWriteArgs& a);                                                             \
  void paged_attention(const PagedAttentionArgs& a);                                               \
  void softmax_topk(const SoftmaxTopkArgs& a);

// Row movement for MoE token permutation (kernels/cpu/row_ops.cpp, kernels/reference/row_ops.cpp).
#define SY_KERNEL_ROW_OPS                                                                          \
  /* dst[i, :] = src[rows[i], :] for i < n */                                                      \
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim);     \
  /* dst[rows[i], :] += weights[i] * src[i, :] for i = 0..n-1 in order (weights null: 1) */         \
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src,   \
                        int64_t n, int64_t dim);

namespace cpu {
SY_KERNEL_OPS
SY_KERNEL_ROW_OPS
}  // namespace cpu

namespace ref {
SY_KERNEL_OPS
SY_KERNEL_ROW_OPS
}  // namespace ref

}  // namespace sy
