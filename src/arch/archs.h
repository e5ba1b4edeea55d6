// The describers of the architectures in this folder, one file each, and the readers they share; the
// table in model_desc.cpp maps Hugging Face class names to them.
#pragma once

#include "arch/model_desc.h"

namespace sy {

using ArchDescriber = ModelDesc (*)(const ConfigJson& cfg);

ModelDesc describe_qwen3_moe(const ConfigJson& cfg);
ModelDesc describe_mixtral(const ConfigJson& cfg);
ModelDesc describe_glm4_moe(const ConfigJson& cfg);
ModelDesc describe_deepseek_v3(const ConfigJson& cfg);
ModelDesc describe_deepseek_v32(const ConfigJson& cfg);
ModelDesc describe_glm_moe_dsa(const ConfigJson& cfg);

// hidden_size, num_hidden_layers, vocab_size, tie_word_embeddings, the weight dtype, model_type, and
// max_position_embeddings (its default given), rms_norm_eps (default given) and hidden_act, which must be
// "silu" in every family here.
void read_common(const ConfigJson& cfg, ModelDesc& d, int64_t default_max_position, double default_eps);

// num_attention_heads, num_key_value_heads and head_dim (defaults: n_heads and hidden / n_heads unless
// given), the rope settings, and rotary_dim = head_dim · partial_rotary_factor (even, in (0, head_dim]).
void read_gqa(const ConfigJson& cfg, ModelDesc& d, int64_t default_kv_heads, double default_theta);

}  // namespace sy
