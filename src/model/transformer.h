// The pre-norm decoder stack shared by every family: embedding, per layer
// [RMSNorm → attention (GQA or MLA) → residual, RMSNorm → MLP or MoE → residual], final RMSNorm, LM head.
// model/bind.cpp fills a TransformerSpec from a model description and binds its weights.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/blocks/attention.h"
#include "model/blocks/ffn.h"
#include "model/blocks/mla.h"
#include "model/model.h"
#include "model/rope.h"

namespace sy {

struct DecoderLayer {
  WeightPtr input_norm = nullptr;      // [hidden]
  WeightPtr post_attn_norm = nullptr;  // [hidden]
  GqaAttentionConfig attn_config;
  GqaAttentionWeights attn;
  std::optional<MlaConfig> mla_config;  // set: multi-head latent attention instead of attn_config / attn
  MlaWeights mla;
  std::optional<MoeConfig> moe_config;  // set: routed experts; unset: dense MLP
  MoeWeights moe;
  DenseMlpWeights mlp;
};

// The model's configs, as the architecture reads them; make_transformer cuts the attention configs to this
// rank's heads (ShardPlan). Layers hold only this rank's pipeline stage.
struct TransformerSpec {
  ModelInfo info;
  float norm_eps = 1e-6f;
  RopeTable rope;
  // Vocabulary-parallel over dense_tp: this rank's rows [vocab_share.start, + count) of the embedding and
  // the LM head, then (dense_tp > 1) one zero row that tokens of other ranks' rows read. Embedding on the first
  // pipeline stage only, final norm and head on the last.
  Share vocab_share;
  WeightPtr embed = nullptr;       // [vocab_share.count (+ 1), hidden]
  WeightPtr final_norm = nullptr;  // [hidden]
  WeightPtr lm_head = nullptr;     // [vocab_share.count (+ 1), hidden]; may equal embed (tied)
  std::vector<DecoderLayer> layers;
  bool check_finite = false;  // LoadOptions::check_finite
};

std::unique_ptr<Model> make_transformer(TransformerSpec spec, WeightStore weights, Backend& backend,
                                        const ShardPlan& plan);

}  // namespace sy
