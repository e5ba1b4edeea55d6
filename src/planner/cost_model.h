// The planner's speed model: the time of a decode step and of a prefill for a layout, predicted from the ops
// each rank runs (the same ops, in the same order and phases, as model/ and runtime/ issue them) timed by a
// machine profile (bench calibrate), with the collectives each rank waits on and the pipeline's micro-batches.
// Without a profile the ops are timed by their bytes and FLOPs at default efficiencies of the machine preset
// (said so in plan's output).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_desc.h"
#include "parallel/machine.h"
#include "parallel/mapping.h"
#include "planner/profile.h"

namespace sy {

// bench latency's phases, in its order.
inline constexpr int kCostPhaseCount = 9;
inline constexpr std::array<const char*, kCostPhaseCount> kCostPhaseNames = {
    "attention", "router", "experts", "combine", "dense", "norms", "communication", "sampling", "other"};

struct StepPrediction {
  int64_t batch = 0;         // sequences (over every dp replica)
  int64_t context = 0;       // tokens in each sequence's cache (decode), prompt tokens (prefill)
  double seconds = 0;        // decode: one step as the engine runs it (a replayed graph on one GPU); prefill: all of it
  double eager_seconds = 0;  // the same work issued op by op (the phase breakdown's)
  std::array<double, kCostPhaseCount> phase_seconds{};  // eager, per phase, of the busiest rank
  double tokens_per_second = 0;                         // decode: batch / seconds; prefill: prompt tokens / seconds
  bool graph = false;                                   // decode replayed as a captured graph
};

// The busiest expert rank's work when `tokens` tokens each route to top_k distinct experts of n_experts, uniformly
// at random, and rank r holds experts [r·E/ep, (r+1)·E/ep): the expected pairs and distinct experts of the rank
// with the most distinct experts (at small batch a rank's time is its experts' weights). Up to 512 pairs: the
// mean of a fixed-seed simulation (a normal approximation is far off at a handful of pairs: 2 pairs on 4 ranks
// give 1.14, not 1.52); more: mean plus extreme-value spread, every local expert touched as the pairs cover them.
struct ExpertLoad {
  double pairs = 0;
  double touched = 0;
};
ExpertLoad busiest_expert_rank(double tokens, int64_t top_k, int64_t n_experts, int ep);

struct CostInputs {
  const ModelDesc* shape = nullptr;
  ParallelSizes sizes;
  std::vector<int64_t> stage_layers;  // decoder layers per pipeline stage
  const Cluster* cluster = nullptr;
  const MachineProfile* profile = nullptr;
  int64_t kv_bytes = 2;  // per cached value
  int64_t max_batch_tokens = 8192;
};

// One decode step of `batch` sequences whose caches hold `context` tokens.
StepPrediction predict_decode(const CostInputs& in, int64_t batch, int64_t context);
// The prefill of `batch` prompts of `len` tokens, in chunks of at most max_batch_tokens tokens.
StepPrediction predict_prefill(const CostInputs& in, int64_t batch, int64_t len);

// One op of a predicted decode step as the cost model priced it (plan --explain), in the order priced.
struct CostTraceRow {
  int stage = 0;       // pipeline stage; -1: the step's tail (logits to the host, sampling)
  std::string pass;    // "hot": timed on their own operands; "cold": beyond the caches (the _cold tables)
  double weight = 1;   // the share of the stage's time this pass carries (beyond_caches' fraction, or 1 - it)
  std::string phase;   // bench latency's
  std::string op;      // the op priced (or the collective)
  std::string table;   // the profile's table it was timed from; "work" where none (bytes and FLOPs at the rates)
  std::string query;   // the op's dims, name=value
  double share = 1;    // of the ranks at work at once (CPU ranks: between the table's alone and all-ranks times)
  double calls = 1;    // a step: calls a layer times layers
  double seconds = 0;  // one call, as priced (at least its launch when eager)
};

// The decode step predict_decode prices, op by op (stage by stage; each pass of a stage weighted as the step mixes
// them), with the pipeline's sends and the skew the ranks wait for as rows of their own; and the step as predicted.
struct CostExplanation {
  StepPrediction step;
  std::vector<CostTraceRow> rows;
};
CostExplanation explain_decode(const CostInputs& in, int64_t batch, int64_t context);
// The first chunk predict_prefill prices for `batch` prompts of `len` tokens (as many whole prompts as
// max_batch_tokens holds, else the prompt's first max_batch_tokens), op by op; step: that chunk.
CostExplanation explain_prefill_chunk(const CostInputs& in, int64_t batch, int64_t len);

// A profile of default efficiencies from a machine preset: copies at 80% of the memory bandwidth, products at
// 60% of the bf16 rate, 4 µs to launch an op, 10 µs to launch a graph; no op tables (every op by its work).
MachineProfile preset_profile(const Machine& machine);

}  // namespace sy
