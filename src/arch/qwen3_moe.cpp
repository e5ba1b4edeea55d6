// Qwen3-MoE (Qwen3MoeForCausalLM): GQA with per-head q/k RMSNorm, softmax top-k routing renormalised
// when norm_topk_prob, dense MLP on mlp_only_layers and between sparse steps (decoder_sparse_step).
#include <algorithm>

#include "arch/archs.h"
#include "base/check.h"

namespace sy {

ModelDesc describe_qwen3_moe(const ConfigJson& cfg) {
  // Defaults are those of transformers' Qwen3MoeConfig.
  ModelDesc d;
  d.family = "Qwen3-MoE";
  read_common(cfg, d, 32768, 1e-6);
  read_gqa(cfg, d, 0, 10000.0);
  d.attn.qkv_bias = d.attn.o_bias = cfg.get_bool("attention_bias", false);
  d.attn.qk_norm = true;
  SY_CHECK(!cfg.get_bool("use_sliding_window", false),
           "{}: use_sliding_window=true is not supported for Qwen3-MoE yet; set it to false", cfg.source());
  MoeDesc& m = d.moe;
  // transformers 5.x writes the expert count as num_local_experts; published checkpoints say num_experts.
  m.n_experts = cfg.has("num_experts") ? cfg.get_int("num_experts", 0) : cfg.get_int("num_local_experts", 128, 0);
  m.top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  m.inter = cfg.get_int("moe_intermediate_size", 768, 1);
  m.renormalize = cfg.get_bool("norm_topk_prob", false);
  d.dense_inter = cfg.get_int("intermediate_size", 6144, 1);
  const int64_t step = cfg.get_int("decoder_sparse_step", 1, 1);
  const auto mlp_only = cfg.get_int_list("mlp_only_layers");
  for (int64_t i = 0; i < d.n_layers; ++i) {
    const bool sparse =
        std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && m.n_experts > 0 && (i + 1) % step == 0;
    d.layer_ffn.push_back(sparse ? FfnKind::moe : FfnKind::dense);
  }
  return d;
}

}  // namespace sy
