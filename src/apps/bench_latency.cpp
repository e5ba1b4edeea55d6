// `switchyard bench latency`: engine-level prefill and decode timings per batch size, with the memory
// (and compute) floor of each step from design.md, the ratio "% of limit", and where the time goes. With a
// layout every rank runs the same engine steps (the model is collective) and rank 0 reports.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <utility>

#include "apps/bench_timing.h"
#include "apps/commands.h"
#include "apps/launch.h"
#include "base/check.h"
#include "base/log.h"
#include "parallel/comm_trace.h"
#include "parallel/rank_groups.h"
#include "runtime/engine.h"

namespace sy {

namespace {

struct BenchOptions {
  std::string model;
  std::string device = "cpu";
  std::string kv_dtype = "auto";  // --kv-dtype
  std::string routing = "model";  // --routing: model or uniform
  bool random_weights = false;
  uint64_t seed = 0;
  int64_t layers = 0;
  std::vector<int64_t> batches = {1, 10, 64, 256};
  int64_t input_len = 512;
  int64_t output_len = 128;
  int64_t max_batch_tokens = 8192;
  int64_t block_size = 16;
  int64_t warmup_prompts = 0;     // --warmup-prompts: prompts in each untimed prefill pass; 0: the batch
  bool decode_only = false;       // --decode-only: no prefill passes but the decode sequences' own
  int64_t prefill_max_batch = 0;  // --prefill-max-batch: prefill timed at batches up to this only; 0: at every batch
  std::string json;
  std::string comm_trace;  // --comm-trace: each rank's collectives of the timed steps to PREFIX.b<B>.rank<R>.json
  LayoutFlags layout;
};

// How this process takes part: alone, or as one rank of a layout.
struct BenchRank {
  std::string device;                      // this rank's backend
  Communicator* world = nullptr;           // null: one rank
  const ParallelGroups* groups = nullptr;  // with world
  const LayoutCheck* check = nullptr;      // with world
  std::string transport;                   // with world: "MPI (host memory)" or "NCCL"

  bool reports() const { return world == nullptr || world->rank() == 0; }
};

// Matrix-product rate in FLOP/s through the backend's own linear (its weight type, fp32 accumulation).
double measure_matrix_rate(Backend& be) {
  const int64_t n = be.device() == Device::cpu ? 1024 : 8192;
  auto w = be.alloc(static_cast<size_t>(n * n) * dtype_size(be.weight_dtype()));
  auto x = be.alloc(static_cast<size_t>(n * n) * sizeof(float));
  auto y = be.alloc(static_cast<size_t>(n * n) * sizeof(float));
  be.fill_random_normal({.dst = w->data(), .n = n * n, .seed = 2});
  std::vector<float> host(static_cast<size_t>(n * n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto& v : host) v = normal(rng);
  be.copy_to_device(x->data(), host.data(), host.size() * sizeof(float));
  std::vector<double> t;
  for (int i = 0; i < 8; ++i) {
    be.synchronize();
    const auto t0 = BenchClock::now();
    be.linear(x->as<float>(), w->data(), nullptr, y->as<float>(), n, n, n);
    be.synchronize();
    if (i >= 2) t.push_back(ms_since(t0));
  }
  return 2.0 * std::pow(static_cast<double>(n), 3) / (median(t) * 1e-3);
}

double experts_touched(const ReadCost::MoeLayer& l, double tokens) {
  const double e = static_cast<double>(l.n_experts), k = static_cast<double>(l.top_k);
  return e * (1.0 - std::pow(1.0 - k / e, tokens));
}

// Bytes a step over `tokens` new tokens whose sequences hold `context` tokens in all must read: each MoE
// layer's experts as counted (`touched`, one per layer) or, without counts, as uniform routing expects.
double step_bytes(const ReadCost& c, double tokens, double context, const std::vector<double>& touched = {}) {
  double bytes = c.always_bytes + tokens * c.embedding_row_bytes + context * c.kv_bytes_per_token;
  for (size_t i = 0; i < c.moe_layers.size(); ++i) {
    const auto& l = c.moe_layers[i];
    bytes += (touched.size() == c.moe_layers.size() ? touched[i] : experts_touched(l, tokens)) * l.expert_bytes;
  }
  return bytes;
}

nlohmann::json phase_json(const PhaseTimes& t) {
  nlohmann::json j;
  for (int p = 0; p < kPhaseCount; ++p) j[phase_name(static_cast<Phase>(p))] = t[static_cast<size_t>(p)];
  return j;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x / static_cast<double>(v.size());
  return v.empty() ? 0.0 : s;
}

// Adds `count` random prompts of --input-len tokens, each to generate `new_tokens`; returns their ids.
using AddPrompts = std::function<std::vector<int64_t>(int64_t new_tokens, int64_t count)>;

struct BatchResult {
  int64_t batch = 0;
  double prefill_ms = 0, prefill_tok_s = 0, prefill_floor_ms = 0;
  int64_t warmup_tokens = 0, timed_prefill_tokens = 0;  // tokens the engine ran in the untimed and the timed passes
  double decode_step_ms = 0, eager_step_ms = 0, decode_tok_s = 0, decode_floor_ms = 0, decode_floor_bytes = 0;
  double decode_context = 0;  // tokens a sequence holds, mean over the decode steps (all B run in each)
  // Each decode step's wall time in order (rank 0's): the profiled (eager) steps, then the timed ones, whose median
  // is decode_step_ms. A run whose steps still speed up after the first ones shows it here.
  std::vector<double> eager_steps_ms, steps_ms;
  // Distinct experts a decode step read per MoE layer: counted from the profiled steps' routing (empty
  // where not counted: under a layout rank 0 routes only its share), and as uniform routing expects.
  double experts_counted = 0, experts_uniform = 0, decode_floor_bytes_uniform = 0;
  bool counted = false;
  PhaseTimes phases{};
  double sampling_ms = 0, other_ms = 0;
  PhaseTimes prefill_phases{};  // ms per prefill pass, device events, uncaptured
  double prefill_eager_ms = 0;  // that profiled pass's wall time (with the experts counted after each step)
  // Distinct experts a prefill step read per MoE layer (mean over the profiled pass's steps), counted and as
  // uniform routing expects at each step's tokens; not counted under a layout.
  double prefill_experts_counted = 0, prefill_experts_uniform = 0;
  bool prefill_counted = false;
  bool prefill_timed = false;  // measure_prefill ran (not --decode-only, the batch within --prefill-max-batch)
};

// Whether batch B's prefill is timed: not under --decode-only, and B within --prefill-max-batch where given.
bool times_prefill(const BenchOptions& o, int64_t B) {
  return !o.decode_only && (o.prefill_max_batch == 0 || B <= o.prefill_max_batch);
}

// The prefill passes (bench latency without --decode-only): two untimed passes of the same shapes first (the
// first sizes the scratch memory and sees each step shape, the second captures the graphs), then the timed pass
// (B prompts, one token each: prefill alone, as the planner predicts it), then one profiled pass (eager, device
// events) for the prefill phase breakdown. With --warmup-prompts the untimed passes hold fewer prompts: a pass of
// many full steps sees its step shapes in its first few, and a batch of 256 prompts of 8,192 tokens would
// otherwise spend minutes in them.
void measure_prefill(Engine& engine, Backend& be, const BenchOptions& o, int64_t B, const AddPrompts& add_prompts,
                     Communicator* world, bool count, const ReadCost& c, BatchResult& r) {
  const int64_t warm = o.warmup_prompts > 0 ? std::min(B, o.warmup_prompts) : B;
  const int64_t processed0 = engine.tokens_processed();
  for (int pass = 0; pass < 2; ++pass) {
    add_prompts(1, warm);
    engine.run();
  }
  r.warmup_tokens = engine.tokens_processed() - processed0;
  add_prompts(1, B);
  be.synchronize();
  // The ranks start the clock together: the first step's collectives would otherwise count the time the
  // others took to set up.
  if (world != nullptr) world->barrier();
  const int64_t processed1 = engine.tokens_processed();
  const auto t0 = BenchClock::now();
  engine.run();
  be.synchronize();
  r.prefill_ms = ms_since(t0);
  r.timed_prefill_tokens = engine.tokens_processed() - processed1;
  be.set_profiling(true);
  be.take_phase_times();
  add_prompts(1, B);
  // The profiled pass also counts the experts each MoE layer's routing chose in each of its steps (marked on
  // the device, read after each step), against uniform routing's expectation at the step's tokens.
  be.set_expert_counting(count);
  int64_t tokens_before = engine.tokens_processed();
  double prefill_counted = 0, prefill_uniform = 0;
  int prefill_steps = 0;
  const auto p0 = BenchClock::now();
  engine.run([&] {
    const std::vector<int64_t> touched = count ? be.take_touched_experts() : std::vector<int64_t>{};
    const auto tokens = static_cast<double>(engine.tokens_processed() - tokens_before);
    tokens_before = engine.tokens_processed();
    if (touched.size() != c.moe_layers.size() || touched.empty()) return;
    for (size_t i = 0; i < touched.size(); ++i) {
      prefill_counted += static_cast<double>(touched[i]) / static_cast<double>(touched.size());
      prefill_uniform += experts_touched(c.moe_layers[i], tokens) / static_cast<double>(touched.size());
    }
    ++prefill_steps;
  });
  be.synchronize();
  r.prefill_eager_ms = ms_since(p0);
  be.set_expert_counting(false);
  if (prefill_steps > 0) {
    r.prefill_experts_counted = prefill_counted / prefill_steps;
    r.prefill_experts_uniform = prefill_uniform / prefill_steps;
    r.prefill_counted = true;
  }
  r.prefill_phases = be.take_phase_times();
  be.set_profiling(false);
}

// Every rank of a layout runs this alike: the same prompts (the generator is seeded), the same steps.
BatchResult run_batch(Model& model, Backend& be, const BenchOptions& o, int64_t B, double bandwidth, double matrix_rate,
                      Communicator* world) {
  const ModelInfo& info = model.info();
  // Decode is timed over steps that carry all B sequences. Prompts are prefilled a budget of max_batch_tokens
  // a step, the running ones decoding meanwhile, so the first sequences hold up to `lead` tokens more than the
  // last when every prompt is in: each decode sequence may generate that many beyond output_len (its KV
  // reserved), and is aborted once the timed steps are done.
  const int64_t prefill_per_step = o.max_batch_tokens - B;  // at least 1 (check_options)
  const int64_t lead = (B * o.input_len + prefill_per_step - 1) / prefill_per_step + 1;
  const int64_t per_seq = o.input_len + o.output_len + lead;
  EngineConfig config{.block_size = o.block_size,
                      .kv_blocks = B * ((per_seq + o.block_size - 1) / o.block_size) + B,
                      .scheduler = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = std::max<int64_t>(B, 1)}};
  Engine engine(model, be, config);
  std::mt19937 rng(static_cast<uint32_t>(1000 + B));
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(info.vocab_size - 1));
  const AddPrompts add_prompts = [&](int64_t new_tokens, int64_t count) {
    std::vector<int64_t> added;
    for (int64_t b = 0; b < count; ++b) {
      std::vector<int32_t> prompt(static_cast<size_t>(o.input_len));
      for (auto& t : prompt) t = token(rng);
      added.push_back(engine.add({.prompt = prompt, .max_new_tokens = new_tokens}));
    }
    return added;
  };
  BatchResult r{.batch = B};
  // Prefill is measured in steady state, as a server runs it (measure_prefill; the decode sequences' own
  // prefill below has the first ones decoding in its steps when the prompts take several). --decode-only skips
  // it: repeated runs of a case for its decode step (bench/plan_accuracy.py --repeats), where the prefill
  // passes would take most of the run. --prefill-max-batch skips it above that batch: the repeats time the
  // small batches' prefill again, where its passes take a second or two.
  const ReadCost& c = info.cost;
  const bool count = world == nullptr || world->size() == 1;
  r.prefill_timed = times_prefill(o, B);
  if (r.prefill_timed) measure_prefill(engine, be, o, B, add_prompts, world, count, c, r);

  // Within the model's context (the check below says so should a sequence then end before the timed steps do).
  const std::vector<int64_t> ids =
      add_prompts(std::max(o.output_len, std::min(o.output_len + lead, info.max_position_embeddings - o.input_len)), B);
  const auto all_prefilled = [&] {
    return std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return !engine.result(id).output.empty(); });
  };
  while (!all_prefilled()) engine.step();
  be.synchronize();
  if (world != nullptr) world->barrier();  // the decode steps start together
  const double T = static_cast<double>(B * o.input_len);
  if (r.prefill_timed) r.prefill_tok_s = T / (r.prefill_ms * 1e-3);
  const double prefill_flops = 2.0 * T * c.active_params_per_token + 2.0 * T *
                                                                         (static_cast<double>(o.input_len) / 2.0) *
                                                                         static_cast<double>(c.attn_heads_x_dims);
  double prefill_bytes = c.always_bytes + T * c.embedding_row_bytes + T * c.kv_bytes_per_token;
  for (const auto& l : c.moe_layers) prefill_bytes += experts_touched(l, T) * l.expert_bytes;
  r.prefill_floor_ms = 1e3 * std::max(prefill_flops / matrix_rate, prefill_bytes / bandwidth);

  // Decode: every step now carries exactly one token per sequence. The first steps run eagerly with
  // device events for the phase breakdown; the rest are timed without events (and captured as one
  // graph per step shape where the backend can), and give the step time.
  constexpr int kProfiledSteps = 6;
  const int64_t decode_steps = o.output_len - 1;  // one token per sequence came with its prefill
  double context = 0;                             // tokens the B sequences hold at the first timed step
  for (int64_t id : ids) context += static_cast<double>(o.input_len + engine.result(id).output.size());
  const auto decode_step = [&] {
    engine.step();
    be.synchronize();
    SY_CHECK(static_cast<int64_t>(engine.scheduler().running().size()) == B &&
                 std::none_of(ids.begin(), ids.end(), [&](int64_t id) { return engine.result(id).finished; }),
             "bench latency: a decode step ran {} of the batch's {} sequences (prompts of {} tokens prefilled {} "
             "tokens a step); raise --max-batch-tokens or lower --batch",
             engine.scheduler().running().size(), B, o.input_len, o.max_batch_tokens);
  };
  std::vector<double> eager_ms, step_ms;
  be.set_profiling(true);
  be.take_phase_times();
  const double sampling0 = engine.sampling_ms();
  // The profiled steps also count the experts each MoE layer's routing chose (marked on the device).
  be.set_expert_counting(count);
  std::vector<double> touched(info.cost.moe_layers.size(), 0.0);
  int counted_steps = 0;
  while (static_cast<int64_t>(eager_ms.size()) < std::min<int64_t>(kProfiledSteps, decode_steps)) {
    const auto s0 = BenchClock::now();
    decode_step();
    eager_ms.push_back(ms_since(s0));
    const std::vector<int64_t> step_touched = count ? be.take_touched_experts() : std::vector<int64_t>{};
    if (step_touched.size() == touched.size() && !touched.empty()) {
      for (size_t i = 0; i < touched.size(); ++i) touched[i] += static_cast<double>(step_touched[i]);
      ++counted_steps;
    }
  }
  be.set_expert_counting(false);
  const PhaseTimes phases = be.take_phase_times();
  const double sampling = engine.sampling_ms() - sampling0;
  be.set_profiling(false);
  const bool tracing = world != nullptr && !o.comm_trace.empty();
  comm_trace::take();
  comm_trace::enable(tracing);
  while (static_cast<int64_t>(eager_ms.size() + step_ms.size()) < decode_steps) {
    comm_trace::set_step(static_cast<int64_t>(step_ms.size()));
    const auto s0 = BenchClock::now();
    decode_step();
    step_ms.push_back(ms_since(s0));
  }
  comm_trace::enable(false);
  for (int64_t id : ids) engine.abort(id);
  SY_CHECK(!eager_ms.empty(), "no decode steps ran; use --output-len of at least 2");
  r.decode_step_ms = median(step_ms.empty() ? eager_ms : step_ms);
  r.eager_step_ms = median(eager_ms);
  r.decode_tok_s = static_cast<double>(B) / (r.decode_step_ms * 1e-3);
  context += static_cast<double>(B) * static_cast<double>(decode_steps) / 2.0;  // the steps' mean
  r.decode_context = context / static_cast<double>(B);
  std::vector<double> uniform;
  for (const auto& l : c.moe_layers) uniform.push_back(experts_touched(l, static_cast<double>(B)));
  r.experts_uniform = mean(uniform);
  if (counted_steps > 0) {
    for (double& t : touched) t /= counted_steps;
    r.experts_counted = mean(touched);
    r.counted = true;
  } else {
    touched.clear();
  }
  r.decode_floor_bytes = step_bytes(c, static_cast<double>(B), context, touched);
  r.decode_floor_bytes_uniform = step_bytes(c, static_cast<double>(B), context);
  r.decode_floor_ms = 1e3 * r.decode_floor_bytes / bandwidth;
  const auto n = static_cast<double>(eager_ms.size());
  double eager_mean = 0, accounted = 0;
  for (double s : eager_ms) eager_mean += s / n;
  for (int p = 0; p < kPhaseCount; ++p) {
    r.phases[static_cast<size_t>(p)] = phases[static_cast<size_t>(p)] / n;
    accounted += r.phases[static_cast<size_t>(p)];
  }
  // Sampling: on the host (engine time) plus on the device (its phase). "other" holds the marked other phase
  // plus host time between device work (launches, syncs).
  const double host_sampling = sampling / n;
  r.sampling_ms = host_sampling + r.phases[static_cast<size_t>(Phase::sampling)];
  r.other_ms = std::max(0.0, eager_mean - accounted - host_sampling) + r.phases[static_cast<size_t>(Phase::other)];
  if (tracing) {
    const std::string path = fmt::format("{}.b{}.rank{}.json", o.comm_trace, B, world->rank());
    // Beside its collectives, each rank's own eager steps and their phases (ms a step): bench latency reports
    // rank 0's, and a rank the others wait for shows here in which phase it is slower.
    nlohmann::json trace = nlohmann::json::parse(comm_trace::to_json(comm_trace::take(), world->rank(), step_ms));
    trace["eager_step_ms"] = eager_ms;
    trace["eager_phase_ms"] = phase_json(r.phases);
    std::ofstream f(path);
    f << trace.dump() << "\n";
    SY_CHECK(f.good(), "bench latency: cannot write the collective trace {}", path);
  }
  r.eager_steps_ms = std::move(eager_ms);
  r.steps_ms = std::move(step_ms);
  return r;
}

void check_options(const BenchOptions& o) {
  SY_CHECK(o.input_len >= 1 && o.output_len >= 2, "--input-len must be >= 1 and --output-len >= 2, got {} and {}",
           o.input_len, o.output_len);
  SY_CHECK(!o.decode_only || o.warmup_prompts == 0,
           "--warmup-prompts {} sizes the untimed prefill passes, which --decode-only leaves out; drop one of the two",
           o.warmup_prompts);
  SY_CHECK(!o.decode_only || o.prefill_max_batch == 0,
           "--prefill-max-batch {} times the prefill up to that batch, which --decode-only leaves out at every batch; "
           "drop one of the two",
           o.prefill_max_batch);
  for (int64_t b : o.batches) {
    SY_CHECK(b >= 1, "--batch sizes must be >= 1, got {}", b);
    // A decode step of the whole batch takes one token a sequence out of the step's budget, and prompts must
    // still get some of it.
    SY_CHECK(b < o.max_batch_tokens,
             "--batch {} needs --max-batch-tokens above it (got {}): a decode step of every sequence is {} tokens", b,
             o.max_batch_tokens, b);
  }
}

// The layout, checked before any weight is read (as generate checks it); one rank without layout flags.
GenerateLayout check_bench_layout(const BenchOptions& o, int launched_ranks) {
  const int64_t largest = *std::max_element(o.batches.begin(), o.batches.end());
  return check_generate_layout(o.layout, {.model_dir = o.model,
                                          .random_weights = o.random_weights,
                                          .max_layers = o.layers,
                                          .max_batch_tokens = o.max_batch_tokens,
                                          .kv_tokens = largest * (o.input_len + o.output_len),
                                          .kv_dtype = o.kv_dtype,
                                          .launched_ranks = launched_ranks});
}

int bench_latency(const BenchOptions& o, const BenchRank& rank) {
  auto backend = make_backend(rank.device, parse_kv_dtype(o.kv_dtype));
  backend->set_uniform_routing(o.routing == "uniform");
  const auto t_load = BenchClock::now();
  auto model = load_model({.dir = o.model,
                           .random_weights = o.random_weights,
                           .seed = o.seed,
                           .max_layers = o.layers,
                           .parallel = rank.groups},
                          *backend);
  backend->synchronize();
  const double load_s = ms_since(t_load) / 1e3;
  // Every rank measures its own device, at the same time as the others (a CPU rank shares the memory bus
  // with them, as it does in the steps); rank 0's figures are reported.
  const double bandwidth = measure_copy_bandwidth(*backend);
  const double matrix_rate = measure_matrix_rate(*backend);
  const ModelInfo& info = model->info();
  const bool layout = rank.world != nullptr && rank.world->size() > 1;
  // The model reports the read cost of the whole model on every rank; under a layout the limits are those
  // of all W devices together (W × the bandwidth and matrix rate measured on this rank's device).
  const double ranks = layout ? static_cast<double>(rank.world->size()) : 1.0;
  int64_t layers = info.n_layers;
  double weight_gb = static_cast<double>(info.weight_bytes) / 1e9, fullest_gb = weight_gb;
  if (layout) {
    int64_t staged = 0;
    for (int64_t n : rank.check->stage_layers) staged += n;
    layers = staged > 0 ? staged : layers;
    const auto mine = static_cast<int64_t>(info.weight_bytes);
    std::vector<int64_t> all(static_cast<size_t>(rank.world->size()));
    rank.world->all_gather(&mine, all.data(), 1, DType::i64);
    weight_gb = 0;
    for (int64_t b : all) weight_gb += static_cast<double>(b) / 1e9;
    fullest_gb = static_cast<double>(*std::max_element(all.begin(), all.end())) / 1e9;
  }
  if (rank.reports()) {
    if (layout) {
      std::printf(
          "model %s, %lld layers, %.2f GB of weights over %d ranks (%.2f GB on the fullest) loaded in %.1f s; "
          "device %s on rank 0: copy %.0f GB/s, matrix %.0f TFLOP/s\n",
          info.architecture.c_str(), static_cast<long long>(layers), weight_gb, rank.world->size(), fullest_gb, load_s,
          rank.device.c_str(), bandwidth / 1e9, matrix_rate / 1e12);
      std::printf(
          "layout %s: %s; collectives over %s; times and phases are rank 0's; floors: the whole model's bytes "
          "and FLOPs over all %d devices' bandwidth and matrix rate\n",
          layout_flags(rank.check->sizes).c_str(), describe_sizes(rank.check->sizes).c_str(), rank.transport.c_str(),
          rank.world->size());
    } else {
      std::printf(
          "model %s, %lld layers, %.2f GB of weights loaded in %.1f s; device %s: copy %.0f GB/s, matrix %.0f "
          "TFLOP/s\n",
          info.architecture.c_str(), static_cast<long long>(layers), weight_gb, load_s, rank.device.c_str(),
          bandwidth / 1e9, matrix_rate / 1e12);
    }
    const std::string prefill_note =
        o.decode_only
            ? std::string("not measured (--decode-only)")
            : fmt::format(
                  "one timed pass after two untimed ones of the same shapes{}{}",
                  o.warmup_prompts > 0 ? fmt::format(" (of at most {} prompts)", o.warmup_prompts) : std::string(),
                  o.prefill_max_batch > 0
                      ? fmt::format(", at batches up to {} (--prefill-max-batch)", o.prefill_max_batch)
                      : std::string());
    std::printf(
        "input %lld, output %lld tokens per sequence; prefill: %s; step ms: median decode step (captured where the "
        "device can); eager ms and the phases "
        "(ms per step, device events): the first decode steps, uncaptured; the decode floor reads the experts "
        "their routing touched; routing: %s\n\n",
        static_cast<long long>(o.input_len), static_cast<long long>(o.output_len), prefill_note.c_str(),
        o.routing == "uniform" ? "uniform (each token's experts drawn uniformly, the router's weights kept)"
                               : "the model's");
    std::printf("%6s %12s %9s | %9s %11s %9s %7s | %9s | %9s %7s %8s %8s %8s %7s %13s %8s %7s\n", "batch",
                "prefill tok/s", "% limit", "step ms", "decode tok/s", "floor ms", "% limit", "eager ms", "attention",
                "router", "experts", "combine", "dense", "norms", "communication", "sampling", "other");
    std::fflush(stdout);
  }
  nlohmann::json out = {
      {"model", info.architecture},
      {"device", rank.device},
      {"layers", layers},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"routing", o.routing},
      {"warmup_prompts", o.warmup_prompts > 0 ? nlohmann::json(o.warmup_prompts) : nlohmann::json(nullptr)},
      {"decode_only", o.decode_only},
      {"prefill_max_batch", o.prefill_max_batch > 0 ? nlohmann::json(o.prefill_max_batch) : nlohmann::json(nullptr)},
      {"copy_bandwidth_gb_s", bandwidth / 1e9},
      {"matrix_tflop_s", matrix_rate / 1e12},
      {"weight_gb", weight_gb},
      {"results", nlohmann::json::array()}};
  if (layout) {
    out["ranks"] = rank.world->size();
    out["layout"] = {{"flags", layout_flags(rank.check->sizes)}, {"sizes", describe_sizes(rank.check->sizes)}};
    out["transport"] = rank.transport;
    out["fullest_rank_weight_gb"] = fullest_gb;
  }
  std::vector<BatchResult> results;
  for (int64_t B : o.batches) {
    const BatchResult r = run_batch(*model, *backend, o, B, bandwidth * ranks, matrix_rate * ranks, rank.world);
    results.push_back(r);
    if (!rank.reports()) continue;
    const auto ph = [&](Phase p) { return r.phases[static_cast<size_t>(p)]; };
    const double prefill_pct = r.prefill_timed ? 100.0 * r.prefill_floor_ms / r.prefill_ms : 0.0;
    const double decode_pct = 100.0 * r.decode_floor_ms / r.decode_step_ms;
    std::printf(
        "%6lld %12s %9s | %9.3f %11.0f %9.3f %6.1f%% | %9.3f | %9.3f %7.3f %8.3f %8.3f %8.3f %7.3f %13.3f "
        "%8.3f %7.3f\n",
        static_cast<long long>(B), r.prefill_timed ? fmt::format("{:.0f}", r.prefill_tok_s).c_str() : "-",
        r.prefill_timed ? fmt::format("{:.1f}%", prefill_pct).c_str() : "-", r.decode_step_ms, r.decode_tok_s,
        r.decode_floor_ms, decode_pct, r.eager_step_ms, ph(Phase::attention), ph(Phase::router), ph(Phase::experts),
        ph(Phase::combine), ph(Phase::dense), ph(Phase::norms), ph(Phase::communication), r.sampling_ms, r.other_ms);
    std::fflush(stdout);
    nlohmann::json phases;
    for (int p = 0; p < kPhaseCount; ++p) {
      if (static_cast<Phase>(p) != Phase::other && static_cast<Phase>(p) != Phase::sampling)
        phases[phase_name(static_cast<Phase>(p))] = r.phases[static_cast<size_t>(p)];
    }
    phases["sampling"] = r.sampling_ms;
    phases["other"] = r.other_ms;
    nlohmann::json row = {
        {"batch", B},
        {"prefill_ms", r.prefill_ms},
        {"prefill_warmup_tokens", r.warmup_tokens},
        {"prefill_timed_tokens", r.timed_prefill_tokens},
        {"prefill_tok_s", r.prefill_tok_s},
        {"prefill_floor_ms", r.prefill_floor_ms},
        {"prefill_pct_of_limit", prefill_pct},
        {"decode_step_ms", r.decode_step_ms},
        {"decode_eager_step_ms", r.eager_step_ms},
        {"decode_eager_steps_ms", r.eager_steps_ms},
        {"decode_steps_ms", r.steps_ms},
        {"decode_tok_s", r.decode_tok_s},
        {"decode_floor_ms", r.decode_floor_ms},
        {"decode_floor_bytes", r.decode_floor_bytes},
        {"decode_context_tokens", r.decode_context},
        {"decode_pct_of_limit", decode_pct},
        {"decode_experts_per_moe_layer", r.counted ? nlohmann::json(r.experts_counted) : nlohmann::json(nullptr)},
        {"decode_experts_per_moe_layer_uniform", r.experts_uniform},
        {"decode_floor_bytes_uniform", r.decode_floor_bytes_uniform},
        {"decode_phase_ms", phases},
        {"prefill_eager_ms", r.prefill_eager_ms},
        {"prefill_experts_per_moe_layer",
         r.prefill_counted ? nlohmann::json(r.prefill_experts_counted) : nlohmann::json(nullptr)},
        {"prefill_experts_per_moe_layer_uniform", r.prefill_experts_uniform},
        {"prefill_phase_ms", phase_json(r.prefill_phases)}};
    if (!r.prefill_timed) {
      for (auto& [key, value] : row.items()) {
        if (key.starts_with("prefill_")) value = nullptr;
      }
    }
    out["results"].push_back(std::move(row));
  }
  if (rank.reports() && !info.cost.moe_layers.empty()) {
    std::printf(
        "\nexperts read per MoE layer by a decode step (the floor's expert bytes): counted from the routing of "
        "the profiled steps, and as uniform routing would give\n");
    for (const BatchResult& r : results) {
      if (r.counted) {
        std::printf("%6lld %9.1f counted %9.1f uniform\n", static_cast<long long>(r.batch), r.experts_counted,
                    r.experts_uniform);
      } else {
        std::printf("%6lld %9s counted %9.1f uniform (the floor uses it)\n", static_cast<long long>(r.batch), "-",
                    r.experts_uniform);
      }
    }
  }
  if (rank.reports() && o.decode_only) {
    std::printf("\nprefill: not measured (--decode-only)\n");
  } else if (rank.reports()) {
    // Where a prefill pass goes (one eager pass with device events; its wall time next to the timed one).
    std::printf("\nprefill phases by batch size (ms per pass of batch x input tokens, eager with device events)\n");
    std::printf("%7s %9s %9s | %9s %7s %8s %8s %8s %7s %13s %7s\n", "prefill", "timed ms", "eager ms", "attention",
                "router", "experts", "combine", "dense", "norms", "communication", "other");
    for (const BatchResult& r : results) {
      if (!r.prefill_timed) {
        std::printf("%7lld %9s (not measured: above --prefill-max-batch)\n", static_cast<long long>(r.batch), "-");
        continue;
      }
      const auto ph = [&](Phase p) { return r.prefill_phases[static_cast<size_t>(p)]; };
      std::printf("%7lld %9.2f %9.2f | %9.2f %7.2f %8.2f %8.2f %8.2f %7.2f %13.2f %7.2f\n",
                  static_cast<long long>(r.batch), r.prefill_ms, r.prefill_eager_ms, ph(Phase::attention),
                  ph(Phase::router), ph(Phase::experts), ph(Phase::combine), ph(Phase::dense), ph(Phase::norms),
                  ph(Phase::communication), ph(Phase::other));
    }
    std::fflush(stdout);
  }
  if (rank.reports() && !o.json.empty()) {
    std::ofstream f(o.json);
    SY_CHECK(f.good(), "cannot write --json file {}", o.json);
    f << out.dump(2) << "\n";
  }
  return 0;
}

// One rank of an mpirun launch: checks agreed on by every rank, the groups of the layout, the layout
// printed by rank 0, then the benchmark.
int run_bench_latency_rank(const BenchOptions& o, Launch& launch) {
  Communicator& world = launch.join_world();
  GenerateLayout layout;
  if (!launch.check_on_every_rank([&] {
        check_options(o);
        layout = check_bench_layout(o, world.size());
      })) {
    return 2;
  }
  const LayoutCheck& check = layout.check;
  const RankGroups groups = make_rank_groups(world, Mapping(check.sizes), check.request.pp_layers, o.device);
  print_layout(world, check, layout.placed ? &*layout.placed : nullptr);
  return bench_latency(o, {.device = groups.device,
                           .world = &world,
                           .groups = groups.groups.get(),
                           .check = &check,
                           .transport = groups.transport});
}

int run_bench_latency(const BenchOptions& o, Launch& launch) {
  if (launch.under_mpirun()) return run_bench_latency_rank(o, launch);
  check_options(o);
  const LayoutCheck check = check_bench_layout(o, 0).check;
  const int world = check.sizes.world_size();
  if (world > 1) launch.rerun_under_mpirun(world);
  return bench_latency(o, {.device = o.device});
}

}  // namespace

CommandMain add_bench_latency_command(CLI::App& bench, Launch& launch) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = bench.add_subcommand("latency", "engine-level prefill and decode step times against the floor");
  cmd->add_option("--model", o->model, "Hugging Face model folder (with --random-weights only config.json)")
      ->required();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (with a layout, cuda gives each rank its local GPU)");
  add_kv_dtype_flag(cmd, o->kv_dtype);
  cmd->add_flag("--random-weights", o->random_weights, "seeded random weights; only config.json is read");
  cmd->add_option("--seed", o->seed, "random-weight seed");
  cmd->add_option("--routing", o->routing,
                  "model: the router's choice; uniform: each token's experts drawn uniformly at random (as the "
                  "planner predicts; random weights route far from uniformly)")
      ->check(CLI::IsMember({"model", "uniform"}));
  cmd->add_option("--layers", o->layers, "keep only the first N layers")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batches, "batch sizes, e.g. 1,10,64,256")->delimiter(',');
  cmd->add_option("--input-len", o->input_len, "prompt tokens per sequence")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--output-len", o->output_len, "generated tokens per sequence")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "tokens per forward pass (prefill chunk)")
      ->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--block-size", o->block_size, "KV cache block size")->check(CLI::Range(1, 4096));
  cmd->add_option("--warmup-prompts", o->warmup_prompts,
                  "prompts in each of the two untimed prefill passes (default: the batch); a few suffice when the "
                  "batch's prompts fill many steps of --max-batch-tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--decode-only", o->decode_only,
                "time the decode steps only: no prefill passes but the decode sequences' own (a run several times "
                "faster where prefill dominates it; prefill figures null in --json)");
  cmd->add_option("--prefill-max-batch", o->prefill_max_batch,
                  "time the prefill only at batch sizes up to this; larger ones time the decode steps only, as "
                  "--decode-only does (their prefill figures null in --json)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", o->json, "also write the results as JSON to this file");
  cmd->add_option("--comm-trace", o->comm_trace,
                  "with several ranks: each rank writes the collectives of the timed decode steps (group, call "
                  "number, bytes, enter and exit times) to PREFIX.b<batch>.rank<R>.json; bench/comm_trace.py "
                  "splits them into waiting for the last rank and the transfer (MPI ranks; NCCL's calls return "
                  "once enqueued, so their times say little)");
  add_layout_flags(cmd, o->layout);
  return [o, &launch] { return run_bench_latency(*o, launch); };
}

}  // namespace sy
