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

// A prepared call that takes `costs_us[i]` on its i-th call and the last entry's cost after those.
Prepared costed(std::vector<double> costs_us, int& calls) {
  return {.issue =
              [costs = std::move(costs_us), &calls] {
                const size_t i = static_cast<size_t>(calls++);
                spin_us(i < costs.size() ? costs[i] : costs.back());
              },
          .capturable = false};
}

TEST(CalibrateTiming, OneSlowTimedCallIsNotThePointsTime) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const TimingPolicy policy{.graphs = false, .batch_us = 1000, .repeats = 1};
  // The sizing call 30 µs, the call timed alone caught slow at 3 ms, every later call 30 µs: a batch of about 33
  // calls is timed, 30 µs a call (the bound leaves the host's scheduling its share).
  int calls = 0;
  const double us = time_prepared(*be, costed({30, 3000, 30}, calls), policy);
  EXPECT_GT(calls, 20);
  EXPECT_GE(us, 30.0);
  EXPECT_LT(us, 300.0);
}

TEST(CalibrateTiming, ACallThatFillsABatchIsTimedAlone) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const TimingPolicy policy{.graphs = false, .batch_us = 1000, .repeats = 1};
  int calls = 0;
  const double us = time_prepared(*be, costed({2000}, calls), policy);
  EXPECT_EQ(calls, 2);  // the sizing call and the timed one
  EXPECT_GE(us, 2000.0);
  EXPECT_LT(us, 20000.0);
}

TEST(CalibrateTiming, AShortCallIsTimedInBatches) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const TimingPolicy policy{.graphs = false, .batch_us = 1000, .repeats = 3};
  int calls = 0;
  const double us = time_prepared(*be, costed({100}, calls), policy);
  EXPECT_GE(calls, 2 + 3 * 10);  // three batches of at least ten calls of 100 µs
  EXPECT_GE(us, 100.0);
  EXPECT_LT(us, 1000.0);
}

}  // namespace
}  // namespace sy
