// The shape of a model as the planner needs it (layers, heads, experts, sizes, dtypes), read from
// config.json for every supported architecture through one table of readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "io/model_config.h"

namespace sy {

enum class AttentionKind : uint8_t { gqa, mla };
enum class FfnKind : uint8_t { dense, moe };

struct AttentionShape {
  AttentionKind kind = AttentionKind::gqa;
  int64_t n_heads = 0;
  int64_t kv_heads = 0;  // GQA: K/V heads; MLA: equals n_heads (one latent, expanded per head)
  int64_t head_dim = 0;  // GQA: q/k head size; MLA: qk_nope_head_dim + qk_rope_head_dim
  int64_t v_head_dim = 0;
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;  // per-head RMSNorm of q and k, weights [head_dim]
  // MLA (DeepSeek-V3 family): q_lora_rank 0 means a plain q_proj.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  // Sparse-attention indexer (DeepSeek-V3.2, GLM-5); 0 = none.
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
};

struct MoeShape {
  int64_t n_experts = 0;  // routed experts per MoE layer
  int64_t top_k = 0;
  int64_t inter = 0;         // moe_intermediate_size of one routed expert
  int64_t n_shared = 0;      // shared experts, fused into one MLP of n_shared·shared_inter_each
  int64_t shared_inter = 0;  // intermediate size of that fused shared MLP (0 = none)
  bool router_bias = false;  // e_score_correction_bias [n_experts], fp32
};

// fp8 checkpoints with one fp32 scale per block of weights (DeepSeek-V3 style quantization_config).
struct WeightQuant {
  std::string method;  // quantization_config.quant_method; empty = unquantised
  bool block_fp8 = false;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
};

struct ModelShape {
  std::string architecture;  // HF class
  std::string model_type;
  std::string family;  // "Qwen3-MoE", "DeepSeek-V3 / Kimi K2", ...
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t max_position = 0;
  bool tie_embeddings = false;
  AttentionShape attn;
  MoeShape moe;
  int64_t dense_inter = 0;         // intermediate size of dense FFN layers
  std::vector<FfnKind> layer_ffn;  // [n_layers]
  int64_t nextn_layers = 0;        // multi-token-prediction layers stored after the decoder (not loaded)
  DType dtype = DType::bf16;       // weights (config "torch_dtype" / "dtype")
  WeightQuant quant;

  int64_t moe_layer_count() const;
  int64_t dense_layer_count() const;
  // KV cache bytes per token of one layer on one rank of attention-TP size tp.
  // GQA: 2·ceil(kv_heads/tp)·head_dim·bytes; MLA: (kv_lora_rank + rope_dim)·bytes (replicated over tp),
  // plus the indexer's key (index_head_dim·bytes) where there is one.
  int64_t kv_bytes_per_token_layer(int tp, int64_t kv_dtype_bytes) const;
  // The first n layers only (generate --layers).
  ModelShape truncated(int64_t n) const;
};

// Reads the shape from a config.json; unknown architectures are an error listing the known ones.
// `quantization_config` is passed separately because it is a nested object (see load_model_shape).
ModelShape read_model_shape(const ConfigJson& cfg, const WeightQuant& quant);
// DIR/config.json, including its quantization_config (fp8 with weight_block_size).
ModelShape load_model_shape(const std::filesystem::path& dir);
std::vector<std::string> planner_architectures();

}  // namespace sy
