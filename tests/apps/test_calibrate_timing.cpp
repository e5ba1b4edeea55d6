// bench calibrate's timing of one point (time_prepared) against a prepared call whose cost the test sets: a single
// slow call does not become the point's time, a call that fills a batch is timed alone, a short one in batches.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "apps/bench_calibrate_points.h"
#include "backend/backend.h"

namespace sy {
namespace {

using Clock = std::chrono::steady_clock;

// Spins for `us` microseconds (a sleep can oversleep by a time slice).
void spin_us(double us) {
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

// time_prepared at batches of `batch_us` and `repeats` of them, on a prepared call that takes `costs_us[i]` µs on its
// i-th call and the last entry's after those; `calls` counts the calls made.
double time_costed(std::vector<double> costs_us, double batch_us, int repeats, int& calls) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const Prepared p{.issue =
                       [costs = std::move(costs_us), &calls] {
                         const size_t i = static_cast<size_t>(calls++);
                         spin_us(i < costs.size() ? costs[i] : costs.back());
                       },
                   .capturable = false};
  return time_prepared(*be, p, TimingPolicy{.graphs = false, .batch_us = batch_us, .repeats = repeats});
}

TEST(CalibrateTiming, OneSlowTimedCallIsNotThePointsTime) {
  // The sizing call 30 µs, the call timed alone caught slow at 3 ms, every later call 30 µs: a 3 ms batch of about
  // 100 calls is timed, 30 µs a call (the bound leaves the host's scheduling its share). The batch is long against
  // the calls so that a loaded host (the sanitiser tier: 100 µs calls measured over 111 µs) still sizes more than
  // 20 calls.
  int calls = 0;
  const double us = time_costed({30, 3000, 30}, 3000, 1, calls);
  EXPECT_GT(calls, 20);
  EXPECT_GE(us, 30.0);
  EXPECT_LT(us, 300.0);
}

TEST(CalibrateTiming, ACallThatFillsABatchIsTimedAlone) {
  int calls = 0;
  const double us = time_costed({2000}, 1000, 1, calls);
  EXPECT_EQ(calls, 2);  // the sizing call and the timed one
  EXPECT_GE(us, 2000.0);
  EXPECT_LT(us, 20000.0);
}

TEST(CalibrateTiming, AShortCallIsTimedInBatches) {
  int calls = 0;
  // Three 3 ms batches of about 30 calls of 100 µs, at least ten also where a loaded host slows the sizing calls
  // (a CI run under the sanitisers timed them over 111 µs: batches of nine, had the batch been 1 ms).
  const double us = time_costed({100}, 3000, 3, calls);
  EXPECT_GE(calls, 2 + 3 * 10);
  EXPECT_GE(us, 100.0);
  EXPECT_LT(us, 1000.0);
}

}  // namespace
}  // namespace sy
