// The tensor declarations of a description: the names every family shares (attention by kind, the FFN by
// the layer's kind) with the description's own names where families differ.
#include "arch/tensors.h"

namespace sy {

namespace {

// Appends the tensors of one decoder layer under `p` ("model.layers.{i}.") with their roles; an MTP
// layer's are all `nextn`.
class LayerDecls {
 public:
  LayerDecls(const ModelDesc& d, std::vector<TensorDecl>& out, bool nextn) : d_(d), out_(out), nextn_(nextn) {}

  void add(std::string name, std::vector<int64_t> shape, TensorRole role, bool matrix = false, bool f32 = false) {
    out_.push_back({.name = std::move(name),
                    .shape = std::move(shape),
                    .role = nextn_ ? TensorRole::nextn : role,
                    .matrix = matrix,
                    .f32 = f32});
  }
  void matrix(std::string name, int64_t rows, int64_t cols, TensorRole role) {
    add(std::move(name), {rows, cols}, role, true);
  }

  void attention(const std::string& p, bool own_indexer) {
    const AttentionDesc& a = d_.attn;
    const int64_t h = d_.hidden;
    const std::string s = p + "self_attn.";
    using R = TensorRole;
    if (a.kind == AttentionKind::gqa) {
      matrix(s + "q_proj.weight", a.n_heads * a.head_dim, h, R::attn_by_heads);
      matrix(s + "k_proj.weight", a.kv_heads * a.head_dim, h, R::attn_by_kv_heads);
      matrix(s + "v_proj.weight", a.kv_heads * a.v_head_dim, h, R::attn_by_kv_heads);
      matrix(s + "o_proj.weight", h, a.n_heads * a.v_head_dim, R::attn_by_heads);
      if (a.qkv_bias) {
        add(s + "q_proj.bias", {a.n_heads * a.head_dim}, R::attn_by_heads);
        add(s + "k_proj.bias", {a.kv_heads * a.head_dim}, R::attn_by_kv_heads);
        add(s + "v_proj.bias", {a.kv_heads * a.v_head_dim}, R::attn_by_kv_heads);
      }
      if (a.o_bias) add(s + "o_proj.bias", {h}, R::attn_replicated);
      if (a.qk_norm) {
        add(s + "q_norm.weight", {a.head_dim}, R::norm);
        add(s + "k_norm.weight", {a.head_dim}, R::norm);
      }
      return;
    }
    // MLA: attention_bias puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj.
    if (a.q_lora_rank > 0) {
      matrix(s + "q_a_proj.weight", a.q_lora_rank, h, R::attn_replicated);
      if (a.qkv_bias) add(s + "q_a_proj.bias", {a.q_lora_rank}, R::attn_replicated);
      add(s + "q_a_layernorm.weight", {a.q_lora_rank}, R::norm);
      matrix(s + "q_b_proj.weight", a.n_heads * a.head_dim, a.q_lora_rank, R::attn_by_heads);
    } else {
      matrix(s + "q_proj.weight", a.n_heads * a.head_dim, h, R::attn_by_heads);
    }
    matrix(s + "kv_a_proj_with_mqa.weight", a.kv_lora_rank + a.qk_rope_head_dim, h, R::attn_replicated);
    if (a.qkv_bias) add(s + "kv_a_proj_with_mqa.bias", {a.kv_lora_rank + a.qk_rope_head_dim}, R::attn_replicated);
    add(s + "kv_a_layernorm.weight", {a.kv_lora_rank}, R::norm);
    matrix(s + "kv_b_proj.weight", a.n_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, R::attn_by_heads);
    matrix(s + "o_proj.weight", h, a.n_heads * a.v_head_dim, R::attn_by_heads);
    if (a.o_bias) add(s + "o_proj.bias", {h}, R::attn_replicated);
    if (d_.has_indexer() && own_indexer) {
      const std::string x = s + "indexer.";
      matrix(x + "wq_b.weight", a.index_n_heads * a.index_head_dim, a.q_lora_rank, R::attn_replicated);
      matrix(x + "wk.weight", a.index_head_dim, h, R::attn_replicated);
      add(x + "k_norm.weight", {a.index_head_dim}, R::norm);
      add(x + "k_norm.bias", {a.index_head_dim}, R::norm);
      // Not quantised in the published FP8 checkpoints: DeepSeek's V3.2 code builds it in the model dtype,
      // and transformers' FP8 model leaves it so (tools/fixtures/published_sizes.py).
      add(x + "weights_proj.weight", {a.index_n_heads, h}, R::attn_replicated);
    }
  }

  void mlp(const std::string& p, int64_t inter, TensorRole role, const std::string& gate, const std::string& up,
           const std::string& down) {
    matrix(p + gate, inter, d_.hidden, role);
    matrix(p + up, inter, d_.hidden, role);
    matrix(p + down, d_.hidden, inter, role);
  }

  void ffn(const std::string& p, FfnKind kind) {
    using R = TensorRole;
    switch (kind) {
      case FfnKind::dense:
        mlp(p + "mlp.", d_.dense_inter, R::dense_mlp, "gate_proj.weight", "up_proj.weight", "down_proj.weight");
        return;
      case FfnKind::moe: {
        const MoeDesc& m = d_.moe;
        const TensorNames& n = d_.names;
        const std::string b = p + n.moe_block;
        add(b + "gate.weight", {m.n_experts, d_.hidden}, R::router);
        if (m.router_bias) add(b + "gate.e_score_correction_bias", {m.n_experts}, R::router, false, true);
        for (int64_t e = 0; e < m.n_experts; ++e) {
          mlp(b + "experts." + std::to_string(e) + ".", m.inter, R::expert, n.expert_gate, n.expert_up, n.expert_down);
        }
        if (m.shared_inter > 0) {
          mlp(b + "shared_experts.", m.shared_inter, R::shared_expert, "gate_proj.weight", "up_proj.weight",
              "down_proj.weight");
        }
        return;
      }
    }
  }

 private:
  const ModelDesc& d_;
  std::vector<TensorDecl>& out_;
  bool nextn_;
};

}  // namespace

std::vector<TensorDecl> layer_tensors(const ModelDesc& d, int64_t layer) {
  std::vector<TensorDecl> out;
  const bool nextn = layer >= d.n_layers;
  LayerDecls l(d, out, nextn);
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  l.add(p + "input_layernorm.weight", {d.hidden}, TensorRole::norm);
  l.add(p + "post_attention_layernorm.weight", {d.hidden}, TensorRole::norm);
  const auto i = static_cast<size_t>(layer);
  l.attention(p, nextn || d.layer_own_indexer.empty() || d.layer_own_indexer[i]);
  l.ffn(p, nextn ? FfnKind::moe : d.layer_ffn[i]);
  if (nextn) {
    // DeepSeek-V3's MTP module: eh_proj over [embedding | hidden], its norms, its own embedding and head.
    l.matrix(p + "eh_proj.weight", d.hidden, 2 * d.hidden, TensorRole::nextn);
    l.add(p + "enorm.weight", {d.hidden}, TensorRole::nextn);
    l.add(p + "hnorm.weight", {d.hidden}, TensorRole::nextn);
    l.add(p + "shared_head.norm.weight", {d.hidden}, TensorRole::nextn);
    l.add(p + "embed_tokens.weight", {d.vocab, d.hidden}, TensorRole::nextn);
    l.add(p + "shared_head.head.weight", {d.vocab, d.hidden}, TensorRole::nextn);
  }
  return out;
}

std::vector<TensorDecl> global_tensors(const ModelDesc& d) {
  std::vector<TensorDecl> out;
  out.push_back({.name = "model.embed_tokens.weight", .shape = {d.vocab, d.hidden}, .role = TensorRole::embedding});
  out.push_back({.name = "model.norm.weight", .shape = {d.hidden}, .role = TensorRole::final_norm});
  if (!d.tie_embeddings) {
    out.push_back({.name = "lm_head.weight", .shape = {d.vocab, d.hidden}, .role = TensorRole::lm_head});
  }
  return out;
}

std::string scaled_tensor_name(const std::string& name) {
  for (const char* suffix :
       {".weight_scale_inv", ".weight_scale_2", ".weight_scale", ".input_scale", ".weight_packed"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.ends_with(s)) return name.substr(0, name.size() - s.size()) + ".weight";
  }
  return "";
}

}  // namespace sy
