// Readable output of plan and inspect.
#include "planner/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sy {

namespace {

std::string group_digits(int64_t v) { return format_count(v); }

std::string format_params(int64_t n) {
  const double d = static_cast<double>(n);
  if (d >= 1e12) return fmt::format("{:.2f} T", d / 1e12);
  if (d >= 1e9) return fmt::format("{:.2f} B", d / 1e9);
  if (d >= 1e6) return fmt::format("{:.2f} M", d / 1e6);
  return group_digits(n);
}

std::string format_rate(double tokens_per_second) { return group_digits(std::llround(tokens_per_second)); }

// "attention 1.20, experts 2.31, ..." in ms, the phases with any time.
std::string format_phases(const StepPrediction& p) {
  std::string out;
  for (size_t i = 0; i < p.phase_seconds.size(); ++i) {
    if (p.phase_seconds[i] <= 0) continue;
    out += fmt::format("{}{} {:.3f}", out.empty() ? "" : ", ", kCostPhaseNames[i], p.phase_seconds[i] * 1e3);
  }
  return out;
}

std::string describe_attention(const AttentionDesc& a) {
  if (a.kind == AttentionKind::gqa) {
    return fmt::format("GQA: {} heads / {} KV heads of {}{}{}", a.n_heads, a.kv_heads, a.head_dim,
                       a.qkv_bias ? ", qkv bias" : "", a.qk_norm ? ", q/k norm" : "");
  }
  std::string s = fmt::format("MLA: {} heads, q_lora_rank {}, kv_lora_rank {}, rope {} + nope {}, v {}", a.n_heads,
                              a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim);
  if (a.index_n_heads > 0) {
    s += fmt::format("; sparse indexer {} heads of {}, top {} keys", a.index_n_heads, a.index_head_dim, a.index_topk);
  }
  return s;
}

std::string describe_layers(const ModelDesc& s) {
  std::vector<int> dense, moe;
  for (size_t i = 0; i < s.layer_ffn.size(); ++i) {
    (s.layer_ffn[i] == FfnKind::moe ? moe : dense).push_back(static_cast<int>(i));
  }
  std::string out = fmt::format("{}", s.n_layers);
  std::string kinds;
  if (!dense.empty()) kinds += fmt::format("{} dense ({})", dense.size(), format_ranks(dense));
  if (!moe.empty()) kinds += fmt::format("{}{} MoE ({})", kinds.empty() ? "" : ", ", moe.size(), format_ranks(moe));
  out += ": " + kinds;
  if (s.nextn_layers > 0) out += fmt::format("; {} multi-token-prediction layer(s) stored, not loaded", s.nextn_layers);
  return out;
}

std::string describe_experts(const ModelDesc& s) {
  const MoeDesc& m = s.moe;
  std::string out = fmt::format("{} routed, top-{}, intermediate {}", m.n_experts, m.top_k, m.inter);
  if (m.shared_inter > 0) out += fmt::format("; {} shared (intermediate {})", m.n_shared, m.shared_inter);
  if (s.dense_layer_count() > 0) out += fmt::format("; dense MLP intermediate {}", s.dense_inter);
  return out;
}

std::string describe_dtype(const ModelDesc& s) {
  std::string out(dtype_name(s.dtype));
  if (s.quant.block_fp8) {
    out += fmt::format("; linear weights fp8 with fp32 scales per {}×{} block", s.quant.block_rows, s.quant.block_cols);
    if (!s.quant.ignore.empty()) out += fmt::format(" ({} ignore entries)", s.quant.ignore.size());
  } else if (s.quant.int4_group) {
    out += fmt::format("; linear weights INT4 with bf16 scales per group of {} (compressed-tensors pack-quantized)",
                       s.quant.group_size);
    if (!s.quant.ignore.empty()) out += fmt::format(", except {} ignore entries", s.quant.ignore.size());
  } else if (s.quant.nvfp4) {
    out += fmt::format(
        "; linear weights NVFP4 (E2M1) with fp8 scales per group of {} and an fp32 scale per tensor (ModelOpt)",
        s.quant.group_size);
    if (!s.quant.ignore.empty()) out += fmt::format(", except {} exclude_modules entries", s.quant.ignore.size());
    if (!s.quant.kv_cache_quant.empty()) {
      out += fmt::format("; kv cache scales {} (read with --kv-dtype fp8, else the cache stays {})",
                         s.quant.kv_cache_quant, dtype_name(s.dtype));
    }
  } else if (!s.quant.method.empty()) {
    out += fmt::format("; quantization_config {}", s.quant.method);
  }
  return out;
}

int64_t worst_weights(const LayoutMemory& m) {
  int64_t w = 0;
  for (const auto& s : m.stages) w = std::max(w, s.device_weight_bytes);
  return w;
}

int64_t worst_activations(const LayoutMemory& m) {
  int64_t w = 0;
  for (const auto& s : m.stages) w = std::max(w, s.activation_bytes);
  return w;
}

std::string join(const std::vector<std::string>& items, const char* sep, const char* last_sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? last_sep : sep;
    out += items[i];
  }
  return out;
}

// A note line for a profile the recheck left with over kBusyProfilePoints points over a larger one's time; "" else.
std::string busy_profile_note(const MachineProfile& p) {
  if (p.busy_points <= kBusyProfilePoints) return "";
  return fmt::format(
      "note     {}: {} points are still over twice the time of a larger point after bench calibrate's recheck, so "
      "the host was likely busy while it was timed; its predictions can be far off. Calibrate again on a quiet "
      "host.\n",
      p.source, p.busy_points);
}

}  // namespace

std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      const bool l = i < left.size() && left[i];
      const std::string pad(width[i] - r[i].size(), ' ');
      if (i > 0) line += "  ";
      line += l ? r[i] + pad : pad + r[i];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string format_target(const PlanTarget& t) {
  const ModelDesc& s = t.shape;
  const Machine& m = t.cluster.machine;
  std::string out;
  out += fmt::format("model    {} ({}): {} layers, {} experts top-{}, {}\n", s.architecture, s.family, s.n_layers,
                     s.moe.n_experts, s.moe.top_k, describe_attention(s.attn));
  out += fmt::format("weights  {} ({}), from {}\n", format_bytes(t.weights.total().bytes - t.weights.nextn.bytes),
                     describe_dtype(s), t.weights_source);
  if (t.device_weights) {
    // What this build holds on the device (PlanTarget::device_weights).
    const int64_t held = t.device_weights->total().bytes - t.device_weights->nextn.bytes;
    const int64_t bytes = t.weights.total().bytes - t.weights.nextn.bytes;
    out += fmt::format(
        "note     a GPU holds {} of them ({:.2f}x): {}; weights/GPU, the memory check and the decode floor count "
        "what the GPU holds\n",
        format_bytes(held), static_cast<double>(held) / static_cast<double>(std::max<int64_t>(bytes, 1)),
        s.quant.block_fp8 ? "its kernels read the FP8 blocks as stored, all but kv_b_proj and the indexer's "
                            "matrices, which it widens to the model dtype at load"
                          : "this build dequantises INT4 and NVFP4 weights to the model dtype at load");
  }
  out += fmt::format("machine  {}: {} at {} TB/s per GPU, {} {} GB/s\n", t.cluster.describe(),
                     format_bytes(m.memory_bytes()), m.hbm_tbps, m.link, m.link_gbps);
  out += fmt::format(
      "step     {} tokens per forward pass, KV cache {} bytes/value, {} fixed per GPU; decode "
      "estimated at context {}\n",
      t.memory.max_batch_tokens, t.memory.kv_dtype_bytes, format_bytes(t.memory.fixed_bytes), t.decode_context);
  return out;
}

std::string format_plan(const PlanTarget& t, const Plan& plan) {
  std::string out = format_target(t);
  if (t.profiles.empty()) {
    out += fmt::format("speed    predicted from {}\n", preset_profile(t.cluster.machine).source);
  } else {
    for (const MachineProfile& p : t.profiles) {
      out += fmt::format("speed    predicted from {} ({}, {} rank{})\n", p.source, p.name, p.ranks,
                         p.ranks == 1 ? "" : "s");
      out += busy_profile_note(p);
    }
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "layout", "pp", "dp", "tp", "edp", "ep", "etp", "dtp", "weights/GPU", "activ./GPU",
                  "KV tokens/replica", "KV tokens all", "fits", "tok/s b=1", fmt::format("tok/s b={}", t.decode_batch),
                  fmt::format("TPOT ms b={}", t.decode_batch), fmt::format("floor tok/s b={}", t.decode_batch)});
  int n = 0;
  for (const PlanEntry& e : plan.layouts) {
    const ParallelSizes& z = e.check.sizes;
    std::vector<std::string> row = {std::to_string(++n),  layout_flags(z),       std::to_string(z.pp),
                                    std::to_string(z.dp), std::to_string(z.tp),  std::to_string(z.edp),
                                    std::to_string(z.ep), std::to_string(z.etp), std::to_string(z.dense_tp)};
    if (e.check.memory) {
      const LayoutMemory& m = *e.check.memory;
      row.insert(row.end(), {format_bytes(worst_weights(m)), format_bytes(worst_activations(m)),
                             group_digits(m.kv_tokens), group_digits(m.kv_tokens_total), m.fits ? "yes" : "no",
                             format_rate(e.predicted->decode_one.tokens_per_second),
                             format_rate(e.predicted->decode_batch.tokens_per_second),
                             fmt::format("{:.2f}", e.predicted->decode_batch.seconds * 1e3),
                             format_rate(e.decode_batch.tokens_per_second)});
    }
    rows.push_back(std::move(row));
  }
  std::vector<bool> left(18, false);
  left[1] = true;
  if (plan.layouts.empty()) {
    out += fmt::format("no layout of {} GPUs passes the rules\n", t.cluster.gpus);
  } else {
    const auto fitting =
        std::count_if(plan.layouts.begin(), plan.layouts.end(), [](const PlanEntry& e) { return e.check.valid(); });
    out += fmt::format("{} of {} layouts pass the rules, {} fit; best first by predicted decode tok/s at the batch\n",
                       plan.layouts.size(), plan.considered, fitting);
    out += format_table(rows, left);
  }
  if (!plan.invalid.empty()) {
    out += fmt::format("\n{} layouts break rules (counted under each rule they break):\n", plan.invalid_layouts);
    std::vector<std::vector<std::string>> inv;
    for (const auto& r : plan.invalid) {
      inv.push_back({"  " + r.rule, std::to_string(r.layouts), "e.g. " + r.example_flags + ":", r.example_message});
    }
    out += format_table(inv, {true, false, true, true});
  }
  const bool any_fits = !plan.layouts.empty() && plan.layouts.front().check.valid();
  if (!any_fits && !plan.layouts.empty()) {
    const LayoutCheck& best = plan.layouts.front().check;
    out += fmt::format("\nnothing fits on {}. Closest: {}\n", t.cluster.describe(), layout_flags(best.sizes));
    for (const auto& i : best.issues) out += "  [" + i.rule + "] " + i.message + "\n";
  }
  if (!any_fits) {
    if (const auto bigger = smallest_fitting_cluster(t)) {
      const std::string nodes = bigger->cluster.nodes > 1 ? fmt::format(" --nodes {}", bigger->cluster.nodes) : "";
      out +=
          fmt::format("smallest fitting cluster: {} with {}: run plan with --gpus {}{}\n", bigger->cluster.describe(),
                      layout_flags(bigger->best.check.sizes), bigger->cluster.gpus, nodes);
    } else {
      out += "no cluster of up to 512 GPUs of this machine fits the model\n";
    }
  }
  return out;
}

std::vector<std::string> layout_notes(const PlanTarget& t, const LayoutCheck& c) {
  std::vector<std::string> notes = c.completions;
  if (c.uses_fewer_gpus) {
    std::string line = fmt::format("uses {} of the {} GPUs (W = pp·dp·tp = {})", c.sizes.world_size(), t.cluster.gpus,
                                   c.sizes.world_size());
    if (!c.use_all_gpus.empty()) {
      line += fmt::format("; to use all {}: {}", t.cluster.gpus, join(c.use_all_gpus, ", ", " or "));
    }
    notes.push_back(line);
  }
  return notes;
}

std::string format_layout(const PlanTarget& t, const LayoutCheck& c) {
  const ParallelSizes& z = c.sizes;
  std::string out = format_target(t) + "\n";
  const std::string asked = c.request.flags();
  const std::string resolved = layout_flags(z);
  out += fmt::format("layout   {}{}: {}\n", asked, asked == resolved ? "" : " → " + resolved,
                     c.valid() ? "valid" : "refused");
  out += fmt::format("sizes    {}\n", describe_sizes(z));
  for (const auto& n : layout_notes(t, c)) out += "note     " + n + "\n";
  for (size_t p = 0, first = 0; p < c.stage_layers.size(); first += static_cast<size_t>(c.stage_layers[p]), ++p) {
    out += fmt::format("stage {}  ranks {}-{}, layers {}-{} ({}){}{}\n", p, p * static_cast<size_t>(z.stage_size()),
                       (p + 1) * static_cast<size_t>(z.stage_size()) - 1, first,
                       first + static_cast<size_t>(c.stage_layers[p]) - 1, c.stage_layers[p],
                       p == 0 ? ", embedding" : "", p + 1 == c.stage_layers.size() ? ", LM head" : "");
  }
  if (c.memory) {
    for (const auto& m : c.memory->stages) out += "memory   " + describe_stage_memory(m) + "\n";
    out +=
        fmt::format("KV       {} tokens per dp replica{}\n", group_digits(c.memory->kv_tokens),
                    z.dp > 1 ? fmt::format(", {} over the {} replicas", group_digits(c.memory->kv_tokens_total), z.dp)
                             : std::string());
    const LayoutPrediction pred = predict_layout(t, c);
    out += fmt::format("speed    predicted from {}\n", pred.profile);
    for (const MachineProfile& p : t.profiles) {
      if (p.source == pred.profile) out += busy_profile_note(p);
    }
    // At --batch 1 the batch's decode step is the one-sequence step: printed once.
    const bool one = t.decode_batch == 1;
    for (const StepPrediction* p : {&pred.decode_one, &pred.decode_batch, &pred.prefill}) {
      if (one && p == &pred.decode_batch) continue;
      const bool prefill = p == &pred.prefill;
      out += fmt::format("{}  batch {}, {} {}: {:.2f} ms{}, {} tok/s; eager {:.2f} ms: {}\n",
                         prefill ? "prefill" : "decode ", p->batch, p->context, prefill ? "tokens each" : "in context",
                         p->seconds * 1e3, prefill ? "" : " per step (TPOT)", format_rate(p->tokens_per_second),
                         p->eager_seconds * 1e3, format_phases(*p));
    }
    for (const int64_t b : one ? std::vector<int64_t>{1} : std::vector<int64_t>{1, t.decode_batch}) {
      const DecodeEstimate d = estimate_decode(t.shape, z, *c.memory, t.cluster, b, t.decode_context, t.memory);
      out += fmt::format(
          "floor    batch {}: {:.2f} ms/step, {} tok/s (memory {:.2f} ms + comm {:.2f} ms per stage and "
          "micro-batch)\n",
          b, d.step_seconds * 1e3, format_rate(d.tokens_per_second), d.memory_seconds * 1e3, d.comm_seconds * 1e3);
    }
  }
  if (!c.rules_pass()) return out;
  const Mapping mapping(z);
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "node", "gpu", "numa", "pp", "dp", "tp", "edp", "ep", "etp", "dtp", "tp group", "dp group",
                  "pp group", "ep group", "etp group", "edp group", "dense_tp group"});
  for (int r = 0; r < mapping.world_size(); ++r) {
    const RankCoords k = mapping.coords(r);
    const Placement p = t.cluster.place(r);
    std::vector<std::string> row = {
        std::to_string(r),          std::to_string(p.node),         std::to_string(p.local_gpu),
        std::to_string(p.numa),     std::to_string(k.pp_rank),      std::to_string(k.dp_rank),
        std::to_string(k.tp_rank),  std::to_string(k.edp_rank),     std::to_string(k.ep_rank),
        std::to_string(k.etp_rank), std::to_string(k.dense_tp_rank)};
    for (Axis a : {Axis::tp, Axis::dp, Axis::pp, Axis::ep, Axis::etp, Axis::edp, Axis::dense_tp}) {
      row.push_back(format_ranks(mapping.group(a, r)));
    }
    rows.push_back(std::move(row));
  }
  std::vector<bool> left(18, false);
  for (size_t i = 11; i < 18; ++i) left[i] = true;
  out += '\n';
  out += format_table(rows, left);
  return out;
}

std::string format_issues(const PlanTarget& t, const LayoutCheck& c) {
  std::string out = fmt::format("layout {} on {} is refused ({} rule{} broken):", c.request.flags(),
                                t.cluster.describe(), c.issues.size(), c.issues.size() == 1 ? "" : "s");
  const std::vector<std::string>* shown = nullptr;
  for (const auto& i : c.issues) {
    out += fmt::format("\n  [{}] {}", i.rule, i.message);
    if (i.alternatives.empty()) continue;
    if (shown != nullptr && *shown == i.alternatives) {
      out += "; valid instead: as above";
      continue;
    }
    out += fmt::format("; valid instead: {}", join(i.alternatives, ", ", " or "));
    shown = &i.alternatives;
  }
  for (const auto& n : layout_notes(t, c)) out += "\n  note: " + n;
  return out;
}

std::string format_inspect(const InspectReport& r) {
  const ModelDesc& s = r.shape;
  const WeightTable& w = r.weights;
  const Amount total = w.total();
  const Amount loaded{.bytes = total.bytes - w.nextn.bytes, .params = total.params - w.nextn.params};
  const Amount active = w.active_per_token(s);
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"architecture", fmt::format("{} (model_type {}, {})", s.architecture, s.model_type, s.family)});
  rows.push_back({"weights from", r.weights_source});
  rows.push_back({"layers", describe_layers(s)});
  rows.push_back({"attention", describe_attention(s.attn)});
  rows.push_back({"experts", describe_experts(s)});
  rows.push_back({"vocabulary", fmt::format("{}, embeddings {}", s.vocab, s.tie_embeddings ? "tied" : "untied")});
  rows.push_back({"dtype", describe_dtype(s)});
  rows.push_back({"parameters", fmt::format("{} total, {} active per token ({} routed experts of {} per layer)",
                                            format_params(loaded.params), format_params(active.params), s.moe.top_k,
                                            s.moe.n_experts)});
  rows.push_back(
      {"bytes", fmt::format("{} loaded, {} read per token", format_bytes(loaded.bytes), format_bytes(active.bytes))});
  const int64_t kv = s.n_layers * s.kv_bytes_per_token_layer(1, 2);
  const int64_t kv_fp8 = s.n_layers * s.kv_bytes_per_token_layer(1, 1);
  rows.push_back(
      {"KV per token",
       s.attn.kind == AttentionKind::mla
           ? fmt::format("{} in bf16, {} with --kv-dtype fp8: {} layers × ({} latent + {} rope) × 2 (fp8: 1) bytes{}, "
                         "replicated over tp",
                         format_bytes(kv), format_bytes(kv_fp8), s.n_layers, s.attn.kv_lora_rank,
                         s.attn.qk_rope_head_dim,
                         s.attn.index_head_dim > 0
                             ? fmt::format(" + {} indexer key × 2 bytes (bf16 either way)", s.attn.index_head_dim)
                             : "")
           : fmt::format("{} in bf16, {} with --kv-dtype fp8: {} layers × 2 × {} KV heads × {} × 2 (fp8: 1) bytes "
                         "(tp 1)",
                         format_bytes(kv), format_bytes(kv_fp8), s.n_layers, s.attn.kv_heads, s.attn.head_dim)});
  std::string out = format_table(rows, {true, true});
  out += "\nby part\n";
  std::vector<std::vector<std::string>> parts;
  parts.push_back({"  part", "bytes", "share", "parameters", "stored as", "split over"});
  const char* quantised_form = s.quant.block_fp8 ? "FP8" : s.quant.int4_group ? "INT4" : s.quant.nvfp4 ? "NVFP4" : "";
  // A part whose parameters are all unquantised is shown in the model's dtype (routers' fp32 tensors too).
  const auto stored_as = [&](const Amount& a) {
    if (a.quantised_params == 0) return std::string(dtype_name(s.dtype));
    if (a.quantised_params == a.params) return std::string(quantised_form);
    return fmt::format("{} {:.0f}%", quantised_form,
                       100.0 * static_cast<double>(a.quantised_params) / static_cast<double>(a.params));
  };
  const auto by_part = w.by_part();
  static const char* split[kPartCount] = {"tp (heads)",
                                          "replicated",
                                          "replicated",
                                          "ep × etp",
                                          "dense_tp",
                                          "dense_tp",
                                          "dense_tp (vocab rows), first stage",
                                          "dense_tp (vocab rows), last stage",
                                          "not loaded",
                                          "replicated"};
  for (int i = 0; i < kPartCount; ++i) {
    const Amount& a = by_part[static_cast<size_t>(i)];
    if (a.bytes == 0) continue;
    parts.push_back({"  " + std::string(part_name(static_cast<Part>(i))), format_bytes(a.bytes),
                     fmt::format("{:.1f}%", 100.0 * static_cast<double>(a.bytes) / static_cast<double>(total.bytes)),
                     format_params(a.params), stored_as(a), split[i]});
  }
  out += format_table(parts, {true, false, false, false, true, true});
  if (!w.unrecognised.empty()) {
    out += fmt::format("\n{} tensor(s) match no part and are counted as replicated 'other', e.g. {}\n",
                       w.unrecognised.size(), w.unrecognised.front());
  }
  return out;
}

}  // namespace sy
