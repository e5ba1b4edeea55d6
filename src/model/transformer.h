// The pre-norm decoder stack shared by every family: embedding, per layer
// [RMSNorm → attention (GQA or MLA) → residual, RMSNorm → MLP or MoE → residual], final RMSNorm, LM head.
// Architecture files (model/archs/) fill a TransformerSpec and bind its weights.
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
  std::optional<MlaConfig> mla_config;    // set: multi-head latent attention instead of attn_config / attn
  MlaWeights mla;
  std::optional<MoeConfig> moe_config;    // set: routed experts; unset: dense MLP
  MoeWeights moe;
  DenseMlpWeights mlp;
};

struct TransformerSpec {
  ModelInfo info;
  float norm_eps = 1e-6f;
  RopeTable rope;
  WeightPtr embed = nullptr;       // [vocab, hidden]
  WeightPtr final_norm = nullptr;  // [hidden]
  WeightPtr lm_head = nullptr;     // [vocab, hidden]; may equal embed (tied)
  std::vector<DecoderLayer> layers;
};

std::unique_ptr<Model> make_transformer(TransformerSpec spec, WeightStore weights, Backend& backend);

}  // namespace sy

namespace sy {

// Number of layers to build: all, or the first `max_layers` when that is set (> 0). Layers not built
// are skipped in the checkpoint so that strict binding does not report them.
int64_t layers_to_build(int64_t n_layers, int64_t max_layers, WeightLoader& loader);

// Multi-token-prediction layers stored after the decoder (model.layers.{n_layers + i}.*, i < n_nextn) are
// not used for plain decoding: skipped in the checkpoint, with a log line.
void skip_nextn_layers(WeightLoader& loader, int64_t n_layers, int64_t n_nextn);

// Binds model.embed_tokens.weight, model.norm.weight and lm_head.weight (or ties the head to the
// embedding) into `spec` using spec.info's vocab and hidden sizes.
void bind_embeddings_and_head(WeightLoader& loader, TransformerSpec& spec, bool tie_word_embeddings);

}  // namespace sy
