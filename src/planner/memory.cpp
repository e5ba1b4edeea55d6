// Per-stage memory: weight shards, activation and all-to-all buffers, fixed costs, KV capacity.
#include "planner/memory.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/int_math.h"

namespace sy {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t activation_bytes(const ModelDesc& s, const ParallelSizes& sz, const std::vector<FfnKind>& stage_ffn,
                         bool last_stage, const MemoryOptions& o) {
  const int64_t T = o.max_batch_tokens;
  const int64_t a = o.act_dtype_bytes;
  const int64_t h = s.hidden;
  const AttentionDesc& at = s.attn;
  // Residual stream, normed input, attention output and FFN output.
  const int64_t hidden_buffers = 4 * T * h * a;

  const int64_t local_heads = ceil_div(at.n_heads, sz.tp);
  int64_t attention = 0;
  if (at.kind == AttentionKind::gqa) {
    const int64_t local_kv = ceil_div(at.kv_heads, sz.tp);
    attention =
        T * (local_heads * at.head_dim + local_kv * (at.head_dim + at.v_head_dim) + local_heads * at.v_head_dim) * a;
  } else {
    attention = T *
                (at.q_lora_rank + local_heads * at.head_dim + at.kv_lora_rank + at.qk_rope_head_dim +
                 local_heads * (at.qk_nope_head_dim + at.v_head_dim) + local_heads * at.v_head_dim) *
                a;
  }

  int64_t ffn = 0;
  const bool any_dense = std::find(stage_ffn.begin(), stage_ffn.end(), FfnKind::dense) != stage_ffn.end();
  const bool any_moe = std::find(stage_ffn.begin(), stage_ffn.end(), FfnKind::moe) != stage_ffn.end();
  if (any_dense) ffn = std::max(ffn, T * 3 * ceil_div(s.dense_inter, sz.dense_tp) * a);
  if (any_moe) {
    const MoeDesc& m = s.moe;
    // Routed (token, expert) pairs of the whole stage, shared by the ep·edp expert shards.
    const int64_t pairs = static_cast<int64_t>(sz.dp) * T * m.top_k;
    const int64_t balanced = ceil_div(pairs, static_cast<int64_t>(sz.ep) * sz.edp);
    const int64_t recv =
        std::min(pairs, static_cast<int64_t>(std::ceil(static_cast<double>(balanced) * o.expert_capacity)));
    const int64_t local_inter = ceil_div(m.inter, sz.etp);
    const int64_t dispatch = 2 * T * m.top_k * h * a;  // send (dispatch) and receive (combine) of own tokens
    const int64_t expert_io = mul_sat(recv, (2 * h + 3 * local_inter) * a);  // received rows, gate·up, down output
    const int64_t router = T * m.n_experts * 4;
    const int64_t shared = m.shared_inter > 0 ? T * 3 * ceil_div(m.shared_inter, sz.dense_tp) * a : 0;
    ffn = std::max(ffn, add_sat(expert_io, dispatch + router + shared));
  }
  int64_t logits = 0;
  if (last_stage) {
    const int64_t rows = std::min(T, o.max_seqs);
    // fp32 logits of this rank's vocabulary shard, and the gathered full rows for sampling.
    logits = rows * (ceil_div(s.vocab, sz.dense_tp) + s.vocab) * 4;
  }
  return add_sat(std::max(attention, ffn), hidden_buffers + logits);
}

LayoutMemory estimate_memory(const ModelDesc& shape, const WeightTable& table, const ParallelSizes& sizes,
                             const std::vector<int64_t>& stage_layers, int64_t device_bytes, const MemoryOptions& o,
                             const WeightTable* device_table) {
  SY_CHECK(static_cast<int>(stage_layers.size()) == sizes.pp, "{} stage layer counts for pp {}", stage_layers.size(),
           sizes.pp);
  LayoutMemory out;
  const int64_t min_kv = o.min_kv_tokens > 0 ? o.min_kv_tokens : o.max_batch_tokens;
  int64_t first = 0;
  int64_t worst_headroom = 0;
  for (int p = 0; p < sizes.pp; ++p) {
    StageMemory m;
    m.stage = p;
    m.first_layer = first;
    m.n_layers = stage_layers[static_cast<size_t>(p)];
    const bool first_stage = p == 0;
    const bool last_stage = p == sizes.pp - 1;
    m.weights = rank_weight_bytes(table, shape, sizes, first, m.n_layers, first_stage, last_stage, o.shard);
    for (int64_t b : m.weights) m.weight_bytes = add_sat(m.weight_bytes, b);
    m.device_weights = device_table == nullptr ? m.weights
                                               : rank_weight_bytes(*device_table, shape, sizes, first, m.n_layers,
                                                                   first_stage, last_stage, o.shard);
    for (int64_t b : m.device_weights) m.device_weight_bytes = add_sat(m.device_weight_bytes, b);
    const std::vector<FfnKind> ffn(shape.layer_ffn.begin() + first, shape.layer_ffn.begin() + first + m.n_layers);
    m.activation_bytes = activation_bytes(shape, sizes, ffn, last_stage, o);
    m.fixed_bytes = o.fixed_bytes;
    m.kv_bytes_per_token = m.n_layers * shape.kv_bytes_per_token_layer(sizes.tp, o.kv_dtype_bytes);
    m.capacity_bytes = device_bytes;
    // Each term is at most INT64_MAX (saturated); their sum is taken so that it cannot wrap.
    const int64_t used = add_sat(add_sat(m.device_weight_bytes, m.activation_bytes), m.fixed_bytes);
    m.free_bytes = used == std::numeric_limits<int64_t>::max() ? -used : device_bytes - used;
    m.kv_tokens = m.free_bytes > 0 && m.kv_bytes_per_token > 0 ? m.free_bytes / m.kv_bytes_per_token : 0;
    m.min_kv_tokens = min_kv;
    const int64_t kv_needed = mul_sat(min_kv, m.kv_bytes_per_token);
    m.fits = m.free_bytes >= 0 && m.free_bytes >= kv_needed;
    const int64_t headroom = m.free_bytes < 0 ? m.free_bytes : m.free_bytes - kv_needed;
    if (p == 0 || headroom < worst_headroom) {
      worst_headroom = headroom;
      out.worst_stage = p;
    }
    first += m.n_layers;
    out.stages.push_back(m);
  }
  out.fits = std::all_of(out.stages.begin(), out.stages.end(), [](const StageMemory& m) { return m.fits; });
  out.kv_tokens = out.stages.front().kv_tokens;
  for (const auto& m : out.stages) out.kv_tokens = std::min(out.kv_tokens, m.kv_tokens);
  out.kv_tokens_total = out.kv_tokens * sizes.dp;
  return out;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double mag = std::fabs(b);
  if (mag >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (mag >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (mag >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (mag >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string format_count(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string s = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

std::string describe_stage_memory(const StageMemory& m) {
  std::vector<std::pair<int64_t, Part>> parts;
  for (int i = 0; i < kPartCount; ++i) {
    if (m.device_weights[static_cast<size_t>(i)] > 0)
      parts.emplace_back(m.device_weights[static_cast<size_t>(i)], static_cast<Part>(i));
  }
  std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string detail;
  for (size_t i = 0; i < parts.size() && i < 3; ++i) {
    if (i > 0) detail += ", ";
    detail += fmt::format("{} {}", part_name(parts[i].second), format_bytes(parts[i].first));
  }
  const int64_t used = add_sat(add_sat(m.device_weight_bytes, m.activation_bytes), m.fixed_bytes);
  const std::string head = fmt::format(
      "stage {} (layers {}-{}): weights {}{} ({}) + activations {} + fixed {} = {} of {}", m.stage, m.first_layer,
      m.first_layer + m.n_layers - 1, format_bytes(m.device_weight_bytes),
      m.device_weight_bytes != m.weight_bytes ? " as the GPU holds them" : "", detail, format_bytes(m.activation_bytes),
      format_bytes(m.fixed_bytes), format_bytes(used), format_bytes(m.capacity_bytes));
  if (m.free_bytes < 0) {
    return fmt::format("{}, {} over before any KV cache ({} needed for {} tokens at {}/token)", head,
                       format_bytes(-m.free_bytes), format_bytes(mul_sat(m.min_kv_tokens, m.kv_bytes_per_token)),
                       format_count(m.min_kv_tokens), format_bytes(m.kv_bytes_per_token));
  }
  return fmt::format("{}, leaving {} for KV at {}/token = {} tokens (needs {})", head, format_bytes(m.free_bytes),
                     format_bytes(m.kv_bytes_per_token), format_count(m.kv_tokens), format_count(m.min_kv_tokens));
}

}  // namespace sy
