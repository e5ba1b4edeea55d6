// What a model is, read once from its config.json: sizes, the kind of every layer, the attention and
// routing variants and their numerical settings, with the defaults of the transformers config classes.
// The loader (model/bind.cpp), `plan`, `inspect` and the cost model all read this one description; no other
// code reads an architecture's keys from config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "arch/quant.h"
#include "base/dtype.h"
#include "io/model_config.h"

namespace sy {

enum class AttentionKind : uint8_t { gqa, mla };
enum class FfnKind : uint8_t { dense, moe };

enum class RouterScoring : uint8_t {
  softmax,  // softmax over the experts, top-k (Mixtral, Qwen3-MoE)
  sigmoid,  // DeepSeek-V3 noaux_tc: sigmoid, e_score_correction_bias for the choice only, group-limited top-k
};

struct AttentionDesc {
  AttentionKind kind = AttentionKind::gqa;
  int64_t n_heads = 0;
  int64_t kv_heads = 0;  // GQA: K/V heads; MLA: equals n_heads (one latent, expanded per head)
  int64_t head_dim = 0;  // GQA: q/k head size; MLA: qk_nope_head_dim + qk_rope_head_dim
  int64_t v_head_dim = 0;
  bool qkv_bias = false;  // GQA: q/k/v projection biases; MLA: biases on q_a_proj and kv_a_proj_with_mqa
  bool o_bias = false;    // o_proj bias
  bool qk_norm = false;   // GQA: per-head RMSNorm of q and k, weights [head_dim]
  // GQA: the leading dims of each head that rotate (partial rotary); 0 < rotary_dim <= head_dim, even.
  int64_t rotary_dim = 0;
  int64_t sliding_window = 0;  // GQA: 0 = full causal attention
  // MLA (DeepSeek-V3 family): q_lora_rank 0 means a plain q_proj.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  bool rope_interleaved = false;  // MLA: rope over pairs (2i, 2i+1) of the rope dims
  double softmax_scale = 0;       // MLA: qk_head_dim^-0.5, times mscale² under yarn with mscale_all_dim
  // Sparse-attention indexer (DeepSeek-V3.2, GLM-5); index_n_heads 0 = none.
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  bool index_rope_interleaved = false;  // GLM-5: adjacent pairs; DeepSeek-V3.2: rotate-half
};

struct MoeDesc {
  int64_t n_experts = 0;  // routed experts per MoE layer
  int64_t top_k = 0;
  int64_t inter = 0;         // moe_intermediate_size of one routed expert
  int64_t n_shared = 0;      // shared experts, fused into one MLP of n_shared·inter
  int64_t shared_inter = 0;  // intermediate size of that fused shared MLP (0 = none)
  bool router_bias = false;  // e_score_correction_bias [n_experts], fp32
  RouterScoring scoring = RouterScoring::softmax;
  bool renormalize = false;  // top-k weights divided by their sum
  int64_t n_group = 1;       // sigmoid: experts form n_group equal groups, only the topk_group best are eligible
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;  // sigmoid: multiplies the final routed weights
};

// Checkpoint names where the families differ, relative to model.layers.{i}. (the rest is common to all:
// input_layernorm, post_attention_layernorm, self_attn.*, mlp.* of dense layers, shared_experts).
struct TensorNames {
  std::string moe_block = "mlp.";  // the routed block: {moe_block}gate.weight, {moe_block}experts.{e}.{expert_*}
  std::string expert_gate = "gate_proj.weight";
  std::string expert_up = "up_proj.weight";
  std::string expert_down = "down_proj.weight";
};

struct ModelDesc {
  std::string architecture;  // HF class
  std::string model_type;
  std::string family;  // "Qwen3-MoE", "DeepSeek-V3 / Kimi K2", ...
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t max_position = 0;  // max_position_embeddings
  bool tie_embeddings = false;
  double norm_eps = 1e-6;  // rms_norm_eps of the decoder norms (and GQA's q/k norms)
  RopeConfig rope;         // rope_type, theta and scaling
  AttentionDesc attn;
  MoeDesc moe;
  int64_t dense_inter = 0;         // intermediate size of dense FFN layers
  std::vector<FfnKind> layer_ffn;  // [n_layers]
  // [n_layers] where there is a sparse-attention indexer: whether the layer runs its own (GLM-5's "shared"
  // layers reuse the previous full layer's choice and hold no indexer weights); empty otherwise.
  std::vector<bool> layer_own_indexer;
  int64_t nextn_layers = 0;   // multi-token-prediction layers stored after the decoder (not loaded)
  DType dtype = DType::bf16;  // weights (config "torch_dtype" / "dtype")
  WeightQuant quant;
  TensorNames names;

  int64_t moe_layer_count() const;
  int64_t dense_layer_count() const;
  bool has_indexer() const { return attn.index_n_heads > 0; }
  // KV cache bytes per token of one layer on one rank of attention-TP size tp.
  // GQA: 2·ceil(kv_heads/tp)·head_dim·kv_dtype_bytes; MLA: (kv_lora_rank + rope_dim)·kv_dtype_bytes (replicated
  // over tp), plus the indexer's key (index_head_dim·index_bytes: the model dtype whatever the KV dtype) where
  // there is one.
  int64_t kv_bytes_per_token_layer(int tp, int64_t kv_dtype_bytes, int64_t index_bytes = 2) const;
  // The first n layers only (generate --layers); n <= 0 or n >= n_layers: all of them.
  ModelDesc truncated(int64_t n) const;
};

// The description of the model a config.json describes (quantization_config included). Unknown
// architectures, unsupported variants and values outside their range are sy::Error naming the file, the
// key, the value and what is accepted.
ModelDesc describe_model(const ConfigJson& cfg);
// As describe_model, with ModelOpt's hf_quant_config.json where config.json has no quantization_config.
ModelDesc describe_model(const ConfigJson& cfg, const std::optional<ConfigJson>& hf_quant);
// DIR/config.json (and DIR/hf_quant_config.json when present).
ModelDesc load_model_desc(const std::filesystem::path& dir);
// The Hugging Face classes that can be described (and so loaded and planned).
std::vector<std::string> described_architectures();

}  // namespace sy
