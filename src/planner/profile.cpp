// Reading a machine profile and looking up op and collective times in it.
#include "planner/profile.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

using nlohmann::json;

// Dims that are outcomes of a measurement rather than inputs (the distinct experts a random routing touched):
// never matched against the query, only counted in the work.
bool outcome_dim(const std::string& d) { return d == "touched"; }

double lg(double v) { return std::log(std::max(v, 1e-30)); }

// The fixed part of an op's time in the work model: what even an empty call costs.
double fixed_seconds(const std::string& device) { return device == "cuda" ? 2e-6 : 0.5e-6; }

const json& need(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  SY_CHECK(it != j.end(), "{} has no key '{}' (profiles are written by `switchyard bench calibrate`)", where, key);
  return *it;
}

// j[key], when present: an array of arrays of names.size() finite numbers ([segment_us, fraction], ...); empty
// when absent. sy::Error naming the key and the entry otherwise.
std::vector<std::vector<double>> number_tuples(const json& j, const char* key, const std::vector<std::string>& names,
                                               const std::string& where) {
  std::vector<std::vector<double>> out;
  if (!j.contains(key)) return out;
  const json& a = j[key];
  const std::string shape = fmt::format("[{}]", fmt::join(names, ", "));
  SY_CHECK(a.is_array(), "{}.{} must be an array of {} entries, not {}", where, key, shape,
           cut_for_message(a.dump(), 60));
  for (size_t i = 0; i < a.size(); ++i) {
    const json& e = a[i];
    bool ok = e.is_array() && e.size() == names.size();
    for (size_t k = 0; ok && k < e.size(); ++k) ok = e[k].is_number() && std::isfinite(e[k].get<double>());
    SY_CHECK(ok, "{}.{}[{}] must be {} (finite numbers), not {}", where, key, i, shape, cut_for_message(e.dump(), 60));
    out.emplace_back();
    for (const json& v : e) out.back().push_back(v.get<double>());
  }
  return out;
}

double number(const json& j, const char* key, const std::string& where, bool positive) {
  const json& v = need(j, key, where);
  SY_CHECK(v.is_number(), "{}.{} must be a number, not {}", where, key, cut_for_message(v.dump(), 60));
  const double d = v.get<double>();
  SY_CHECK(std::isfinite(d) && (positive ? d > 0 : d >= 0), "{}.{} is {}; it must be finite and {}", where, key, d,
           positive ? "positive" : "at least 0");
  return d;
}

std::string text(const json& j, const char* key, const std::string& where) {
  const json& v = need(j, key, where);
  SY_CHECK(v.is_string(), "{}.{} must be a string, not {}", where, key, cut_for_message(v.dump(), 60));
  return v.get<std::string>();
}

std::map<std::string, OpTable> tables(const json& j, const std::string& where) {
  SY_CHECK(j.is_object(), "{} must be an object of tables {{\"dims\": [...], \"points\": [[...], ...]}}", where);
  std::map<std::string, OpTable> out;
  for (const auto& [name, tj] : j.items()) {
    const std::string w = fmt::format("{}.{}", where, name);
    SY_CHECK(tj.is_object(), "{} must be an object with 'dims' and 'points'", w);
    OpTable t;
    const json& dims = need(tj, "dims", w);
    SY_CHECK(dims.is_array() && !dims.empty(), "{}.dims must be a non-empty array of names", w);
    for (const json& d : dims) {
      SY_CHECK(d.is_string(), "{}.dims holds {}, not a name", w, cut_for_message(d.dump(), 40));
      t.dims.push_back(d.get<std::string>());
    }
    const json& pts = need(tj, "points", w);
    SY_CHECK(pts.is_array() && !pts.empty(), "{}.points must be a non-empty array of points", w);
    for (size_t i = 0; i < pts.size(); ++i) {
      const json& p = pts[i];
      SY_CHECK(p.is_array() && p.size() == t.dims.size() + 1,
               "{}.points[{}] must hold {} numbers (the dims {}, then microseconds), not {}", w, i, t.dims.size() + 1,
               fmt::join(t.dims, ", "), cut_for_message(p.dump(), 80));
      std::vector<double> row;
      for (size_t k = 0; k < p.size(); ++k) {
        SY_CHECK(p[k].is_number(), "{}.points[{}][{}] is {}, not a number", w, i, k, cut_for_message(p[k].dump(), 40));
        const double v = p[k].get<double>();
        const bool time = k + 1 == p.size();
        SY_CHECK(std::isfinite(v) && (time ? v > 0 : v >= 0), "{}.points[{}][{}] is {}; {} must be finite and {}", w, i,
                 k, v, time ? "a time" : "a dim", time ? "positive" : "at least 0");
        row.push_back(v);
      }
      t.points.push_back(std::move(row));
    }
    out[name] = std::move(t);
  }
  return out;
}

// Interpolates log(value) against log(x) over sorted (x, log value) pairs; constant beyond the ends.
double interp_log(const std::vector<std::pair<double, double>>& xs, double x) {
  if (xs.size() == 1 || x <= xs.front().first) return xs.front().second;
  if (x >= xs.back().first) return xs.back().second;
  const auto hi = std::lower_bound(xs.begin(), xs.end(), x, [](const auto& p, double v) { return p.first < v; });
  const auto lo = hi - 1;
  const double f = (lg(x) - lg(lo->first)) / (lg(hi->first) - lg(lo->first));
  return lo->second + f * (hi->second - lo->second);
}

// Sorted (x, mean log value) over the rows, one entry per distinct x.
std::vector<std::pair<double, double>> series(const std::vector<std::pair<double, double>>& rows) {
  std::map<double, std::pair<double, int>> acc;
  for (const auto& [x, v] : rows) {
    acc[x].first += v;
    ++acc[x].second;
  }
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, s] : acc) out.emplace_back(x, s.first / s.second);
  return out;
}

// How far (in the lookup's log distance) a second and third shape may lie beyond the nearest for the median of the
// three to price a query: each within a factor of two in one dim.
constexpr double kNeighbourDistance = 0.7;

// A CPU backend runs each routed expert's rows as one product (backend/grouped_moe.cpp): a single row as a
// matrix-vector product, several rows as a matrix product, which OpenBLAS does several times slower at a few rows
// (kernels/cpu/ops.cpp linear). Whether a point of a routed-experts table ("tokens", "top_k" and the outcome
// "touched") gave every expert it touched one row decides which of the two it timed: r19's 4-rank profile timed
// the bundled model's 2 experts at 12 µs for one token, 73 µs for two tokens that its random routing put on one
// expert, 24 µs where it put them on two. A query whose pairs each have an expert of their own (batch 1: a token's
// pairs go to distinct experts) is priced from the points of one row an expert where the shape has any, and the
// others from the rest (docs/perf-notes.md item 56). Other tables: every point.
class ExpertRows {
 public:
  explicit ExpertRows(const OpTable& t)
      : tokens_(t.dim("tokens")), top_k_(t.dim("top_k")), touched_(t.dim("touched")) {}
  // As many experts touched as pairs. A point of 32 pairs on 26 experts ran 6 of them as products of several
  // rows, and prices a query of several rows an expert (r15's pp8 at batch 64: 8 tokens a micro-batch).
  bool one_row(const std::vector<double>& p) const {
    if (tokens_ < 0 || top_k_ < 0 || touched_ < 0) return false;
    const double pairs = p[static_cast<size_t>(tokens_)] * p[static_cast<size_t>(top_k_)];
    return pairs <= p[static_cast<size_t>(touched_)] * (1 + 1e-9);
  }
  // The members whose kernel is the query's, or all of them when none is.
  std::vector<size_t> same_kernel(const std::vector<size_t>& members, const std::vector<double>& q,
                                  const OpTable& t) const {
    if (tokens_ < 0 || top_k_ < 0 || touched_ < 0) return members;
    std::vector<size_t> same;
    for (const size_t i : members) {
      if (one_row(t.points[i]) == one_row(q)) same.push_back(i);
    }
    return same.empty() ? members : same;
  }

 private:
  int tokens_, top_k_, touched_;
};

// A point of a series: the varying dim's value, log(time / work) and log(work).
struct SeriesPoint {
  double x, log_ratio, log_work;
};

// series() of the points' ratios.
std::vector<std::pair<double, double>> series_of(const std::vector<SeriesPoint>& points) {
  std::vector<std::pair<double, double>> ratios;
  for (const SeriesPoint& p : points) ratios.emplace_back(p.x, p.log_ratio);
  return series(ratios);
}

// series() over the points of one shape, each point's time held to the lower envelope from above: a point never
// takes longer than one of the same shape with more of the varying dim (more rows, tokens, pairs or context: more
// work by the same kernel), so a point slower than a larger one caught something else on the machine (a CPU
// thread preempted for a time slice: 8-12 ms on points of 0.1-3 ms) and reads as the larger one's time. A CPU
// host's two calibrations of one rank, minutes apart, put 31% of their common points outside 0.8-1.25x of each
// other; the planner's decode step at batch 1 from the one against the other was 1.25-5.1x, 0.75-1.06x so held
// (docs/perf-notes.md item 45). Points off their neighbours the other way, or faster, are kept: a median over
// three points smoothed away a real slow point of the experts (ep4 at batch 64 priced 22% under, from 14%).
std::vector<std::pair<double, double>> capped_series(const std::vector<SeriesPoint>& points) {
  std::vector<std::pair<double, double>> ratios, works;
  for (const SeriesPoint& p : points) {
    ratios.emplace_back(p.x, p.log_ratio);
    works.emplace_back(p.x, p.log_work);
  }
  auto out = series(ratios);
  const auto w = series(works);
  double cap = std::numeric_limits<double>::infinity();  // log time
  for (size_t i = out.size(); i-- > 0;) {
    cap = std::min(cap, out[i].second + w[i].second);
    out[i].second = cap - w[i].second;
  }
  return out;
}

}  // namespace

int OpTable::dim(const std::string& name) const {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == name) return static_cast<int>(i);
  }
  return -1;
}

const OpShapes& OpTable::shapes(const std::vector<int>& vary) const {
  static std::mutex mutex;  // lookups may come from several threads; the index is built once
  const std::lock_guard lock(mutex);
  if (shapes_points_ != points.size()) {
    shapes_.clear();
    shapes_points_ = points.size();
  }
  const auto [it, fresh] = shapes_.try_emplace(vary);
  if (!fresh) return it->second;
  std::vector<OpShape>& out = it->second.shapes;
  const size_t n = dims.size();
  std::vector<bool>& shape_dim = it->second.shape_dim;
  shape_dim.resize(n);
  for (size_t d = 0; d < n; ++d) {
    shape_dim[d] = !outcome_dim(dims[d]) && std::find(vary.begin(), vary.end(), static_cast<int>(d)) == vary.end();
  }
  std::map<std::vector<double>, size_t> index;  // the shape dims' values -> out[i]
  for (size_t i = 0; i < points.size(); ++i) {
    const std::vector<double>& p = points[i];
    std::vector<double> key;
    for (size_t d = 0; d < n; ++d) {
      if (shape_dim[d]) key.push_back(p[d]);
    }
    const auto [at, first] = index.try_emplace(std::move(key), out.size());
    if (first) out.push_back({.point = p, .lo = p, .hi = p});
    OpShape& s = out[at->second];
    s.members.push_back(i);
    for (const int v : vary) {
      const auto d = static_cast<size_t>(v);
      s.lo[d] = std::min(s.lo[d], p[d]);
      s.hi[d] = std::max(s.hi[d], p[d]);
    }
  }
  const auto logs = [](const std::vector<double>& v) {
    std::vector<double> l(v.size());
    for (size_t d = 0; d < v.size(); ++d) l[d] = lg(v[d] + 1);
    return l;
  };
  for (OpShape& s : out) {
    s.log_point = logs(s.point);
    s.log_lo = logs(s.lo);
    s.log_hi = logs(s.hi);
  }
  return it->second;
}

double MachineProfile::work_seconds(const OpWork& w) const {
  // On a CPU the ops read memory with every thread of the rank, faster than the single copy `copy_gb_s` times.
  const double bytes_rate = std::max(copy_bytes_per_s, stream_bytes_per_s);
  return fixed_seconds(device) + std::max(w.bytes / bytes_rate, w.flops / matrix_flops_per_s);
}

double MachineProfile::scaling_seconds(const OpWork& w) const {
  return work_seconds({.bytes = std::max(w.bytes, w.reads), .flops = w.flops});
}

double DimView::operator[](std::string_view name) const {
  for (size_t i = 0; i < names->size(); ++i) {
    if ((*names)[i] == name) return values[i];
  }
  SY_FAIL("an op point with dims {} has no dim '{}'", fmt::join(*names, ", "), name);
}

double MachineProfile::op_seconds(const std::string& op, const DimView& query, const std::vector<std::string>& vary,
                                  const WorkFn& work, bool alone) const {
  const std::map<std::string, OpTable>& tables = alone ? ops_alone : ops;
  auto it = tables.find(op);
  SY_CHECK(it != tables.end(), "the profile {} has no {}timings of op '{}'; calibrate again with this build", source,
           alone ? "single-rank " : "", op);
  const OpTable& t = it->second;
  const size_t n = t.dims.size();
  std::vector<double> q(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& qn = *query.names;
    const auto f = std::find(qn.begin(), qn.end(), t.dims[i]);
    SY_CHECK(f != qn.end(), "the profile {} times op '{}' by '{}', which the cost model does not give ({})", source, op,
             t.dims[i], fmt::join(qn, ", "));
    q[i] = query.values[f - qn.begin()];
  }
  std::vector<int> vi;
  for (const std::string& v : vary) {
    const int i = t.dim(v);
    SY_CHECK(i >= 0, "the profile {} times op '{}' by {}, without '{}'", source, op, fmt::join(t.dims, ", "), v);
    vi.push_back(i);
  }
  // The measured shapes nearest to the query: log distance in the non-varying dims, plus how far the query lies
  // outside the shape's measured range in the varying ones (a shape timed at m = 1 only says nothing of m = 64,
  // where a product turns from reading its weights to computing).
  const OpShapes& index = t.shapes(vi);
  std::vector<double> log_q(n);
  for (size_t d = 0; d < n; ++d) log_q[d] = lg(q[d] + 1);
  std::vector<std::pair<double, const OpShape*>> by_distance;
  for (const OpShape& s : index.shapes) {
    double dist = 0;
    for (size_t d = 0; d < n; ++d) {
      if (index.shape_dim[d]) dist += std::abs(s.log_point[d] - log_q[d]);
    }
    for (const int v : vi) {
      const auto d = static_cast<size_t>(v);
      dist += std::max(0.0, s.log_lo[d] - log_q[d]) + std::max(0.0, log_q[d] - s.log_hi[d]);
    }
    by_distance.emplace_back(dist, &s);
  }
  SY_CHECK(!by_distance.empty(), "the profile {} has no points of op '{}'", source, op);
  std::sort(by_distance.begin(), by_distance.end(), [](const auto& x, const auto& y) {
    return x.first < y.first || (x.first == y.first && x.second < y.second);
  });
  // A CPU profile's points caught what else the host ran (items 45 and 49 below); a GPU's are replayed graphs,
  // whose differences between neighbouring shapes and rows are the kernels' own (cuBLAS picks another kernel at
  // one row than at two: held to the two-row time, Qwen3-30B-A3B's b1 decode on one H200 went from −14.9% to
  // −17.8%).
  const bool noisy = device == "cpu";
  // Each point of a shape as log(measured time / predicted work), over the varying dims.
  const auto point = [&](const std::vector<double>& p, double x) {
    const double w = scaling_seconds(work(DimView{&t.dims, p.data()}));
    return SeriesPoint{.x = x, .log_ratio = lg(p.back() * 1e-6 / w), .log_work = lg(w)};
  };
  const double w_q = scaling_seconds(work(DimView{&t.dims, q.data()}));
  const ExpertRows rows_of{t};
  // The query's time from one shape's points.
  const auto from_shape = [&](const OpShape& nearest) {
    double log_r = 0;
    const std::vector<size_t> members = noisy ? rows_of.same_kernel(nearest.members, q, t) : nearest.members;
    if (vi.size() == 1) {
      std::vector<SeriesPoint> rows;
      for (const size_t i : members) {
        const auto& p = t.points[i];
        rows.push_back(point(p, p[static_cast<size_t>(vi[0])]));
      }
      const auto s = noisy ? capped_series(rows) : series_of(rows);
      const auto a = static_cast<size_t>(vi[0]);
      log_r = interp_log(s, q[a]);
      const bool one_row = noisy && rows_of.one_row(q) && std::all_of(members.begin(), members.end(), [&](size_t i) {
                             return rows_of.one_row(t.points[i]);
                           });
      if (q[a] > s.back().first && one_row) {
        // Beyond the largest point of one row an expert: every further expert is another single-row product.
        return std::exp(log_r) * w_q;
      }
      if (q[a] > s.back().first) {
        // Beyond the largest timed point: that point's time, and the work past it at the better of its efficiency
        // and the profile's rates. What makes a small point slow (per-call overhead, an expert's few rows) does
        // not grow with the rows: the same ratio on the whole priced 128 rows of 32 experts at 8 CPU ranks at 82
        // ms a layer where they ran in 38 (the 32-row point's ratio 3.5 times the compute past it).
        std::vector<double> at = q;
        at[a] = s.back().first;
        const double w_last = scaling_seconds(work(DimView{&t.dims, at.data()}));
        const double r = std::exp(log_r);
        return r * w_last + std::min(r, 1.0) * std::max(0.0, w_q - w_last);
      }
    } else {
      SY_CHECK(vi.size() == 2, "op_seconds interpolates over one or two dims, not {}", vi.size());
      const auto a = static_cast<size_t>(vi[0]), b = static_cast<size_t>(vi[1]);
      // Interpolate over a within each measured value of b, then over b.
      std::map<double, std::vector<SeriesPoint>> by_b;
      for (const size_t i : members) {
        const auto& p = t.points[i];
        by_b[p[b]].push_back(point(p, p[a]));
      }
      std::vector<std::pair<double, double>> over_b;
      for (const auto& [bv, rows] : by_b) {
        over_b.emplace_back(bv, interp_log(noisy ? capped_series(rows) : series_of(rows), q[a]));
      }
      log_r = interp_log(over_b, q[b]);
    }
    return std::exp(log_r) * w_q;
  };
  // The nearest shape's time, or the median of the three nearest where the second and third lie within
  // kNeighbourDistance of it: one shape's timing that caught something else on the machine does not set the
  // query's (r15's 1-rank profile timed the medium config's fused QKV product, 1,536 × 1,024, at 200 µs at one row
  // cold, where its neighbours 1,024 × 1,024 and 768 × 1,024 ran at a third of that a byte and r14's at 78 µs;
  // docs/perf-notes.md item 49).
  const double first = from_shape(*by_distance.front().second);
  if (!noisy || by_distance.size() < 3 || by_distance[2].first > by_distance.front().first + kNeighbourDistance) {
    return first;
  }
  std::array<double, 3> three = {first, from_shape(*by_distance[1].second), from_shape(*by_distance[2].second)};
  std::sort(three.begin(), three.end());
  return three[1];
}

double MachineProfile::largest_timed(const std::string& op, const DimView& query, const std::string& rows) const {
  const auto it = ops.find(op);
  SY_CHECK(it != ops.end(), "the profile {} has no timings of op '{}'; calibrate again with this build", source, op);
  const OpTable& t = it->second;
  const int r = t.dim(rows);
  SY_CHECK(r >= 0, "the profile {} times op '{}' by {}, without '{}'", source, op, fmt::join(t.dims, ", "), rows);
  const OpShapes& index = t.shapes({r});
  for (const OpShape& s : index.shapes) {
    bool same = true;
    for (size_t d = 0; d < t.dims.size() && same; ++d) {
      if (index.shape_dim[d]) same = s.point[d] == query[t.dims[d]];
    }
    if (same) return s.hi[static_cast<size_t>(r)];
  }
  return 0;
}

namespace {

// Weights this large stream from memory whatever the CPU's caches (the largest last-level caches hold a few
// hundred MB).
constexpr double kBeyondCachesBytes = 512e6;

// A linear_pool table's pools: (pool bytes, the median of its rounds' µs a call), by pool; empty without the table.
std::vector<std::pair<double, double>> pool_times(const std::map<std::string, OpTable>& tables) {
  const auto it = tables.find("linear_pool");
  if (it == tables.end()) return {};
  const int pool = it->second.dim("pool_mb");
  if (pool < 0) return {};
  std::map<double, std::vector<double>> rounds;
  for (const auto& pt : it->second.points) rounds[pt[static_cast<size_t>(pool)] * 1048576.0].push_back(pt.back());
  std::vector<std::pair<double, double>> us;
  for (auto& [bytes, times] : rounds) {
    const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end());
    us.emplace_back(bytes, *mid);  // the upper median of an even count
  }
  return us;
}

// The rate of the linear_pool table's largest pool when that pool is beyond the caches: the same kind of
// single-row product as the streaming point (one shape for the whole table), its weights rotating through the pool
// so that each call reads them from memory; 0 without such a pool.
double pool_stream_rate(const MachineProfile& p, const std::map<std::string, OpTable>& tables) {
  const std::vector<std::pair<double, double>> us = pool_times(tables);
  if (us.empty() || us.back().first < kBeyondCachesBytes || !(us.back().second > 0)) return 0;
  const OpTable& t = tables.at("linear_pool");
  const int m = t.dim("m"), n = t.dim("n"), k = t.dim("k");
  if (m < 0 || n < 0 || k < 0 || t.points.front()[static_cast<size_t>(m)] != 1) return 0;
  const auto& pt = t.points.front();
  return pt[static_cast<size_t>(n)] * pt[static_cast<size_t>(k)] * p.weight_bytes / (us.back().second * 1e-6);
}

// See MachineProfile::stream_bytes_per_s: the single-row linear point with the most weight bytes, when those are
// beyond the caches, or the cache curve's largest pool where that read faster. Both read weights from memory; the
// one 2 GB product is a single timing that can catch the machine slow (r16's 1-rank profile: 66 GB/s where its
// 512 MiB pool read 90, r14's and r15's streaming points 82 and 91, and the engine's 131 MB LM head 100;
// docs/perf-notes.md item 52), and a floor is the fastest the memory was seen to go.
double stream_rate(const MachineProfile& p, const std::map<std::string, OpTable>& tables) {
  const auto it = tables.find("linear");
  if (p.device != "cpu" || it == tables.end()) return 0;
  const OpTable& t = it->second;
  const int m = t.dim("m"), n = t.dim("n"), k = t.dim("k");
  if (m < 0 || n < 0 || k < 0) return 0;
  double best_bytes = 0, rate = 0;
  for (const auto& pt : t.points) {
    if (pt[static_cast<size_t>(m)] != 1) continue;
    const double bytes = pt[static_cast<size_t>(n)] * pt[static_cast<size_t>(k)] * p.weight_bytes;
    if (bytes > best_bytes) best_bytes = bytes, rate = bytes / (pt.back() * 1e-6);
  }
  if (best_bytes < kBeyondCachesBytes) return 0;
  return std::max(rate, pool_stream_rate(p, tables));
}

// MachineProfile::cache_curve from a linear_pool table: each pool's time (the median of its rounds) as the
// fraction of the way from the smallest pool's (the op's own weights) to the largest's, clamped to [0, 1] and made
// non-decreasing (a pool never reads faster than a smaller one but for noise). No curve when the largest pools are
// less than kCurveSpan slower than the smallest: the probe did not see the caches (one CPU rank of 16 threads
// splits the op's 1 MiB into 64 KiB a thread and times its overhead, 16 µs a call from 1 to 256 MiB, the curve
// then a step at whichever pool the noise put highest; docs/perf-notes.md item 46), and the cost model goes by
// bytes as without the table. With six pools or more each end is the median of its three pools: r20's 1-rank
// probe read 47.5-52.5 µs from 4 to 384 MB and 55.0 at 512 MB, and that one point passed a flat probe for a curve
// that put the bundled model's 1-rank step a third of the way beyond the caches (docs/perf-notes.md item 60).
constexpr double kCurveSpan = 0.1;
constexpr size_t kCurveEnds = 3;

std::vector<std::pair<double, double>> cache_curve(const std::map<std::string, OpTable>& tables) {
  std::vector<std::pair<double, double>> us = pool_times(tables);
  if (us.size() < 2) return {};
  const double lo = us.front().second, span = us.back().second - lo;
  if (!(span >= kCurveSpan * lo)) return {};
  if (us.size() >= 2 * kCurveEnds) {
    const auto middle = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> first, last;
    for (size_t i = 0; i < kCurveEnds; ++i) {
      first.push_back(us[i].second);
      last.push_back(us[us.size() - 1 - i].second);
    }
    const double from = middle(first);
    if (!(middle(last) - from >= kCurveSpan * from)) return {};
  }
  double f = 0;
  for (auto& [bytes, v] : us) {
    f = std::max(f, std::clamp((v - lo) / span, 0.0, 1.0));
    v = f;
  }
  return us;
}

double curve_at(const std::vector<std::pair<double, double>>& c, double bytes) {
  if (bytes <= c.front().first) return c.front().second;
  if (bytes >= c.back().first) return c.back().second;
  const auto hi = std::lower_bound(c.begin(), c.end(), bytes, [](const auto& e, double b) { return e.first < b; });
  const auto lo = hi - 1;
  const double w = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second + w * (hi->second - lo->second);
}

// The best rate any timed product reached, in FLOP/s (0 without a linear table). The matrix rate is the roofline's
// compute bound: the product with the most FLOPs can be a single row streaming 1 GB (the streaming point), whose
// rate is its memory's, 20-40 times below what the same ranks compute at (0.007 against 0.034 TFLOP/s at 8 ranks).
double best_linear_rate(const std::map<std::string, OpTable>& tables) {
  const auto it = tables.find("linear");
  if (it == tables.end()) return 0;
  const OpTable& t = it->second;
  const int m = t.dim("m"), n = t.dim("n"), k = t.dim("k");
  if (m < 0 || n < 0 || k < 0) return 0;
  double rate = 0;
  for (const auto& pt : t.points) {
    const double flops = 2 * pt[static_cast<size_t>(m)] * pt[static_cast<size_t>(n)] * pt[static_cast<size_t>(k)];
    if (pt.back() > 0) rate = std::max(rate, flops / (pt.back() * 1e-6));
  }
  return rate;
}

}  // namespace

double MachineProfile::skew_fraction(double segment_s) const {
  if (skew.empty()) return 0;
  std::vector<std::pair<double, double>> xs;
  for (const auto& [seg, f] : skew) xs.emplace_back(seg, lg(std::max(f, 1e-6)));
  const double f = std::exp(interp_log(xs, std::max(segment_s, 1e-9)));
  return f <= 1e-6 ? 0.0 : f;
}

double MachineProfile::skew_cold_fraction(double rows, double segment_s) const {
  SY_CHECK(!skew_cold.empty(), "the profile {} has no step.skew_cold", source);
  std::map<double, std::vector<std::pair<double, double>>> by_rows;  // rows -> (segment, log fraction)
  for (const auto& [r, seg, f] : skew_cold) by_rows[r].emplace_back(seg, lg(std::max(f, 1e-6)));
  std::vector<std::pair<double, double>> over_rows;
  for (auto& [r, segs] : by_rows) {
    std::sort(segs.begin(), segs.end());
    const double f = std::exp(interp_log(segs, std::max(segment_s, 1e-9)));
    over_rows.emplace_back(r, f <= 1e-6 ? 0.0 : f);
  }
  return interp_log(over_rows, std::max(rows, 1.0));
}

double MachineProfile::collective_seconds(const std::string& kind, int ranks, double bytes) const {
  if (ranks <= 1) return 0;
  auto it = collectives.find(kind);
  SY_CHECK(it != collectives.end(), "the profile {} has no '{}' timings", source, kind);
  const OpTable& t = it->second;
  const int ri = t.dim("ranks"), bi = t.dim("bytes");
  SY_CHECK(ri >= 0 && bi >= 0, "{}: collectives.{} must have dims ranks and bytes", source, kind);
  double nearest = 0, best = std::numeric_limits<double>::infinity();
  for (const auto& p : t.points) {
    const double d = std::abs(lg(p[static_cast<size_t>(ri)]) - lg(ranks));
    if (d < best) {
      best = d;
      nearest = p[static_cast<size_t>(ri)];
    }
  }
  std::vector<std::pair<double, double>> rows;
  for (const auto& p : t.points) {
    if (p[static_cast<size_t>(ri)] == nearest) rows.emplace_back(p[static_cast<size_t>(bi)], lg(p.back()));
  }
  const auto s = series(rows);
  const double b = std::max(bytes, 1.0);
  double us = std::exp(interp_log(s, b));
  if (b > s.back().first) us = std::exp(s.back().second) * b / s.back().first;  // bandwidth-bound beyond
  if (b < s.front().first && s.size() >= 2) {
    // Below the smallest size timed (256 B; 4 KB in profiles before item 57): a latency and a rate through the two
    // smallest points, where they give a positive latency; else that point's time. The two smallest need not be all
    // latency on CPU ranks: r19's 4-rank all-reduce took 8.9 µs at 4 KB and 17.0 at 16 KB, so 1 KB reads 6.9 µs,
    // not 8.9 (docs/perf-notes.md item 57).
    const double b0 = s[0].first, t0 = std::exp(s[0].second), b1 = s[1].first, t1 = std::exp(s[1].second);
    const double per_byte = (t1 - t0) / (b1 - b0), latency = t0 - per_byte * b0;
    if (per_byte > 0 && latency > 0) us = latency + per_byte * b;
  }
  return us * 1e-6;
}

MachineProfile parse_profile(const std::string& text_in, const std::string& src) {
  check_json_depth(text_in, src);
  json j;
  try {
    j = json::parse(text_in);
  } catch (const json::exception& e) {
    SY_FAIL("{} is not valid JSON: {}", src, cut_for_message(e.what(), 200));
  }
  SY_CHECK(j.is_object(), "{} must hold one JSON object (a profile from `switchyard bench calibrate`)", src);
  const std::string format = text(j, "format", src);
  SY_CHECK(format == "switchyard-profile", "{}: format is '{}', not 'switchyard-profile'", src,
           cut_for_message(format, 40));
  const double version = number(j, "version", src, true);
  SY_CHECK(version == 1, "{}: profile version {} is not 1, the one this build reads; calibrate again", src, version);
  MachineProfile p;
  p.source = src;
  const json& m = need(j, "machine", src);
  const std::string mw = src + ": machine";
  p.device = text(m, "device", mw);
  SY_CHECK(p.device == "cuda" || p.device == "cpu", "{}.device is '{}'; it must be cuda or cpu", mw,
           cut_for_message(p.device, 40));
  p.name = text(m, "name", mw);
  p.ranks = static_cast<int>(number(m, "ranks", mw, true));
  p.transport = text(m, "transport", mw);
  if (m.contains("cpu_threads")) p.cpu_threads = static_cast<int>(number(m, "cpu_threads", mw, false));
  if (m.contains("recheck")) {
    const std::string rw = mw + ".recheck";
    SY_CHECK(m["recheck"].is_object(), "{} must be an object {{\"retimed\", \"faster\", \"left\"}}, not {}", rw,
             cut_for_message(m["recheck"].dump(), 60));
    p.busy_points = static_cast<int>(number(m["recheck"], "left", rw, false));
  }
  p.weight_bytes = p.device == "cuda" ? 2 : 4;
  if (m.contains("weight_dtype")) {
    const std::string wd = text(m, "weight_dtype", mw);
    SY_CHECK(wd == "bf16" || wd == "f32", "{}.weight_dtype is '{}'; it must be bf16 or f32", mw,
             cut_for_message(wd, 20));
    p.weight_bytes = wd == "bf16" ? 2 : 4;
  }
  const json& r = need(j, "rates", src);
  const std::string rw = src + ": rates";
  p.copy_bytes_per_s = number(r, "copy_gb_s", rw, true) * 1e9;
  p.matrix_flops_per_s = number(r, "matrix_tflop_s", rw, true) * 1e12;
  const json& s = need(j, "step", src);
  const std::string sw = src + ": step";
  p.launch_s = number(s, "launch_us", sw, false) * 1e-6;
  p.sync_s = number(s, "sync_us", sw, false) * 1e-6;
  p.graph_launch_s = number(s, "graph_launch_us", sw, false) * 1e-6;
  p.copy_to_host_s = number(s, "copy_to_host_us", sw, false) * 1e-6;
  // [segment_us, fraction] and [rows, segment_us, fraction]: the segment positive, the fraction at least 0.
  const std::vector<std::vector<double>> skew = number_tuples(s, "skew", {"segment_us", "fraction"}, sw);
  for (size_t i = 0; i < skew.size(); ++i) {
    const double us = skew[i][0], f = skew[i][1];
    SY_CHECK(us > 0 && f >= 0, "{}.skew[{}] is [{}, {}]; the segment must be positive and the fraction at least 0", sw,
             i, us, f);
    p.skew.emplace_back(us * 1e-6, f);
  }
  std::sort(p.skew.begin(), p.skew.end());
  const std::vector<std::vector<double>> cold = number_tuples(s, "skew_cold", {"rows", "segment_us", "fraction"}, sw);
  for (size_t i = 0; i < cold.size(); ++i) {
    const double rows = cold[i][0], us = cold[i][1], f = cold[i][2];
    SY_CHECK(rows >= 1 && us > 0 && f >= 0,
             "{}.skew_cold[{}] is [{}, {}, {}]; rows must be at least 1, the segment positive and the fraction at "
             "least 0",
             sw, i, rows, us, f);
    p.skew_cold.push_back({rows, us * 1e-6, f});
  }
  std::sort(p.skew_cold.begin(), p.skew_cold.end());
  p.ops = tables(need(j, "ops", src), src + ": ops");
  if (j.contains("ops_alone")) p.ops_alone = tables(j["ops_alone"], src + ": ops_alone");
  if (j.contains("collectives") && !j["collectives"].empty()) {
    p.collectives = tables(j["collectives"], src + ": collectives");
  }
  // Profiles written before `bench calibrate` kept the best rate hold the largest product's.
  p.matrix_flops_per_s = std::max(p.matrix_flops_per_s, best_linear_rate(p.ops));
  p.stream_bytes_per_s = stream_rate(p, p.ops);
  p.stream_alone_bytes_per_s = stream_rate(p, p.ops_alone);
  p.cache_curve = cache_curve(p.ops);
  p.cache_curve_alone = cache_curve(p.ops_alone);
  return p;
}

double MachineProfile::cache_fraction(double rank_bytes, double share) const {
  SY_CHECK(has_cache_curve(), "{}: no cache curve (bench calibrate's linear_pool table)", source);
  const double all = curve_at(cache_curve, rank_bytes);
  if (share >= 1 || cache_curve_alone.empty()) return all;
  const double alone = curve_at(cache_curve_alone, rank_bytes);
  return alone + std::max(0.0, share) * (all - alone);
}

MachineProfile load_profile(const std::filesystem::path& path) {
  return parse_profile(read_regular_file(path, kMaxJsonFileBytes, "profile"), path.string());
}

}  // namespace sy
