// The shared reading and binding of the DeepSeek-V3-derived architectures, and the MLA decoder builder.
#include "model/archs/deepseek_family.h"

#include <cmath>

#include "base/check.h"
#include "base/input.h"
#include "base/log.h"

namespace sy {

namespace {

// transformers' yarn_get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Which layers run their own sparse indexer (GLM-5 indexer_types; transformers derives a missing list from
// index_topk_pattern, or index_topk_freq and index_skip_topk_offset).
std::vector<bool> full_indexer_layers(const ConfigJson& cfg, int64_t n_layers, bool sharing) {
  std::vector<bool> full(static_cast<size_t>(n_layers), true);
  if (!sharing) return full;
  std::vector<std::string> types = cfg.get_string_list("indexer_types");
  if (types.empty() && cfg.has("index_topk_pattern")) {
    for (char ch : cfg.get_string("index_topk_pattern", "")) types.push_back(ch == 'S' ? "shared" : ch == 'F' ? "full" : "?");
  }
  if (types.empty()) {
    const int64_t freq = cfg.get_int("index_topk_freq", 1, 1), offset = cfg.get_int("index_skip_topk_offset", 2, 0);
    for (int64_t i = 0; i < n_layers; ++i) full[static_cast<size_t>(i)] = std::max<int64_t>(i - offset + 1, 0) % freq == 0;
  } else {
    SY_CHECK(static_cast<int64_t>(types.size()) == n_layers, "{}: indexer_types has {} entries for {} layers",
             cfg.source(), types.size(), n_layers);
    for (int64_t i = 0; i < n_layers; ++i) {
      const std::string& t = types[static_cast<size_t>(i)];
      SY_CHECK(t == "full" || t == "shared", "{}: indexer_types[{}] is '{}'; expected 'full' or 'shared'",
               cfg.source(), i, t);
      full[static_cast<size_t>(i)] = t == "full";
    }
  }
  SY_CHECK(full[0], "{}: layer 0 must run its own indexer ('full'); a 'shared' layer reuses an earlier one",
           cfg.source());
  return full;
}

}  // namespace

DeepseekMoe read_deepseek_moe(const ConfigJson& cfg, int64_t hidden, int64_t n_layers, const DeepseekMoeDefaults& d) {
  DeepseekMoe m;
  MoeConfig& c = m.moe;
  c.hidden = hidden;
  c.n_experts = cfg.get_int("n_routed_experts", d.n_routed_experts, 1);
  c.top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  c.inter = cfg.get_int("moe_intermediate_size", d.moe_intermediate_size, 1);
  c.renormalize = cfg.get_bool("norm_topk_prob", true);
  c.scoring = RouterScoring::sigmoid;
  c.n_group = cfg.get_int("n_group", d.n_group, 1);
  c.topk_group = cfg.get_int("topk_group", d.topk_group, 1);
  c.routed_scaling_factor = static_cast<float>(cfg.get_double("routed_scaling_factor", d.routed_scaling_factor));
  c.shared_inter = cfg.get_int("n_shared_experts", 1, 0) * c.inter;
  m.dense_inter = cfg.get_int("intermediate_size", d.intermediate_size, 1);
  m.nextn_layers = cfg.get_int("num_nextn_predict_layers", 0, 0);

  const auto scoring = cfg.get_string("scoring_func", "sigmoid"), method = cfg.get_string("topk_method", "noaux_tc");
  SY_CHECK(scoring == "sigmoid" && method == "noaux_tc", "{}: scoring_func '{}' with topk_method '{}' is not "
           "supported; DeepSeek-V3-style checkpoints use 'sigmoid' with 'noaux_tc' (DeepSeek-V2's softmax routing is "
           "not implemented)", cfg.source(), scoring, method);
  SY_CHECK(c.n_experts % c.n_group == 0 && c.topk_group <= c.n_group,
           "{}: n_group {} must divide n_routed_experts {} and topk_group {} must not exceed it", cfg.source(),
           c.n_group, c.n_experts, c.topk_group);
  SY_CHECK(c.top_k <= c.topk_group * (c.n_experts / c.n_group), "{}: num_experts_per_tok {} exceeds the {} experts "
           "of topk_group {} groups", cfg.source(), c.top_k, c.topk_group * (c.n_experts / c.n_group), c.topk_group);
  const auto act = cfg.get_string("hidden_act", "silu");
  SY_CHECK(act == "silu", "{}: hidden_act '{}' is not supported; this family uses 'silu'", cfg.source(), cut_for_message(act));

  const auto types = cfg.get_string_list("mlp_layer_types");
  if (!types.empty()) {
    SY_CHECK(static_cast<int64_t>(types.size()) == n_layers, "{}: mlp_layer_types has {} entries for {} layers",
             cfg.source(), types.size(), n_layers);
    for (const auto& t : types) {
      SY_CHECK(t == "dense" || t == "sparse", "{}: mlp_layer_types holds '{}'; expected 'dense' or 'sparse'",
               cfg.source(), t);
      m.sparse.push_back(t == "sparse");
    }
    return m;
  }
  // The published DeepSeek rule (transformers ignores moe_layer_freq, which is 1 in every released config).
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", d.first_k_dense_replace, 0);
  const int64_t freq = cfg.get_int("moe_layer_freq", 1, 1);
  for (int64_t i = 0; i < n_layers; ++i) m.sparse.push_back(i >= first_dense && i % freq == 0);
  return m;
}

void bind_deepseek_ffn(WeightLoader& loader, const std::string& layer_prefix, bool sparse, const DeepseekMoe& m,
                       DecoderLayer& layer) {
  if (sparse) {
    layer.moe_config = m.moe;
    layer.moe = bind_deepseek_moe(loader, layer_prefix + "mlp.", m.moe);
    return;
  }
  const MlpNames names{.gate = "gate_proj.weight", .up = "up_proj.weight", .down = "down_proj.weight"};
  layer.mlp = bind_dense_mlp(loader, layer_prefix + "mlp.", names, m.moe.hidden, m.dense_inter);
}

std::unique_ptr<Model> build_mla_model(const ConfigJson& cfg, const LoadOptions& opt, WeightLoader& loader,
                                       WeightStore& store, Backend& backend, const MlaFamily& f) {
  const int64_t hidden = cfg.get_int("hidden_size", 1);
  const int64_t n_layers = cfg.get_int("num_hidden_layers", 1);
  MlaConfig mla{.hidden = hidden, .n_heads = cfg.get_int("num_attention_heads", 1),
                // null (DeepSeek-V2-Lite form) or absent: a plain q_proj
                .q_lora_rank = cfg.has("q_lora_rank") ? cfg.get_int("q_lora_rank", 1) : 0,
                .kv_lora_rank = cfg.get_int("kv_lora_rank", 512, 1),
                .qk_nope_head_dim = cfg.get_int("qk_nope_head_dim", f.qk_nope_head_dim, 0),
                .qk_rope_head_dim = cfg.get_int("qk_rope_head_dim", 64, 2),
                .v_head_dim = cfg.get_int("v_head_dim", f.v_head_dim, 1),
                .rope_interleaved = f.reads_rope_interleave ? cfg.get_bool("rope_interleave", f.rope_interleave_default)
                                                            : f.rope_interleave_default,
                .attention_bias = cfg.get_bool("attention_bias", false)};
  SY_CHECK(mla.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim {} must be even", cfg.source(), mla.qk_rope_head_dim);

  TransformerSpec spec;
  spec.info = {.architecture = f.architecture, .vocab_size = cfg.get_int("vocab_size", 1), .hidden_size = hidden,
               .max_position_embeddings = cfg.get_int("max_position_embeddings", f.max_position_embeddings, 1)};
  spec.norm_eps = static_cast<float>(cfg.get_double("rms_norm_eps", f.rms_norm_eps));
  // transformers points head_dim at qk_rope_head_dim: the rope tables cover the rope slice only.
  const RopeConfig rope = cfg.rope(10000.0);
  SY_CHECK(rope.partial_rotary_factor == 1.0, "{}: partial_rotary_factor {} is not supported with MLA", cfg.source(),
           rope.partial_rotary_factor);
  spec.rope = compute_rope_table(rope, mla.qk_rope_head_dim, spec.info.max_position_embeddings);
  // DeepseekV3Attention: scaling = qk_head_dim^-0.5, times mscale² for a non-default rope with mscale_all_dim.
  double scale = 1.0 / std::sqrt(static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  if (rope.type != "default" && rope.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  mla.softmax_scale = static_cast<float>(scale);

  std::vector<bool> full_indexer;
  if (f.sparse_indexer) {
    SY_CHECK(mla.q_lora_rank > 0, "{}: the sparse-attention indexer needs q_lora_rank", cfg.source());
    mla.indexer = IndexerConfig{.hidden = hidden, .q_lora_rank = mla.q_lora_rank,
                                .n_heads = cfg.get_int("index_n_heads", f.index_n_heads, 1),
                                .head_dim = cfg.get_int("index_head_dim", 128, 1),
                                .rope_dim = mla.qk_rope_head_dim, .top_k = cfg.get_int("index_topk", 2048, 1),
                                .rope_interleaved = f.indexer_rope_interleaved};
    SY_CHECK(mla.indexer->head_dim >= mla.qk_rope_head_dim, "{}: index_head_dim {} is below qk_rope_head_dim {}",
             cfg.source(), mla.indexer->head_dim, mla.qk_rope_head_dim);
    full_indexer = full_indexer_layers(cfg, n_layers, f.indexer_sharing);
  }
  const DeepseekMoe moe = read_deepseek_moe(cfg, hidden, n_layers, f.moe);

  const int64_t built = layers_to_build(n_layers, opt.max_layers, loader);
  skip_nextn_layers(loader, n_layers, moe.nextn_layers);
  spec.info.n_layers = built;
  spec.info.kv = mla_kv_geometry(mla, built);
  bind_embeddings_and_head(loader, spec, cfg.get_bool("tie_word_embeddings", false));
  const LayerRange stage = stage_layers(loader);
  for (int64_t i = stage.begin; i < stage.end; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer;
    layer.input_norm = loader.bind(p + "input_layernorm.weight", {hidden}, WeightInit::ones);
    layer.post_attn_norm = loader.bind(p + "post_attention_layernorm.weight", {hidden}, WeightInit::ones);
    MlaConfig lc = mla;
    if (lc.indexer) lc.indexer->shared = !full_indexer[static_cast<size_t>(i)];
    layer.mla = bind_mla(loader, p + "self_attn.", lc);
    layer.mla_config = lc;
    bind_deepseek_ffn(loader, p, moe.sparse[static_cast<size_t>(i)], moe, layer);
    spec.layers.push_back(std::move(layer));
  }
  loader.finish();
  return make_transformer(std::move(spec), std::move(store), backend, loader.plan());
}

}  // namespace sy
