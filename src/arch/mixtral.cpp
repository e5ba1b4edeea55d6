// Mixtral (MixtralForCausalLM): GQA, optional sliding window, softmax top-k routing always renormalised,
// every layer MoE, its experts named block_sparse_moe.experts.{e}.w1 (gate), w3 (up), w2 (down).
#include "arch/archs.h"

namespace sy {

ModelDesc describe_mixtral(const ConfigJson& cfg) {
  // Defaults are those of transformers' MixtralConfig.
  ModelDesc d;
  d.family = "Mixtral";
  read_common(cfg, d, 4096 * 32, 1e-5);
  read_gqa(cfg, d, 8, 1e6);
  d.attn.sliding_window = cfg.get_optional_int("sliding_window");
  MoeDesc& m = d.moe;
  m.n_experts = cfg.get_int("num_local_experts", 8, 1);
  m.top_k = cfg.get_int("num_experts_per_tok", 2, 1);
  m.inter = cfg.get_int("intermediate_size", 14336, 1);
  m.renormalize = true;
  d.layer_ffn.assign(static_cast<size_t>(d.n_layers), FfnKind::moe);
  d.names = {.moe_block = "block_sparse_moe.",
             .expert_gate = "w1.weight",
             .expert_up = "w3.weight",
             .expert_down = "w2.weight"};
  return d;
}

}  // namespace sy
