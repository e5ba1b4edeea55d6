// Forward pass of the pre-norm decoder stack over one rank's stage.
#include "model/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "base/check.h"
#include "base/log.h"

namespace sy {

namespace {

// This file's buffers in the scratch the model's blocks share.
constexpr std::string_view kArea = "transformer";
enum ScratchId : int {
  kResidual,
  kNormed,
  kBlockOut,
  kLastHidden,
  kLogits,
  kVocabGather,
  kDensePad,
  kDenseAll,
  kDenseOut,
  kDenseIds
};

class Transformer final : public Model {
 public:
  Transformer(TransformerSpec spec, WeightStore weights, Backend& backend, const ShardPlan& plan)
      : spec_(std::move(spec)),
        weights_(std::move(weights)),
        backend_(backend),
        plan_(plan),
        scratch_(backend),
        comm_(backend) {
    // What a step reads of the whole model (not of this rank's share): the basis of the memory floor.
    const ReadCost stage_cost = read_cost();
    // Attention configs to this rank's heads; the KV cache to this rank's layers and KV heads.
    for (DecoderLayer& l : spec_.layers) {
      if (l.mla_config) {
        l.mla_config->n_heads = even_share(l.mla_config->n_heads, plan_.tp_rank, plan_.tp, "attention heads").count;
      } else {
        l.attn_config = shard_gqa(l.attn_config, plan_.tp_rank, plan_.tp).local;
      }
    }
    spec_.info.n_layers = static_cast<int64_t>(spec_.layers.size());
    spec_.info.kv.n_layers = spec_.info.n_layers;
    if (!spec_.layers[0].mla_config) spec_.info.kv.kv_heads = spec_.layers[0].attn_config.kv_heads;
    spec_.info.dp_size = plan_.dp;
    spec_.info.weight_bytes = weights_.bytes;
    spec_.info.cost = plan_.pp > 1 ? sum_over_stages(stage_cost) : stage_cost;
    for (const DecoderLayer& l : spec_.layers) has_indexer_ = has_indexer_ || (l.mla_config && l.mla_config->indexer);
    inv_freq_ = backend_.alloc(spec_.rope.inv_freq.size() * sizeof(float));
    backend_.copy_to_device(inv_freq_->data(), spec_.rope.inv_freq.data(), inv_freq_->size());
  }

  const ModelInfo& info() const override { return spec_.info; }
  const ShardPlan& plan() const override { return plan_; }
  Share vocab_share() const override { return spec_.vocab_share; }
  bool checks_finite() const override { return spec_.check_finite; }
  std::string first_nonfinite() const override { return first_nonfinite_; }
  uint64_t scratch_generation() const override { return scratch_.generation(); }

  // The hidden state, and the indexer's selection of the stage's last layer (which the next stage's first
  // layers reuse on GLM-5's shared-indexer layers).
  std::vector<StageTensor> stage_boundary(int64_t T) override {
    const int64_t H = spec_.info.hidden_size, rows = std::max<int64_t>(T, 1);
    std::vector<StageTensor> b{{scratch_.area(kArea).get<float>(kResidual, rows * H), T * H, DType::f32}};
    if (has_indexer_) {
      const int64_t top_k = first_indexer_top_k();
      b.push_back({indexer_selection(scratch_, T, top_k), T * top_k, DType::i32});
    }
    return b;
  }

  // Embedding on the first stage (the previous stage's hidden state elsewhere, in stage_boundary's buffers),
  // this stage's layers, the final norm and the LM head on the last.
  StepLogits forward(const StepInput& in, const KvCacheView& kv) override {
    const int64_t T = in.step.tokens, H = spec_.info.hidden_size;
    SY_CHECK(static_cast<int64_t>(kv.k.size()) == spec_.info.n_layers, "KV cache has {} layers, model has {}",
             kv.k.size(), spec_.info.n_layers);
    SY_CHECK(static_cast<int64_t>(in.tokens.size()) == T, "step of {} tokens with {} token ids", T, in.tokens.size());
    first_nonfinite_.clear();
    const int64_t rows = std::max<int64_t>(T, 1);
    float* residual = scratch_.area(kArea).get<float>(kResidual, rows * H);
    float* normed = scratch_.area(kArea).get<float>(kNormed, rows * H);
    float* block_out = scratch_.area(kArea).get<float>(kBlockOut, rows * H);
    const DenseRows dense = dense_rows(T);
    if (plan_.first_stage()) {
      embed(dense, in, residual);
      check_finite(residual, T * H, -1, "embedding");
    }
    if (T > 0) {
      backend_.mark(Phase::norms);
      backend_.rms_norm(residual, spec_.layers[0].input_norm, normed, T, H, spec_.norm_eps);
    }
    run_layers(in.step, kv, residual, normed, block_out, dense);
    if (!plan_.last_stage()) return {};
    return head(dense, normed, in.logit_rows, in.n_logit_rows);
  }

  // A step stays on the device unless an MoE layer needs a host round trip at T tokens (or every block's
  // output is being checked on the host).
  bool capturable(int64_t T) const override {
    if (spec_.check_finite) return false;
    for (const DecoderLayer& l : spec_.layers) {
      if (!l.moe_config) continue;
      const MoeConfig& m = *l.moe_config;
      if (!backend_.moe_experts_async(
              {.tokens = T, .hidden = m.hidden, .inter = m.inter, .n_experts = m.n_experts, .top_k = m.top_k})) {
        return false;
      }
    }
    return true;
  }

 private:
  // The rows a dense_tp group computes together (dense MLPs, shared experts, embedding, LM head). Inside a
  // tp group the members hold the same tokens: the rows are this rank's T. A group spanning dp replicas
  // gathers every member's rows, each member's block padded to the longest (n · max_t rows).
  struct DenseRows {
    bool gathered = false;
    int64_t T = 0;
    int64_t max_t = 0;
    int n = 1;
    int me = 0;
    int64_t rows() const { return gathered ? n * max_t : T; }
  };

  DenseRows dense_rows(int64_t T) {
    DenseRows r{.gathered = plan_.dense_spans_dp(), .T = T, .max_t = T};
    if (!r.gathered) return r;
    Communicator& dense = *plan_.groups->dense;
    r.n = dense.size();
    r.me = dense.rank();
    r.max_t = 0;
    for (int64_t t : comm_.gather_counts(dense, T)) r.max_t = std::max(r.max_t, t);
    return r;
  }

  // x [T, H] → every member's rows [n · max_t, H] (zero padding), or x itself inside a tp group.
  const float* dense_gather(const DenseRows& r, const float* x) {
    if (!r.gathered) return x;
    const int64_t H = spec_.info.hidden_size;
    float* pad = scratch_.area(kArea).get<float>(kDensePad, r.max_t * H);
    backend_.zero(pad, static_cast<size_t>(r.max_t * H) * sizeof(float));
    if (r.T > 0) backend_.copy_on_device(pad, x, static_cast<size_t>(r.T * H) * sizeof(float));
    float* all = scratch_.area(kArea).get<float>(kDenseAll, r.rows() * H);
    comm_.all_gather(*plan_.groups->dense, pad, all, r.max_t * H);
    return all;
  }

  // y [rows, H] partial sums over the group → this rank's complete T rows, written to (or added onto) out.
  void dense_reduce(const DenseRows& r, float* y, float* out, bool add) {
    const int64_t H = spec_.info.hidden_size;
    float* mine = y;
    if (r.gathered) {
      mine = scratch_.area(kArea).get<float>(kDensePad, r.max_t * H);
      comm_.reduce_scatter(*plan_.groups->dense, y, mine, r.max_t * H);
    } else {
      comm_.all_reduce(group(&ParallelGroups::dense), y, r.T * H);
    }
    if (r.T == 0) return;
    backend_.mark(Phase::dense);
    if (add) {
      backend_.add(out, mine, r.T * H);
    } else if (mine != out) {
      backend_.copy_on_device(out, mine, static_cast<size_t>(r.T * H) * sizeof(float));
    }
  }

  // A SwiGLU MLP sharded over dense_tp (a dense layer or the shared experts) on this rank's tokens.
  void dense_block(const StepContext& step, const DenseRows& r, const DenseMlpWeights& w, const float* x, float* out,
                   bool add) {
    if (r.rows() == 0) return;
    const float* in = dense_gather(r, x);
    float* y = add || r.gathered ? scratch_.area(kArea).get<float>(kDenseOut, r.rows() * spec_.info.hidden_size) : out;
    StepContext s = step;
    s.tokens = r.rows();
    dense_mlp_forward(s, scratch_, w, in, y);
    dense_reduce(r, y, out, add);
  }

  // Vocabulary-parallel embedding of this rank's tokens into `out` [T, H].
  void embed(const DenseRows& r, const StepInput& in, float* out) {
    const int64_t H = spec_.info.hidden_size;
    if (r.rows() == 0) return;
    backend_.mark(Phase::other);
    if (!r.gathered) {
      backend_.embedding(spec_.embed, in.vocab_rows, out, r.T, H);
      comm_.all_reduce(group(&ParallelGroups::dense), out, r.T * H);  // each row comes from the one rank holding it
      return;
    }
    // Every member's token ids (exact as floats below 2^24), mapped to this rank's rows.
    std::vector<float> mine(static_cast<size_t>(r.max_t), -1.0f), all(static_cast<size_t>(r.rows()));
    for (int64_t i = 0; i < r.T; ++i)
      mine[static_cast<size_t>(i)] = static_cast<float>(in.tokens[static_cast<size_t>(i)]);
    comm_.all_gather_host(*plan_.groups->dense, mine.data(), all.data(), r.max_t);
    const Share& vs = spec_.vocab_share;
    std::vector<int32_t> ids(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const auto t = static_cast<int64_t>(all[i]);
      ids[i] = static_cast<int32_t>(t >= vs.start && t < vs.start + vs.count ? t - vs.start : vs.count);
    }
    auto* dev_ids = scratch_.area(kArea).get<int32_t>(kDenseIds, r.rows());
    backend_.copy_to_device(dev_ids, ids.data(), ids.size() * sizeof(int32_t));
    float* y = scratch_.area(kArea).get<float>(kDenseOut, r.rows() * H);
    backend_.embedding(spec_.embed, dev_ids, y, r.rows(), H);
    dense_reduce(r, y, out, false);
  }

  // Vocabulary-parallel LM head over the rows `rows` of normed: their logits [R, V], on the device when this
  // rank holds the whole vocabulary, else assembled on the host.
  StepLogits head(const DenseRows& dr, const float* normed, const int32_t* rows, int64_t R) {
    const int64_t H = spec_.info.hidden_size, V = spec_.info.vocab_size, n_dense = plan_.dense;
    const int64_t chunk = (V + n_dense - 1) / n_dense;
    // Rows computed together: this rank's R, or every dense member's, padded to the most.
    DenseRows r{.gathered = dr.gathered, .T = R, .max_t = R, .n = dr.n, .me = dr.me};
    if (r.gathered) {
      r.max_t = 0;
      for (int64_t t : comm_.gather_counts(*plan_.groups->dense, R)) r.max_t = std::max(r.max_t, t);
    }
    if (r.rows() == 0) return {};
    backend_.mark(Phase::dense);
    float* last = scratch_.area(kArea).get<float>(kLastHidden, std::max<int64_t>(R, 1) * H);
    if (R > 0) backend_.gather_rows(normed, rows, last, R, H);
    const float* in = dense_gather(r, last);
    backend_.mark(Phase::dense);
    float* part = scratch_.area(kArea).get<float>(kLogits, r.rows() * chunk);
    if (spec_.vocab_share.count > 0)
      backend_.linear(in, spec_.lm_head, nullptr, part, r.rows(), spec_.vocab_share.count, H);
    if (n_dense == 1) return {.device = part};
    const int64_t block = r.rows() * chunk;  // one vocabulary share of every row computed here
    float* all = scratch_.area(kArea).get<float>(kVocabGather, block * n_dense);
    comm_.all_gather(*plan_.groups->dense, part, all, block);
    host_vocab_.resize(static_cast<size_t>(block * n_dense));
    backend_.mark(Phase::other);
    backend_.copy_to_host(host_vocab_.data(), all, host_vocab_.size() * sizeof(float));
    const int64_t first = r.gathered ? r.me * r.max_t : 0;  // this rank's rows among those computed
    host_logits_.resize(static_cast<size_t>(R * V));
    for (int v = 0; v < n_dense; ++v) {
      const Share sh = ceil_share(V, v, static_cast<int>(n_dense));
      for (int64_t i = 0; i < R; ++i) {
        std::copy_n(host_vocab_.data() + static_cast<size_t>(v * block + (first + i) * sh.count), sh.count,
                    host_logits_.data() + static_cast<size_t>(i * V + sh.start));
      }
    }
    return {.host = host_logits_.data()};
  }

  // The decoder layers of this rank's stage over its T tokens (possibly none: the rank still serves its
  // experts and its dense_tp group), from normed = the first layer's input norm to normed = the next
  // stage's input (the final norm on the last stage; the residual alone otherwise). On one rank every
  // collective is over the trivial group and does nothing, so this is also the captured single-rank step.
  void run_layers(const StepContext& step, const KvCacheView& kv, float* residual, float* normed, float* block_out,
                  const DenseRows& dense) {
    const int64_t T = step.tokens, H = spec_.info.hidden_size;
    const RopeView rope{.inv_freq = inv_freq_->as<float>(), .attention_scale = spec_.rope.attention_scale};
    const float eps = spec_.norm_eps;
    Communicator& tp = group(&ParallelGroups::tp);
    // MoE with every expert on every rank of a tp-only stage: each rank's experts give partial sums over
    // their intermediate share, reduced with the attention output's all-reduce pattern (no dispatch).
    const bool tp_only_moe = plan_.ep == 1 && plan_.edp == 1 && plan_.dp == 1 && plan_.dense == plan_.tp;
    for (size_t l = 0; l < spec_.layers.size(); ++l) {
      const DecoderLayer& layer = spec_.layers[l];
      if (T > 0) {
        if (layer.mla_config) {
          mla_attention_forward(step, scratch_, *layer.mla_config, layer.mla, rope, normed, block_out, kv.k[l],
                                kv.index_k.empty() ? nullptr : kv.index_k[l]);
        } else {
          gqa_attention_forward(step, scratch_, layer.attn_config, layer.attn, rope, normed, block_out, kv.k[l],
                                kv.v[l]);
        }
        comm_.all_reduce(tp, block_out, T * H);
        check_finite(block_out, T * H, static_cast<int64_t>(l), "attention");
        backend_.mark(Phase::norms);
        backend_.add_rms_norm(residual, block_out, layer.post_attn_norm, normed, T, H, eps);
      }
      if (!layer.moe_config) {
        dense_block(step, dense, layer.mlp, normed, block_out, false);
      } else if (!tp_only_moe) {
        moe_forward_parallel(step, scratch_, *layer.moe_config, layer.moe, normed, block_out, plan_, comm_);
        if (layer.moe_config->shared_inter > 0) dense_block(step, dense, layer.moe.shared, normed, block_out, true);
      } else if (T > 0) {
        moe_forward(step, scratch_, *layer.moe_config, layer.moe, normed, block_out);
        comm_.all_reduce(tp, block_out, T * H);
      }
      if (T == 0) continue;
      check_finite(block_out, T * H, static_cast<int64_t>(l), "FFN");
      backend_.mark(Phase::norms);
      if (l + 1 < spec_.layers.size()) {
        backend_.add_rms_norm(residual, block_out, spec_.layers[l + 1].input_norm, normed, T, H, eps);
      } else if (plan_.last_stage()) {
        backend_.add_rms_norm(residual, block_out, spec_.final_norm, normed, T, H, eps);
      } else {
        backend_.add(residual, block_out, T * H);
      }
    }
  }

  // One of this rank's groups; on one rank without groups, the trivial group of one.
  Communicator& group(std::unique_ptr<Communicator> ParallelGroups::*g) {
    return plan_.groups != nullptr ? *(plan_.groups->*g) : *single_;
  }

  int64_t first_indexer_top_k() const {
    for (const DecoderLayer& l : spec_.layers) {
      if (l.mla_config && l.mla_config->indexer) return l.mla_config->indexer->top_k;
    }
    return 0;
  }

  // check_finite: records the block as the first non-finite output of this forward when x [n] holds a NaN
  // or an infinity. A host copy per block: the debug mode only.
  // local_layer: the block's layer in this stage; -1 for the embedding.
  void check_finite(const float* x, int64_t n, int64_t local_layer, const char* block) {
    if (!spec_.check_finite || !first_nonfinite_.empty() || n <= 0) return;
    check_host_.resize(static_cast<size_t>(n));
    backend_.copy_to_host(check_host_.data(), x, check_host_.size() * sizeof(float));
    const auto bad = std::find_if(check_host_.begin(), check_host_.end(), [](float v) { return !std::isfinite(v); });
    if (bad == check_host_.end()) return;
    const auto at = static_cast<int64_t>(bad - check_host_.begin());
    const std::string where =
        local_layer < 0 ? std::string(block) : fmt::format("layer {} {}", plan_.first_layer + local_layer, block);
    first_nonfinite_ = fmt::format("the {} output (first at token {} of the step, value {})", where,
                                   at / spec_.info.hidden_size, *bad);
  }

  // The read cost of the whole model from every stage's share: sums, and the MoE layers in stage order.
  // Collective over the pp group.
  ReadCost sum_over_stages(const ReadCost& mine) {
    const auto& moe = mine.moe_layers;
    const ReadCost::MoeLayer first = moe.empty() ? ReadCost::MoeLayer{} : moe.front();
    for (const auto& m : moe) {
      SY_CHECK(m.n_experts == first.n_experts && m.top_k == first.top_k && m.expert_bytes == first.expert_bytes,
               "the MoE layers of one stage differ in shape; the read cost assumes they do not");
    }
    constexpr int kFields = 9;
    const std::array<float, kFields> send = {
        static_cast<float>(mine.always_bytes),       static_cast<float>(mine.embedding_row_bytes),
        static_cast<float>(mine.kv_bytes_per_token), static_cast<float>(mine.active_params_per_token),
        static_cast<float>(mine.attn_heads_x_dims),  static_cast<float>(moe.size()),
        static_cast<float>(first.n_experts),         static_cast<float>(first.top_k),
        static_cast<float>(first.expert_bytes)};
    std::vector<float> all(static_cast<size_t>(kFields * plan_.pp));
    comm_.all_gather_host(*plan_.groups->pp, send.data(), all.data(), kFields);
    ReadCost c;
    for (int p = 0; p < plan_.pp; ++p) {
      const float* f = all.data() + static_cast<size_t>(p * kFields);
      c.always_bytes += f[0];
      c.embedding_row_bytes += f[1];
      c.kv_bytes_per_token += f[2];
      c.active_params_per_token += f[3];
      c.attn_heads_x_dims += static_cast<int64_t>(f[4]);
      for (int64_t i = 0; i < static_cast<int64_t>(f[5]); ++i) {
        c.moe_layers.push_back(
            {.n_experts = static_cast<int64_t>(f[6]), .top_k = static_cast<int64_t>(f[7]), .expert_bytes = f[8]});
      }
    }
    return c;
  }

  // What one step reads of this stage's layers in the model's own (unsharded) shapes: the configs before
  // they are cut to this rank's heads, dense MLPs at their whole intermediate size; the embedding row on
  // the first stage, the LM head and final norm on the last.
  ReadCost read_cost() const {
    const auto w = static_cast<double>(dtype_size(backend_.weight_dtype()));
    // Bytes per element of a matrix as held: the weight dtype, or the quantised value and its share of a scale.
    const auto held = [w](const Matrix& m) { return held_bytes_per_weight(m.q, w); };
    // The KV bytes as the cache stores them (what a step reads): 1 per value for FP8 E4M3 on the GPU, 4 on the CPU,
    // which keeps E4M3-rounded values in fp32.
    const auto kv = static_cast<double>(dtype_size(backend_.kv_storage_dtype()));
    const auto H = static_cast<double>(spec_.info.hidden_size), V = static_cast<double>(spec_.info.vocab_size);
    ReadCost c;
    if (plan_.first_stage()) c.embedding_row_bytes = H * w;
    if (plan_.last_stage()) {
      c.always_bytes = V * H * w + H * w;  // LM head, final norm
      c.active_params_per_token = V * H;
    }
    for (const DecoderLayer& l : spec_.layers) {
      if (l.mla_config) {
        const MlaConfig& mc = *l.mla_config;
        const MlaCost m = mla_cost(mc);
        // Each projection as it is held; kv_b_proj (per-head products), the indexer, biases and norms in the
        // weight dtype.
        const auto d = [](int64_t v) { return static_cast<double>(v); };
        const double qk = d(mc.qk_nope_head_dim + mc.qk_rope_head_dim), nh = d(mc.n_heads);
        const double q_a = mc.q_lora_rank > 0 ? H * d(mc.q_lora_rank) : 0.0;
        const double q_b = mc.q_lora_rank > 0 ? d(mc.q_lora_rank) * nh * qk : H * nh * qk;
        const double kv_a = H * d(mc.kv_lora_rank + mc.qk_rope_head_dim), o = nh * d(mc.v_head_dim) * H;
        const double quantisable = (q_a > 0 ? q_a * held(l.mla.q_a_proj) : 0.0) +
                                   q_b * held(mc.q_lora_rank > 0 ? l.mla.q_b_proj : l.mla.q_proj) +
                                   kv_a * held(l.mla.kv_a_proj) + o * held(l.mla.o_proj);
        c.always_bytes += quantisable + (m.weight_elems - q_a - q_b - kv_a - o) * w + 2 * H * w;  // and two norms
        c.active_params_per_token += m.weight_elems;
        c.kv_bytes_per_token += m.kv_elems_per_token * kv + m.index_elems_per_token * w;
        c.attn_heads_x_dims += m.heads_x_dims;
      } else {
        const GqaAttentionConfig& a = l.attn_config;
        const double q = static_cast<double>(a.n_heads * a.head_dim);
        const double kvd = static_cast<double>(a.kv_heads * a.head_dim);
        const double attn_params = H * (q + 2 * kvd) + q * H;
        c.always_bytes += H * (q + 2 * kvd) * held(l.attn.q_proj) + q * H * held(l.attn.o_proj) +
                          2 * H * w;  // projections, two norms
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
        c.always_bytes +=
            router * 4 + (l.moe.score_bias ? static_cast<double>(m.n_experts) * 4 : 0) +
            (m.shared_inter > 0 ? shared / 3 * (2 * held(l.moe.shared.gate_up) + held(l.moe.shared.down)) : 0.0);
        c.moe_layers.push_back({.n_experts = m.n_experts,
                                .top_k = m.top_k,
                                .expert_bytes = expert / 3 * (2 * held(l.moe.gate_up) + held(l.moe.down))});
        c.active_params_per_token += router + static_cast<double>(m.top_k) * expert + shared;
      } else {
        const double mlp = 3.0 * H * static_cast<double>(l.mlp.inter * plan_.dense);
        c.always_bytes += mlp / 3 * (2 * held(l.mlp.gate_up) + held(l.mlp.down));
        c.active_params_per_token += mlp;
      }
    }
    return c;
  }

  TransformerSpec spec_;
  WeightStore weights_;
  Backend& backend_;
  ShardPlan plan_;
  Scratch scratch_;
  ModelComm comm_;
  std::unique_ptr<Communicator> single_ = make_single_rank_communicator();
  bool has_indexer_ = false;
  std::vector<float> host_vocab_;   // the dense_tp group's vocabulary shares of the logits
  std::vector<float> host_logits_;  // and the logits [R, V] assembled from them
  std::unique_ptr<DeviceBuffer> inv_freq_;
  std::string first_nonfinite_;  // check_finite: the first block of the last forward whose output was not finite
  std::vector<float> check_host_;
};

}  // namespace

std::unique_ptr<Model> make_transformer(TransformerSpec spec, WeightStore weights, Backend& backend,
                                        const ShardPlan& plan) {
  SY_CHECK(!spec.layers.empty(), "a model needs at least one layer");
  if (weights.checks_only) return nullptr;  // check_model: everything is checked, nothing is built
  return std::make_unique<Transformer>(std::move(spec), std::move(weights), backend, plan);
}

}  // namespace sy
