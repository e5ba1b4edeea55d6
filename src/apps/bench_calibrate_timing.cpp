// bench calibrate's timing of one prepared point: batches of back-to-back calls, replayed as one captured graph
// where the backend can capture (bench_calibrate_points.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "apps/bench_calibrate_points.h"
#include "apps/bench_timing.h"
#include "base/check.h"
#include "base/log.h"

namespace sy {

// Replays `calls` captured calls as one graph: the median of `repeats` replays per call. Once, a batch shorter than
// half the target is captured again with more calls.
double time_captured(Backend& be, const Prepared& p, const TimingPolicy& t, int calls) {
  struct DropCaptures {
    Backend& be;
    ~DropCaptures() { be.drop_captures(); }
  } drop{be};
  for (int attempt = 0;; ++attempt) {
    const int64_t id = be.capture([&] {
      for (int i = 0; i < calls; ++i) p.issue();
    });
    be.replay(id);  // the first launch uploads the graph
    be.synchronize();
    auto t0 = BenchClock::now();
    be.replay(id);
    be.synchronize();
    const double batch = us_since(t0);
    if (attempt == 0 && batch < t.batch_us / 2 && calls < t.max_calls) {
      calls = static_cast<int>(std::min<double>(t.max_calls, std::ceil(calls * t.batch_us / std::max(batch, 1.0))));
      be.drop_captures();
      continue;
    }
    std::vector<double> per_call{batch / calls};
    while (static_cast<int>(per_call.size()) < t.repeats) {
      t0 = BenchClock::now();
      be.replay(id);
      be.synchronize();
      per_call.push_back(us_since(t0) / calls);
    }
    return median(per_call);
  }
}

// µs per call of the prepared op, as TimingPolicy says (bench_calibrate_points.h).
double time_prepared(Backend& be, const Prepared& p, const TimingPolicy& t) {
  // The first call sizes the backend's scratch memory (a capture must not allocate); the second is timed alone.
  auto t0 = BenchClock::now();
  p.issue();
  be.synchronize();
  const double first = us_since(t0);
  t0 = BenchClock::now();
  p.issue();
  be.synchronize();
  const double once = us_since(t0);
  // The point is sized from the faster of the two: one call caught slow (the host's 1-rank profiles timed a 512 x
  // 256 product at one row, 8-16 µs, at 2,013 and 4,794 µs, right after the 2 GB streaming point; docs/perf-notes.md
  // item 53) is then not the point's time, but a batch of calls is.
  const double single = std::min(first, once);
  std::vector<double> per_call;
  int calls = 1, repeats = t.repeats;
  if (single >= t.batch_us) {
    // One call fills a batch: launch costs are small against it, and three of them agree closely.
    per_call.push_back(once);
    repeats = std::min(repeats, 3);
  } else {
    calls = static_cast<int>(std::clamp(std::ceil(t.batch_us / std::max(single, 0.01)), 1.0, double(t.max_calls)));
    if (t.graphs && p.capturable && be.can_capture()) {
      try {
        return time_captured(be, p, t, calls);
      } catch (const Error& e) {
        log_warn("bench calibrate: capturing the op failed ({}); timing it eagerly", e.what());
      }
    }
  }
  while (static_cast<int>(per_call.size()) < repeats) {
    t0 = BenchClock::now();
    for (int i = 0; i < calls; ++i) p.issue();
    be.synchronize();
    per_call.push_back(us_since(t0) / calls);
  }
  return median(per_call);
}

}  // namespace sy
