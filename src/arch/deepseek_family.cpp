// The shared reading of the DeepSeek-V3-derived architectures: their MoE block and multi-head latent
// attention with the optional sparse-attention indexer.
#include "arch/deepseek_family.h"

#include <cmath>

#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

// transformers' yarn_get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Which layers run their own sparse indexer (GLM-5 indexer_types; transformers derives a missing list from
// index_topk_pattern, or index_topk_freq and index_skip_topk_offset).
std::vector<bool> own_indexer_layers(const ConfigJson& cfg, int64_t n_layers, bool sharing) {
  std::vector<bool> full(static_cast<size_t>(n_layers), true);
  if (!sharing) return full;
  std::vector<std::string> types = cfg.get_string_list("indexer_types");
  if (types.empty() && cfg.has("index_topk_pattern")) {
    for (char ch : cfg.get_string("index_topk_pattern", ""))
      types.push_back(ch == 'S' ? "shared" : ch == 'F' ? "full" : "?");
  }
  if (types.empty()) {
    const int64_t freq = cfg.get_int("index_topk_freq", 1, 1), offset = cfg.get_int("index_skip_topk_offset", 2, 0);
    for (int64_t i = 0; i < n_layers; ++i)
      full[static_cast<size_t>(i)] = std::max<int64_t>(i - offset + 1, 0) % freq == 0;
  } else {
    SY_CHECK(static_cast<int64_t>(types.size()) == n_layers, "{}: indexer_types has {} entries for {} layers",
             cfg.source(), types.size(), n_layers);
    for (int64_t i = 0; i < n_layers; ++i) {
      const std::string& t = types[static_cast<size_t>(i)];
      SY_CHECK(t == "full" || t == "shared", "{}: indexer_types[{}] is '{}'; expected 'full' or 'shared'", cfg.source(),
               i, cut_for_message(t));
      full[static_cast<size_t>(i)] = t == "full";
    }
  }
  SY_CHECK(full[0], "{}: layer 0 must run its own indexer ('full'); a 'shared' layer reuses an earlier one",
           cfg.source());
  return full;
}

}  // namespace

void read_deepseek_moe(const ConfigJson& cfg, ModelDesc& d, const DeepseekMoeDefaults& defaults) {
  MoeDesc& m = d.moe;
  m.n_experts = cfg.get_int("n_routed_experts", defaults.n_routed_experts, 1);
  m.top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  m.inter = cfg.get_int("moe_intermediate_size", defaults.moe_intermediate_size, 1);
  m.renormalize = cfg.get_bool("norm_topk_prob", true);
  m.scoring = RouterScoring::sigmoid;
  m.router_bias = true;  // e_score_correction_bias is part of the router in every checkpoint of the family
  m.n_group = cfg.get_int("n_group", defaults.n_group, 1);
  m.topk_group = cfg.get_int("topk_group", defaults.topk_group, 1);
  m.routed_scaling_factor = cfg.get_double("routed_scaling_factor", defaults.routed_scaling_factor);
  m.n_shared = cfg.get_int("n_shared_experts", 1, 0);
  m.shared_inter = m.n_shared * m.inter;
  d.dense_inter = cfg.get_int("intermediate_size", defaults.intermediate_size, 1);
  d.nextn_layers = cfg.get_int("num_nextn_predict_layers", 0, 0);

  const auto scoring = cfg.get_string("scoring_func", "sigmoid"), method = cfg.get_string("topk_method", "noaux_tc");
  SY_CHECK(scoring == "sigmoid" && method == "noaux_tc",
           "{}: scoring_func '{}' with topk_method '{}' is not "
           "supported; DeepSeek-V3-style checkpoints use 'sigmoid' with 'noaux_tc' (DeepSeek-V2's softmax routing is "
           "not implemented)",
           cfg.source(), cut_for_message(scoring), cut_for_message(method));
  SY_CHECK(m.n_experts % m.n_group == 0 && m.topk_group <= m.n_group,
           "{}: n_group {} must divide n_routed_experts {} and topk_group {} must not exceed it", cfg.source(),
           m.n_group, m.n_experts, m.topk_group);
  SY_CHECK(m.top_k <= m.topk_group * (m.n_experts / m.n_group),
           "{}: num_experts_per_tok {} exceeds the {} experts "
           "of topk_group {} groups",
           cfg.source(), m.top_k, m.topk_group * (m.n_experts / m.n_group), m.topk_group);

  d.layer_ffn.clear();
  const auto types = cfg.get_string_list("mlp_layer_types");
  if (!types.empty()) {
    SY_CHECK(static_cast<int64_t>(types.size()) == d.n_layers, "{}: mlp_layer_types has {} entries for {} layers",
             cfg.source(), types.size(), d.n_layers);
    for (const auto& t : types) {
      SY_CHECK(t == "dense" || t == "sparse", "{}: mlp_layer_types holds '{}'; expected 'dense' or 'sparse'",
               cfg.source(), cut_for_message(t));
      d.layer_ffn.push_back(t == "sparse" ? FfnKind::moe : FfnKind::dense);
    }
    return;
  }
  // The published DeepSeek rule (transformers ignores moe_layer_freq, which is 1 in every released config).
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", defaults.first_k_dense_replace, 0);
  const int64_t freq = cfg.get_int("moe_layer_freq", 1, 1);
  for (int64_t i = 0; i < d.n_layers; ++i) {
    d.layer_ffn.push_back(i >= first_dense && i % freq == 0 ? FfnKind::moe : FfnKind::dense);
  }
}

ModelDesc describe_mla_model(const ConfigJson& cfg, const MlaFamily& f) {
  ModelDesc d;
  d.family = f.family;
  read_common(cfg, d, f.max_position_embeddings, f.rms_norm_eps);
  if (d.model_type == "kimi_k2") d.family = "Kimi K2 (DeepSeek-V3)";
  AttentionDesc& a = d.attn;
  a.kind = AttentionKind::mla;
  a.n_heads = cfg.get_int("num_attention_heads", 1);
  a.kv_heads = a.n_heads;
  // Absent: the class's default; null (DeepSeek-V2-Lite form): a plain q_proj.
  a.q_lora_rank =
      cfg.present("q_lora_rank") ? (cfg.has("q_lora_rank") ? cfg.get_int("q_lora_rank", 1) : 0) : f.q_lora_rank;
  a.kv_lora_rank = cfg.get_int("kv_lora_rank", 512, 1);
  a.qk_nope_head_dim = cfg.get_int("qk_nope_head_dim", f.qk_nope_head_dim, 0);
  a.qk_rope_head_dim = cfg.get_int("qk_rope_head_dim", 64, 2);
  a.v_head_dim = cfg.get_int("v_head_dim", f.v_head_dim, 1);
  a.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  a.rotary_dim = a.qk_rope_head_dim;
  a.rope_interleaved =
      f.reads_rope_interleave ? cfg.get_bool("rope_interleave", f.rope_interleave_default) : f.rope_interleave_default;
  a.qkv_bias = a.o_bias = cfg.get_bool("attention_bias", false);
  SY_CHECK(a.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim {} must be even", cfg.source(), a.qk_rope_head_dim);

  // transformers points head_dim at qk_rope_head_dim: the rope tables cover the rope slice only.
  d.rope = cfg.rope(10000.0);
  SY_CHECK(d.rope.partial_rotary_factor == 1.0, "{}: partial_rotary_factor {} is not supported with MLA", cfg.source(),
           d.rope.partial_rotary_factor);
  // DeepseekV3Attention: scaling = qk_head_dim^-0.5, times mscale² for a non-default rope with mscale_all_dim.
  double scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  if (d.rope.type != "default" && d.rope.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(d.rope.factor, d.rope.mscale_all_dim);
    scale *= m * m;
  }
  a.softmax_scale = scale;

  if (f.sparse_indexer) {
    SY_CHECK(a.q_lora_rank > 0, "{}: the sparse-attention indexer needs q_lora_rank", cfg.source());
    a.index_n_heads = cfg.get_int("index_n_heads", f.index_n_heads, 1);
    a.index_head_dim = cfg.get_int("index_head_dim", 128, 1);
    a.index_topk = cfg.get_int("index_topk", 2048, 1);
    a.index_rope_interleaved = f.indexer_rope_interleaved;
    SY_CHECK(a.index_head_dim >= a.qk_rope_head_dim, "{}: index_head_dim {} is below qk_rope_head_dim {}", cfg.source(),
             a.index_head_dim, a.qk_rope_head_dim);
    d.layer_own_indexer = own_indexer_layers(cfg, d.n_layers, f.indexer_sharing);
  }
  read_deepseek_moe(cfg, d, f.moe);
  return d;
}

}  // namespace sy
