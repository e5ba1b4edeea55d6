// What every architecture reads alike: the sizes of the stack, the weight dtype, GQA attention and rope.
#include "arch/archs.h"
#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

DType read_dtype(const ConfigJson& cfg) {
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  const std::string name = cfg.get_string("dtype", cfg.get_string("torch_dtype", "bfloat16"));
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  if (name == "float32") return DType::f32;
  SY_FAIL("{}: dtype '{}' is not one of bfloat16, float16, float32", cfg.source(), cut_for_message(name));
}

}  // namespace

void read_common(const ConfigJson& cfg, ModelDesc& d, int64_t default_max_position, double default_eps) {
  d.model_type = cfg.get_string("model_type", "");
  d.hidden = cfg.get_int("hidden_size", 1);
  d.n_layers = cfg.get_int("num_hidden_layers", 1);
  d.vocab = cfg.get_int("vocab_size", 1);
  d.tie_embeddings = cfg.get_bool("tie_word_embeddings", false);
  d.max_position = cfg.get_int("max_position_embeddings", default_max_position, 1);
  d.norm_eps = cfg.get_double("rms_norm_eps", default_eps);
  d.dtype = read_dtype(cfg);
  const std::string act = cfg.get_string("hidden_act", "silu");
  SY_CHECK(act == "silu", "{}: hidden_act '{}' is not supported; {} uses 'silu'", cfg.source(), cut_for_message(act),
           d.family);
}

void read_gqa(const ConfigJson& cfg, ModelDesc& d, int64_t default_kv_heads, double default_theta) {
  AttentionDesc& a = d.attn;
  a.kind = AttentionKind::gqa;
  a.n_heads = cfg.get_int("num_attention_heads", 1);
  a.kv_heads = cfg.get_int("num_key_value_heads", default_kv_heads > 0 ? default_kv_heads : a.n_heads, 1);
  a.head_dim = cfg.get_int("head_dim", d.hidden / a.n_heads, 2);
  a.v_head_dim = a.head_dim;
  SY_CHECK(a.n_heads % a.kv_heads == 0, "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}",
           cfg.source(), a.n_heads, a.kv_heads);
  d.rope = cfg.rope(default_theta);
  a.rotary_dim = static_cast<int64_t>(static_cast<double>(a.head_dim) * d.rope.partial_rotary_factor);
  SY_CHECK(a.rotary_dim > 0 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.head_dim,
           "{}: head_dim {} x partial_rotary_factor {} gives rotary dim {}; it must be even and in (0, head_dim]",
           cfg.source(), a.head_dim, d.rope.partial_rotary_factor, a.rotary_dim);
}

}  // namespace sy
