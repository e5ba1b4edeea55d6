// The speed model's pricing of single ops (cost_ops.cpp): each op's work by its dims, the profile's table or rates
// that time it (hot, beyond the caches, alone or beside the other ranks), and one rank's ops summed per phase.
// Internal to the planner: cost_model.cpp lays out which ops a rank runs per step; this prices them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/machine.h"
#include "planner/cost_model.h"
#include "planner/profile.h"

namespace sy::cost {

// bench latency's phases (kCostPhaseNames), as indices.
enum Ph : uint8_t { attention, router, experts, combine, dense, norms, communication, sampling, other };

inline double d(int64_t v) { return static_cast<double>(v); }

// The work of each op the profile times, by its dims (the bytes each must move, the FLOPs it must do).
// wb: bytes per weight element; kvb: per cached value; activations are fp32 in the Backend API.
struct Works {
  double wb = 2;
  double kvb = 2;
  // The CPU kernels (kernels/cpu/ops.cpp paged_attention, mla_ops.cpp) take each query head's dot products over
  // its keys in turn: their time follows query heads × keys, not the kv heads' bytes. Between shapes of other
  // head counts a lookup scales by these reads (OpWork::reads): 4 query heads on 2 kv heads took 12.7 µs over 128
  // keys where 4 on 1 took 12.6 and 8 on 2 took 23.4 (r19's 1-rank profile, part g).
  bool reads_per_head = false;

  OpWork linear(const DimView& v, double w_bytes) const {
    const double m = v["m"], n = v["n"], k = v["k"];
    return {.bytes = n * k * w_bytes + 4 * (m * k + m * n), .flops = 2 * m * n * k};
  }
  OpWork moe(const DimView& v) const {
    const double t = v["tokens"], h = v["hidden"], i = v["inter"];
    return {.bytes = v["touched"] * 3 * h * i * wb + 8 * t * h, .flops = 6 * t * v["top_k"] * h * i};
  }
  OpWork paged_attention(const DimView& v) const {
    const double s = v["seqs"], q = v["q_len"], c = v["context"], hd = v["head_dim"];
    const double pairs = q * c - q * (q - 1) / 2;  // causal: query i sees c - q + i + 1 keys
    return {.bytes = s * c * v["kv_heads"] * hd * 2 * kvb + 8 * s * q * v["n_heads"] * hd,
            .flops = 4 * s * v["n_heads"] * hd * pairs,
            .reads = reads_per_head ? s * pairs * v["n_heads"] * hd * 2 * kvb : 0};
  }
  OpWork mla_attention(const DimView& v) const {
    const double s = v["seqs"], q = v["q_len"], c = v["context"], l = v["kv_lora_rank"], r = v["rope_dim"];
    const double pairs = q * c - q * (q - 1) / 2;
    return {.bytes = s * c * (l + r) * kvb + 8 * s * q * v["n_heads"] * (l + r),
            .flops = 2 * s * v["n_heads"] * pairs * (2 * l + r),
            .reads = reads_per_head ? s * pairs * v["n_heads"] * (l + r) * kvb : 0};
  }
};

// How many of a CPU profile's ranks run an op at once, as the share of the way from rank 0 alone (0) to every rank
// together (1): the ranks share the host's cores and memory, so an op runs faster while the others wait.
struct Busy {
  double share = 1;
  double stream = 0;  // bytes/s a rank streams beyond the caches at this share; 0: no such floor
};

// explain_decode's rows while it runs (on its thread); null otherwise. The context the next rows get: their stage,
// pass and how many times their layer repeats.
struct TraceState {
  std::vector<CostTraceRow>* rows = nullptr;
  int stage = 0;
  std::string pass = "hot";
  double layers = 1;
};
extern thread_local TraceState t_trace;

// A row of waiting the stage adds to its mixed passes' time (the skew, a pipeline boundary).
void trace_wait(const std::string& op, const std::string& table, const std::string& query, double seconds);

// The expected largest of n independent standard normals (0.5642 = 1/√π for n = 2, 1.0294 for 4, 1.4236 for 8).
double expected_max_normal(int n);

// The ops of one rank, accumulated per phase: kernel time (as a captured graph replays them) and eager time
// (each op at least its launch).
class Ops {
 public:
  // stream: hold every op to its bytes at the profile's streaming rate (a step beyond the caches).
  Ops(const MachineProfile& p, const Cluster& c, double kvb, bool stream = false) : p_(p), c_(c), stream_(stream) {
    w_.wb = p.weight_bytes;
    w_.kvb = kvb;
    w_.reads_per_head = p.device == "cpu";
    busy(1);
  }
  // The share of the profile's ranks running the ops that follow at once (Busy).
  void busy(double share) {
    busy_.share = std::clamp(share, 0.0, 1.0);
    busy_.stream = 0;
    if (!stream_) return;
    const double all = p_.stream_bytes_per_s, alone = p_.stream_alone_bytes_per_s;
    busy_.stream = alone > 0 ? alone + busy_.share * (all - alone) : all;
  }
  double busy_share() const { return busy_.share; }

  void linear(Ph ph, int64_t m, int64_t n, int64_t k, bool f32 = false, double times = 1);
  // A row-wise op over `rows` rows (dim rows_dim) of the other dims' product elements, `bytes_per` bytes moved
  // per element.
  // Of the other dims, only the first `sized` (all by default) count in the size of a row.
  void rows_op(Ph ph, const std::string& op, const std::string& rows_dim, int64_t rows,
               const std::vector<std::string>& other, const std::vector<int64_t>& other_values, double bytes_per,
               size_t sized = 99);
  // blocks/attention.cpp: q/k norms, rope and the K/V write in one op.
  void qk_rope(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim);
  void moe(Ph ph, int64_t tokens, int64_t top_k, int64_t n_experts, int64_t hidden, int64_t inter, double touched,
           double times = 1);
  void gqa_attention(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t kv_heads, int64_t head_dim);
  void mla(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t lora, int64_t rope);
  void head_linear(int64_t tokens, int64_t heads, int64_t in, int64_t out);
  // A collective over a group of `ranks` consecutive-rank span `span`, `bytes` per rank.
  void collective(const std::string& kind, int ranks, int span, double bytes);
  // A host round trip (a copy of a few bytes back, the host waiting for the device).
  void host_wait(Ph ph);
  void copy(Ph ph, const std::string& op, double n_bytes);

  std::array<double, kCostPhaseCount> eager{};
  double kernels = 0;   // as a captured graph replays them
  double bytes = 0;     // the ops' bytes
  double resident = 0;  // beyond `bytes`: the weights of the rank's that this step's ops leave unread (experts)
  double syncs = 0;     // collectives, each a point where the ranks wait for the slowest
  double eager_total() const {
    double s = 0;
    for (double v : eager) s += v;
    return s;
  }
  // Every total times k.
  void scale(double k) {
    for (double& v : eager) v *= k;
    kernels *= k;
    bytes *= k;
    resident *= k;
    syncs *= k;
  }
  // Adds `times` copies of another rank-op list (identical layers timed once).
  void absorb(const Ops& o, double times) {
    for (size_t i = 0; i < eager.size(); ++i) eager[i] += times * o.eager[i];
    kernels += times * o.kernels;
    bytes += times * o.bytes;
    resident += times * o.resident;
    syncs += times * o.syncs;
  }
  // CPU ranks sharing a host: at each collective the ranks wait for the slowest; the profile's skew fraction of
  // the work between collectives (MachineProfile::skew_fraction), counted as communication. For the share `cold`
  // of the work timed beyond the caches (beyond_caches), whose tables keep the median rank's times, the skew
  // beyond the caches measured against the median rank at the step's `rows` a product (skew_cold_fraction),
  // where the profile has it. The profile measured it with all W ranks at work; with k of them at work at once
  // (the stage's busy share: one replica's sequence under dp, one pipeline stage at batch 1) the ranks wait for
  // the slowest of k, E[max of k normals] / E[max of W] of it, none for k = 1 (docs/perf-notes.md item 50).
  void add_skew(double cold, double rows);

 private:
  void add(Ph ph, double times, double seconds, bool not_a_kernel = false);
  const MachineProfile& p_;
  const Cluster& c_;
  bool stream_ = false;
  Busy busy_;
  Works w_;
};

}  // namespace sy::cost
