// GLM-4.5 (Glm4MoeForCausalLM): GQA with q/k/v biases (attention_bias; o_proj never has one), optional
// per-head q/k RMSNorm (use_qk_norm), rotate-half rope over the first partial_rotary_factor of each head;
// DeepSeek-V3's MoE block (sigmoid noaux_tc routing, shared experts, first_k_dense_replace dense layers);
// multi-token-prediction layers skipped.
#include "base/check.h"
#include "model/archs/archs.h"
#include "model/archs/deepseek_family.h"

namespace sy {

std::unique_ptr<Model> build_glm4_moe(const ConfigJson& cfg, const LoadOptions& opt, WeightLoader& loader,
                                      WeightStore& store, Backend& backend) {
  // Defaults are those of transformers' Glm4MoeConfig.
  const int64_t hidden = cfg.get_int("hidden_size", 1);
  const int64_t n_heads = cfg.get_int("num_attention_heads", 1);
  const int64_t kv_heads = cfg.get_int("num_key_value_heads", 8, 1);
  const int64_t head_dim = cfg.get_int("head_dim", hidden / n_heads, 2);
  const int64_t n_layers = cfg.get_int("num_hidden_layers", 1);
  const double eps = cfg.get_double("rms_norm_eps", 1e-5);
  SY_CHECK(n_heads % kv_heads == 0, "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}",
           cfg.source(), n_heads, kv_heads);

  TransformerSpec spec;
  spec.info = {.architecture = "Glm4MoeForCausalLM", .vocab_size = cfg.get_int("vocab_size", 1),
               .hidden_size = hidden, .max_position_embeddings = cfg.get_int("max_position_embeddings", 131072, 1)};
  spec.norm_eps = static_cast<float>(eps);
  const RopeConfig rope = cfg.rope(10000.0);
  // Glm4MoeConfig defaults partial_rotary_factor to 0.5 when a config does not say (an explicit 1.0 inside
  // rope_parameters cannot be told from absent here; no released GLM-4.5 config has it).
  const double partial = cfg.has("partial_rotary_factor") || rope.partial_rotary_factor != 1.0
                             ? rope.partial_rotary_factor
                             : 0.5;
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  SY_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim,
           "{}: head_dim {} x partial_rotary_factor {} gives rotary dim {}; it must be even and in (0, head_dim]",
           cfg.source(), head_dim, partial, rotary_dim);
  spec.rope = compute_rope_table(rope, rotary_dim, spec.info.max_position_embeddings);

  const DeepseekMoe moe = read_deepseek_moe(cfg, hidden, n_layers,
                                            {.n_routed_experts = 128, .moe_intermediate_size = 1408,
                                             .intermediate_size = 10944, .first_k_dense_replace = 1, .n_group = 1,
                                             .topk_group = 1, .routed_scaling_factor = 1.0});
  const int64_t built = layers_to_build(n_layers, opt.max_layers, loader);
  skip_nextn_layers(loader, n_layers, moe.nextn_layers);
  spec.info.n_layers = built;
  spec.info.kv = {.n_layers = built, .kv_heads = kv_heads, .head_dim = head_dim, .v_head_dim = head_dim};
  bind_embeddings_and_head(loader, spec, cfg.get_bool("tie_word_embeddings", false));

  const GqaAttentionConfig attn{.hidden = hidden, .n_heads = n_heads, .kv_heads = kv_heads, .head_dim = head_dim,
                                .rotary_dim = rotary_dim, .qkv_bias = cfg.get_bool("attention_bias", false),
                                .o_bias = false, .qk_norm = cfg.get_bool("use_qk_norm", false),
                                .qk_norm_eps = static_cast<float>(eps)};
  const LayerRange stage = stage_layers(loader);
  for (int64_t i = stage.begin; i < stage.end; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer;
    layer.input_norm = loader.bind(p + "input_layernorm.weight", {hidden}, WeightInit::ones);
    layer.post_attn_norm = loader.bind(p + "post_attention_layernorm.weight", {hidden}, WeightInit::ones);
    layer.attn_config = attn;
    layer.attn = bind_gqa_attention(loader, p + "self_attn.", attn);
    bind_deepseek_ffn(loader, p, moe.sparse[static_cast<size_t>(i)], moe, layer);
    spec.layers.push_back(std::move(layer));
  }
  loader.finish();
  return make_transformer(std::move(spec), std::move(store), backend, loader.plan());
}

}  // namespace sy
