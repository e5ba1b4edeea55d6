// The ops' argument structs, one per op, passed unchanged from the model's blocks through the backend to
// the kernels of every backend (the CPU kernels, their scalar references, the CUDA kernels). Activations
// are fp32 pointers; weights and the KV cache are untyped pointers to the backend's storage type (fp32 on
// the CPU, bf16 on the GPU: Backend::weight_dtype(), kv_dtype()), which each kernel set reads as its own.
// Also the signatures shared by the CPU kernels (namespace sy::cpu, kernels/cpu/) and their references
// (namespace sy::ref, kernels/reference/), declared once through the SY_KERNEL_* macros so the two sets
// cannot drift apart.
#pragma once

#include <cstdint>

namespace sy {

struct RopeArgs {
  float* x = nullptr;                  // [tokens, heads, head_dim], rotated in place
  const int32_t* positions = nullptr;  // [tokens]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;        // first rotary_dim dims of each head rotate, the rest pass through
  float attention_scale = 1.0f;  // cos and sin are multiplied by it (yarn's mscale)
  // false: rotate-half pairs (i, i + rotary_dim/2) as Llama/Qwen/Mixtral; true: adjacent pairs (2i, 2i+1).
  bool interleaved = false;
};

// What a layer's KV cache holds (Backend::kv_dtype()): the values as computed, in the backend's storage type, or FP8
// E4M3 with one scale per tensor (a layer's K and its V; MLA: its whole cache row, latent and rope key):
// stored = e4m3_rn_satfinite(x / scale), read = float(stored) · scale (kernels/e4m3.h). The CUDA kernels hold the
// E4M3 bytes and apply the scales where they read them; the CPU kernels keep fp32 storage holding float(stored) ·
// scale, the value every reader sees, so that both attend over the same numbers. The sparse indexer's key cache is
// never quantised.
struct KvQuant {
  bool e4m3 = false;
  float k_scale = 1.0f;  // K, or MLA's cache row
  float v_scale = 1.0f;  // V (unused by MLA)
};

struct PagedAttentionArgs {
  const float* q = nullptr;               // [tokens, n_heads, head_dim]
  const void* k_cache = nullptr;          // kv [n_slots, kv_heads, head_dim], slot = block * block_size + offset
  const void* v_cache = nullptr;          // kv [n_slots, kv_heads, v_head_dim]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks] block ids per sequence
  const int32_t* token_seq = nullptr;     // [tokens] row of block_tables that each query token belongs to
  const int32_t* positions = nullptr;     // [tokens] a query at position p sees its sequence's keys 0..p
  float* out = nullptr;                   // [tokens, n_heads, v_head_dim]
  int64_t tokens = 0;
  int64_t n_seqs = 0;  // rows of block_tables (a GPU picks its decode or prefill kernel by tokens per sequence)
  int64_t n_heads = 0;
  int64_t kv_heads = 0;  // n_heads % kv_heads == 0; query head h reads kv head h / (n_heads / kv_heads)
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t block_size = 0;
  int64_t max_blocks = 0;
  float scale = 1.0f;          // applied to q·k before softmax
  int64_t sliding_window = 0;  // 0: none; else key k visible iff p - k < sliding_window
  KvQuant kv_quant;            // how k_cache and v_cache hold their values
};

struct KvWriteArgs {
  const float* k = nullptr;        // [tokens, kv_heads, head_dim]
  const float* v = nullptr;        // [tokens, kv_heads, v_head_dim]
  const int32_t* slots = nullptr;  // [tokens] destination slot of each token
  void* k_cache = nullptr;         // kv [n_slots, kv_heads, head_dim]
  void* v_cache = nullptr;         // kv [n_slots, kv_heads, v_head_dim]
  int64_t tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  KvQuant kv_quant;  // how the caches hold the values written
};

struct SoftmaxTopkArgs {
  const float* logits = nullptr;  // [tokens, n_experts] router logits
  int32_t* expert_ids = nullptr;  // [tokens, top_k] chosen experts, highest probability first (ties: lower id)
  float* weights = nullptr;       // [tokens, top_k] their softmax probabilities (fp32), renormalised if asked
  int64_t tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  bool renormalize = false;  // divide the top-k probabilities by their sum
  // Uniform routing (bench latency --routing uniform): the ids then become uniform_route_row's draw from the same
  // logits (kernels/uniform_route.h); the weights stay the top-k's.
  bool uniform = false;
};

// What a GQA layer does between its q/k/v products and attention: each q and k head RMS-normalised over
// head_dim with q_norm / k_norm (when given: Qwen3), then rotated (rope) in place; then k and v written to
// the cache at the tokens' slots. Backend::qk_norm_rope_kv_write composes rms_norm, rope and kv_write (the
// oracle); a backend may do it in one pass.
struct QkRopeKvArgs {
  float* q = nullptr;            // [tokens, n_heads, head_dim], normalised and rotated in place
  float* k = nullptr;            // [tokens, kv_heads, head_dim], likewise
  const float* v = nullptr;      // [tokens, kv_heads, head_dim]
  const void* q_norm = nullptr;  // weight [head_dim], or null: q and k are not normalised
  const void* k_norm = nullptr;  // weight [head_dim], null exactly when q_norm is
  float norm_eps = 1e-6f;
  const int32_t* positions = nullptr;  // [tokens]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  int64_t rotary_dim = 0;              // as RopeArgs
  float attention_scale = 1.0f;
  bool interleaved = false;
  const int32_t* slots = nullptr;  // [tokens]
  void* k_cache = nullptr;         // kv [n_slots, kv_heads, head_dim]
  void* v_cache = nullptr;         // kv [n_slots, kv_heads, head_dim]
  int64_t tokens = 0;
  int64_t n_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  KvQuant kv_quant;  // how the caches hold the k and v written
};

// How a weight matrix is stored when a backend keeps a checkpoint's quantised form on the device instead
// of dequantising it at load (Backend::keeps_quantised). dense: the backend's weight dtype. fp8_block:
// E4M3 bytes [rows, cols] with one fp32 scale per block of block_rows x block_cols (DeepSeek-V3's form),
// w[r, c] = float(q[r, c]) * scales[(r / block_rows) * scale_cols + c / block_cols]; for an array of
// matrices (experts), matrix e's scales start at scales + e * scale_stride.
// The 4-bit forms hold bytes [rows, cols / 2], element c of a row in byte c / 2, the low nibble first, with
// one group scale per row and block_cols (the group, a multiple of 16) columns: block_rows is 1 and
// group_scales[r * scale_cols + c / block_cols] scales element (r, c); matrix e's group scales start at
// e * scale_stride. int4_group (compressed-tensors pack-quantized, symmetric): w = (nibble - 8) · bf16 group
// scale. nvfp4 (NVIDIA ModelOpt): w = e2m1(nibble) · e4m3 group scale · row_scales[r], the tensor's
// weight_scale_2 repeated per row (so that parts stacked in one matrix keep their own); matrix e's row
// scales start at row_scales + e * rows.
enum class WeightFormat : uint8_t { dense, fp8_block, int4_group, nvfp4 };
struct QuantView {
  WeightFormat format = WeightFormat::dense;
  const float* scales = nullptr;       // fp8_block
  const void* group_scales = nullptr;  // int4_group: bf16; nvfp4: e4m3
  const float* row_scales = nullptr;   // nvfp4
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  int64_t scale_cols = 0;    // ceil(cols / block_cols)
  int64_t scale_stride = 0;  // scales per matrix of an array
  bool dense() const { return format == WeightFormat::dense; }
  bool four_bit() const { return format == WeightFormat::int4_group || format == WeightFormat::nvfp4; }
};

// Random 4-bit weights (QuantView int4_group or nvfp4): uniformly random bytes (every nibble value equally
// likely), every group scale `group_scale` (stored as bf16 for int4_group, e4m3 for nvfp4: it must be exact
// there) and every row scale `row_scale` (nvfp4).
struct RandomQ4Args {
  WeightFormat format = WeightFormat::int4_group;
  void* dst = nullptr;  // [n_bytes]
  int64_t n_bytes = 0;
  void* group_scales = nullptr;  // [n_groups]
  int64_t n_groups = 0;
  float* row_scales = nullptr;  // [n_rows], nvfp4
  int64_t n_rows = 0;
  uint64_t seed = 0;
  float group_scale = 1.0f;
  float row_scale = 1.0f;
};

// Bytes a matrix element takes as held: `dense_bytes` (the weight dtype), or the quantised value and its
// share of the scales (the per-row scales of nvfp4 left out: 4 bytes a row).
inline double held_bytes_per_weight(const QuantView& q, double dense_bytes) {
  switch (q.format) {
    case WeightFormat::dense:
      return dense_bytes;
    case WeightFormat::fp8_block:
      return 1.0 + 4.0 / static_cast<double>(q.block_rows * q.block_cols);
    case WeightFormat::int4_group:
      return 0.5 + 2.0 / static_cast<double>(q.block_cols);
    case WeightFormat::nvfp4:
      return 0.5 + 1.0 / static_cast<double>(q.block_cols);
  }
  return dense_bytes;
}

// The routed experts of one MoE layer: out[t] = Σ_k weights[t, k] · expert_{ids[t, k]}(x[t]) with
// expert(x) = down(silu(gate x) · up x). Routing itself (which experts, which weights) is the model's.
struct MoeExpertsArgs {
  const float* x = nullptr;             // [tokens, hidden]
  const int32_t* expert_ids = nullptr;  // [tokens, top_k]
  const float* weights = nullptr;       // [tokens, top_k], the final combine weights
  const void* gate_up = nullptr;        // weight [n_experts, 2 * inter, hidden], gate rows first
  const void* down = nullptr;           // weight [n_experts, hidden, inter]
  QuantView gate_up_q;                  // dense, or how gate_up and down are stored (quantised forms as above)
  QuantView down_q;
  float* out = nullptr;  // [tokens, hidden], overwritten
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t inter = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
};

// The CPU kernels' and references' view of storage pointers: fp32 on the CPU.
inline const float* f32_storage(const void* p) { return static_cast<const float*>(p); }
inline float* f32_storage(void* p) { return static_cast<float*>(p); }

#define SY_KERNEL_OPS                                                                                          \
  /* y[m, n] = x[m, k] · w[n, k]^T (+ bias[n] when bias is not null); w in nn.Linear layout */                \
  void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k);   \
  /* y = x / sqrt(mean(x^2) + eps) * weight, per row of dim; y may alias x */                                  \
  void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps);          \
  /* residual += x, then y = rms_norm(residual) */                                                             \
  void add_rms_norm(float* residual, const float* x, const float* weight, float* y, int64_t rows, int64_t dim, \
                    float eps);                                                                                \
  /* out[t] = table[ids[t]]; table [vocab, dim]. Precondition: 0 <= ids[t] < vocab */                          \
  void embedding(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t dim);             \
  /* out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up [rows, 2*inter] */                       \
  void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t inter);                                \
  void rope(const RopeArgs& a);                                                                                \
  void kv_write(const KvWriteArgs& a);                                                                         \
  void paged_attention(const PagedAttentionArgs& a);                                                           \
  void softmax_topk(const SoftmaxTopkArgs& a);

// DeepSeek-V3 routing ("noaux_tc"): scores s = sigmoid(logits); the choice uses s + score_bias, restricted to
// the topk_group best of n_group equal expert groups (a group's score is the sum of its two best biased
// scores); the weights are the unbiased s of the chosen experts, divided by their sum (+1e-20) when
// renormalize, times scaling. Ties go to the lower group / expert id.
struct GroupedTopkArgs {
  const float* logits = nullptr;      // [tokens, n_experts] router logits
  const float* score_bias = nullptr;  // [n_experts] e_score_correction_bias, or null
  int32_t* expert_ids = nullptr;      // [tokens, top_k] highest biased score first
  float* weights = nullptr;           // [tokens, top_k] final combine weights
  int64_t tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;     // divides n_experts
  int64_t topk_group = 1;  // 1 <= topk_group <= n_group; top_k <= topk_group * n_experts / n_group
  bool renormalize = false;
  float scaling = 1.0f;  // routed_scaling_factor
  bool uniform = false;  // as SoftmaxTopkArgs::uniform
};

// Multi-head latent attention (DeepSeek-V2/V3) over a paged cache whose row per token is the compressed
// latent (after kv_a_layernorm) followed by the shared rope key: [kv_lora_rank | rope_dim], one "head".
struct MlaKvWriteArgs {
  const float* kv = nullptr;          // [tokens, kv_lora_rank + rope_dim]: kv_a_proj_with_mqa output, rope part rotated
  const void* norm_weight = nullptr;  // weight [kv_lora_rank] kv_a_layernorm
  const int32_t* slots = nullptr;     // [tokens]
  void* cache = nullptr;              // kv [n_slots, kv_lora_rank + rope_dim]: rms_norm(latent) * weight, rope key
  int64_t tokens = 0;
  int64_t kv_lora_rank = 0;
  int64_t rope_dim = 0;
  float eps = 1e-6f;
  KvQuant kv_quant;  // how the cache holds its rows (k_scale scales the whole row)
};

// Per-head matrix products: y[t, h, :out] = W_h · x[t, h, :in] with W_h at w + h * w_head_stride, stored
// [out, in] (nn.Linear) or, when w_transposed, [in, out]. Absorbs kv_b_proj into the query and output of MLA.
struct HeadLinearArgs {
  const float* x = nullptr;  // [tokens, heads, x_stride], the first `in` of each head read
  const void* w = nullptr;   // weight, head h's matrix at element h * w_head_stride
  float* y = nullptr;        // [tokens, heads, y_stride], the first `out` of each head written
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;       // >= in
  int64_t y_stride = 0;       // >= out
  int64_t w_head_stride = 0;  // elements between consecutive heads' matrices
  bool w_transposed = false;
};

// Absorbed MLA attention: per query head, score_j = scale · (q_latent · latent_j + q_rope · rope_j) over the
// sequence's keys (all of 0..p, or the sparse indexer's choice), out = Σ softmax(score)_j · latent_j.
struct MlaAttentionArgs {
  const float* q_latent = nullptr;        // [tokens, n_heads, kv_lora_rank]: q_nope through kv_b_proj's K part
  const float* q_rope = nullptr;          // [tokens, n_heads, q_rope_stride], the first rope_dim of each head
  const void* cache = nullptr;            // kv [n_slots, kv_lora_rank + rope_dim]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  const int32_t* token_seq = nullptr;     // [tokens]
  const int32_t* positions = nullptr;     // [tokens]
  // [tokens, n_selected] key positions the sparse indexer kept, ascending, -1 past the end; null: keys 0..p
  const int32_t* key_positions = nullptr;
  float* out = nullptr;  // [tokens, n_heads, kv_lora_rank] attention output in latent space
  int64_t tokens = 0;
  int64_t n_heads = 0;
  int64_t kv_lora_rank = 0;
  int64_t rope_dim = 0;
  int64_t q_rope_stride = 0;
  int64_t n_selected = 0;
  int64_t block_size = 0;
  int64_t max_blocks = 0;
  float scale = 1.0f;
  KvQuant kv_quant;  // how the cache holds its rows
};

// The sparse-attention indexer (DeepSeek-V3.2, GLM-5): score_j = Σ_h weight_scale · head_weights[h] ·
// relu(scale · q_h · k_j) over the sequence's keys 0..p; the top_k best keys (ties: lower position) are
// written in ascending position order, -1 past the end when p + 1 < top_k.
struct IndexerTopkArgs {
  const float* q = nullptr;               // [tokens, n_heads, head_dim] indexer queries, rotated
  const float* head_weights = nullptr;    // [tokens, n_heads] weights_proj(x)
  const void* k_cache = nullptr;          // kv [n_slots, head_dim] indexer keys
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  const int32_t* token_seq = nullptr;     // [tokens]
  const int32_t* positions = nullptr;     // [tokens]
  int32_t* key_positions = nullptr;       // [tokens, top_k]
  int64_t tokens = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t top_k = 0;
  int64_t block_size = 0;
  int64_t max_blocks = 0;
  float scale = 1.0f;         // head_dim^-0.5
  float weight_scale = 1.0f;  // n_heads^-0.5
};

// MLA, the sparse indexer and the layer norm it uses (kernels/cpu/mla_ops.cpp, kernels/reference/mla_ops.cpp).
#define SY_KERNEL_MLA_OPS                                                                                      \
  void mla_kv_write(const MlaKvWriteArgs& a);                                                                  \
  void head_linear(const HeadLinearArgs& a);                                                                   \
  void mla_attention(const MlaAttentionArgs& a);                                                               \
  void indexer_topk(const IndexerTopkArgs& a);                                                                 \
  /* y = (x - mean) / sqrt(var + eps) * weight + bias per row (biased variance); y may alias x */              \
  void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows, int64_t dim, \
                  float eps);

// Sigmoid group-limited routing and the shared-expert sum (kernels/cpu/routing_ops.cpp,
// kernels/reference/routing_ops.cpp).
#define SY_KERNEL_ROUTING_OPS                  \
  void grouped_topk(const GroupedTopkArgs& a); \
  /* y[i] += x[i] for i < n */                 \
  void add(float* y, const float* x, int64_t n);

// Row movement for MoE token permutation (kernels/cpu/row_ops.cpp, kernels/reference/row_ops.cpp).
#define SY_KERNEL_ROW_OPS                                                                                   \
  /* dst[i, :] = src[rows[i], :] for i < n */                                                               \
  void gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n, int64_t dim);              \
  /* dst[rows[i], :] += weights[i] * src[i, :] for i = 0..n-1 in order (weights null: 1) */                 \
  void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, \
                        int64_t dim);

// The column blocks of a row-major [rows, Σ width] matrix copied out into row-major matrices of their own
// (dst[i] is [rows, width[i]]; Backend::split_columns): the q, k and v of one product over stacked weights. Unused
// parts: width 0.
struct ColumnSplit {
  const float* src = nullptr;
  int64_t rows = 0;
  float* dst[3] = {};
  int64_t width[3] = {};
};

// One logit row to sample (Backend::sample_tokens). Greedy when temperature is 0 (the first maximum: lowest
// id on ties); else temperature, then top-k, top-p and min-p in the order transformers applies them, the
// candidates ordered by scaled logit (lower id first on ties) and the draw made with `u` in [0, 1) from the
// request's own generator, so that every backend sampling the same row with the same u picks the same token.
struct SampleRow {
  int64_t row = 0;  // of the logits matrix [rows, vocab]
  float temperature = 0.0f;
  int64_t top_k = 0;   // 0: off
  float top_p = 1.0f;  // 1: off
  float min_p = 0.0f;  // 0: off; drops tokens whose probability is below min_p times the top token's
  double u = 0.0;      // the uniform draw (unused when greedy)
};
// What sample_tokens returns for a row that is not sampled: a logit is NaN or infinite.
inline constexpr int32_t kSampleNotFinite = -1;

namespace cpu {
SY_KERNEL_OPS
SY_KERNEL_ROW_OPS
SY_KERNEL_MLA_OPS
SY_KERNEL_ROUTING_OPS
// The token sampled from logits [vocab] (kernels/cpu/sampling.cpp), or kSampleNotFinite; p.row is ignored. The
// oracle of every backend's sample_tokens.
int32_t sample_row(const float* logits, int64_t vocab, const SampleRow& p);
}  // namespace cpu

namespace ref {
SY_KERNEL_OPS
SY_KERNEL_ROW_OPS
SY_KERNEL_MLA_OPS
SY_KERNEL_ROUTING_OPS
}  // namespace ref

}  // namespace sy
