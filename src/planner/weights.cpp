// Weight tables from config.json or safetensors headers, and the per-rank share of each part.
#include "planner/weights.h"

#include <algorithm>
#include <cctype>

#include "base/check.h"
#include "base/int_math.h"

namespace sy {

std::string_view part_name(Part p) {
  switch (p) {
    case Part::attention:
      return "attention";
    case Part::norms:
      return "norms";
    case Part::router:
      return "router";
    case Part::experts:
      return "experts";
    case Part::shared_experts:
      return "shared experts";
    case Part::dense_mlp:
      return "dense MLP";
    case Part::embedding:
      return "embedding";
    case Part::lm_head:
      return "LM head";
    case Part::nextn:
      return "MTP layers (not loaded)";
    case Part::other:
      return "other";
  }
  return "?";
}

namespace {

size_t idx(Part p) { return static_cast<size_t>(p); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Adds one layer's amounts into the part totals.
void add_layer(std::array<Amount, kPartCount>& parts, const LayerWeights& l) {
  parts[idx(Part::attention)] += l.attn_by_heads;
  parts[idx(Part::attention)] += l.attn_by_kv_heads;
  parts[idx(Part::attention)] += l.attn_replicated;
  parts[idx(Part::norms)] += l.norms;
  parts[idx(Part::router)] += l.router;
  parts[idx(Part::experts)] += l.experts;
  parts[idx(Part::shared_experts)] += l.shared_experts;
  parts[idx(Part::dense_mlp)] += l.dense_mlp;
  parts[idx(Part::other)] += l.other;
}

// Tensors of one architecture family as the config describes them.
class ConfigTensors {
 public:
  explicit ConfigTensors(const ModelDesc& s) : s_(s), elem_(static_cast<int64_t>(dtype_size(s.dtype))) {}

  // A plain tensor in the model dtype (norms, embeddings, biases, routers).
  Amount plain(int64_t numel) const { return {.bytes = numel * elem_, .params = numel}; }
  Amount f32(int64_t numel) const { return {.bytes = numel * 4, .params = numel}; }
  // A linear weight [out, in]: fp8 plus one fp32 scale per block when the checkpoint is block-quantised.
  Amount linear(int64_t out, int64_t in) const {
    if (!s_.quant.block_fp8) return plain(out * in);
    const int64_t scales = ceil_div(out, s_.quant.block_rows) * ceil_div(in, s_.quant.block_cols);
    return {.bytes = out * in + scales * 4, .params = out * in};
  }

  // own_indexer: the layer holds its sparse-attention indexer (GLM-5's "shared" layers reuse another's).
  void attention(LayerWeights& l, bool own_indexer) const {
    const AttentionDesc& a = s_.attn;
    const int64_t h = s_.hidden;
    l.norms += plain(2 * h);  // input_layernorm, post_attention_layernorm
    if (a.kind == AttentionKind::gqa) {
      l.attn_by_heads += linear(a.n_heads * a.head_dim, h);
      l.attn_by_heads += linear(h, a.n_heads * a.v_head_dim);
      l.attn_by_kv_heads += linear(a.kv_heads * a.head_dim, h);
      l.attn_by_kv_heads += linear(a.kv_heads * a.v_head_dim, h);
      if (a.qkv_bias) {
        l.attn_by_heads += plain(a.n_heads * a.head_dim);
        l.attn_by_kv_heads += plain(a.kv_heads * (a.head_dim + a.v_head_dim));
      }
      if (a.o_bias) l.attn_replicated += plain(h);
      if (a.qk_norm) l.norms += plain(2 * a.head_dim);
      return;
    }
    // MLA's attention_bias: q_a_proj and kv_a_proj_with_mqa biases; o_proj's is o_bias.
    if (a.q_lora_rank > 0) {
      l.attn_replicated += linear(a.q_lora_rank, h);
      if (a.qkv_bias) l.attn_replicated += plain(a.q_lora_rank);
      l.norms += plain(a.q_lora_rank);
      l.attn_by_heads += linear(a.n_heads * a.head_dim, a.q_lora_rank);
    } else {
      l.attn_by_heads += linear(a.n_heads * a.head_dim, h);
    }
    l.attn_replicated += linear(a.kv_lora_rank + a.qk_rope_head_dim, h);
    if (a.qkv_bias) l.attn_replicated += plain(a.kv_lora_rank + a.qk_rope_head_dim);
    if (a.o_bias) l.attn_replicated += plain(h);
    l.norms += plain(a.kv_lora_rank);
    l.attn_by_heads += linear(a.n_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank);
    l.attn_by_heads += linear(h, a.n_heads * a.v_head_dim);
    if (a.index_n_heads > 0 && own_indexer) {
      l.attn_replicated += linear(a.index_n_heads * a.index_head_dim, a.q_lora_rank > 0 ? a.q_lora_rank : h);
      l.attn_replicated += linear(a.index_head_dim, h);
      l.norms += plain(2 * a.index_head_dim);  // LayerNorm weight and bias
      l.attn_replicated += plain(a.index_n_heads * h);
    }
  }

  Amount mlp(int64_t inter) const {
    Amount a = linear(inter, s_.hidden);
    a += linear(inter, s_.hidden);
    a += linear(s_.hidden, inter);
    return a;
  }

  void ffn(LayerWeights& l, FfnKind kind) const {
    if (kind == FfnKind::dense) {
      l.dense_mlp += mlp(s_.dense_inter);
      return;
    }
    const MoeDesc& m = s_.moe;
    l.router += plain(m.n_experts * s_.hidden);
    if (m.router_bias) l.router += f32(m.n_experts);
    for (int64_t e = 0; e < m.n_experts; ++e) l.experts += mlp(m.inter);
    if (m.shared_inter > 0) l.shared_experts += mlp(m.shared_inter);
  }

 private:
  const ModelDesc& s_;
  int64_t elem_;
};

bool is_scale_tensor(const std::string& name) {
  return name.ends_with("_scale_inv") || name.ends_with("weight_scale") || name.ends_with("input_scale");
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// Where one tensor of a decoder layer goes; `rest` is the name after "model.layers.<i>.".
Amount* classify_layer_tensor(LayerWeights& l, const std::string& rest) {
  const bool attn = rest.starts_with("self_attn.");
  if (contains(rest, "norm.") && !contains(rest, "_proj")) return &l.norms;
  if (attn) {
    if (contains(rest, ".indexer.")) return &l.attn_replicated;
    if (contains(rest, "q_a_proj") || contains(rest, "kv_a_proj")) return &l.attn_replicated;
    if (contains(rest, "k_proj.") || contains(rest, "v_proj.")) return &l.attn_by_kv_heads;
    if (contains(rest, "o_proj.")) return rest.ends_with(".bias") ? &l.attn_replicated : &l.attn_by_heads;
    if (contains(rest, "q_proj.") || contains(rest, "q_b_proj.") || contains(rest, "kv_b_proj.")) {
      return &l.attn_by_heads;
    }
    return &l.other;
  }
  if (contains(rest, "shared_expert_gate")) return &l.router;
  if (contains(rest, "shared_expert")) return &l.shared_experts;
  if (contains(rest, "experts.")) return &l.experts;
  if (rest.starts_with("mlp.gate.") || rest.starts_with("block_sparse_moe.gate.")) return &l.router;
  if (rest.starts_with("mlp.")) return &l.dense_mlp;
  return &l.other;
}

}  // namespace

std::array<Amount, kPartCount> WeightTable::by_part() const {
  std::array<Amount, kPartCount> parts{};
  for (const auto& l : layers) add_layer(parts, l);
  parts[idx(Part::embedding)] += embedding;
  parts[idx(Part::lm_head)] += lm_head;
  parts[idx(Part::norms)] += final_norm;
  parts[idx(Part::nextn)] += nextn;
  parts[idx(Part::other)] += other;
  return parts;
}

Amount WeightTable::total() const {
  Amount t;
  for (const auto& a : by_part()) t += a;
  return t;
}

Amount WeightTable::active_per_token(const ModelDesc& shape) const {
  Amount t;
  const auto parts = by_part();
  for (int i = 0; i < kPartCount; ++i) {
    const Part p = static_cast<Part>(i);
    if (p == Part::nextn) continue;
    if (p == Part::experts && shape.moe.n_experts > 0) {
      t.bytes += parts[idx(p)].bytes * shape.moe.top_k / shape.moe.n_experts;
      t.params += parts[idx(p)].params * shape.moe.top_k / shape.moe.n_experts;
      continue;
    }
    t += parts[idx(p)];
  }
  return t;
}

WeightTable weights_from_config(const ModelDesc& shape) {
  SY_CHECK(shape.quant.method.empty() || shape.quant.block_fp8,
           "config.json: quantization_config.quant_method '{}' cannot be sized from the config alone; point --model "
           "at a folder with the safetensors files so their headers give the sizes",
           shape.quant.method);
  const ConfigTensors t(shape);
  WeightTable w;
  w.tied = shape.tie_embeddings;
  for (int64_t i = 0; i < shape.n_layers; ++i) {
    LayerWeights l;
    t.attention(l, shape.layer_own_indexer.empty() || shape.layer_own_indexer[static_cast<size_t>(i)]);
    t.ffn(l, shape.layer_ffn[static_cast<size_t>(i)]);
    w.layers.push_back(l);
  }
  w.embedding = t.plain(shape.vocab * shape.hidden);
  if (!shape.tie_embeddings) w.lm_head = t.plain(shape.vocab * shape.hidden);
  w.final_norm = t.plain(shape.hidden);
  // An MTP layer is a MoE decoder layer plus eh_proj [hidden, 2·hidden], enorm, hnorm, its head's norm
  // and (DeepSeek-V3 checkpoints) its own copies of the embedding and the LM head.
  for (int64_t i = 0; i < shape.nextn_layers; ++i) {
    LayerWeights l;
    t.attention(l, true);
    t.ffn(l, FfnKind::moe);
    std::array<Amount, kPartCount> parts{};
    add_layer(parts, l);
    for (const auto& a : parts) w.nextn += a;
    w.nextn += t.linear(shape.hidden, 2 * shape.hidden);
    w.nextn += t.plain(3 * shape.hidden + 2 * shape.vocab * shape.hidden);
  }
  return w;
}

WeightTable weights_from_checkpoint(const ModelDesc& shape, const Checkpoint& ckpt) {
  WeightTable w;
  w.layers.resize(static_cast<size_t>(shape.n_layers));
  const std::string layer_prefix = "model.layers.";
  for (const TensorInfo* t : ckpt.tensors()) {
    const Amount a{.bytes = static_cast<int64_t>(t->nbytes), .params = is_scale_tensor(t->name) ? 0 : t->shape.numel()};
    const std::string& name = t->name;
    if (name.starts_with(layer_prefix)) {
      size_t pos = layer_prefix.size();
      int64_t layer = 0;
      bool digits = false;
      while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) {
        // Saturates: any index past the model's layers is treated alike (an MTP or cut layer).
        layer = std::min<int64_t>(layer * 10 + (name[pos++] - '0'), int64_t{1} << 40);
        digits = true;
      }
      if (digits && pos < name.size() && name[pos] == '.') {
        if (layer >= shape.n_layers) {
          w.nextn += a;  // MTP layers, and layers beyond --layers
          continue;
        }
        Amount* slot = classify_layer_tensor(w.layers[static_cast<size_t>(layer)], name.substr(pos + 1));
        *slot += a;
        if (slot == &w.layers[static_cast<size_t>(layer)].other) w.unrecognised.push_back(name);
        continue;
      }
    }
    if (name.starts_with("model.embed_tokens.")) {
      w.embedding += a;
    } else if (name.starts_with("lm_head.")) {
      w.lm_head += a;
    } else if (name.starts_with("model.norm.")) {
      w.final_norm += a;
    } else {
      w.other += a;
      w.unrecognised.push_back(name);
    }
  }
  w.tied = w.lm_head.bytes == 0 && shape.tie_embeddings;
  return w;
}

std::array<int64_t, kPartCount> rank_weight_bytes(const WeightTable& table, const ModelDesc& shape,
                                                  const ParallelSizes& sz, int64_t first_layer, int64_t n_layers,
                                                  bool first_stage, bool last_stage, const ShardOptions& opt) {
  SY_CHECK(sz.tp >= 1 && sz.ep >= 1 && sz.etp >= 1 && sz.dense_tp >= 1, "rank_weight_bytes needs resolved sizes");
  SY_CHECK(first_layer >= 0 && first_layer + n_layers <= static_cast<int64_t>(table.layers.size()),
           "layers {}..{} are outside the model's {} layers", first_layer, first_layer + n_layers - 1,
           table.layers.size());
  std::array<int64_t, kPartCount> b{};
  const int64_t kv = shape.attn.kv_heads;
  const int64_t local_kv = ceil_div(kv, sz.tp);
  const int64_t slots = add_sat(shape.moe.n_experts, opt.redundant_experts);
  const int64_t local_experts = ceil_div_sat(slots, sz.ep);
  for (int64_t i = first_layer; i < first_layer + n_layers; ++i) {
    const LayerWeights& l = table.layers[static_cast<size_t>(i)];
    b[idx(Part::attention)] += ceil_div(l.attn_by_heads.bytes, sz.tp) + l.attn_replicated.bytes;
    if (kv > 0) b[idx(Part::attention)] += ceil_div_sat(mul_sat(l.attn_by_kv_heads.bytes, local_kv), kv);
    b[idx(Part::norms)] += l.norms.bytes;
    b[idx(Part::router)] += l.router.bytes;
    if (l.experts.bytes > 0 && shape.moe.n_experts > 0) {
      b[idx(Part::experts)] =
          add_sat(b[idx(Part::experts)],
                  ceil_div_sat(mul_sat(l.experts.bytes, local_experts), shape.moe.n_experts * int64_t{sz.etp}));
    }
    b[idx(Part::shared_experts)] += ceil_div(l.shared_experts.bytes, sz.dense_tp);
    b[idx(Part::dense_mlp)] += ceil_div(l.dense_mlp.bytes, sz.dense_tp);
    b[idx(Part::other)] += l.other.bytes;
  }
  if (first_stage) {
    b[idx(Part::embedding)] +=
        opt.vocab_parallel ? ceil_div(table.embedding.bytes, sz.dense_tp) : table.embedding.bytes;
    b[idx(Part::other)] += table.other.bytes;
  }
  if (last_stage) {
    b[idx(Part::norms)] += table.final_norm.bytes;
    // A tied head reuses the embedding rows the same rank already holds when the stage holds both.
    const bool shares_embedding = table.tied && first_stage;
    if (!shares_embedding) {
      const int64_t head = table.tied ? table.embedding.bytes : table.lm_head.bytes;
      b[idx(Part::lm_head)] += ceil_div(head, sz.dense_tp);
    }
  }
  return b;
}

}  // namespace sy
