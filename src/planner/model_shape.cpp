// One reader per architecture turns config.json into a ModelShape; defaults are those of the
// transformers config classes, as in model/archs/.
#include "planner/model_shape.h"

#include <algorithm>
#include <optional>

#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

DType read_dtype(const ConfigJson& cfg) {
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  const std::string name = cfg.get_string("dtype", cfg.get_string("torch_dtype", "bfloat16"));
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  if (name == "float32") return DType::f32;
  SY_FAIL("{}: dtype '{}' is not one of bfloat16, float16, float32", cfg.source(), cut_for_message(name));
}

void read_common(const ConfigJson& cfg, ModelShape& s) {
  s.model_type = cfg.get_string("model_type", "");
  s.hidden = cfg.get_int("hidden_size", 1);
  s.n_layers = cfg.get_int("num_hidden_layers", 1);
  s.vocab = cfg.get_int("vocab_size", 1);
  s.tie_embeddings = cfg.get_bool("tie_word_embeddings", false);
  s.dtype = read_dtype(cfg);
}

void read_gqa(const ConfigJson& cfg, ModelShape& s, int64_t default_kv_heads, int64_t default_head_dim) {
  AttentionShape& a = s.attn;
  a.kind = AttentionKind::gqa;
  a.n_heads = cfg.get_int("num_attention_heads", 1);
  a.kv_heads = cfg.get_int("num_key_value_heads", default_kv_heads > 0 ? default_kv_heads : a.n_heads, 1);
  a.head_dim = cfg.get_int("head_dim", default_head_dim > 0 ? default_head_dim : s.hidden / a.n_heads, 1);
  a.v_head_dim = a.head_dim;
  SY_CHECK(a.n_heads % a.kv_heads == 0, "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}",
           cfg.source(), a.n_heads, a.kv_heads);
}

// DeepSeek-V3-style MoE block: routed experts, shared experts, first_k_dense_replace dense layers.
void read_deepseek_moe(const ConfigJson& cfg, ModelShape& s, int64_t default_experts, int64_t default_inter,
                       int64_t default_dense_inter, int64_t default_first_dense) {
  MoeShape& m = s.moe;
  m.n_experts = cfg.get_int("n_routed_experts", default_experts, 0);
  m.top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  m.inter = cfg.get_int("moe_intermediate_size", default_inter, 1);
  m.n_shared = cfg.get_int("n_shared_experts", 1, 0);
  m.shared_inter = m.n_shared * m.inter;
  m.router_bias = true;  // e_score_correction_bias is part of the router in every checkpoint of the family
  s.dense_inter = cfg.get_int("intermediate_size", default_dense_inter, 1);
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", default_first_dense, 0);
  const int64_t freq = cfg.get_int("moe_layer_freq", 1, 1);
  s.layer_ffn.clear();
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const bool moe = m.n_experts > 0 && i >= first_dense && i % freq == 0;
    s.layer_ffn.push_back(moe ? FfnKind::moe : FfnKind::dense);
  }
  s.nextn_layers = cfg.get_int("num_nextn_predict_layers", 0, 0);
  SY_CHECK(m.n_experts == 0 || m.top_k <= m.n_experts, "{}: num_experts_per_tok {} exceeds n_routed_experts {}",
           cfg.source(), m.top_k, m.n_experts);
}

void read_mla(const ConfigJson& cfg, ModelShape& s, bool indexer) {
  AttentionShape& a = s.attn;
  a.kind = AttentionKind::mla;
  a.n_heads = cfg.get_int("num_attention_heads", 1);
  a.kv_heads = a.n_heads;
  a.q_lora_rank = cfg.get_int("q_lora_rank", 0, 0);  // null (DeepSeek-V2-Lite form): plain q_proj
  a.kv_lora_rank = cfg.get_int("kv_lora_rank", 512, 1);
  a.qk_rope_head_dim = cfg.get_int("qk_rope_head_dim", 64, 1);
  a.qk_nope_head_dim = cfg.get_int("qk_nope_head_dim", 128, 0);
  a.v_head_dim = cfg.get_int("v_head_dim", 128, 1);
  a.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  a.qkv_bias = false;
  a.o_bias = false;
  if (indexer) {
    a.index_n_heads = cfg.get_int("index_n_heads", 64, 1);
    a.index_head_dim = cfg.get_int("index_head_dim", 128, 1);
    a.index_topk = cfg.get_int("index_topk", 2048, 1);
  }
}

ModelShape read_qwen3_moe(const ConfigJson& cfg) {
  ModelShape s;
  s.family = "Qwen3-MoE";
  read_common(cfg, s);
  read_gqa(cfg, s, 0, 0);
  s.attn.qkv_bias = s.attn.o_bias = cfg.get_bool("attention_bias", false);
  s.attn.qk_norm = true;
  // transformers 5 may spell the expert count num_local_experts.
  s.moe.n_experts =
      cfg.has("num_experts") ? cfg.get_int("num_experts", 128, 0) : cfg.get_int("num_local_experts", 128, 0);
  s.moe.top_k = cfg.get_int("num_experts_per_tok", 8, 1);
  s.moe.inter = cfg.get_int("moe_intermediate_size", 768, 1);
  s.dense_inter = cfg.get_int("intermediate_size", 6144, 1);
  const int64_t step = cfg.get_int("decoder_sparse_step", 1, 1);
  const auto mlp_only = cfg.get_int_list("mlp_only_layers");
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const bool sparse =
        std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && s.moe.n_experts > 0 && (i + 1) % step == 0;
    s.layer_ffn.push_back(sparse ? FfnKind::moe : FfnKind::dense);
  }
  return s;
}

ModelShape read_mixtral(const ConfigJson& cfg) {
  ModelShape s;
  s.family = "Mixtral";
  read_common(cfg, s);
  read_gqa(cfg, s, 8, 0);
  s.moe.n_experts = cfg.get_int("num_local_experts", 8, 1);
  s.moe.top_k = cfg.get_int("num_experts_per_tok", 2, 1);
  s.moe.inter = cfg.get_int("intermediate_size", 14336, 1);
  s.layer_ffn.assign(static_cast<size_t>(s.n_layers), FfnKind::moe);
  return s;
}

ModelShape read_deepseek_v3(const ConfigJson& cfg) {
  ModelShape s;
  read_common(cfg, s);
  s.family = s.model_type == "kimi_k2" ? "Kimi K2 (DeepSeek-V3)" : "DeepSeek-V3";
  read_mla(cfg, s, false);
  read_deepseek_moe(cfg, s, 256, 2048, 18432, 3);
  return s;
}

ModelShape read_deepseek_v32(const ConfigJson& cfg) {
  ModelShape s;
  read_common(cfg, s);
  s.family = "DeepSeek-V3.2";
  read_mla(cfg, s, true);
  read_deepseek_moe(cfg, s, 256, 2048, 18432, 3);
  return s;
}

ModelShape read_glm_moe_dsa(const ConfigJson& cfg) {
  ModelShape s;
  read_common(cfg, s);
  s.family = "GLM-5";
  read_mla(cfg, s, true);
  read_deepseek_moe(cfg, s, 256, 2048, 12288, 3);
  return s;
}

ModelShape read_glm4_moe(const ConfigJson& cfg) {
  ModelShape s;
  read_common(cfg, s);
  s.family = "GLM-4.5";
  read_gqa(cfg, s, 8, 128);
  s.attn.qkv_bias = cfg.get_bool("attention_bias", false);
  s.attn.o_bias = false;
  s.attn.qk_norm = cfg.get_bool("use_qk_norm", false);
  read_deepseek_moe(cfg, s, 128, 1408, 10944, 1);
  return s;
}

// Each size is bounded by ConfigJson; their products are bounded here, before anything is sized from them,
// so that every byte count of the planner fits in 64 bits and a dry run binds a bounded number of tensors.
// The bounds are about a thousand times the largest published models (1T parameters, 61 layers x 384
// experts).
constexpr double kMaxParams = 1e15;
constexpr int64_t kMaxExpertLayers = 1 << 20;

void check_model_size(const ModelShape& s, const std::string& source) {
  SY_CHECK(s.moe.n_experts == 0 || s.moe.top_k <= s.moe.n_experts,
           "{}: num_experts_per_tok {} exceeds the {} experts; it must be in [1, {}]", source, s.moe.top_k,
           s.moe.n_experts, s.moe.n_experts);
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const AttentionShape& a = s.attn;
  const double h = d(s.hidden);
  const double attention = h * d(a.n_heads) * d(a.head_dim + a.v_head_dim) + 2 * h * d(a.kv_heads) * d(a.head_dim) +
                           d(a.q_lora_rank) * (h + d(a.n_heads) * d(a.head_dim)) +
                           d(a.kv_lora_rank) * (h + d(a.n_heads) * d(a.qk_nope_head_dim + a.v_head_dim)) +
                           d(a.index_n_heads) * d(a.index_head_dim) * (h + d(a.q_lora_rank));
  const double ffn = 3 * h * (d(s.moe.n_experts) * d(s.moe.inter) + d(s.moe.shared_inter) + d(s.dense_inter)) +
                     h * d(s.moe.n_experts);
  const double params = d(s.n_layers + s.nextn_layers) * (attention + ffn) + 2 * d(s.vocab) * h;
  SY_CHECK(params <= kMaxParams,
           "{}: the config describes about {:.3g} parameters, over the {:.0e} this engine accepts; check "
           "num_hidden_layers, hidden_size, intermediate sizes, experts and vocab_size",
           source, params, kMaxParams);
  SY_CHECK(s.moe.n_experts * (s.n_layers + s.nextn_layers) <= kMaxExpertLayers,
           "{}: {} experts in each of {} layers make {} expert tensor sets, over the {} this engine accepts", source,
           s.moe.n_experts, s.n_layers + s.nextn_layers, s.moe.n_experts * (s.n_layers + s.nextn_layers),
           kMaxExpertLayers);
}

struct ArchReader {
  const char* architecture;
  ModelShape (*read)(const ConfigJson&);
};

constexpr ArchReader kReaders[] = {
    {"Qwen3MoeForCausalLM", read_qwen3_moe},     {"MixtralForCausalLM", read_mixtral},
    {"DeepseekV3ForCausalLM", read_deepseek_v3}, {"DeepseekV32ForCausalLM", read_deepseek_v32},
    {"Glm4MoeForCausalLM", read_glm4_moe},       {"GlmMoeDsaForCausalLM", read_glm_moe_dsa},
};

}  // namespace

int64_t ModelShape::moe_layer_count() const { return std::count(layer_ffn.begin(), layer_ffn.end(), FfnKind::moe); }

int64_t ModelShape::dense_layer_count() const { return std::count(layer_ffn.begin(), layer_ffn.end(), FfnKind::dense); }

int64_t ModelShape::kv_bytes_per_token_layer(int tp, int64_t kv_bytes) const {
  if (attn.kind == AttentionKind::mla) {
    return (attn.kv_lora_rank + attn.qk_rope_head_dim + attn.index_head_dim) * kv_bytes;
  }
  const int64_t local_kv = (attn.kv_heads + tp - 1) / tp;
  return local_kv * (attn.head_dim + attn.v_head_dim) * kv_bytes;
}

ModelShape ModelShape::truncated(int64_t n) const {
  ModelShape s = *this;
  if (n > 0 && n < n_layers) {
    s.n_layers = n;
    s.layer_ffn.resize(static_cast<size_t>(n));
    s.nextn_layers = 0;
  }
  return s;
}

std::vector<std::string> planner_architectures() {
  std::vector<std::string> out;
  for (const auto& r : kReaders) out.emplace_back(r.architecture);
  return out;
}

ModelShape read_model_shape(const ConfigJson& cfg, const WeightQuant& quant) {
  const std::string arch = cfg.architecture();
  for (const auto& r : kReaders) {
    if (arch != r.architecture) continue;
    ModelShape s = r.read(cfg);
    s.architecture = arch;
    s.max_position = cfg.get_int("max_position_embeddings", 0, 0);
    s.quant = quant;
    SY_CHECK(s.attn.n_heads >= 1 && s.hidden >= 1, "{}: num_attention_heads and hidden_size must be positive",
             cfg.source());
    check_model_size(s, cfg.source());
    return s;
  }
  std::string known;
  for (const auto& a : planner_architectures()) known += (known.empty() ? "" : ", ") + a;
  SY_FAIL("{}: architecture '{}' is not known to the planner; known: {}", cfg.source(), cut_for_message(arch), known);
}

ModelShape load_model_shape(const std::filesystem::path& dir) {
  const ConfigJson cfg = ConfigJson::load(dir);
  WeightQuant quant;
  if (const std::optional<ConfigJson> q = cfg.child("quantization_config")) {
    quant.method = q->get_string("quant_method", "unknown");
    if (quant.method == "fp8" && q->has("weight_block_size")) {
      const std::vector<int64_t> block = q->get_int_list("weight_block_size");
      SY_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0,
               "{}: weight_block_size must be two positive integers, got {} values", q->source(), block.size());
      quant.block_fp8 = true;
      quant.block_rows = block[0];
      quant.block_cols = block[1];
    }
  }
  return read_model_shape(cfg, quant);
}

}  // namespace sy
