// Qwen3-MoE (Qwen3MoeForCausalLM): GQA with per-head q/k RMSNorm, softmax top-k routing renormalised
// when norm_topk_prob, dense MLP on mlp_only_layers and between sparse steps (decoder_sparse_step).
#include <algorithm>

#include "base/check.h"
#include "base/input.h"
#include "model/archs/archs.h"
#include "model/transformer.h"

namespace sy {

std::unique_ptr<Model> build_qwen3_moe(const ConfigJson& cfg, const LoadOptions& opt, WeightLoader& loader,
                                       WeightStore& store, Backend& backend) {
  // Defaults are those of transformers' Qwen3MoeConfig.
  const int64_t hidden = cfg.get_int("hidden_size", 1);
  const int64_t n_heads = cfg.get_int("num_attention_heads", 1);
  const int64_t kv_heads = cfg.get_int("num_key_value_heads", n_heads, 1);
  const int64_t head_dim = cfg.get_int("head_dim", hidden / n_heads, 2);
  const int64_t n_layers = cfg.get_int("num_hidden_layers", 1);
  const int64_t vocab = cfg.get_int("vocab_size", 1);
  // transformers 5.x writes the expert count as num_local_experts; published checkpoints say num_experts.
  const int64_t n_experts = cfg.has("num_experts") ? cfg.get_int("num_experts", 0)
                                                   : cfg.get_int("num_local_experts", 128, 0);
  const int64_t top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  const int64_t moe_inter = cfg.get_int("moe_intermediate_size", 768, 1);
  const int64_t dense_inter = cfg.get_int("intermediate_size", 6144, 1);
  const int64_t sparse_step = cfg.get_int("decoder_sparse_step", 1, 1);
  const auto mlp_only = cfg.get_int_list("mlp_only_layers");
  const bool norm_topk = cfg.get_bool("norm_topk_prob", false);
  const bool attention_bias = cfg.get_bool("attention_bias", false);
  const double eps = cfg.get_double("rms_norm_eps", 1e-6);
  const auto act = cfg.get_string("hidden_act", "silu");
  SY_CHECK(act == "silu", "{}: hidden_act '{}' is not supported; Qwen3-MoE uses 'silu'", cfg.source(), cut_for_message(act));
  SY_CHECK(n_heads % kv_heads == 0, "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}",
           cfg.source(), n_heads, kv_heads);
  SY_CHECK(n_experts == 0 || top_k <= n_experts, "{}: num_experts_per_tok {} exceeds num_experts {}", cfg.source(),
           top_k, n_experts);
  SY_CHECK(!cfg.get_bool("use_sliding_window", false),
           "{}: use_sliding_window=true is not supported for Qwen3-MoE yet; set it to false", cfg.source());

  TransformerSpec spec;
  spec.info = {.architecture = "Qwen3MoeForCausalLM", .vocab_size = vocab, .hidden_size = hidden,
               .max_position_embeddings = cfg.get_int("max_position_embeddings", 32768, 1)};
  spec.norm_eps = static_cast<float>(eps);
  const RopeConfig rope = cfg.rope(10000.0);
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  spec.rope = compute_rope_table(rope, rotary_dim, spec.info.max_position_embeddings);

  const int64_t built = layers_to_build(n_layers, opt.max_layers, loader);
  spec.info.n_layers = built;
  spec.info.kv = {.n_layers = built, .kv_heads = kv_heads, .head_dim = head_dim, .v_head_dim = head_dim};
  bind_embeddings_and_head(loader, spec, cfg.get_bool("tie_word_embeddings", false));

  const GqaAttentionConfig attn{.hidden = hidden, .n_heads = n_heads, .kv_heads = kv_heads, .head_dim = head_dim,
                                .rotary_dim = rotary_dim, .qkv_bias = attention_bias, .o_bias = attention_bias,
                                .qk_norm = true, .qk_norm_eps = static_cast<float>(eps)};
  const MlpNames names{.gate = "gate_proj.weight", .up = "up_proj.weight", .down = "down_proj.weight"};
  const LayerRange stage = stage_layers(loader);
  for (int64_t i = stage.begin; i < stage.end; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer;
    layer.input_norm = loader.bind(p + "input_layernorm.weight", {hidden}, WeightInit::ones);
    layer.post_attn_norm = loader.bind(p + "post_attention_layernorm.weight", {hidden}, WeightInit::ones);
    layer.attn_config = attn;
    layer.attn = bind_gqa_attention(loader, p + "self_attn.", attn);
    const bool sparse = std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && n_experts > 0 &&
                        (i + 1) % sparse_step == 0;
    if (sparse) {
      layer.moe_config = MoeConfig{.hidden = hidden, .n_experts = n_experts, .top_k = top_k, .inter = moe_inter,
                                   .renormalize = norm_topk};
      layer.moe = bind_moe(loader, p + "mlp.gate.weight", p + "mlp.experts.", names, *layer.moe_config);
    } else {
      layer.mlp = bind_dense_mlp(loader, p + "mlp.", names, hidden, dense_inter);
    }
    spec.layers.push_back(std::move(layer));
  }
  loader.finish();
  return make_transformer(std::move(spec), std::move(store), backend, loader.plan());
}

}  // namespace sy
