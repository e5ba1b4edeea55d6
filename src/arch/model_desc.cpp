// The one table from Hugging Face class names to describers, the bounds every description is checked
// against, and what a description answers (layer counts, KV bytes, a cut to fewer layers).
#include "arch/model_desc.h"

#include <algorithm>
#include <optional>

#include "arch/archs.h"
#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

struct ArchEntry {
  const char* architecture;
  ArchDescriber describe;
};

constexpr ArchEntry kArchitectures[] = {
    {"Qwen3MoeForCausalLM", describe_qwen3_moe},       {"MixtralForCausalLM", describe_mixtral},
    {"DeepseekV3ForCausalLM", describe_deepseek_v3},  // also Kimi K2 (model_type kimi_k2)
    {"DeepseekV32ForCausalLM", describe_deepseek_v32}, {"Glm4MoeForCausalLM", describe_glm4_moe},
    {"GlmMoeDsaForCausalLM", describe_glm_moe_dsa},
};

// Each size is bounded by ConfigJson; their products are bounded here, before anything is sized from them,
// so that every byte count of the planner fits in 64 bits and a dry run binds a bounded number of tensors.
// The bounds are about a thousand times the largest published models (1T parameters, 61 layers x 384
// experts).
constexpr double kMaxParams = 1e15;
constexpr int64_t kMaxExpertLayers = 1 << 20;

void check_model_size(const ModelDesc& s, const std::string& source) {
  SY_CHECK(s.attn.n_heads >= 1 && s.hidden >= 1, "{}: num_attention_heads and hidden_size must be positive", source);
  SY_CHECK(s.moe.n_experts == 0 || s.moe.top_k <= s.moe.n_experts,
           "{}: num_experts_per_tok {} exceeds the {} experts; it must be in [1, {}]", source, s.moe.top_k,
           s.moe.n_experts, s.moe.n_experts);
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const AttentionDesc& a = s.attn;
  const double h = d(s.hidden);
  const double attention = h * d(a.n_heads) * d(a.head_dim + a.v_head_dim) + 2 * h * d(a.kv_heads) * d(a.head_dim) +
                           d(a.q_lora_rank) * (h + d(a.n_heads) * d(a.head_dim)) +
                           d(a.kv_lora_rank) * (h + d(a.n_heads) * d(a.qk_nope_head_dim + a.v_head_dim)) +
                           d(a.index_n_heads) * d(a.index_head_dim) * (h + d(a.q_lora_rank));
  const double ffn =
      3 * h * (d(s.moe.n_experts) * d(s.moe.inter) + d(s.moe.shared_inter) + d(s.dense_inter)) + h * d(s.moe.n_experts);
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

}  // namespace

int64_t ModelDesc::moe_layer_count() const { return std::count(layer_ffn.begin(), layer_ffn.end(), FfnKind::moe); }

int64_t ModelDesc::dense_layer_count() const { return std::count(layer_ffn.begin(), layer_ffn.end(), FfnKind::dense); }

int64_t ModelDesc::kv_bytes_per_token_layer(int tp, int64_t kv_bytes, int64_t index_bytes) const {
  if (attn.kind == AttentionKind::mla) {
    return (attn.kv_lora_rank + attn.qk_rope_head_dim) * kv_bytes + attn.index_head_dim * index_bytes;
  }
  const int64_t local_kv = (attn.kv_heads + tp - 1) / tp;
  return local_kv * (attn.head_dim + attn.v_head_dim) * kv_bytes;
}

ModelDesc ModelDesc::truncated(int64_t n) const {
  ModelDesc s = *this;
  if (n > 0 && n < n_layers) {
    s.n_layers = n;
    s.layer_ffn.resize(static_cast<size_t>(n));
    if (!s.layer_own_indexer.empty()) s.layer_own_indexer.resize(static_cast<size_t>(n));
    s.nextn_layers = 0;
  }
  return s;
}

std::vector<std::string> described_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchitectures) out.emplace_back(a.architecture);
  return out;
}

ModelDesc describe_model(const ConfigJson& cfg, const std::optional<ConfigJson>& hf_quant) {
  const std::string arch = cfg.architecture();
  for (const auto& a : kArchitectures) {
    if (arch != a.architecture) continue;
    ModelDesc d = a.describe(cfg);
    d.architecture = arch;
    d.quant = read_quant(cfg, hf_quant);
    check_model_size(d, cfg.source());
    return d;
  }
  std::string known;
  for (const auto& a : described_architectures()) known += (known.empty() ? "" : ", ") + a;
  SY_FAIL("{}: architecture '{}' is not supported; supported: {}", cfg.source(), cut_for_message(arch), known);
}

ModelDesc describe_model(const ConfigJson& cfg) { return describe_model(cfg, std::nullopt); }

ModelDesc load_model_desc(const std::filesystem::path& dir) {
  return describe_model(ConfigJson::load(dir), ConfigJson::load_if_present(dir / "hf_quant_config.json"));
}

}  // namespace sy
