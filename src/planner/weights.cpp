// Weight tables from config.json or safetensors headers, and the per-rank share of each part.
#include "planner/weights.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <utility>

#include "arch/tensors.h"
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

// Where a tensor of `role` is counted: a field of its layer's weights or of the table.
Amount& slot(WeightTable& w, LayerWeights* layer, TensorRole role) {
  switch (role) {
    case TensorRole::attn_by_heads:
      return layer->attn_by_heads;
    case TensorRole::attn_by_kv_heads:
      return layer->attn_by_kv_heads;
    case TensorRole::attn_replicated:
      return layer->attn_replicated;
    case TensorRole::norm:
      return layer->norms;
    case TensorRole::router:
      return layer->router;
    case TensorRole::expert:
      return layer->experts;
    case TensorRole::shared_expert:
      return layer->shared_experts;
    case TensorRole::dense_mlp:
      return layer->dense_mlp;
    case TensorRole::embedding:
      return w.embedding;
    case TensorRole::lm_head:
      return w.lm_head;
    case TensorRole::final_norm:
      return w.final_norm;
    case TensorRole::nextn:
      return w.nextn;
  }
  return w.other;
}

// A declared tensor's bytes as config.json implies them: the model dtype (fp32 where declared so), or fp8
// plus one fp32 scale per block for the linear weights of a block-quantised checkpoint.
Amount declared_amount(const ModelDesc& d, const TensorDecl& t) {
  int64_t numel = 1;
  for (int64_t n : t.shape) numel *= n;
  if (t.f32) return {.bytes = numel * 4, .params = numel};
  const auto bytes = static_cast<int64_t>(dtype_size(d.dtype));
  if (t.matrix) {
    const bool quantised = d.quant.quantises(t.name);
    const int64_t whole = d.quant.nvfp4 && quantised ? 8 : 0;  // weight_scale_2, input_scale
    return {.bytes = d.quant.stored_bytes(t.name, t.shape[0], t.shape[1], bytes),
            .params = numel,
            .whole_bytes = whole,
            .quantised_params = quantised ? numel : 0};
  }
  return {.bytes = numel * bytes, .params = numel};
}

// The decoder layer a checkpoint name belongs to ("model.layers.<i>."), or -1. Saturates: any index past
// the model's layers is treated alike (an MTP or cut layer).
int64_t layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return -1;
  size_t pos = prefix.size();
  int64_t layer = 0;
  bool digits = false;
  while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) {
    layer = std::min<int64_t>(layer * 10 + (name[pos++] - '0'), int64_t{1} << 40);
    digits = true;
  }
  return digits && pos < name.size() && name[pos] == '.' ? layer : -1;
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
  SY_CHECK(shape.quant.method.empty() || shape.quant.block_fp8 || shape.quant.int4_group || shape.quant.nvfp4,
           "config.json: quantization_config.quant_method '{}' cannot be sized from the config alone; point --model "
           "at a folder with the safetensors files so their headers give the sizes",
           shape.quant.method);
  WeightTable w;
  w.tied = shape.tie_embeddings;
  w.layers.resize(static_cast<size_t>(shape.n_layers));
  for (const TensorDecl& t : global_tensors(shape)) slot(w, nullptr, t.role) += declared_amount(shape, t);
  for (int64_t i = 0; i < shape.n_layers + shape.nextn_layers; ++i) {
    LayerWeights* layer = i < shape.n_layers ? &w.layers[static_cast<size_t>(i)] : nullptr;
    for (const TensorDecl& t : layer_tensors(shape, i)) slot(w, layer, t.role) += declared_amount(shape, t);
  }
  return w;
}

WeightTable weights_from_checkpoint(const ModelDesc& shape, const Checkpoint& ckpt) {
  WeightTable w;
  w.layers.resize(static_cast<size_t>(shape.n_layers));
  // Every name the description declares for the layers kept, with its layer (-1: global), role and elements.
  struct Declared {
    int64_t layer;
    TensorRole role;
    int64_t numel;
  };
  std::unordered_map<std::string, Declared> declared;
  const auto numel = [](const TensorDecl& t) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return n;
  };
  for (const TensorDecl& t : global_tensors(shape)) declared.emplace(t.name, Declared{-1, t.role, numel(t)});
  for (int64_t i = 0; i < shape.n_layers; ++i) {
    for (TensorDecl& t : layer_tensors(shape, i)) declared.emplace(t.name, Declared{i, t.role, numel(t)});
  }
  for (const TensorInfo* t : ckpt.tensors()) {
    // INT4's X.weight_shape: 16 bytes of metadata per weight, checked by the loader and not kept.
    if (shape.quant.int4_group && t->name.ends_with(".weight_shape")) continue;
    const std::string scaled = scaled_tensor_name(t->name);
    const std::string& name = scaled.empty() ? t->name : scaled;
    const int64_t layer = layer_of(name);
    const auto it = declared.find(name);
    // An INT4 or NVFP4 weight's parameters are its declared shape's elements (its packed words or bytes hold
    // them, padded to whole words); other quantisation siblings hold none.
    const bool packed = t->name.ends_with(".weight_packed");
    const bool nvfp4 = scaled.empty() && t->dtype == DType::u8 && it != declared.end();
    const int64_t params = nvfp4            ? it->second.numel
                           : scaled.empty() ? t->shape.numel()
                           : packed         ? (it != declared.end() ? it->second.numel : t->shape.numel() * 8)
                                            : 0;
    // NVFP4's per-tensor scales: each shard of the weight keeps them whole.
    const bool per_tensor = !scaled.empty() && shape.quant.nvfp4 && t->shape.numel() == 1;
    const bool quantised = (scaled.empty() && t->dtype == DType::f8_e4m3) || packed || nvfp4;
    const Amount a{.bytes = static_cast<int64_t>(t->nbytes),
                   .params = params,
                   .whole_bytes = per_tensor ? static_cast<int64_t>(t->nbytes) : 0,
                   .quantised_params = quantised ? params : 0};
    if (layer >= shape.n_layers) {
      w.nextn += a;  // MTP layers, and layers beyond --layers
      continue;
    }
    if (it != declared.end()) {
      const int64_t l = it->second.layer;
      slot(w, l >= 0 ? &w.layers[static_cast<size_t>(l)] : nullptr, it->second.role) += a;
      continue;
    }
    (layer >= 0 ? w.layers[static_cast<size_t>(layer)].other : w.other) += a;
    w.unrecognised.push_back(t->name);
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
  // One rank's share of a weight split n ways: the split bytes divided, the per-tensor scales whole.
  const auto share = [](const Amount& a, int64_t n) { return ceil_div(a.bytes - a.whole_bytes, n) + a.whole_bytes; };
  for (int64_t i = first_layer; i < first_layer + n_layers; ++i) {
    const LayerWeights& l = table.layers[static_cast<size_t>(i)];
    b[idx(Part::attention)] += share(l.attn_by_heads, sz.tp) + l.attn_replicated.bytes;
    if (kv > 0) {
      const Amount& a = l.attn_by_kv_heads;
      b[idx(Part::attention)] += ceil_div_sat(mul_sat(a.bytes - a.whole_bytes, local_kv), kv) + a.whole_bytes;
    }
    b[idx(Part::norms)] += l.norms.bytes;
    b[idx(Part::router)] += l.router.bytes;
    if (l.experts.bytes > 0 && shape.moe.n_experts > 0) {
      const Amount& e = l.experts;
      const int64_t split =
          ceil_div_sat(mul_sat(e.bytes - e.whole_bytes, local_experts), shape.moe.n_experts * int64_t{sz.etp});
      const int64_t whole = ceil_div_sat(mul_sat(e.whole_bytes, local_experts), shape.moe.n_experts);
      b[idx(Part::experts)] = add_sat(b[idx(Part::experts)], add_sat(split, whole));
    }
    b[idx(Part::shared_experts)] += share(l.shared_experts, sz.dense_tp);
    b[idx(Part::dense_mlp)] += share(l.dense_mlp, sz.dense_tp);
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
