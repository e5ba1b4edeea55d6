// `bench calibrate`'s ops: each point (bench_calibrate_points.cpp) timed through the Backend, ranks sharing a host
// in lockstep; the per-step fixed costs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <new>
#include <numeric>
#include <optional>
#include <random>
#include <string_view>

#include "apps/bench_calibrate.h"
#include "apps/bench_calibrate_points.h"
#include "apps/bench_timing.h"
#include "base/check.h"
#include "base/log.h"

namespace sy {

namespace {

std::string point_text(const CalibPoint& p) { return fmt::format("[{}]", fmt::join(p, ", ")); }

// The time left to an op: what is left of the whole budget, in proportion to its weight among the ops left.
struct Budget {
  BenchClock::time_point start = BenchClock::now();
  double seconds = 0;
  double weight_left = 0;

  double share(double weight) const {
    const double left = std::max(0.0, seconds - ms_since(start) / 1e3);
    return weight_left > 0 ? left * weight / weight_left : left;
  }
};

// Ranks that share the host's cores and memory (CPU ranks) time each point together: they start it after a
// barrier, every decision to skip is taken by all of them, and the time kept is the slowest rank's. In a step the
// ranks stream and compute at the same moments and wait for the slowest at the next collective; ranks timing
// the grid each at its own pace would share the memory with whatever the others happen to run. Without a
// communicator (one rank, or GPUs of their own) each call is the identity.
// A point this many times slower a row than its series' previous point is timed again (Lockstep's loop).
constexpr double kOutlierFactor = 4.0;

struct Lockstep {
  Communicator* world = nullptr;

  bool any(bool mine) const {
    if (world == nullptr) return mine;
    float f = mine ? 1.0f : 0.0f;
    world->all_reduce_sum(&f, 1);
    return f > 0;
  }
  void start() const {
    if (world != nullptr) world->barrier();
  }
  // The slowest rank's time; the cold ops' the median rank's (each rank's memory traffic bursts at the barrier's
  // start, so the slowest of W ranks reading cold weights at once is far slower than the step's ranks, which drift
  // apart; the planner's skew term is where waiting for the slowest belongs).
  double of_ranks(bool cold, double us) const {
    if (world == nullptr) return us;
    return cold ? median_rank(*world, us) : slowest_rank(*world, us);
  }
  // Rank 0 times the point again while the others wait at the barrier, as the idle ranks of a step wait in a
  // collective (a pipeline's other stages at batch 1, attention replicas without a sequence); 0 on the other
  // ranks, without a communicator, or when that second timing fails.
  double alone(const std::function<double()>& time) const {
    if (world == nullptr) return 0;
    double us = 0;
    if (world->rank() == 0) {
      // On failure the point keeps its lockstep time only (us stays 0).
      try {
        us = time();
      } catch (const Error&) {
      } catch (const std::bad_alloc&) {
      }
    }
    world->barrier();
    return us;
  }
};

}  // namespace

const std::vector<OpSpec>& calibrated_ops() {
  static const std::vector<OpSpec> specs = [] {
    std::vector<OpSpec> v;
    for (const OpEntry& e : op_entries()) v.push_back(e.spec);
    return v;
  }();
  return specs;
}

namespace {

// The middle of a point's times over the passes that timed it (the mean of the middle two for an even count);
// zeros (not timed) left out, 0 when none.
double middle(std::vector<double> v) {
  std::erase(v, 0.0);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One pass over the grid within `seconds`; each timed point keyed by the grid's point (`keys`, parallel to the
// tables' points), the recorded dims differing where a point records an outcome (the experts a routing touched).
// `first_pass`: a series' first point is timed whatever the budget (a later pass's series may have nothing of its
// own: the first pass timed every point once). `ledger`: which points this pass times, in which order, and what
// it learnt for the next (PassLedger).
std::vector<MeasuredOp> time_ops_pass(const OpsRun& run, const std::vector<OpGrid>& grid, double seconds,
                                      bool first_pass, PassLedger& ledger, std::vector<SkippedPoint>& skipped,
                                      std::vector<std::vector<CalibPoint>>& keys) {
  Backend& be = run.be;
  const Lockstep lock{.world = run.lockstep};
  Budget budget{.seconds = seconds};
  for (const OpGrid& g : grid) budget.weight_left += g.weight;
  std::mt19937_64 rng(20240519);
  std::vector<MeasuredOp> tables;
  ColdPool cold;
  // Memory kept back for the backend's own (scratch, libraries' workspaces).
  const double reserve = be.device() == Device::cpu ? 1e9 : 2e9;
  for (const OpGrid& g : grid) {
    const OpEntry& entry = find_op(g.op);
    const bool cold_op = g.op.ends_with("_cold");
    MeasuredOp table{.op = g.op, .dims = entry.spec.dims};
    std::vector<CalibPoint> op_keys;
    const auto op_start = BenchClock::now();
    const double share = budget.share(g.weight);
    budget.weight_left -= g.weight;
    size_t n_skipped = 0;
    const auto skip = [&](const CalibPoint& p, std::string why) {
      skipped.push_back({.op = g.op, .point = p, .why = std::move(why)});
      ++n_skipped;
    };
    // Each series (one shape, growing rows) has an equal part of what is left of the op's share, so that a
    // bound too short for the whole grid still reaches every shape, the later models' as well as the first's.
    size_t series_left = g.series.size();
    for (const std::vector<CalibPoint>& series : g.series) {
      SeriesWeights weights;
      const double series_share = std::max(0.0, share - ms_since(op_start) / 1e3) / static_cast<double>(series_left--);
      const auto series_start = BenchClock::now();
      double prev_us = 0, prev_rows = 1;  // the series' last timed point: its time and its first dim
      // A later pass first reaches the points no earlier pass timed (a first pass whose time ran out before the
      // series' large rows: item 41), then times again the ones timed before, each sweep from the cheapest up.
      // Every rank's ledger holds the same points timed, so the order is the same on all of them.
      std::vector<size_t> order(series.size());
      std::iota(order.begin(), order.end(), size_t{0});
      if (!first_pass) {
        std::stable_partition(order.begin(), order.end(),
                              [&](size_t i) { return ledger.turn(g.op, series[i]) == PassLedger::Turn::first; });
      }
      for (size_t n = 0; n < order.size(); ++n) {
        const size_t i = order[n];
        const CalibPoint& point = series[i];
        const size_t later = series.size() - i - 1;
        // A series' first point is timed whatever the budget, so that no op or shape is left without points (the
        // planner would fall back to the preset's efficiencies, or to another shape's ratio).
        if ((n > 0 || !first_pass) && lock.any(ms_since(series_start) / 1e3 > series_share)) {
          skip(point, fmt::format("the series' part ({:.2f} s) of the op's share of the time budget ({:.1f} s of "
                                  "--max-seconds) was spent; {} more point(s) of this series not timed in this pass",
                                  series_share, share, order.size() - n - 1));
          break;
        }
        if (static_cast<double>(point[0]) < prev_rows) prev_us = 0;  // the sweep of points timed before begins
        if (std::any_of(point.begin(), point.end(), [](int64_t v) { return v <= 0; })) {
          skip(point, "a dim is 0 (a slice finer than the shape, e.g. 4 kv heads over tp 8)");
          continue;
        }
        // Every rank's ledger holds the same points failed, closed or not yet timed; their costs differ, so a
        // point is left when any rank would leave it.
        if (lock.any(ledger.turn(g.op, point) == PassLedger::Turn::leave)) continue;
        const auto point_start = BenchClock::now();
        std::optional<PointMemory> mem;
        std::optional<Prepared> prepared;
        std::string why;
        double us = 0;
        bool failed = false;
        // Preparing, then timing; a rank that fails either says so to the others before any of them goes on.
        // The backend's own scratch for the op (outside the limit above) may not fit, or a library may refuse the
        // shape: the point is recorded as skipped with the reason, and the run goes on.
        for (const bool timing : {false, true}) {
          bool mine = true;  // this rank failed, until its step returns
          try {
            if (timing) {
              us = time_prepared(be, *prepared, run.timing);
            } else {
              const double free = static_cast<double>(be.memory_info().free_bytes) * run.memory_share - reserve;
              mem.emplace(be, weights, cold, free, rng);
              prepared.emplace(entry.prepare(*mem, be, point));
            }
            mine = false;
          } catch (const PointSkip& s) {
            why = s.why;
          } catch (const std::bad_alloc&) {
            why = "the allocation failed (out of memory)";
          } catch (const Error& e) {
            why = e.what();
          }
          failed = lock.any(mine);
          if (failed) {
            if (!mine) why = "another rank could not time this point";
            break;
          }
          if (!timing) lock.start();
        }
        if (failed) {
          skip(point, why);
          ledger.close(g.op, point);
          continue;
        }
        us = lock.of_ranks(cold_op, us);
        // A point far slower a row than the series' previous one (time grows at most in proportion to the rows)
        // met a rank descheduled for milliseconds (CPU ranks sharing a host: 6 ms for 128 rows of add_rms_norm
        // where 64 rows took 12 µs); timed again, up to twice, and the fastest kept. A series' first point has
        // nothing to compare with (752 µs for one row of a 2,048 × 256 product whose 4,096-row sibling took 181):
        // with ranks sharing a host it is always timed twice. Every rank sees the same slowest time, so all of
        // them retime together.
        const double bound = kOutlierFactor * prev_us * static_cast<double>(point[0]) / prev_rows;
        const bool first_shared = i == 0 && lock.world != nullptr;
        for (int again = 0; again < 2 && ((first_shared && again == 0) || (prev_us > 0 && us > bound)); ++again) {
          lock.start();
          double retimed = 0;
          try {
            retimed = time_prepared(be, *prepared, run.timing);
          } catch (const Error&) {
            retimed = us;
          }
          us = std::min(us, lock.of_ranks(cold_op, retimed));
        }
        prev_us = us;
        prev_rows = static_cast<double>(point[0]);
        const double alone = lock.alone([&] { return time_prepared(be, *prepared, run.timing); });
        const CalibPoint recorded = prepared->recorded.empty() ? point : prepared->recorded;
        table.points.push_back({.dims = recorded, .us = us, .alone_us = alone});
        op_keys.push_back(point);
        ledger.timed(g.op, point, ms_since(point_start) / 1e3);
        if (us > run.timing.cut_us && later > 0) {
          for (size_t j = i + 1; j < series.size(); ++j) ledger.close(g.op, series[j]);
          skip(series[i + 1], fmt::format("one call at {} took {:.1f} ms, over the {:.0f} ms cut; this and {} larger "
                                          "point(s) of the series not timed",
                                          point_text(point), us / 1e3, run.timing.cut_us / 1e3, later - 1));
          break;
        }
      }
    }
    if (run.log) {
      std::printf("calibrate: %-22s %5zu points, %4zu skipped, %6.1f s\n", g.op.c_str(), table.points.size(), n_skipped,
                  ms_since(op_start) / 1e3);
      std::fflush(stdout);
    }
    // An op none of whose points could be timed is left out (its points are in "skipped"); the profile reader
    // refuses an empty table.
    if (!table.points.empty()) {
      tables.push_back(std::move(table));
      keys.push_back(std::move(op_keys));
    }
  }
  return tables;
}

}  // namespace

std::vector<size_t> dominated_points(const MeasuredOp& op) {
  const auto valid = [](const CalibPoint& d) {
    return std::all_of(d.begin(), d.end(), [](int64_t v) { return v > 0; });
  };
  std::vector<size_t> out;
  for (size_t i = 0; i < op.points.size(); ++i) {
    const TimedPoint& p = op.points[i];
    if (!valid(p.dims)) continue;
    const bool dominated = std::any_of(op.points.begin(), op.points.end(), [&](const TimedPoint& q) {
      if (q.dims.size() != p.dims.size() || q.dims == p.dims || !valid(q.dims) || q.us <= 0) return false;
      for (size_t d = 0; d < p.dims.size(); ++d) {
        if (q.dims[d] < p.dims[d]) return false;
      }
      return p.us > kDominatedFactor * q.us && p.us - q.us > kDominatedMarginUs;
    });
    if (dominated) out.push_back(i);
  }
  return out;
}

// In up to two rounds (a point timed again may still be over, or a faster neighbour may now name another). Every
// rank holds the same times (the slowest rank's, or the median's), so every rank picks the same points.
RecheckCount recheck_dominated(const OpsRun& run, double seconds, PassLedger& ledger,
                               const std::map<std::string, std::vector<CalibPoint>>& point_order,
                               std::vector<MeasuredOp>& out) {
  constexpr int kRounds = 2;
  const auto start = BenchClock::now();
  RecheckCount c;
  const Lockstep lock{.world = run.lockstep};
  OpsRun recheck_run = run;
  recheck_run.log = false;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<OpGrid> grid;
    std::vector<size_t> table_of;  // grid entry -> index into out
    size_t n_points = 0;
    for (size_t t = 0; t < out.size(); ++t) {
      const std::vector<size_t> idx = dominated_points(out[t]);
      if (idx.empty()) continue;
      OpGrid g{.op = out[t].op, .weight = static_cast<double>(idx.size())};
      for (size_t i : idx) g.series.push_back({point_order.at(out[t].op)[i]});
      n_points += idx.size();
      grid.push_back(std::move(g));
      table_of.push_back(t);
    }
    const double left = seconds - ms_since(start) / 1e3;
    // The ranks' clocks differ: every rank stops when any has no time left (grid is the same on all of them).
    if (grid.empty() || lock.any(left <= 0)) break;
    if (run.log) {
      std::printf("calibrate: recheck %d: %zu point(s) over %.0fx the time of a larger one, %.1f s left\n", round + 1,
                  n_points, kDominatedFactor, left);
      std::fflush(stdout);
    }
    std::vector<SkippedPoint> unused;
    std::vector<std::vector<CalibPoint>> keys;
    const std::vector<MeasuredOp> tables = time_ops_pass(recheck_run, grid, left, false, ledger, unused, keys);
    for (size_t t = 0; t < tables.size(); ++t) {
      const auto g = std::find_if(grid.begin(), grid.end(), [&](const OpGrid& e) { return e.op == tables[t].op; });
      MeasuredOp& m = out[table_of[static_cast<size_t>(g - grid.begin())]];
      const std::vector<CalibPoint>& order = point_order.at(m.op);
      for (size_t i = 0; i < tables[t].points.size(); ++i) {
        const size_t j = static_cast<size_t>(std::find(order.begin(), order.end(), keys[t][i]) - order.begin());
        SY_CHECK(j < m.points.size(), "bench calibrate: the recheck timed {} {}, a point not in its table", m.op,
                 point_text(keys[t][i]));
        TimedPoint& p = m.points[j];
        const TimedPoint& again = tables[t].points[i];
        ++c.retimed;
        if (again.us > 0 && again.us < p.us) {
          p.us = again.us;
          if (again.alone_us > 0) p.alone_us = again.alone_us;
          ++c.faster;
        }
      }
    }
  }
  for (const MeasuredOp& m : out) c.left += static_cast<int>(dominated_points(m).size());
  if (run.log) {
    std::printf(
        "calibrate: recheck: %d point(s) timed again, %d of them faster; %d point(s) still over %.0fx a "
        "larger one's time\n",
        c.retimed, c.faster, c.left, kDominatedFactor);
    std::fflush(stdout);
  }
  return c;
}

std::vector<MeasuredOp> time_ops(const OpsRun& run, const std::vector<OpGrid>& grid, std::vector<SkippedPoint>& skipped,
                                 RecheckCount* recheck) {
  SY_CHECK(run.be.kv_storage_dtype() == run.be.weight_dtype(),
           "bench calibrate fills the KV cache in the weight dtype");
  SY_CHECK(run.passes >= 1, "bench calibrate: --passes must be at least 1, got {}", run.passes);
  // Each pass the whole grid in its share of the time; a point's time the middle of the passes' (OpsRun::passes).
  struct Merged {
    CalibPoint dims;  // as the first pass that timed it recorded them
    std::vector<double> us, alone_us;
  };
  std::vector<std::string> op_order;
  std::map<std::string, std::vector<std::string>> op_dims;
  std::map<std::string, std::vector<CalibPoint>> point_order;  // by op: the keys, first seen first
  std::map<std::pair<std::string, CalibPoint>, Merged> merged;
  std::map<std::pair<std::string, CalibPoint>, std::string> not_timed;  // the last pass's reason
  PassLedger ledger;
  // The timing's repeats spread over the passes rather than taken back to back: with 3 repeats and 3 passes, each
  // pass times a point once, so the passes cost about what one pass of three repeats did.
  OpsRun pass_run = run;
  pass_run.timing.repeats = std::max(1, run.timing.repeats / run.passes);
  const auto start = BenchClock::now();
  SY_CHECK(run.recheck_share >= 0 && run.recheck_share < 1, "bench calibrate: the recheck's share is {}",
           run.recheck_share);
  const double pass_seconds = run.seconds * (1 - run.recheck_share);
  for (int pass = 0; pass < run.passes; ++pass) {
    // Coverage before repeats (item 41): the first pass the time one pass would have had less what the later
    // ones need to time its points again (first_pass_share); they share what is left, the first's unspent time
    // too, and time again its cheapest points of each series first, then what its time did not reach.
    const double remaining = std::max(0.0, pass_seconds - ms_since(start) / 1e3);
    const double left = pass == 0 ? remaining * first_pass_share(run.passes) : remaining / (run.passes - pass);
    if (run.log && run.passes > 1) {
      std::printf("calibrate: pass %d of %d, %.1f s\n", pass + 1, run.passes, left);
      std::fflush(stdout);
    }
    std::vector<SkippedPoint> pass_skipped;
    std::vector<std::vector<CalibPoint>> keys;
    const std::vector<MeasuredOp> tables = time_ops_pass(pass_run, grid, left, pass == 0, ledger, pass_skipped, keys);
    for (SkippedPoint& s : pass_skipped) not_timed.insert_or_assign({s.op, s.point}, std::move(s.why));
    for (size_t t = 0; t < tables.size(); ++t) {
      const MeasuredOp& m = tables[t];
      if (op_dims.try_emplace(m.op, m.dims).second) op_order.push_back(m.op);
      for (size_t i = 0; i < m.points.size(); ++i) {
        const auto [it, fresh] = merged.try_emplace({m.op, keys[t][i]}, Merged{.dims = m.points[i].dims});
        if (fresh) point_order[m.op].push_back(keys[t][i]);
        it->second.us.push_back(m.points[i].us);
        it->second.alone_us.push_back(m.points[i].alone_us);
      }
    }
  }
  std::vector<MeasuredOp> out;
  for (const std::string& op : op_order) {
    MeasuredOp m{.op = op, .dims = op_dims[op]};
    for (const CalibPoint& key : point_order[op]) {
      const Merged& p = merged.at({op, key});
      m.points.push_back({.dims = p.dims, .us = middle(p.us), .alone_us = middle(p.alone_us)});
    }
    out.push_back(std::move(m));
  }
  const RecheckCount rc = recheck_dominated(run, run.seconds - ms_since(start) / 1e3, ledger, point_order, out);
  if (recheck != nullptr) *recheck = rc;
  // A point is skipped when no pass timed it.
  for (auto& [key, why] : not_timed) {
    if (!merged.contains(key)) skipped.push_back({.op = key.first, .point = key.second, .why = std::move(why)});
  }
  return out;
}

StepSection time_step_costs(Backend& be, const TimingPolicy& timing) {
  constexpr int64_t kTiny = 256;
  auto y = random_floats(be, kTiny, 1), x = random_floats(be, kTiny, 2);
  const auto tiny = [&] { be.add(y->as<float>(), x->as<float>(), kTiny); };
  StepSection s;
  constexpr int kSamples = 200;
  std::vector<double> launch, sync, read_back;
  tiny();
  be.synchronize();
  for (int r = 0; r < 5; ++r) {
    const auto t0 = BenchClock::now();
    for (int i = 0; i < kSamples; ++i) tiny();
    launch.push_back(us_since(t0) / kSamples);  // issue time only: the device may still be running them
    be.synchronize();
  }
  s.launch_us = median(launch);
  int32_t word = 0;
  auto dev_word = be.alloc(sizeof(word));
  be.copy_on_device(dev_word->data(), x->data(), sizeof(word));
  for (int i = 0; i < kSamples; ++i) {
    be.synchronize();
    auto t0 = BenchClock::now();
    be.synchronize();
    sync.push_back(us_since(t0));
    t0 = BenchClock::now();
    be.copy_to_host(&word, dev_word->data(), sizeof(word));
    read_back.push_back(us_since(t0));
  }
  s.sync_us = median(sync);
  s.copy_to_host_us = median(read_back);
  if (timing.graphs && be.can_capture()) {
    // The op's own time inside a graph of many, then one graph of it replayed and waited for, less the wait.
    const double op_us = time_captured(be, {.issue = tiny}, timing, timing.max_calls);
    struct DropCaptures {
      Backend& be;
      ~DropCaptures() { be.drop_captures(); }
    } drop{be};
    const int64_t id = be.capture(tiny);
    be.replay(id);
    be.synchronize();
    std::vector<double> one;
    for (int i = 0; i < kSamples; ++i) {
      const auto t0 = BenchClock::now();
      be.replay(id);
      be.synchronize();
      one.push_back(us_since(t0));
    }
    s.graph_launch_us = std::max(0.0, median(one) - s.sync_us - op_us);
  }
  return s;
}

double time_matrix_rate(Backend& be, const TimingPolicy& timing) {
  const int64_t n = be.device() == Device::cpu ? 1024 : 8192;
  SeriesWeights weights;
  ColdPool cold;
  std::mt19937_64 rng(7);
  PointMemory mem(be, weights, cold, 1e18, rng);
  const Prepared p = find_op("linear").prepare(mem, be, {n, n, n});
  return 2.0 * std::pow(static_cast<double>(n), 3) / (time_prepared(be, p, timing) * 1e-6);
}

}  // namespace sy
