// JSON output of plan and inspect: the same facts as the tables, in stable keys, bytes as integers.
#include <nlohmann/json.hpp>

#include "planner/report.h"

namespace sy {

namespace {

using nlohmann::json;

json sizes_json(const ParallelSizes& z) {
  json j;
  for (Axis a : kAxes) j[std::string(axis_name(a))] = z.get(a);
  j["stage_size"] = z.stage_size();
  j["world_size"] = z.world_size();
  j["flags"] = layout_flags(z);
  return j;
}

json parts_json(const std::array<int64_t, kPartCount>& bytes) {
  json j = json::object();
  for (int i = 0; i < kPartCount; ++i) {
    if (bytes[static_cast<size_t>(i)] != 0)
      j[std::string(part_name(static_cast<Part>(i)))] = bytes[static_cast<size_t>(i)];
  }
  return j;
}

json memory_json(const LayoutMemory& m) {
  json stages = json::array();
  for (const auto& s : m.stages) {
    stages.push_back({{"stage", s.stage},
                      {"first_layer", s.first_layer},
                      {"layers", s.n_layers},
                      {"weight_bytes", s.weight_bytes},
                      {"device_weight_bytes", s.device_weight_bytes},
                      {"weight_bytes_by_part", parts_json(s.weights)},
                      {"activation_bytes", s.activation_bytes},
                      {"fixed_bytes", s.fixed_bytes},
                      {"capacity_bytes", s.capacity_bytes},
                      {"free_bytes", s.free_bytes},
                      {"kv_bytes_per_token", s.kv_bytes_per_token},
                      {"kv_tokens", s.kv_tokens},
                      {"min_kv_tokens", s.min_kv_tokens},
                      {"fits", s.fits}});
  }
  return {{"stages", stages},
          {"worst_stage", m.worst_stage},
          {"kv_tokens_per_replica", m.kv_tokens},
          {"kv_tokens_total", m.kv_tokens_total},
          {"fits", m.fits}};
}

json decode_json(const DecodeEstimate& d) {
  return {{"batch", d.batch},
          {"step_seconds", d.step_seconds},
          {"tokens_per_second", d.tokens_per_second},
          {"memory_seconds", d.memory_seconds},
          {"comm_seconds", d.comm_seconds}};
}

json prediction_json(const StepPrediction& p) {
  json phases;
  for (size_t i = 0; i < p.phase_seconds.size(); ++i) phases[kCostPhaseNames[i]] = p.phase_seconds[i] * 1e3;
  return {{"batch", p.batch},      {"context", p.context},
          {"ms", p.seconds * 1e3}, {"eager_ms", p.eager_seconds * 1e3},
          {"phase_ms", phases},    {"tokens_per_second", p.tokens_per_second},
          {"graph", p.graph}};
}

json predicted_json(const LayoutPrediction& p) {
  return {{"profile", p.profile},
          {"decode", {prediction_json(p.decode_one), prediction_json(p.decode_batch)}},
          {"tpot_ms", p.decode_batch.seconds * 1e3},
          {"prefill", prediction_json(p.prefill)}};
}

json issues_json(const std::vector<LayoutIssue>& issues) {
  json out = json::array();
  for (const auto& i : issues) {
    json axes = json::array();
    for (Axis a : i.axes) axes.push_back(std::string(axis_name(a)));
    out.push_back({{"rule", i.rule}, {"message", i.message}, {"axes", axes}, {"alternatives", i.alternatives}});
  }
  return out;
}

json target_json(const PlanTarget& t) {
  const Machine& m = t.cluster.machine;
  const ModelDesc& s = t.shape;
  return {{"model",
           {{"architecture", s.architecture},
            {"model_type", s.model_type},
            {"layers", s.n_layers},
            {"experts", s.moe.n_experts},
            {"top_k", s.moe.top_k},
            {"weight_bytes", t.weights.total().bytes - t.weights.nextn.bytes},
            {"weights_source", t.weights_source}}},
          {"machine",
           {{"name", m.name},
            {"gpu", m.gpu},
            {"memory_bytes", m.memory_bytes()},
            {"hbm_tbps", m.hbm_tbps},
            {"bf16_tflops", m.bf16_tflops},
            {"fp8_tflops", m.fp8_tflops},
            {"fp4_tflops", m.fp4_tflops},
            {"link", m.link},
            {"link_gbps", m.link_gbps},
            {"network_gbps", m.network_gbps},
            {"gpus_per_node", m.gpus_per_node},
            {"numa_sockets", m.numa_sockets},
            {"gpu_socket", m.gpu_socket},
            {"source", m.source}}},
          {"cluster", {{"gpus", t.cluster.gpus}, {"nodes", t.cluster.nodes}}},
          {"step",
           {{"max_batch_tokens", t.memory.max_batch_tokens},
            {"kv_dtype_bytes", t.memory.kv_dtype_bytes},
            {"fixed_bytes", t.memory.fixed_bytes},
            {"decode_context", t.decode_context},
            {"decode_batch", t.decode_batch}}}};
}

json check_json(const PlanTarget& t, const LayoutCheck& c) {
  json j = {{"request", c.request.flags()},    {"sizes", sizes_json(c.sizes)}, {"valid", c.valid()},
            {"issues", issues_json(c.issues)}, {"notes", layout_notes(t, c)},  {"stage_layers", c.stage_layers}};
  if (c.memory) j["memory"] = memory_json(*c.memory);
  return j;
}

}  // namespace

std::string plan_json(const PlanTarget& t, const Plan& plan) {
  json j = target_json(t);
  json layouts = json::array();
  for (const auto& e : plan.layouts) {
    json l = check_json(t, e.check);
    if (e.check.memory) l["decode"] = {decode_json(e.decode_one), decode_json(e.decode_batch)};
    if (e.predicted) l["predicted"] = predicted_json(*e.predicted);
    layouts.push_back(l);
  }
  json invalid = json::array();
  for (const auto& r : plan.invalid) {
    invalid.push_back(
        {{"rule", r.rule}, {"layouts", r.layouts}, {"example", r.example_flags}, {"message", r.example_message}});
  }
  j["considered"] = plan.considered;
  j["layouts"] = layouts;
  j["invalid_layouts"] = plan.invalid_layouts;
  j["invalid_by_rule"] = invalid;
  return j.dump(2);
}

std::string layout_json(const PlanTarget& t, const LayoutCheck& c) {
  json j = target_json(t);
  json l = check_json(t, c);
  if (c.memory) {
    l["decode"] = json::array();
    for (int64_t b : {int64_t{1}, t.decode_batch}) {
      l["decode"].push_back(
          decode_json(estimate_decode(t.shape, c.sizes, *c.memory, t.cluster, b, t.decode_context, t.memory)));
    }
    l["predicted"] = predicted_json(predict_layout(t, c));
  }
  if (c.rules_pass()) {
    const Mapping mapping(c.sizes);
    json ranks = json::array();
    for (int r = 0; r < mapping.world_size(); ++r) {
      const RankCoords k = mapping.coords(r);
      const Placement p = t.cluster.place(r);
      json coords, groups;
      for (Axis a : kAxes) {
        coords[std::string(axis_name(a))] = k.get(a);
        groups[std::string(axis_name(a))] = mapping.group(a, r);
      }
      ranks.push_back({{"rank", r},
                       {"node", p.node},
                       {"gpu", p.local_gpu},
                       {"numa", p.numa},
                       {"coords", coords},
                       {"groups", groups}});
    }
    l["ranks"] = ranks;
  }
  j["layout"] = l;
  return j.dump(2);
}

std::string inspect_json(const InspectReport& r) {
  const ModelDesc& s = r.shape;
  const WeightTable& w = r.weights;
  const auto parts = w.by_part();
  json by_part = json::object();
  for (int i = 0; i < kPartCount; ++i) {
    const Amount& a = parts[static_cast<size_t>(i)];
    if (a.bytes != 0)
      by_part[std::string(part_name(static_cast<Part>(i)))] = {
          {"bytes", a.bytes}, {"params", a.params}, {"quantised_params", a.quantised_params}};
  }
  json layers = json::array();
  for (FfnKind k : s.layer_ffn) layers.push_back(k == FfnKind::moe ? "moe" : "dense");
  const Amount total = w.total();
  const Amount active = w.active_per_token(s);
  json j = {{"architecture", s.architecture},
            {"model_type", s.model_type},
            {"family", s.family},
            {"weights_source", r.weights_source},
            {"layers", s.n_layers},
            {"layer_kinds", layers},
            {"mtp_layers", s.nextn_layers},
            {"hidden_size", s.hidden},
            {"vocab_size", s.vocab},
            {"tie_word_embeddings", s.tie_embeddings},
            {"attention",
             {{"kind", s.attn.kind == AttentionKind::mla ? "mla" : "gqa"},
              {"heads", s.attn.n_heads},
              {"kv_heads", s.attn.kv_heads},
              {"head_dim", s.attn.head_dim},
              {"v_head_dim", s.attn.v_head_dim},
              {"q_lora_rank", s.attn.q_lora_rank},
              {"kv_lora_rank", s.attn.kv_lora_rank},
              {"qk_rope_head_dim", s.attn.qk_rope_head_dim},
              {"index_n_heads", s.attn.index_n_heads},
              {"index_head_dim", s.attn.index_head_dim}}},
            {"experts",
             {{"routed", s.moe.n_experts},
              {"top_k", s.moe.top_k},
              {"intermediate", s.moe.inter},
              {"shared", s.moe.n_shared},
              {"shared_intermediate", s.moe.shared_inter}}},
            {"dense_intermediate", s.dense_inter},
            {"dtype", std::string(dtype_name(s.dtype))},
            {"fp8_block", s.quant.block_fp8 ? json::array({s.quant.block_rows, s.quant.block_cols}) : json(nullptr)},
            {"int4_group", s.quant.int4_group ? json(s.quant.group_size) : json(nullptr)},
            {"nvfp4_group", s.quant.nvfp4 ? json(s.quant.group_size) : json(nullptr)},
            {"quant_ignore", s.quant.ignore},
            {"params_total", total.params - w.nextn.params},
            {"params_active_per_token", active.params},
            {"bytes_total", total.bytes - w.nextn.bytes},
            {"bytes_active_per_token", active.bytes},
            {"kv_bytes_per_token_tp1_bf16", s.n_layers * s.kv_bytes_per_token_layer(1, 2)},
            {"kv_bytes_per_token_tp1_fp8", s.n_layers * s.kv_bytes_per_token_layer(1, 1)},
            {"by_part", by_part},
            {"unrecognised_tensors", w.unrecognised}};
  return j.dump(2);
}

}  // namespace sy
