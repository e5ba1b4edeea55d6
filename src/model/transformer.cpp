// Forward pass of the pre-norm decoder stack.
#include "model/transformer.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "base/check.h"
#include "base/log.h"

namespace sy {

namespace {

enum ScratchId : int { kIndices = 0, kResidual, kNormed, kBlockOut, kLastHidden, kLogits };

class Transformer final : public Model {
 public:
  Transformer(TransformerSpec spec, WeightStore weights, Backend& backend)
      : spec_(std::move(spec)), weights_(std::move(weights)), backend_(backend), scratch_(backend) {
    spec_.info.weight_bytes = weights_.bytes;
    spec_.info.cost = read_cost();
    inv_freq_ = backend_.alloc(spec_.rope.inv_freq.size() * sizeof(float));
    backend_.copy_to_device(inv_freq_->data(), spec_.rope.inv_freq.data(), inv_freq_->size());
  }

  const ModelInfo& info() const override { return spec_.info; }

  void forward(const ForwardBatch& b, const KvCacheView& kv, float* logits) override {
    const auto T = static_cast<int64_t>(b.tokens.size());
    const int64_t V = spec_.info.vocab_size;
    SY_CHECK(T > 0, "a forward pass needs at least one token");
    SY_CHECK(b.positions.size() == b.tokens.size() && b.token_seq.size() == b.tokens.size() &&
                 b.slots.size() == b.tokens.size(),
             "batch arrays disagree: {} tokens, {} positions, {} sequence ids, {} slots", T, b.positions.size(),
             b.token_seq.size(), b.slots.size());
    SY_CHECK(static_cast<int64_t>(b.block_tables.size()) == b.n_seqs * b.max_blocks,
             "block table holds {} entries, expected {} sequences x {} blocks", b.block_tables.size(), b.n_seqs,
             b.max_blocks);
    SY_CHECK(static_cast<int64_t>(kv.k.size()) == spec_.info.n_layers, "KV cache has {} layers, model has {}",
             kv.k.size(), spec_.info.n_layers);
    for (int32_t t : b.tokens) SY_CHECK(t >= 0 && t < V, "token id {} is outside the vocabulary [0, {})", t, V);

    // Block tables padded to a power-of-two width, so that decode steps of a growing context keep the
    // same shape (and captured step) for many tokens.
    int64_t width = 1;
    while (width < b.max_blocks) width *= 2;
    padded_tables_.assign(static_cast<size_t>(b.n_seqs * width), 0);
    for (int64_t s = 0; s < b.n_seqs; ++s) {
      std::copy_n(b.block_tables.begin() + s * b.max_blocks, b.max_blocks, padded_tables_.begin() + s * width);
    }
    const auto R = static_cast<int64_t>(b.logit_rows.size());
    for (int32_t r : b.logit_rows) SY_CHECK(r >= 0 && r < T, "logit row {} is outside the batch's {} tokens", r, T);

    StepContext step{.backend = &backend_, .tokens = T, .n_seqs = b.n_seqs, .max_blocks = width,
                     .block_size = kv.block_size};
    // Every index array of the step in one buffer and one copy: on a GPU each copy is a round trip.
    const std::vector<int32_t>* arrays[] = {&b.positions, &b.token_seq, &b.slots, &padded_tables_, &b.tokens,
                                            &b.logit_rows};
    indices_.clear();
    size_t offsets[std::size(arrays)];
    for (size_t i = 0; i < std::size(arrays); ++i) {
      offsets[i] = indices_.size();
      indices_.insert(indices_.end(), arrays[i]->begin(), arrays[i]->end());
      indices_.resize((indices_.size() + 3) / 4 * 4);  // 16-byte aligned segments
    }
    int32_t* dev = scratch_.get<int32_t>(kIndices, static_cast<int64_t>(indices_.size()) + 4);
    backend_.copy_to_device(dev, indices_.data(), indices_.size() * sizeof(int32_t));
    step.positions = dev + offsets[0];
    step.token_seq = dev + offsets[1];
    step.slots = dev + offsets[2];
    step.block_tables = dev + offsets[3];
    const int32_t* tokens = dev + offsets[4];
    const int32_t* rows = dev + offsets[5];
    float* dev_logits = scratch_.get<float>(kLogits, std::max<int64_t>(R, 1) * V);

    const auto compute = [&] { compute_step(step, kv, tokens, rows, R, dev_logits); };
    if (!capturable(T)) {
      compute();
    } else {
      run_captured(StepShape{T, b.n_seqs, width, R, kv.k.empty() ? nullptr : kv.k[0]}, compute);
    }
    if (R == 0) return;
    backend_.mark(Phase::other);
    backend_.copy_to_host(logits, dev_logits, static_cast<size_t>(R * V) * sizeof(float));
  }

 private:
  // What a captured step bakes in: sizes and the KV pool it addresses.
  struct StepShape {
    int64_t tokens, n_seqs, width, rows;
    const void* kv;
    bool operator<(const StepShape& o) const {
      return std::tie(tokens, n_seqs, width, rows, kv) < std::tie(o.tokens, o.n_seqs, o.width, o.rows, o.kv);
    }
  };

  // Every op of one step on the device, from token ids to logits; no host round trip when capturable.
  void compute_step(const StepContext& step, const KvCacheView& kv, const int32_t* tokens, const int32_t* rows,
                    int64_t R, float* dev_logits) {
    const int64_t T = step.tokens, H = spec_.info.hidden_size, V = spec_.info.vocab_size;
    float* residual = scratch_.get<float>(kResidual, T * H);
    float* normed = scratch_.get<float>(kNormed, T * H);
    float* block_out = scratch_.get<float>(kBlockOut, T * H);
    const RopeView rope{.inv_freq = inv_freq_->as<float>(), .attention_scale = spec_.rope.attention_scale};
    const float eps = spec_.norm_eps;

    backend_.mark(Phase::other);
    backend_.embedding(spec_.embed, tokens, residual, T, H);
    backend_.mark(Phase::norms);
    backend_.rms_norm(residual, spec_.layers[0].input_norm, normed, T, H, eps);
    for (size_t l = 0; l < spec_.layers.size(); ++l) {
      const DecoderLayer& layer = spec_.layers[l];
      if (layer.mla_config) {
        mla_attention_forward(step, scratch_, *layer.mla_config, layer.mla, rope, normed, block_out, kv.k[l],
                              kv.index_k.empty() ? nullptr : kv.index_k[l]);
      } else {
        gqa_attention_forward(step, scratch_, layer.attn_config, layer.attn, rope, normed, block_out, kv.k[l],
                              kv.v[l]);
      }
      backend_.mark(Phase::norms);
      backend_.add_rms_norm(residual, block_out, layer.post_attn_norm, normed, T, H, eps);
      if (layer.moe_config) {
        moe_forward(step, scratch_, *layer.moe_config, layer.moe, normed, block_out);
      } else {
        dense_mlp_forward(step, scratch_, layer.mlp, normed, block_out);
      }
      backend_.mark(Phase::norms);
      WeightPtr next_norm = l + 1 < spec_.layers.size() ? spec_.layers[l + 1].input_norm : spec_.final_norm;
      backend_.add_rms_norm(residual, block_out, next_norm, normed, T, H, eps);
    }
    if (R == 0) return;
    backend_.mark(Phase::dense);
    float* last = scratch_.get<float>(kLastHidden, R * H);
    backend_.gather_rows(normed, rows, last, R, H);
    backend_.linear(last, spec_.lm_head, nullptr, dev_logits, R, V, H);
  }

  // A step can be captured when the backend can and no MoE layer needs a host round trip at T tokens.
  bool capturable(int64_t T) const {
    if (!backend_.can_capture()) return false;
    for (const DecoderLayer& l : spec_.layers) {
      if (!l.moe_config) continue;
      const MoeConfig& m = *l.moe_config;
      if (!backend_.moe_experts_async({.tokens = T, .hidden = m.hidden, .inter = m.inter, .n_experts = m.n_experts,
                                       .top_k = m.top_k})) {
        return false;
      }
    }
    return true;
  }

  // First time a shape is seen: run eagerly (which also sizes every scratch buffer). Second time:
  // capture, then replay from then on, until a reallocation makes the captures stale.
  void run_captured(const StepShape& shape, const std::function<void()>& compute) {
    if (backend_.generation() != backend_generation_ || scratch_.generation() != scratch_generation_) {
      backend_.drop_captures();
      captured_.clear();
      seen_.clear();
      backend_generation_ = backend_.generation();
      scratch_generation_ = scratch_.generation();
    }
    if (auto it = captured_.find(shape); it != captured_.end()) return backend_.replay(it->second);
    if (!seen_.insert(shape).second) {
      const int64_t id = backend_.capture(compute);
      captured_[shape] = id;
      return backend_.replay(id);
    }
    compute();
    backend_generation_ = backend_.generation();
    scratch_generation_ = scratch_.generation();
  }

  ReadCost read_cost() const {
    const auto w = static_cast<double>(dtype_size(backend_.weight_dtype()));
    const auto kv = static_cast<double>(dtype_size(backend_.kv_dtype()));
    const auto H = static_cast<double>(spec_.info.hidden_size), V = static_cast<double>(spec_.info.vocab_size);
    ReadCost c;
    c.embedding_row_bytes = H * w;
    c.always_bytes = V * H * w + H * w;  // LM head, final norm
    c.active_params_per_token = V * H;
    for (const DecoderLayer& l : spec_.layers) {
      if (l.mla_config) {
        const MlaCost m = mla_cost(*l.mla_config);
        c.always_bytes += m.weight_elems * w + 2 * H * w;  // projections and their norms, two layer norms
        c.active_params_per_token += m.weight_elems;
        c.kv_bytes_per_token += m.kv_elems_per_token * kv;
        c.attn_heads_x_dims += m.heads_x_dims;
      } else {
        const GqaAttentionConfig& a = l.attn_config;
        const double q = static_cast<double>(a.n_heads * a.head_dim);
        const double kvd = static_cast<double>(a.kv_heads * a.head_dim);
        const double attn_params = H * (q + 2 * kvd) + q * H;
        c.always_bytes += attn_params * w + 2 * H * w;  // projections, two norms
        c.active_params_per_token += attn_params;
        c.kv_bytes_per_token += 2 * kvd * kv;
        c.attn_heads_x_dims += a.n_heads * 2 * a.head_dim;
      }
      if (l.moe_config) {
        const MoeConfig& m = *l.moe_config;
        const double expert = 3.0 * H * static_cast<double>(m.inter);
        const double router = static_cast<double>(m.n_experts) * H;
        const double shared = 3.0 * H * static_cast<double>(m.shared_inter);
        // fp32 router (and its fp32 score bias), shared experts read by every step
        c.always_bytes += router * 4 + (l.moe.score_bias ? static_cast<double>(m.n_experts) * 4 : 0) + shared * w;
        c.moe_layers.push_back({.n_experts = m.n_experts, .top_k = m.top_k, .expert_bytes = expert * w});
        c.active_params_per_token += router + static_cast<double>(m.top_k) * expert + shared;
      } else {
        const double mlp = 3.0 * H * static_cast<double>(l.mlp.inter);
        c.always_bytes += mlp * w;
        c.active_params_per_token += mlp;
      }
    }
    return c;
  }

  TransformerSpec spec_;
  WeightStore weights_;
  Backend& backend_;
  Scratch scratch_;
  std::unique_ptr<DeviceBuffer> inv_freq_;
  std::vector<int32_t> padded_tables_;
  std::vector<int32_t> indices_;  // host staging of a step's index arrays
  std::map<StepShape, int64_t> captured_;
  std::set<StepShape> seen_;
  uint64_t backend_generation_ = 0;
  uint64_t scratch_generation_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_transformer(TransformerSpec spec, WeightStore weights, Backend& backend) {
  SY_CHECK(!spec.layers.empty(), "a model needs at least one layer");
  return std::make_unique<Transformer>(std::move(spec), std::move(weights), backend);
}

}  // namespace sy

namespace sy {

int64_t layers_to_build(int64_t n_layers, int64_t max_layers, WeightLoader& loader) {
  if (max_layers <= 0 || max_layers >= n_layers) return n_layers;
  log_info("building the first {} of {} layers (--layers)", max_layers, n_layers);
  for (int64_t i = max_layers; i < n_layers; ++i) loader.skip_prefix("model.layers." + std::to_string(i) + ".");
  return max_layers;
}

void skip_nextn_layers(WeightLoader& loader, int64_t n_layers, int64_t n_nextn) {
  if (n_nextn <= 0) return;
  log_info("skipping {} multi-token-prediction layer(s) (model.layers.{}.*{}): not used for decoding", n_nextn,
           n_layers, n_nextn > 1 ? " and after" : "");
  for (int64_t i = 0; i < n_nextn; ++i) loader.skip_prefix("model.layers." + std::to_string(n_layers + i) + ".");
}

void bind_embeddings_and_head(WeightLoader& loader, TransformerSpec& spec, bool tie_word_embeddings) {
  const int64_t V = spec.info.vocab_size, H = spec.info.hidden_size;
  spec.embed = loader.bind("model.embed_tokens.weight", {V, H});
  spec.final_norm = loader.bind("model.norm.weight", {H}, WeightInit::ones);
  if (!tie_word_embeddings) {
    spec.lm_head = loader.bind("lm_head.weight", {V, H});
    return;
  }
  spec.lm_head = spec.embed;
  // Some tied checkpoints still carry a copy of the head; it is by definition the embedding.
  if (!loader.random() && loader.has("lm_head.weight")) loader.skip_prefix("lm_head.weight");
}

}  // namespace sy
