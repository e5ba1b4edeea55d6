// The speed model's pricing of single ops (see cost_ops.h): the table or rates that time an op, and one rank's
// ops summed per phase.
#include "planner/cost_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numbers>

#include "planner/perf.h"

namespace sy::cost {

thread_local TraceState t_trace;

namespace {

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

// The table an op is timed from: in a step beyond the caches (a streaming floor set) its "_cold" table (timed
// reading its weights from memory, bench calibrate's linear_cold, moe_experts_cold and paged_attention_cold) when
// that holds a point of at least the query's rows (vary's first dim) and, where it has a q_len dim, of the query's
// tokens a sequence; else its own (timed hot). The point may be of another shape: the whole experts' 128-row
// prefill query passes on the expert-parallel slices' 512-row points and is priced from its own shape's 64-row
// point, continued past it by the hot table (op_time; requiring the query's nearest shape to reach the rows
// replanned worse: docs/perf-notes.md, twenty-eighth session, variant b). paged_attention_cold is timed at decode's one
// token a sequence: a prefill's 128 queries a sequence priced from those points took the medium config's attention at 1
// rank from its 0.49 ms hot point to 3.6 ms a layer once the lookups scaled by query heads × keys (docs/perf-notes.md
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
  const auto priced_at = [&](const std::string& table, const DimView& at) {
    double t =
        p.has_op(table) ? p.op_seconds(table, at, vary, work) : p.work_seconds(at.values == q.values ? w : work(at));
    if (busy.share < 1 && p.has_op_alone(table)) {
      const double a = p.op_seconds(table, at, vary, work, true);
      t = a + busy.share * (t - a);
    }
    return t;
  };
  const auto priced = [&](const std::string& table) { return priced_at(table, q); };
  const bool alone = busy.share < 1 && p.has_op_alone(op);
  double s = priced(op);
  // The grouped experts past the rows their cold table timed at the query's own shape (a 1-rank prefill's 128 rows
  // of the whole experts, timed cold up to 64, the table taken for the expert-parallel slices' points up to 512)
  // cost their hot time at the query plus what reading the weights from memory added at that shape's last cold
  // point: past it every expert is touched, so the rows past it compute as the same kernel's hot rows do, over the
  // same weights. The cold point extrapolated by its work at the profile's rates priced r22's medium experts at
  // 9.0 ms a layer where the engine took 11.4 and the hot 128-row point 11.2. Not for linear_cold: the 8-rank
  // profiles time the LM head cold at one row only, and continuing that point by the hot table moved r22's tp8 b64
  // dense phase from +7% to +17% (docs/perf-notes.md item 65).
  const bool cold_table = op != op_in && p.has_op(op_in);
  const double hot = cold_table ? priced(op_in) : 0;
  bool continued = false;
  if (op_in == "moe_experts" && cold_table) {
    const double last = p.largest_timed(op, q, vary.front());
    if (last > 0 && q[vary.front()] > last) {
      std::vector<double> at = values;
      at[static_cast<size_t>(std::find(names.begin(), names.end(), vary.front()) - names.begin())] = last;
      const DimView q_last{&names, at.data()};
      s = hot + std::max(0.0, priced_at(op, q_last) - priced_at(op_in, q_last));
      continued = true;
    }
  }
  // A cold point is the op reading its weights from memory: at most its hot time and those bytes at the streaming
  // rate one after the other. A CPU profile's cold tables hold a few rows a shape (1, 4, 16, 64), and a point above
  // that caught the host busy: r20's priced the medium config's LM head at 64 rows at 41.9 ms where the engine took
  // 20.2 and its hot 32-row point 18.5 (docs/perf-notes.md item 59).
  bool capped = false;
  if (cold_table) {
    const double cap = hot + w.bytes / busy.stream;
    capped = s > cap;
    s = std::min(s, cap);
  }
  const bool floor = busy.stream > 0 && w.bytes / busy.stream > s;
  if (floor) s = w.bytes / busy.stream;
  if (t_trace.rows != nullptr) {
    trace_op(op_in,
             (p.has_op(op) ? op : "work") + std::string(alone ? " (alone-all)" : "") +
                 (continued ? " (hot past its cold rows)" : "") + (capped ? " (hot + stream cap)" : "") +
                 (floor ? " (streaming floor)" : ""),
             names, values, busy.share, s);
  }
  return s;
}

}  // namespace

void trace_wait(const std::string& op, const std::string& table, const std::string& query, double seconds) {
  t_trace.rows->push_back({.stage = t_trace.stage,
                           .pass = "mixed",
                           .phase = "communication",
                           .op = op,
                           .table = table,
                           .query = query,
                           .seconds = seconds});
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

void Ops::linear(Ph ph, int64_t m, int64_t n, int64_t k, bool f32, double times) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const double wb = f32 ? 4.0 : w_.wb;
  const double before = bytes;
  add(ph, times,
      op_time(
          p_, f32 ? "linear_f32" : "linear", {"m", "n", "k"}, {d(m), d(n), d(k)}, {"m"},
          [&](const DimView& v) { return w_.linear(v, wb); }, busy_, &bytes));
  bytes += (times - 1) * (bytes - before);  // op_time counted one call's
}

void Ops::rows_op(Ph ph, const std::string& op, const std::string& rows_dim, int64_t rows,
                  const std::vector<std::string>& other, const std::vector<int64_t>& other_values, double bytes_per,
                  size_t sized) {
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

void Ops::qk_rope(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim) {
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

void Ops::moe(Ph ph, int64_t tokens, int64_t top_k, int64_t n_experts, int64_t hidden, int64_t inter, double touched,
              double times) {
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

void Ops::gqa_attention(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t kv_heads,
                        int64_t head_dim) {
  if (seqs <= 0) return;
  add(Ph::attention, 1,
      op_time(
          p_, "paged_attention", {"seqs", "q_len", "context", "n_heads", "kv_heads", "head_dim"},
          {d(seqs), d(q_len), d(context), d(heads), d(kv_heads), d(head_dim)}, {"seqs", "context"},
          [&](const DimView& v) { return w_.paged_attention(v); }, busy_, &bytes));
}

void Ops::mla(int64_t seqs, int64_t q_len, int64_t context, int64_t heads, int64_t lora, int64_t rope) {
  if (seqs <= 0) return;
  add(Ph::attention, 1,
      op_time(
          p_, "mla_attention", {"seqs", "q_len", "context", "n_heads", "kv_lora_rank", "rope_dim"},
          {d(seqs), d(q_len), d(context), d(heads), d(lora), d(rope)}, {"seqs", "context"},
          [&](const DimView& v) { return w_.mla_attention(v); }, busy_, &bytes));
}

void Ops::head_linear(int64_t tokens, int64_t heads, int64_t in, int64_t out) {
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

void Ops::collective(const std::string& kind, int ranks, int span, double bytes) {
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

void Ops::host_wait(Ph ph) {
  trace_op("host_wait", "step.copy_to_host_us", {}, {}, busy_.share, p_.copy_to_host_s);
  add(ph, 1, p_.copy_to_host_s, true);
}

void Ops::copy(Ph ph, const std::string& op, double n_bytes) {
  if (n_bytes <= 0) return;
  add(ph, 1,
      op_time(
          p_, op, {"bytes"}, {n_bytes}, {"bytes"},
          [&](const DimView& v) { return OpWork{.bytes = v["bytes"], .flops = 0}; }, busy_, &bytes));
}

void Ops::add_skew(double cold, double rows) {
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

void Ops::add(Ph ph, double times, double seconds, bool not_a_kernel) {
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

}  // namespace sy::cost
