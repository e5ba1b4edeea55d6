// `switchyard plan`: every valid layout of a model on a machine with memory per rank and predicted speed,
// or, with layout flags, the full resolved layout or the complete list of rules it breaks. Also the
// layout flags shared with generate, and the check generate runs before loading.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/launch.h"
#include "base/check.h"
#include "base/input.h"
#include "base/log.h"
#include "model/model.h"
#include "planner/cost_model.h"
#include "planner/planner.h"
#include "planner/report.h"

namespace sy {

namespace {

struct PlanOptions {
  std::string model;
  LayoutFlags layout;
  bool json = false;
  bool config_only = false;
  bool all_dense_tp = false;
  int64_t max_batch_tokens = 8192;
  int64_t max_seqs = 256;
  int64_t min_kv_tokens = 0;
  std::string kv_dtype = "bf16";
  double fixed_gb = 2.0;
  int64_t redundant_experts = 0;
  bool no_vocab_parallel = false;
  int64_t batch = 256;
  int64_t context = 1024;
  int64_t prefill_len = 0;
  std::vector<std::string> profiles;
  bool explain = false;
  bool explain_prefill = false;
};

int64_t kv_dtype_bytes(const std::string& name) {
  if (name == "bf16" || name == "fp16") return 2;
  if (name == "fp8") return 1;
  if (name == "fp32") return 4;
  SY_FAIL("--kv-dtype '{}' is not one of bf16, fp16, fp8, fp32", name);
}

// plan --explain: the decode step at --batch, op by op, as the cost model priced it (--explain-prefill: the first
// chunk of the prefill); a step's time per row is calls x one call x the pass's weight (how much of the stage's
// time is the hot or the cold pricing).
std::string format_explain(const PlanTarget& t, const CostExplanation& e, bool prefill) {
  const int64_t len = t.prefill_len > 0 ? t.prefill_len : t.decode_context;
  const std::string what = prefill
                               ? fmt::format("first prefill chunk of {} prompts of {} tokens ({} at most a chunk)",
                                             t.decode_batch, len, t.memory.max_batch_tokens)
                               : fmt::format("decode step at batch {}, context {}", t.decode_batch, t.decode_context);
  std::string out = fmt::format(
      "\n{}, op by op (the busiest rank of each stage; weight: the share of the stage's time its hot or cold "
      "pricing carries; ms: calls x one call x weight):\n",
      what);
  out += fmt::format("{:>5}  {:<5} {:>6}  {:<13} {:<22} {:<40} {:>5} {:>8} {:>10} {:>9}  {}\n", "stage", "pass",
                     "weight", "phase", "op", "table", "share", "calls", "us a call", "ms", "dims");
  std::array<double, kCostPhaseCount> phases{};
  for (const CostTraceRow& r : e.rows) {
    const double ms = r.calls * r.seconds * r.weight * 1e3;
    for (size_t i = 0; i < phases.size(); ++i) {
      if (r.phase == kCostPhaseNames[i]) phases[i] += ms;
    }
    if (r.weight <= 0) continue;  // a pass the step does not take (fully beyond the caches: the hot one)
    out += fmt::format("{:>5}  {:<5} {:>6.3f}  {:<13} {:<22} {:<40} {:>5.2f} {:>8.4g} {:>10.1f} {:>9.3f}  {}\n",
                       r.stage < 0 ? std::string("tail") : std::to_string(r.stage), r.pass, r.weight, r.phase, r.op,
                       r.table, r.share, r.calls, r.seconds * 1e6, ms, r.query);
  }
  out += "sum by phase (stages added; a pipeline of M micro-batches adds its slowest stage M - 1 more times):";
  for (size_t i = 0; i < phases.size(); ++i) out += fmt::format(" {} {:.3f}", kCostPhaseNames[i], phases[i]);
  out += " ms\n";
  const StepPrediction& step = e.step;
  if (step.graph) {
    out += fmt::format(
        "the step replays as one captured graph: {:.3f} ms, the kernels' own time (each row above is at least a "
        "launch, {:.3f} ms in all)\n",
        step.seconds * 1e3, step.eager_seconds * 1e3);
  }
  return out;
}

nlohmann::json explain_json(const std::vector<CostTraceRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const CostTraceRow& r : rows) {
    a.push_back({{"stage", r.stage},
                 {"pass", r.pass},
                 {"weight", r.weight},
                 {"phase", r.phase},
                 {"op", r.op},
                 {"table", r.table},
                 {"query", r.query},
                 {"share", r.share},
                 {"calls", r.calls},
                 {"us_per_call", r.seconds * 1e6},
                 {"ms", r.calls * r.seconds * r.weight * 1e3}});
  }
  return a;
}

int run_plan(const PlanOptions& o) {
  SY_CHECK(!o.layout.machine.empty(),
           "--machine is required: a preset (h100, h200, b200, rtx-pro-6000, a100) or a "
           "JSON machine file");
  const Machine machine = find_machine(o.layout.machine);
  const Cluster cluster =
      make_cluster(machine, o.layout.gpus_given->count() ? std::optional<int>(o.layout.gpus) : std::nullopt,
                   o.layout.nodes_given->count() ? std::optional<int>(o.layout.nodes) : std::nullopt);
  MemoryOptions memory{.max_batch_tokens = o.max_batch_tokens,
                       .max_seqs = o.max_seqs,
                       .min_kv_tokens = o.min_kv_tokens,
                       .kv_dtype_bytes = kv_dtype_bytes(o.kv_dtype),
                       .fixed_bytes = static_cast<int64_t>(o.fixed_gb * 1e9),
                       .shard = {.vocab_parallel = !o.no_vocab_parallel, .redundant_experts = o.redundant_experts}};
  PlanTarget target = load_plan_target(o.model, cluster, memory, o.config_only);
  check_model(o.model, !target.weights_from_checkpoint);  // the checks generate makes, before any plan
  target.decode_batch = o.batch;
  target.decode_context = o.context;
  target.prefill_len = o.prefill_len;
  for (const std::string& p : o.profiles) target.profiles.push_back(load_profile(p));

  SY_CHECK(!(o.explain && o.explain_prefill), "--explain and --explain-prefill each explain one step: give one");
  SY_CHECK(!(o.explain || o.explain_prefill) || o.layout.any_layout_flag(),
           "--explain prices one layout op by op: give it with its flags (--tp, --ep, --pp, --dp, ...), e.g. "
           "plan --model {} --tp 1 --explain",
           o.model);
  if (!o.layout.any_layout_flag()) {
    const Plan plan = make_plan(target, o.all_dense_tp);
    const std::string out = o.json ? plan_json(target, plan) + "\n" : format_plan(target, plan);
    std::fwrite(out.data(), 1, out.size(), stdout);
    const bool fits = !plan.layouts.empty() && plan.layouts.front().check.valid();
    if (!fits) {
      std::fprintf(stderr, "switchyard: error: no layout of %s fits %s\n", target.shape.architecture.c_str(),
                   cluster.describe().c_str());
    }
    return fits ? 0 : 2;
  }
  const LayoutCheck check = check_layout_with_alternatives(target, o.layout.request());
  if (o.json) {
    std::string out = layout_json(target, check) + "\n";
    if ((o.explain || o.explain_prefill) && check.valid()) {
      nlohmann::json j = nlohmann::json::parse(out);
      j[o.explain_prefill ? "explain_prefill" : "explain"] =
          explain_json(explain_layout(target, check, o.explain_prefill).rows);
      out = j.dump(2) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return check.valid() ? 0 : 2;
  }
  SY_CHECK(check.valid(), "{}", format_issues(target, check));
  std::string out = format_layout(target, check);
  if (o.explain || o.explain_prefill) {
    out += format_explain(target, explain_layout(target, check, o.explain_prefill), o.explain_prefill);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::string& text, int64_t max_value, const std::string& flag,
                                    const std::string& noun, const std::string& hint) {
  std::vector<int64_t> values;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SY_CHECK(used == item.size() && !item.empty() && v >= 0 && v <= max_value, "{}: '{}' is not {}; {}", flag,
             cut_for_message(item), noun, hint);
    values.push_back(v);
    pos = comma + 1;
  }
  return values;
}

LayoutRequest LayoutFlags::request() const {
  LayoutRequest r;
  for (size_t i = 0; i < kAxes.size(); ++i) {
    if (given[i] != nullptr && given[i]->count() > 0) r.set(kAxes[i], sizes[i]);
  }
  if (!pp_layers.empty()) {
    for (int64_t v :
         parse_int_list(pp_layers, 1'000'000, "--pp-layers", "a layer count", "give one count per stage, like 30,31")) {
      r.pp_layers.push_back(static_cast<int>(v));
    }
  }
  return r;
}

bool LayoutFlags::any_layout_flag() const {
  for (const auto* g : given) {
    if (g != nullptr && g->count() > 0) return true;
  }
  return !pp_layers.empty();
}

void add_layout_flags(CLI::App* cmd, LayoutFlags& f) {
  static const char* help[] = {
      "attention tensor-parallel size (default: completes W = pp·dp·tp for the GPUs)",
      "attention data-parallel size: independent batches and KV caches (default 1)",
      "pipeline-parallel stages (default 1, or the number of --pp-layers)",
      "expert-parallel size: experts spread over ep ranks (default 1)",
      "expert tensor-parallel size: each expert's intermediate split (default: completes dp·tp = edp·ep·etp)",
      "expert data-parallel size: expert replicas (default 1)",
      "tensor-parallel size of dense FFN layers, shared experts and the LM head (default tp)",
  };
  // Bounds keep every product of sizes (world = pp·dp·tp, edp·ep·etp) inside an int.
  for (size_t i = 0; i < kAxes.size(); ++i) {
    f.given[i] =
        cmd->add_option(std::string(axis_flag(kAxes[i])), f.sizes[i], help[i])->check(CLI::Range(1, kMaxAxisSize));
  }
  cmd->add_option("--pp-layers", f.pp_layers, "decoder layers per pipeline stage, e.g. 30,31");
  f.gpus_given = cmd->add_option("--gpus", f.gpus, "GPUs at hand (default: every GPU of the nodes)")
                     ->check(CLI::Range(1, kMaxGpus));
  f.nodes_given =
      cmd->add_option("--nodes", f.nodes, "nodes (default: as few as hold --gpus)")->check(CLI::Range(1, kMaxGpus));
  cmd->add_option("--machine", f.machine, "machine preset (h100, h200, b200, rtx-pro-6000, a100) or JSON file");
}

GenerateLayout check_generate_layout(const LayoutFlags& f, const GenerateLayoutTarget& in) {
  const bool gpus_given = f.gpus_given != nullptr && f.gpus_given->count() > 0;
  const bool nodes_given = f.nodes_given != nullptr && f.nodes_given->count() > 0;
  const bool launched = in.launched_ranks > 0;
  if (!launched && !f.any_layout_flag() && f.machine.empty() && !gpus_given && !nodes_given) return {};
  const LayoutRequest request = f.request();
  // The ranks the flags ask for; tp, when not given, completes whatever ranks there are.
  int asked = 1;
  for (Axis a : {Axis::pp, Axis::dp, Axis::tp}) asked *= std::max(1, request.get(a).value_or(1));
  // Inside a launch its ranks are the ones at hand (they must run the layout exactly, which is checked
  // below with both numbers, so that a layout that is only the wrong size is not reported as broken).
  int available = launched ? std::max(in.launched_ranks, request.tp ? asked : 1) : asked;
  std::optional<int> gpus = gpus_given ? std::optional<int>(f.gpus) : std::nullopt;
  std::optional<int> nodes = nodes_given ? std::optional<int>(f.nodes) : std::nullopt;
  Machine machine;
  if (!f.machine.empty()) {
    machine = find_machine(f.machine);
    if (launched && !gpus) gpus = available;
  } else {
    // No machine: the ranks are CPU processes (as mpirun starts them), and device memory is unknown, so
    // memory_fit is not checked.
    const int ranks = gpus.value_or(available);
    machine = {.name = "host",
               .gpu = "CPU rank",
               .memory_gb = 0,
               .link = "local",
               .gpus_per_node = std::max(1, ranks),
               .gpu_socket = std::vector<int>(static_cast<size_t>(std::max(1, ranks)), 0)};
    gpus = ranks;
  }
  const Cluster cluster = make_cluster(machine, gpus, nodes);
  const MemoryOptions memory{.max_batch_tokens = in.max_batch_tokens,
                             .min_kv_tokens = in.kv_tokens,
                             .kv_dtype_bytes = parse_kv_dtype(in.kv_dtype) == KvDType::fp8 ? 1 : 2};
  PlanTarget target = load_plan_target(in.model_dir, cluster, memory, in.random_weights, in.max_layers);
  target.check_memory = !f.machine.empty();
  const LayoutCheck check = check_layout_with_alternatives(target, request);
  SY_CHECK(check.valid(), "{}", format_issues(target, check));
  const int world = check.sizes.world_size();
  if (launched) {
    SY_CHECK(world == in.launched_ranks,
             "mpirun started {} ranks, but the layout {} ({}) runs on {}; start it with mpirun -np {}, or run it "
             "without mpirun (switchyard then starts the {} ranks itself)",
             in.launched_ranks, layout_flags(check.sizes), describe_sizes(check.sizes), world, world, world);
  }
#ifndef SY_WITH_MPI
  SY_CHECK(world == 1, "{} is a valid layout of {} ranks ({}), but {}; without MPI, run one rank (--tp 1)",
           layout_flags(check.sizes), world, describe_sizes(check.sizes), kNoMpiBuild);
#endif
  return {.check = check, .placed = f.machine.empty() ? std::nullopt : std::optional<Cluster>(cluster)};
}

CLI::Validator finite_range(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number", cut_for_message(text));
        }
        if (used != text.size() || !std::isfinite(v) || v < min || v > max) {
          return fmt::format("'{}' is not a finite number in [{}, {}]", cut_for_message(text), min, max);
        }
        return {};
      },
      fmt::format("FLOAT in [{} - {}]", min, max));
}

void add_kv_dtype_flag(CLI::App* cmd, std::string& kv_dtype) {
  cmd->add_option("--kv-dtype", kv_dtype,
                  "KV cache dtype: auto (the device's own: fp32 on cpu, bf16 on cuda), bf16, or fp8 (E4M3, per-tensor "
                  "scales from the checkpoint's k_scale / v_scale, else 1.0)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              parse_kv_dtype(text);
            } catch (const Error& e) {
              return e.what();
            }
            return {};
          },
          "auto|bf16|fp8"));
}

CommandMain add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "valid parallel layouts of a model on a machine: memory per rank, KV capacity, predicted decode speed");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json, safetensors headers if present)")
      ->required();
  add_layout_flags(cmd, o->layout);
  cmd->add_flag("--json", o->json, "print JSON instead of tables");
  cmd->add_flag("--explain", o->explain,
                "with a layout: the decode step at --batch op by op (the table each op is timed from, its dims, "
                "calls and time)");
  cmd->add_flag("--explain-prefill", o->explain_prefill,
                "with a layout: the first chunk of the prefill of --batch prompts of --prefill-len tokens, op by op");
  cmd->add_flag("--config-only", o->config_only, "size the weights from config.json even if safetensors are present");
  cmd->add_flag("--all-dense-tp", o->all_dense_tp, "also list dense_tp sizes other than tp");
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "tokens of the largest forward pass per dp replica")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--max-seqs", o->max_seqs, "sequences per step (rows of logits)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--min-kv-tokens", o->min_kv_tokens, "KV tokens each replica must hold (default: --max-batch-tokens)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: bf16, fp16, fp8, fp32");
  cmd->add_option("--fixed-gb", o->fixed_gb, "fixed memory per GPU: context, workspaces, graphs, communicators")
      ->check(finite_range(0.0, 1e4));
  cmd->add_option("--redundant-experts", o->redundant_experts, "extra expert replicas per MoE layer, spread over ep")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  cmd->add_flag("--no-vocab-parallel", o->no_vocab_parallel, "replicate the embedding instead of splitting its rows");
  cmd->add_option("--batch", o->batch, "batch of the second decode estimate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--context", o->context, "context length of the decode estimates")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--prefill-len", o->prefill_len, "prompt tokens of the predicted prefill (default: --context)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option(
      "--profile", o->profiles,
      "machine profile from `bench calibrate` (repeatable: a layout of W ranks uses the one measured with W "
      "ranks); default: the preset's default efficiencies");
  return [o] { return run_plan(*o); };
}

}  // namespace sy
