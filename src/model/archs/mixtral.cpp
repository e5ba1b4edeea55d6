// Mixtral (MixtralForCausalLM): GQA, optional sliding window, softmax top-k routing always renormalised,
// experts named block_sparse_moe.experts.{e}.w1 (gate), w3 (up), w2 (down).
#include "base/check.h"
#include "base/input.h"
#include "model/archs/archs.h"
#include "model/transformer.h"

namespace sy {

std::unique_ptr<Model> build_mixtral(const ConfigJson& cfg, const LoadOptions& opt, WeightLoader& loader,
                                     WeightStore& store, Backend& backend) {
  // Defaults are those of transformers' MixtralConfig.
  const int64_t hidden = cfg.get_int("hidden_size", 1);
  const int64_t n_heads = cfg.get_int("num_attention_heads", 1);
  const int64_t kv_heads = cfg.get_int("num_key_value_heads", 8, 1);
  const int64_t head_dim = cfg.get_int("head_dim", hidden / n_heads, 2);
  const int64_t n_layers = cfg.get_int("num_hidden_layers", 1);
  const int64_t vocab = cfg.get_int("vocab_size", 1);
  const int64_t n_experts = cfg.get_int("num_local_experts", 8, 1);
  const int64_t top_k = cfg.get_int("num_experts_per_tok", 2, 1);
  const int64_t inter = cfg.get_int("intermediate_size", 14336, 1);
  const double eps = cfg.get_double("rms_norm_eps", 1e-5);
  const auto act = cfg.get_string("hidden_act", "silu");
  SY_CHECK(act == "silu", "{}: hidden_act '{}' is not supported; Mixtral uses 'silu'", cfg.source(), cut_for_message(act));
  SY_CHECK(n_heads % kv_heads == 0, "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}",
           cfg.source(), n_heads, kv_heads);
  SY_CHECK(top_k <= n_experts, "{}: num_experts_per_tok {} exceeds num_local_experts {}", cfg.source(), top_k,
           n_experts);

  TransformerSpec spec;
  spec.info = {.architecture = "MixtralForCausalLM", .vocab_size = vocab, .hidden_size = hidden,
               .max_position_embeddings = cfg.get_int("max_position_embeddings", 4096 * 32, 1)};
  spec.norm_eps = static_cast<float>(eps);
  const RopeConfig rope = cfg.rope(1e6);
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  spec.rope = compute_rope_table(rope, rotary_dim, spec.info.max_position_embeddings);

  const int64_t built = layers_to_build(n_layers, opt.max_layers, loader);
  spec.info.n_layers = built;
  spec.info.kv = {.n_layers = built, .kv_heads = kv_heads, .head_dim = head_dim, .v_head_dim = head_dim};
  bind_embeddings_and_head(loader, spec, cfg.get_bool("tie_word_embeddings", false));

  const GqaAttentionConfig attn{.hidden = hidden, .n_heads = n_heads, .kv_heads = kv_heads, .head_dim = head_dim,
                                .rotary_dim = rotary_dim, .sliding_window = cfg.get_optional_int("sliding_window")};
  const MoeConfig moe{.hidden = hidden, .n_experts = n_experts, .top_k = top_k, .inter = inter, .renormalize = true};
  const MlpNames names{.gate = "w1.weight", .up = "w3.weight", .down = "w2.weight"};
  const LayerRange stage = stage_layers(loader);
  for (int64_t i = stage.begin; i < stage.end; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer;
    layer.input_norm = loader.bind(p + "input_layernorm.weight", {hidden}, WeightInit::ones);
    layer.post_attn_norm = loader.bind(p + "post_attention_layernorm.weight", {hidden}, WeightInit::ones);
    layer.attn_config = attn;
    layer.attn = bind_gqa_attention(loader, p + "self_attn.", attn);
    layer.moe_config = moe;
    layer.moe = bind_moe(loader, p + "block_sparse_moe.gate.weight", p + "block_sparse_moe.experts.", names, moe);
    spec.layers.push_back(std::move(layer));
  }
  loader.finish();
  return make_transformer(std::move(spec), std::move(store), backend, loader.plan());
}

}  // namespace sy
