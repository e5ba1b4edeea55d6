// The speed model: each rank's ops per step, as model/transformer.cpp, blocks/attention.cpp, mla.cpp, ffn.cpp
// and runtime/executor.cpp issue them, timed by the profile; the busiest rank of the slowest stage decides.
#include "planner/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <numbers>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "base/check.h"
#include "planner/perf.h"

namespace sy {

namespace {

enum Ph : uint8_t { attention, router, experts, combine, dense, norms, communication, sampling, other };

// Mirrors of the engine's choices (kept equal by hand; each names where it comes from).
constexpr int64_t kStackedQkvMaxTokens = 256;  // blocks/attention.cpp: q, k, v in one product up to this many rows

double d(int64_t v) { return static_cast<double>(v); }

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

// A step whose ranks read more than this many bytes in all stays beyond a CPU's last-level cache (tens of MB on
// the machines this runs on): its ops stream their operands from memory (MachineProfile::stream_bytes_per_s).
constexpr double kCpuCacheBytes = 64e6;

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
thread_local TraceState t_trace;

void trace_op(const std::string& op, const std::string& table, const std::vector<std::string>& names,
              const std::vector<double>& values, double share, double seconds) {
  if (t_trace.rows == nullptr) return;
  std::string q;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    q += (i > 0 ? " " : "") + names[i] + "=" + fmt::format("{:g}", values[i]);
  }
  t_trace.rows->push_back({.stage = t_trace.stage,
                           .pass = t_trace.pass,
                           .op = op,
                           .table = table,
                           .query = q,
                           .share = share,
                           .calls = t_trace.layers,
                           .seconds = seconds});
}

// A row of waiting the stage adds to its mixed passes' time (the skew, a pipeline boundary).
void trace_wait(const std::string& op, const std::string& table, const std::string& query, double seconds) {
  t_trace.rows->push_back({.stage = t_trace.stage,
                           .pass = "mixed",
                           .phase = "communication",
                           .op = op,
                           .table = table,
                           .query = query,
                           .seconds = seconds});
}

// The table an op is timed from: in a step beyond the caches (a streaming floor set) its "_cold" table (timed
// reading its weights from memory, bench calibrate's linear_cold, moe_experts_cold and paged_attention_cold) when
// that holds a point of at least the query's rows (vary's first dim) and, where it has a q_len dim, of the query's
// tokens a sequence; else its own (timed hot). The point may be of another shape: the whole experts' 128-row
// prefill query passes on the expert-parallel slices' 512-row points and is priced from its own shape's 64-row
// point (requiring the query's nearest shape to reach the rows replanned worse: docs/perf-notes.md, twenty-eighth
// session, variant b). paged_attention_cold is timed at decode's one token a sequence: a
// prefill's 128 queries a sequence priced from those points took the medium config's attention at 1 rank from
// its 0.49 ms hot point to 3.6 ms a layer once the lookups scaled by query heads × keys (docs/perf-notes.md
// item 58).
std::string timed_op(const MachineProfile& p, const std::string& op, const DimView& q,
                     const std::vector<std::string>& vary, const Busy& busy) {
  if (busy.stream <= 0 || vary.empty()) return op;
  const auto it = p.ops.find(op + "_cold");
  if (it == p.ops.end()) return op;
  const int rows = it->second.dim(vary.front());
  if (rows < 0) return op;
  const int q_len = it->second.dim("q_len");
  for (const auto& pt : it->second.points) {
    if (q_len >= 0 && pt[static_cast<size_t>(q_len)] != q["q_len"]) continue;
    if (pt[static_cast<size_t>(rows)] >= q[vary.front()]) return it->first;
  }
  return op;
}

// One op's time, from the profile's table when it has one (timed_op: its cold table in a step beyond the caches),
// else from its work at the profile's rates; between the profile's single-rank and all-ranks timings by
// `busy.share`; at least its bytes at `busy.stream` bytes/s when that is set. Adds the op's bytes to *bytes.
double op_time(const MachineProfile& p, const std::string& op_in, const std::vector<std::string>& names,
               const std::vector<double>& values, const std::vector<std::string>& vary, const WorkFn& work,
               const Busy& busy, double* bytes) {
  const DimView q{&names, values.data()};
  const OpWork w = work(q);
  *bytes += w.bytes;
  const std::string op = timed_op(p, op_in, q, vary, busy);
  const auto priced = [&](const std::string& table) {
    double t = p.has_op(table) ? p.op_seconds(table, q, vary, work) : p.work_seconds(w);
    if (busy.share < 1 && p.has_op_alone(table)) {
      const double a = p.op_seconds(table, q, vary, work, true);
      t = a + busy.share * (t - a);
    }
    return t;
  };
  const bool alone = busy.share < 1 && p.has_op_alone(op);
  double s = priced(op);
  // A cold point is the op reading its weights from memory: at most its hot time and those bytes at the streaming
  // rate one after the other. A CPU profile's cold tables hold a few rows a shape (1, 4, 16, 64), and a point above
  // that caught the host busy: r20's priced the medium config's LM head at 64 rows at 41.9 ms where the engine took
  // 20.2 and its hot 32-row point 18.5 (docs/perf-notes.md item 59).
  bool capped = false;
  if (op != op_in && p.has_op(op_in)) {
    const double cap = priced(op_in) + w.bytes / busy.stream;
    capped = s > cap;
    s = std::min(s, cap);
  }
  const bool floor = busy.stream > 0 && w.bytes / busy.stream > s;
  if (floor) s = w.bytes / busy.stream;
  if (t_trace.rows != nullptr) {
    trace_op(op_in,
             (p.has_op(op) ? op : "work") + std::string(alone ? " (alone-all)" : "") +
                 (capped ? " (hot + stream cap)" : "") + (floor ? " (streaming floor)" : ""),
             names, values, busy.share, s);
  }
  return s;
}

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

  void linear(Ph ph, int64_t m, int64_t n, int64_t k, bool f32 = false, double times = 1) {
    if (m <= 0 || n <= 0 || k <= 0) return;
    const double wb = f32 ? 4.0 : w_.wb;
    const double before = bytes;
    add(ph, times,
        op_time(
            p_, f32 ? "linear_f32" : "linear", {"m", "n", "k"}, {d(m), d(n), d(k)}, {"m"},
            [&](const DimView& v) { return w_.linear(v, wb); }, busy_, &bytes));
    bytes += (times - 1) * (bytes - before);  // op_time counted one call's
  }
  // A row-wise op over `rows` rows (dim rows_dim) of the other dims' product elements, `bytes_per` bytes moved
  // per element.
  // Of the other dims, only the first `sized` (all by default) count in the size of a row.
  void rows_op(Ph ph, const std::string& op, const std::string& rows_dim, int64_t rows,
               const std::vector<std::string>& other, const std::vector<int64_t>& other_values, double bytes_per,
               size_t sized = 99) {
    if (rows <= 0) return;
    std::vector<std::string> names{rows_dim};
    std::vector<double> values{d(rows)};
    for (size_t i = 0; i < other.size(); ++i) {
      names.push_back(other[i]);
      values.push_back(d(other_values[i]));
    }
    add(ph, 1,
        op_time(
            p_, op, names, values, {rows_dim},
            [&](const DimView& v) {
              double e = v[rows_dim];
              for (size_t i = 0; i < other.size() && i < sized; ++i) e *= v[other[i]];
              return OpWork{.bytes = e * bytes_per, .flops = 0};
            },
            busy_, &bytes));
  }
  // blocks/attention.cpp: q/k norms, rope and the K/V write in one op.
  void qk_rope(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim) {
    if (tokens <= 0) return;
    add(Ph::attention, 1,
        op_time(
            p_, "qk_norm_rope_kv_write", {"tokens", "n_heads", "kv_heads", "head_dim"},
            {d(tokens), d(heads), d(kv_heads), d(head_dim)}, {"tokens"},
            [&](const DimView& v) {
              return OpWork{.bytes = v["tokens"] * (v["n_heads"] + 2 * v["kv_heads"]) * v["head_dim"] * 8, .flops = 0};
            },
            busy_, &bytes));
  }
  void moe(Ph ph, int64_t tokens, int64_t top_k, int64_t n_experts, int64_t hidden, int64_t inter, double touched,
           double times = 1) {
    if (tokens <= 0 || n_experts <= 0 || times <= 0) return;
    const double before = bytes;
    add(ph, times,
        op_time(
            p_, "moe_experts", {"tokens", "top_k", "n_experts", "hidden", "inter", "touched"},
            {d(tokens), d(top_k), d(n_experts), d(hidden), d(inter), touched}, {"tokens"},
            [&](const DimView& v) { return w_.moe(v); }, busy_, &bytes));
    bytes += (times - 1) * (bytes - before);  // op_time counted one call's
    // The experts this call leaves untouched are read by later steps: the rank's weights between two reads of one.
    resident += times * std::max(0.0, d(n_experts) - touched) * 3 * d(hidden) * d(inter) * w_.wb;
  }
  void gqa_attention(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t kv_heads, int64_t head_dim) {
    if (seqs <= 0) return;
    add(Ph::attention, 1,
        op_time(
            p_, "paged_attention", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"},
            {d(seqs), d(q_len), d(context), d(heads), d(kv_heads), d(head_dim)}, {"seqs", "context"},
            [&](const DimView& v) { return w_.paged_attention(v); }, busy_, &bytes));
  }
  void mla(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t lora, int64_t rope) {
    if (seqs <= 0) return;
    add(Ph::attention, 1,
        op_time(
            p_, "mla_attention", {"seqs", "q_len", "context", "n_heads", "kv_lora_rank", "rope_dim"},
            {d(seqs), d(q_len), d(context), d(heads), d(lora), d(rope)}, {"seqs", "context"},
            [&](const DimView& v) { return w_.mla_attention(v); }, busy_, &bytes));
  }
  void head_linear(int64_t tokens, int64_t heads, int64_t in, int64_t out) {
    if (tokens <= 0) return;
    add(Ph::attention, 1,
        op_time(
            p_, "head_linear", {"tokens", "heads", "in", "out"}, {d(tokens), d(heads), d(in), d(out)}, {"tokens"},
            [&](const DimView& v) {
              const double t = v["tokens"], h = v["heads"], i = v["in"], o = v["out"];
              return OpWork{.bytes = h * i * o * w_.wb + 4 * t * h * (i + o), .flops = 2 * t * h * i * o};
            },
            busy_, &bytes));
  }
  // A collective over a group of `ranks` consecutive-rank span `span`, `bytes` per rank.
  void collective(const std::string& kind, int ranks, int span, double bytes) {
    if (ranks <= 1) return;
    ++syncs;
    double s = 0;
    if (p_.has_collective(kind)) {
      s = p_.collective_seconds(kind, ranks, bytes);
    } else {
      const Link l = link_for_group(c_, span);
      s = kind == "all_reduce"  ? all_reduce_seconds(ranks, bytes, l)
          : kind == "send_recv" ? bytes / l.bytes_per_second + l.latency
                                : all_to_all_seconds(ranks, bytes, l);
    }
    trace_op(kind, p_.has_collective(kind) ? "collectives" : "link model", {"ranks", "bytes"}, {d(ranks), bytes},
             busy_.share, s);
    add(communication, 1, s, /*not_a_kernel=*/true);
  }
  // A host round trip (a copy of a few bytes back, the host waiting for the device).
  void host_wait(Ph ph) {
    trace_op("host_wait", "step.copy_to_host_us", {}, {}, busy_.share, p_.copy_to_host_s);
    add(ph, 1, p_.copy_to_host_s, true);
  }
  void copy(Ph ph, const std::string& op, double n_bytes) {
    if (n_bytes <= 0) return;
    add(ph, 1,
        op_time(
            p_, op, {"bytes"}, {n_bytes}, {"bytes"},
            [&](const DimView& v) { return OpWork{.bytes = v["bytes"], .flops = 0}; }, busy_, &bytes));
  }

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
  void add_skew(double cold, double rows) {
    if (syncs <= 0 || (p_.skew.empty() && !p_.has_skew_cold())) return;
    const double work = eager_total() - eager[communication];
    const double segment = work / syncs;
    double f = p_.skew_fraction(segment);
    if (cold > 0 && p_.has_skew_cold()) f = (1 - cold) * f + cold * p_.skew_cold_fraction(rows, segment);
    const int all = std::max(p_.ranks, 2);
    const double k = 1 + busy_share() * (all - 1);
    const auto lo = static_cast<int>(std::floor(k));
    const auto max_of = [](int n) { return n <= 1 ? 0.0 : expected_max_normal(n); };
    f *= (max_of(lo) + (k - lo) * (max_of(lo + 1) - max_of(lo))) / expected_max_normal(all);
    eager[communication] += work * f;
    if (t_trace.rows != nullptr) {
      trace_wait("skew", "step.skew", fmt::format("segment_us={:.1f} fraction={:.3f}", segment * 1e6, f), work * f);
    }
  }

 private:
  void add(Ph ph, double times, double seconds, bool not_a_kernel = false) {
    const double e = not_a_kernel ? seconds : std::max(seconds, p_.launch_s);
    eager[ph] += times * e;
    kernels += times * seconds;
    if (t_trace.rows != nullptr && !t_trace.rows->empty() && t_trace.rows->back().phase.empty()) {
      CostTraceRow& r = t_trace.rows->back();
      r.phase = kCostPhaseNames[ph];
      r.calls *= times;
      r.seconds = e;
    }
  }
  const MachineProfile& p_;
  const Cluster& c_;
  bool stream_ = false;
  Busy busy_;
  Works w_;
};

// The step's shape on one rank of a stage.
struct RankStep {
  int64_t tokens = 0;        // this dp replica's tokens of the micro-batch (the busiest replica's)
  int64_t micro_tokens = 0;  // the micro-batch's tokens over all dp replicas (fewer than tokens · dp when some idle)
  int64_t seqs = 0;
  int64_t q_len = 1;
  int64_t context = 0;
  int64_t logit_rows = 0;
  bool first_stage = true;
  bool last_stage = true;
  int64_t layers_begin = 0, layers_end = 0;
  double share = 1;          // Busy::share of the stage's ops
  double experts_share = 1;  // of the routed experts under expert parallelism (the ranks that receive pairs)
};

// Expected distinct experts of `n` that `pairs_tokens` tokens touch when each picks k of all E uniformly.
double touched(double local_experts, double k, double e_all, double tokens) {
  if (e_all <= 0) return 0;
  return local_experts * (1.0 - std::pow(1.0 - k / e_all, tokens));
}

// The distinct experts of a call of `p` pairs when the busiest rank averages `pairs` pairs on `touched` distinct
// experts: its share of them in proportion (the mean over the two calls the rank's pairs are split into stays
// `touched`), at least one for a call with pairs and at most the call's pairs and the rank's experts. One token's
// pairs go to distinct experts, so at batch 1 a call of 3 pairs touches 3 (it was priced at the rank's mean,
// 2.04 on the medium config's ep4, and a 2-pair call of the bundled model's ep4 at 1.14: two rows on one expert,
// the BLAS product of several rows, 6 times the single row's time; docs/perf-notes.md item 56).
double touched_of_pairs(double p, double pairs, double touched, int64_t local_experts) {
  if (p <= 0) return 0;
  const double per_pair = pairs > 0 ? std::min(1.0, touched / pairs) : 1.0;
  return std::clamp(p * per_pair, 1.0, std::max(1.0, std::min(p, d(local_experts))));
}

// The expected largest of n independent standard normals, ∫ x · n φ(x) Φ(x)^(n−1) dx by the midpoint rule
// (0.5642 = 1/√π for n = 2, 1.0294 for 4, 1.4236 for 8, 2.3437 for 64); each n computed once.
double expected_max_normal(int n) {
  static std::mutex mutex;
  static std::map<int, double> done;
  const std::lock_guard lock(mutex);
  if (const auto it = done.find(n); it != done.end()) return it->second;
  constexpr double kStep = 1e-3, kEnd = 9.0;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi), inv_sqrt2 = 1.0 / std::sqrt(2.0);
  double sum = 0;
  for (double x = -kEnd + kStep / 2; x < kEnd; x += kStep) {
    const double cdf = 0.5 * std::erfc(-x * inv_sqrt2);
    sum += x * n * inv_sqrt_2pi * std::exp(-0.5 * x * x) * std::pow(cdf, n - 1);
  }
  return done.emplace(n, sum * kStep).first->second;
}

// The expected load of the busiest of `n` ranks holding E/n experts each when `tokens` tokens pick k distinct
// experts of E uniformly. A rank's pairs: a token brings a hypergeometric count (mean k/n, variance
// k·(1/n)(1 − 1/n)(E − k)/(E − 1)); over the tokens, normal. The ranks' loads sum to the pairs, so they deviate
// from their mean as n independent normals do from theirs: the largest lies √(n/(n − 1)) · E[max of n] standard
// deviations above the mean. Against a simulation of the routing (64 tokens × 8 of 64 experts on 8 ranks: 74.98
// pairs; 256 × 4 of 32 on 8: 143.1) this gives 74.7 and 143.3, where mean + √(2 ln n) spreads gave 79.3 and 149.6.
double busiest(double tokens, int64_t k, int64_t e_all, int n) {
  const double pairs = tokens * d(k);
  if (n <= 1) return pairs;
  const double p = 1.0 / n;
  const double fpc = e_all > 1 ? d(e_all - k) / d(e_all - 1) : 1.0;
  const double sd = std::sqrt(pairs * p * (1 - p) * fpc);
  return pairs * p + sd * std::sqrt(static_cast<double>(n) / (n - 1)) * expected_max_normal(n);
}

void attention_ops(Ops& o, const ModelDesc& s, const ParallelSizes& z, const RankStep& r) {
  const AttentionDesc& a = s.attn;
  const int64_t T = r.tokens, H = s.hidden;
  if (a.kind == AttentionKind::gqa) {
    const int64_t nh = a.n_heads / z.tp, kvh = std::max<int64_t>(1, a.kv_heads / z.tp), hd = a.head_dim;
    const int64_t qd = nh * hd, kvd = kvh * hd;
    if (T <= kStackedQkvMaxTokens) {
      o.linear(attention, T, qd + 2 * kvd, H);
      if (T > 1) o.rows_op(attention, "split_columns", "rows", T, {"width"}, {qd + 2 * kvd}, 8);
    } else {
      o.linear(attention, T, qd, H);
      o.linear(attention, T, kvd, H, false, 2);
    }
    o.qk_rope(T, nh, kvh, hd);
    o.gqa_attention(r.seqs, r.q_len, r.context, nh, kvh, hd);
    o.linear(attention, T, H, qd);
    return;
  }
  const int64_t nh = a.n_heads / z.tp, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  if (a.q_lora_rank > 0) {
    o.linear(attention, T, a.q_lora_rank, H);
    o.rows_op(attention, "rms_norm", "rows", T, {"dim"}, {a.q_lora_rank}, 8);
    o.linear(attention, T, nh * qk, a.q_lora_rank);
  } else {
    o.linear(attention, T, nh * qk, H);
  }
  o.linear(attention, T, a.kv_lora_rank + a.qk_rope_head_dim, H);
  o.rows_op(attention, "rope", "tokens", T, {"n_heads", "head_dim"}, {nh, qk}, 8);
  o.rows_op(attention, "rope", "tokens", T, {"n_heads", "head_dim"}, {1, a.kv_lora_rank + a.qk_rope_head_dim}, 8);
  o.rows_op(attention, "mla_kv_write", "tokens", T, {"kv_lora_rank", "rope_dim"}, {a.kv_lora_rank, a.qk_rope_head_dim},
            8);
  if (s.has_indexer()) {
    // The sparse indexer (blocks/indexer.cpp): its products and a top-k over the context, by their work.
    o.linear(attention, T, a.index_n_heads * a.index_head_dim, a.q_lora_rank);
    o.linear(attention, T, a.index_head_dim, H);
    o.linear(attention, T, a.index_n_heads, H);
  }
  o.head_linear(T, nh, a.qk_nope_head_dim, a.kv_lora_rank);
  const int64_t ctx = s.has_indexer() ? std::min(r.context, a.index_topk) : r.context;
  o.mla(r.seqs, r.q_len, ctx, nh, a.kv_lora_rank, a.qk_rope_head_dim);
  o.head_linear(T, nh, a.kv_lora_rank, a.v_head_dim);
  o.linear(attention, T, H, nh * a.v_head_dim);
}

// A SwiGLU MLP sharded over dense_tp on `rows` rows (transformer.cpp dense_block), its reduction included.
void dense_mlp_ops(Ops& o, const ParallelSizes& z, int64_t rows, int64_t T, int64_t H, int64_t inter, bool add,
                   bool gathered) {
  if (rows <= 0) return;
  const int64_t li = inter / z.dense_tp;
  if (gathered) o.collective("all_gather", z.dense_tp, z.dense_tp, d(T * H * 4));
  o.linear(dense, rows, 2 * li, H);
  o.rows_op(dense, "silu_mul", "rows", rows, {"inter"}, {li}, 12);
  o.linear(dense, rows, H, li);
  o.collective(gathered ? "all_gather" : "all_reduce", z.dense_tp, z.dense_tp, d(T * H * 4));
  if (add) o.rows_op(dense, "add", "n", T * H, {}, {}, 12);
}

void moe_ops(Ops& o, const ModelDesc& s, const ParallelSizes& z, const RankStep& r, bool dense_gathered) {
  const MoeDesc& m = s.moe;
  const int64_t T = r.tokens, H = s.hidden, K = m.top_k;
  const int64_t local_e = m.n_experts / z.ep, li = m.inter / z.etp;
  const bool tp_only = z.ep == 1 && z.edp == 1 && z.dp == 1 && z.dense_tp == z.tp;
  const auto route = [&](int64_t tokens) {
    o.linear(router, tokens, m.n_experts, H, true);
    if (m.scoring == RouterScoring::softmax) {
      o.rows_op(router, "softmax_topk", "tokens", tokens, {"n_experts", "top_k"}, {m.n_experts, K}, 4, 1);
    } else {
      o.rows_op(router, "grouped_topk", "tokens", tokens, {"n_experts", "top_k", "n_group", "topk_group"},
                {m.n_experts, K, m.n_group, m.topk_group}, 4, 1);
    }
  };
  if (tp_only) {
    route(T);
    o.moe(experts, T, K, m.n_experts, H, li, touched(d(m.n_experts), d(K), d(m.n_experts), d(T)));
    if (m.shared_inter > 0) dense_mlp_ops(o, z, T, T, H, m.shared_inter, true, false);
    o.collective("all_reduce", z.tp, z.tp, d(T * H * 4));
    return;
  }
  // transformer.cpp moe_forward_parallel: route this rank's share of its tp group's tokens, plan on the host,
  // dispatch, the local experts, return, combine, then the tp group's shares gathered.
  const int64_t own = (T + z.tp - 1) / z.tp;
  route(own);
  o.host_wait(router);
  // The tokens the busiest edp replica's experts serve: its dp replicas' (each at most the busiest's T), no more
  // than the micro-batch holds.
  const double replica_tokens = std::min(d(T) * z.dp / z.edp, d(r.micro_tokens));
  const ExpertLoad load = busiest_expert_rank(replica_tokens, K, m.n_experts, z.ep);  // each etp rank: them all
  const double n_send = d(own * K * z.etp);
  const int stage = z.stage_size();
  o.collective("all_to_all_v", stage, stage, 8.0);  // the counts
  // The dispatch's rows gathered into the send buffer: router, as ffn.cpp marks it.
  o.rows_op(router, "gather_rows", "rows", static_cast<int64_t>(n_send), {"dim"}, {H}, 8);
  o.collective("all_to_all_v", stage, stage, n_send * 4);
  o.collective("all_to_all_v", stage, stage, n_send * d(H) * 4);
  const double share = o.busy_share();
  o.busy(r.experts_share);
  // The busiest rank's pairs and distinct experts (at batch 1 it reads ~2 experts where the mean rank reads
  // 0.5), at least the mean rank's; a fractional count of pairs as the weighted mean of its two neighbours.
  const double busy_touched = std::max(touched(d(local_e), d(K), d(m.n_experts), replica_tokens), load.touched);
  const double lo = std::floor(load.pairs), frac = load.pairs - lo;
  const auto lo_pairs = static_cast<int64_t>(lo);
  o.moe(experts, lo_pairs, 1, local_e, H, li, touched_of_pairs(lo, load.pairs, busy_touched, local_e), 1.0 - frac);
  o.moe(experts, lo_pairs + 1, 1, local_e, H, li, touched_of_pairs(lo + 1, load.pairs, busy_touched, local_e), frac);
  o.busy(share);
  o.collective("all_to_all_v", stage, stage, n_send * d(H) * 4);
  o.rows_op(combine, "scatter_add_rows", "rows", static_cast<int64_t>(n_send), {"dim"}, {H}, 12);
  if (z.tp > 1) o.collective("all_gather", z.tp, z.tp, d(own * H * 4));
  if (m.shared_inter > 0) {
    const int64_t rows = dense_gathered ? T * z.dense_tp : T;
    dense_mlp_ops(o, z, rows, T, H, m.shared_inter, true, dense_gathered);
  }
}

// One micro-batch through this rank's stage (transformer.cpp forward / run_layers / head).
Ops stage_ops(const CostInputs& in, const RankStep& r, bool stream) {
  const ModelDesc& s = *in.shape;
  const ParallelSizes& z = in.sizes;
  Ops o(*in.profile, *in.cluster, d(in.kv_bytes), stream);
  o.busy(r.share);
  const int64_t T = r.tokens, H = s.hidden;
  // dense_tp spanning dp replicas gathers every member's rows (transformer.cpp dense_rows).
  const bool gathered = z.dense_tp > z.tp;
  if (r.first_stage) {
    o.rows_op(other, "embedding", "tokens", T, {"dim"}, {H}, 4 + in.profile->weight_bytes);
    o.collective("all_reduce", z.dense_tp, z.dense_tp, d(T * H * 4));
  }
  o.rows_op(norms, "rms_norm", "rows", T, {"dim"}, {H}, 8);
  // Every layer of a kind costs the same: each kind timed once.
  for (const FfnKind kind : {FfnKind::moe, FfnKind::dense}) {
    int64_t n = 0;
    for (int64_t l = r.layers_begin; l < r.layers_end; ++l) n += s.layer_ffn[static_cast<size_t>(l)] == kind ? 1 : 0;
    if (n == 0) continue;
    Ops layer(*in.profile, *in.cluster, d(in.kv_bytes), stream);
    layer.busy(r.share);
    t_trace.layers = d(n);
    attention_ops(layer, s, z, r);
    layer.collective("all_reduce", z.tp, z.tp, d(T * H * 4));
    layer.rows_op(norms, "add_rms_norm", "rows", T, {"dim"}, {H}, 16);
    if (kind == FfnKind::moe) {
      moe_ops(layer, s, z, r, gathered);
    } else {
      dense_mlp_ops(layer, z, gathered ? T * z.dense_tp : T, T, H, s.dense_inter, false, gathered);
    }
    layer.rows_op(norms, "add_rms_norm", "rows", T, {"dim"}, {H}, 16);
    t_trace.layers = 1;
    o.absorb(layer, d(n));
  }
  if (r.last_stage && r.logit_rows > 0) {
    const int64_t R = r.logit_rows, V = (s.vocab + z.dense_tp - 1) / z.dense_tp;
    o.rows_op(dense, "gather_rows", "rows", R, {"dim"}, {H}, 8);
    o.linear(dense, gathered ? R * z.dense_tp : R, V, H);
    if (z.dense_tp > 1) {
      // transformer.cpp head: the vocabulary shares gathered, copied to the host, reassembled row by row.
      o.collective("all_gather", z.dense_tp, z.dense_tp, d(R * V * 4));
      o.copy(other, "copy_to_host", d(R * V * z.dense_tp * 4));
      o.copy(other, "copy_to_host", d(R * s.vocab * 4));
    }
  }
  return o;
}

// The stage boundary of pipeline stages (executor.cpp run_stage): the residual and the normed rows.
double pp_send_seconds(const CostInputs& in, int64_t tokens) {
  std::vector<CostTraceRow>* const rows = std::exchange(t_trace.rows, nullptr);  // priced as a row of its own
  Ops o(*in.profile, *in.cluster, d(in.kv_bytes));
  o.collective("send_recv", 2, in.sizes.stage_size() + 1, d(tokens * in.shape->hidden * 4 * 2));
  t_trace.rows = rows;
  return o.eager[communication];
}

// How far a rank's stage is from its ops' hot timings (0) to their timings beyond the caches (1, the "_cold"
// tables and the streaming floor). With the profile's cache curve, the curve at the bytes the rank re-reads from
// one step to the next: its stage's weights (every local expert, though a step reads a few) and what its ops read
// (the KV cache). Without (profiles before linear_pool): all or nothing, as the ranks' bytes together pass 64 MB.
double beyond_caches(const MachineProfile& p, const Ops& hot, double ranks_reading, double share) {
  if (p.has_cache_curve()) return p.cache_fraction(hot.bytes + hot.resident, share);
  return p.stream_bytes_per_s > 0 && hot.bytes * ranks_reading > kCpuCacheBytes ? 1.0 : 0.0;
}

// The stage timed `f` of the way from its hot ops to its ops beyond the caches.
Ops mixed(const Ops& hot, const Ops& cold, double f) {
  Ops o = hot;
  o.scale(1 - f);
  o.absorb(cold, f);
  return o;
}

// The step: each micro-batch through every stage, the pipeline filled and drained (executor.cpp
// forward_parallel); one rank: the whole step as one pass.
StepPrediction predict(const CostInputs& in, int64_t batch, int64_t q_len, int64_t context, bool decode) {
  SY_CHECK(in.shape && in.cluster && in.profile, "predict needs a model, a cluster and a profile");
  const ParallelSizes& z = in.sizes;
  StepPrediction out;
  out.batch = batch;
  out.context = context;
  const int64_t M = z.pp > 1 ? std::min<int64_t>(z.pp, batch) : 1;
  const int64_t seqs_micro = (batch + M - 1) / M;
  const int64_t seqs_dp = (seqs_micro + z.dp - 1) / z.dp;
  const bool one_rank = z.world_size() == 1;
  // CPU ranks sharing a host (Busy): the ranks at work at once. A pipeline's M micro-batches keep M·pp of its
  // pp + M - 1 stage slots busy; attention replicas without a sequence wait; under expert parallelism the ranks
  // that receive no pair wait.
  const auto share_of = [&](double ranks) {
    return one_rank ? 1.0 : (ranks - 1) / static_cast<double>(z.world_size() - 1);
  };
  const double stages_busy = d(M) * z.pp / d(z.pp + M - 1);
  const double replicas_busy = std::min(d(z.dp), d(seqs_micro));
  const double pairs_micro = d(seqs_micro * q_len * in.shape->moe.top_k);
  const double expert_ranks = d(z.ep) * z.edp;
  const double expert_ranks_busy = expert_ranks * (1.0 - std::pow(1.0 - 1.0 / expert_ranks, pairs_micro));
  double worst = 0;
  std::array<double, kCostPhaseCount> worst_phases{}, sum_phases{};
  double worst_kernels = 0, sum_kernels = 0;
  int64_t first = 0;
  for (size_t st = 0; st < in.stage_layers.size(); ++st) {
    RankStep r{.tokens = seqs_dp * q_len,
               .micro_tokens = seqs_micro * q_len,
               .seqs = seqs_dp,
               .q_len = q_len,
               .context = context,
               .logit_rows = seqs_dp,
               .first_stage = st == 0,
               .last_stage = st + 1 == in.stage_layers.size(),
               .layers_begin = first,
               .layers_end = first + in.stage_layers[st],
               .share = share_of(stages_busy * z.tp * replicas_busy),
               .experts_share = share_of(stages_busy * z.etp * expert_ranks_busy)};
    first = r.layers_end;
    // The bytes of the ranks at work together beyond a CPU's caches: the ops stream from memory. Attention replicas
    // without a sequence read nothing (one sequence under dp 8: one rank's weights, not eight ranks').
    const double ranks_reading = std::min(d(z.world_size()), d(z.pp) * d(z.tp) * replicas_busy);
    t_trace.stage = static_cast<int>(st);
    t_trace.pass = "hot";
    const size_t hot_rows = t_trace.rows != nullptr ? t_trace.rows->size() : 0;
    const Ops hot = stage_ops(in, r, false);
    const double cold = beyond_caches(*in.profile, hot, ranks_reading, r.share);
    t_trace.pass = "cold";
    const size_t cold_rows = t_trace.rows != nullptr ? t_trace.rows->size() : 0;
    Ops o = cold <= 0 ? hot : cold >= 1 ? stage_ops(in, r, true) : mixed(hot, stage_ops(in, r, true), cold);
    if (t_trace.rows != nullptr) {
      auto& rows = *t_trace.rows;
      for (size_t i = hot_rows; i < rows.size(); ++i) {
        const double f = std::clamp(cold, 0.0, 1.0);
        rows[i].weight = i < cold_rows ? 1 - f : f;
      }
    }
    o.add_skew(std::clamp(cold, 0.0, 1.0), d(r.tokens));
    const double send = z.pp > 1 ? pp_send_seconds(in, r.tokens) : 0.0;
    if (t_trace.rows != nullptr && send > 0 && !r.first_stage) {
      // The step's sum keeps each boundary once, on the receiving stage (the sender's copy counts in its own
      // stage's time when it is the slowest).
      trace_wait("stage boundary", "collectives", "send_recv from the stage before", send);
    }
    if (!r.first_stage) o.eager[communication] += send;
    if (!r.last_stage) o.eager[communication] += send;
    if (o.eager_total() > worst) {
      worst = o.eager_total();
      worst_phases = o.eager;
      worst_kernels = o.kernels;
    }
    for (size_t i = 0; i < sum_phases.size(); ++i) sum_phases[i] += o.eager[i];
    sum_kernels += o.kernels;
    // A stage is busy while it sends and while it receives, but the first micro-batch's pass crosses each boundary
    // once: the sum keeps the receiving side's.
    if (!r.last_stage) sum_phases[communication] -= send;
  }
  const MachineProfile& p = *in.profile;
  // The first micro-batch passes every stage in turn; each later one adds the slowest stage (one stage: M = 1).
  const double more = static_cast<double>(M - 1);
  // Per step on the host and the copies around it (runtime/executor.cpp upload, engine sampling): the inputs
  // uploaded, the sampled ids copied back, one wait for the device.
  const double step_fixed = 4 * p.launch_s + p.copy_to_host_s + p.sync_s;
  t_trace.stage = -1;
  t_trace.pass = "hot";
  Ops tail(p, *in.cluster, d(in.kv_bytes));
  const int64_t V = in.shape->vocab;
  if (one_rank) {
    tail.rows_op(sampling, "sample_tokens", "rows", batch, {"vocab"}, {V}, 4);
  } else {
    // Several ranks (executor.cpp forward_parallel, run_stage): the stage's logits to the host, straight into the
    // step's [batch, V] without dp; under dp into the rank's rows, gathered across dp, each row copied into the
    // step's; to every stage, sampled on the host.
    tail.copy(other, "copy_to_host", d(seqs_dp * V * 4));
    if (z.dp > 1) {
      tail.collective("all_gather", z.dp, z.stage_size(), d(seqs_dp * V * 4));
      tail.copy(other, "copy_to_host", d(batch * V * 4));
    }
    if (z.pp > 1) tail.collective("all_reduce", z.pp, z.world_size(), d(batch * V * 4) / 2);
    tail.rows_op(sampling, "sample_tokens", "rows", batch, {"vocab"}, {V}, 4);
  }
  for (int i = 0; i < kCostPhaseCount; ++i) {
    const auto u = static_cast<size_t>(i);
    out.phase_seconds[u] = sum_phases[u] + worst_phases[u] * more + tail.eager[i];
  }
  out.phase_seconds[other] += step_fixed;
  out.eager_seconds = 0;
  for (double v : out.phase_seconds) out.eager_seconds += v;
  out.graph = decode && one_rank && p.device == "cuda";
  out.seconds =
      out.graph ? sum_kernels + worst_kernels * more + tail.kernels + p.graph_launch_s + step_fixed : out.eager_seconds;
  return out;
}

// The simulation of busiest_expert_rank for t tokens.
ExpertLoad simulate_expert_ranks(int64_t t, int64_t top_k, int64_t n_experts, int ep, int64_t local) {
  constexpr int kTrials = 2000;
  std::mt19937_64 rng(0x243F6A8885A308D3ull);  // fixed seed: the same plan every run
  const auto draw = [&rng](uint64_t bound) { return static_cast<int64_t>(((rng() >> 32) * bound) >> 32); };
  std::vector<int64_t> picks(static_cast<size_t>(top_k));
  std::vector<int> hits(static_cast<size_t>(n_experts)), pairs(static_cast<size_t>(ep)),
      distinct(static_cast<size_t>(ep));
  double sum_pairs = 0, sum_touched = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::fill(hits.begin(), hits.end(), 0);
    for (int64_t tok = 0; tok < t; ++tok) {
      // top_k distinct experts: a draw equal to one of the token's earlier picks is drawn again
      for (int64_t j = 0; j < top_k; ++j) {
        int64_t e = draw(static_cast<uint64_t>(n_experts));
        while (std::find(picks.begin(), picks.begin() + j, e) != picks.begin() + j) {
          e = draw(static_cast<uint64_t>(n_experts));
        }
        picks[static_cast<size_t>(j)] = e;
        ++hits[static_cast<size_t>(e)];
      }
    }
    std::fill(pairs.begin(), pairs.end(), 0);
    std::fill(distinct.begin(), distinct.end(), 0);
    for (int64_t e = 0; e < local * ep; ++e) {
      const auto r = static_cast<size_t>(e / local);
      pairs[r] += hits[static_cast<size_t>(e)];
      distinct[r] += hits[static_cast<size_t>(e)] > 0 ? 1 : 0;
    }
    size_t top = 0;
    for (size_t r = 1; r < pairs.size(); ++r) {
      if (distinct[r] > distinct[top] || (distinct[r] == distinct[top] && pairs[r] > pairs[top])) top = r;
    }
    sum_pairs += pairs[top];
    sum_touched += distinct[top];
  }
  return {.pairs = sum_pairs / kTrials, .touched = sum_touched / kTrials};
}

}  // namespace

ExpertLoad busiest_expert_rank(double tokens, int64_t top_k, int64_t n_experts, int ep) {
  const int64_t local = n_experts / std::max(ep, 1);
  const auto t = static_cast<int64_t>(std::llround(tokens));
  if (t <= 0 || local <= 0) return {};
  if (ep <= 1 || t * top_k > 512) {
    const double pairs = busiest(tokens, top_k, n_experts, ep);
    return {.pairs = pairs, .touched = std::min(d(local), d(local) * (1.0 - std::pow(1.0 - 1.0 / d(local), pairs)))};
  }
  // A plan asks for the same few shapes for every stage, layer kind and layout: each is simulated once.
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int>, ExpertLoad> done;
  const auto key = std::make_tuple(t, top_k, n_experts, ep);
  {
    const std::lock_guard lock(mutex);
    if (const auto it = done.find(key); it != done.end()) return it->second;
  }
  const ExpertLoad load = simulate_expert_ranks(t, top_k, n_experts, ep, local);
  const std::lock_guard lock(mutex);
  return done.emplace(key, load).first->second;
}

StepPrediction predict_decode(const CostInputs& in, int64_t batch, int64_t context) {
  StepPrediction p = predict(in, batch, 1, context, true);
  p.tokens_per_second = p.seconds > 0 ? d(batch) / p.seconds : 0;
  return p;
}

namespace {

// `step` with its ops traced (t_trace) into the explanation's rows.
template <typename Step>
CostExplanation traced(const Step& step) {
  CostExplanation out;
  t_trace = {.rows = &out.rows};
  try {
    out.step = step();
  } catch (...) {
    t_trace = {};
    throw;
  }
  t_trace = {};
  return out;
}

// The whole prompts of `len` tokens a prefill chunk holds (bench latency's prefill); at least one, which a prompt
// longer than max_batch_tokens fills in pieces.
int64_t prompts_a_chunk(const CostInputs& in, int64_t len) {
  return std::max<int64_t>(1, in.max_batch_tokens / std::max<int64_t>(len, 1));
}

}  // namespace

CostExplanation explain_decode(const CostInputs& in, int64_t batch, int64_t context) {
  return traced([&] { return predict(in, batch, 1, context, true); });
}

CostExplanation explain_prefill_chunk(const CostInputs& in, int64_t batch, int64_t len) {
  return traced([&] {
    return len <= in.max_batch_tokens ? predict(in, std::min(prompts_a_chunk(in, len), batch), len, len, false)
                                      : predict(in, 1, in.max_batch_tokens, in.max_batch_tokens, false);
  });
}

StepPrediction predict_prefill(const CostInputs& in, int64_t batch, int64_t len) {
  // Chunks of whole prompts where they fit (bench latency's prefill), else one prompt in pieces.
  const int64_t per_chunk = prompts_a_chunk(in, len);
  StepPrediction total;
  total.batch = batch;
  total.context = len;
  if (len <= in.max_batch_tokens) {
    for (int64_t done = 0; done < batch; done += per_chunk) {
      const StepPrediction c = predict(in, std::min(per_chunk, batch - done), len, len, false);
      total.seconds += c.seconds;
      total.eager_seconds += c.eager_seconds;
      for (size_t i = 0; i < c.phase_seconds.size(); ++i) total.phase_seconds[i] += c.phase_seconds[i];
    }
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t at = 0; at < len; at += in.max_batch_tokens) {
        const int64_t n = std::min(in.max_batch_tokens, len - at);
        const StepPrediction c = predict(in, 1, n, at + n, false);
        total.seconds += c.seconds;
        total.eager_seconds += c.eager_seconds;
        for (size_t i = 0; i < c.phase_seconds.size(); ++i) total.phase_seconds[i] += c.phase_seconds[i];
      }
    }
  }
  total.tokens_per_second = total.seconds > 0 ? d(batch * len) / total.seconds : 0;
  return total;
}

MachineProfile preset_profile(const Machine& m) {
  MachineProfile p;
  p.source = "preset " + m.name + " (default efficiencies: no profile given)";
  p.device = "cuda";
  p.name = m.gpu;
  p.copy_bytes_per_s = m.hbm_tbps * 1e12 * 0.8;
  p.matrix_flops_per_s = std::max(1.0, m.bf16_tflops) * 1e12 * 0.6;
  p.launch_s = 4e-6;
  p.sync_s = 10e-6;
  p.graph_launch_s = 10e-6;
  p.copy_to_host_s = 10e-6;
  return p;
}

}  // namespace sy
