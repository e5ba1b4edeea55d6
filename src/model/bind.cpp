// Builds the decoder stack a model description asks for: the rank's layers, each with its attention (GQA or
// MLA) and FFN (dense or routed experts) bound under the description's checkpoint names, the embedding and
// LM head. No architecture has code of its own here: src/arch/ says what each one is.
#include "model/bind.h"

#include "base/log.h"
#include "model/kv_scales.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace sy {

namespace {

// The decoder layers this rank builds (its pipeline stage's): [begin, end).
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
};

LayerRange stage_layers(const WeightLoader& loader) {
  const ShardPlan& p = loader.plan();
  return {.begin = p.first_layer, .end = p.first_layer + p.n_layers};
}

// Number of layers to build: all, or the first `max_layers` when that is set (> 0). Layers not built
// are skipped in the checkpoint so that strict binding does not report them. Also fixes this rank's
// ShardPlan (loader.plan()) and skips the layers of other pipeline stages.
int64_t layers_to_build(int64_t n_layers, int64_t max_layers, WeightLoader& loader) {
  int64_t built = n_layers;
  if (max_layers > 0 && max_layers < n_layers) {
    log_info("building the first {} of {} layers (--layers)", max_layers, n_layers);
    for (int64_t i = max_layers; i < n_layers; ++i) loader.skip_prefix("model.layers." + std::to_string(i) + ".");
    built = max_layers;
  }
  loader.set_plan(make_shard_plan(loader.groups(), built));
  const LayerRange mine = stage_layers(loader);
  for (int64_t i = 0; i < built; ++i) {
    if (i < mine.begin || i >= mine.end) loader.skip_prefix("model.layers." + std::to_string(i) + ".");
  }
  return built;
}

// Multi-token-prediction layers stored after the decoder (model.layers.{n_layers + i}.*, i < n_nextn) are
// not used for plain decoding: skipped in the checkpoint, with a log line.
void skip_nextn_layers(WeightLoader& loader, int64_t n_layers, int64_t n_nextn) {
  if (n_nextn <= 0) return;
  log_info("skipping {} multi-token-prediction layer(s) (model.layers.{}.*{}): not used for decoding", n_nextn,
           n_layers, n_nextn > 1 ? " and after" : "");
  for (int64_t i = 0; i < n_nextn; ++i) loader.skip_prefix("model.layers." + std::to_string(n_layers + i) + ".");
}

// Binds model.embed_tokens.weight, model.norm.weight and lm_head.weight (or ties the head to the
// embedding) into `spec` using spec.info's vocab and hidden sizes: this rank's vocabulary rows, on the
// stages that use them.
void bind_embeddings_and_head(WeightLoader& loader, TransformerSpec& spec, bool tie_word_embeddings) {
  const int64_t V = spec.info.vocab_size, H = spec.info.hidden_size;
  const ShardPlan& p = loader.plan();
  const Share share = ceil_share(V, p.dense_rank, p.dense);
  spec.vocab_share = share;
  // This rank's vocabulary rows, and a zero row after them when the vocabulary is split.
  const int64_t pad = p.dense > 1 ? 1 : 0;
  const auto bind_rows = [&](const std::string& name) -> WeightPtr {
    void* table = loader.allocate((share.count + pad) * H);
    if (share.count > 0) {
      loader.load_into(name, {V, H}, table, WeightInit::normal,
                       p.dense > 1 ? Slice{.dim = 0, .start = share.start, .count = share.count} : Slice{});
    } else {
      loader.skip_prefix(name);
    }
    if (pad) loader.zero(loader.at(table, share.count * H), H);
    return table;
  };
  const std::string embed = "model.embed_tokens.weight";
  if (p.first_stage()) spec.embed = bind_rows(embed);
  if (!p.last_stage()) {
    loader.skip_prefix("model.norm.weight");
    loader.skip_prefix("lm_head.weight");
    if (!p.first_stage()) loader.skip_prefix(embed);
    return;
  }
  spec.final_norm = loader.bind("model.norm.weight", {H}, WeightInit::ones);
  if (!tie_word_embeddings) {
    spec.lm_head = bind_rows("lm_head.weight");
    if (!p.first_stage()) loader.skip_prefix(embed);
    return;
  }
  spec.lm_head = p.first_stage() ? spec.embed : bind_rows(embed);
  // Some tied checkpoints still carry a copy of the head; it is by definition the embedding.
  if (!loader.random() && loader.has("lm_head.weight")) loader.skip_prefix("lm_head.weight");
}

}  // namespace

std::unique_ptr<Model> build_model(const ModelDesc& d, const LoadOptions& opt, WeightLoader& loader, WeightStore& store,
                                   Backend& backend) {
  TransformerSpec spec;
  spec.info = {.architecture = d.architecture,
               .vocab_size = d.vocab,
               .hidden_size = d.hidden,
               .max_position_embeddings = d.max_position};
  spec.norm_eps = static_cast<float>(d.norm_eps);
  spec.check_finite = opt.check_finite;
  spec.rope = compute_rope_table(d.rope, d.attn.rotary_dim, d.max_position);

  loader.set_quant(d.quant);
  const int64_t built = layers_to_build(d.n_layers, opt.max_layers, loader);
  skip_nextn_layers(loader, d.n_layers, d.nextn_layers);
  spec.info.n_layers = built;
  const bool mla = d.attn.kind == AttentionKind::mla;
  spec.info.kv = mla ? mla_kv_geometry(mla_config(d, 0), built)
                     : KvGeometry{.n_layers = built,
                                  .kv_heads = d.attn.kv_heads,
                                  .head_dim = d.attn.head_dim,
                                  .v_head_dim = d.attn.v_head_dim};
  bind_embeddings_and_head(loader, spec, d.tie_embeddings);

  const GqaAttentionConfig gqa = gqa_attention_config(d);
  const MoeConfig moe = moe_config(d);
  const TensorNames& n = d.names;
  const MlpNames experts{.gate = n.expert_gate, .up = n.expert_up, .down = n.expert_down};
  const LayerRange stage = stage_layers(loader);
  const std::vector<KvQuant> kv_quant =
      read_kv_scales(loader, d.n_layers, d.attn.kind, backend.kv_dtype() == DType::f8_e4m3);
  for (int64_t i = stage.begin; i < stage.end; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer;
    layer.input_norm = loader.bind(p + "input_layernorm.weight", {d.hidden}, WeightInit::ones);
    layer.post_attn_norm = loader.bind(p + "post_attention_layernorm.weight", {d.hidden}, WeightInit::ones);
    if (mla) {
      layer.mla_config = mla_config(d, i);
      layer.mla = bind_mla(loader, p + "self_attn.", *layer.mla_config);
      layer.mla.kv_quant = kv_quant[static_cast<size_t>(i)];
    } else {
      layer.attn_config = gqa;
      layer.attn = bind_gqa_attention(loader, p + "self_attn.", gqa);
      layer.attn.kv_quant = kv_quant[static_cast<size_t>(i)];
    }
    switch (d.layer_ffn[static_cast<size_t>(i)]) {
      case FfnKind::moe:
        layer.moe_config = moe;
        layer.moe = bind_moe(loader, p + n.moe_block, experts, moe);
        break;
      case FfnKind::dense:
        layer.mlp = bind_dense_mlp(loader, p + "mlp.", kProjMlpNames, d.hidden, d.dense_inter);
        break;
    }
    spec.layers.push_back(layer);
  }
  loader.finish();
  return make_transformer(std::move(spec), std::move(store), backend, loader.plan());
}

}  // namespace sy
