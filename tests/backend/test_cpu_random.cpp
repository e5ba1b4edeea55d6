// The CPU backend's random fills (bench and test weights) run on the OpenMP threads: each element is a function
// of (seed, index) alone, so the threads' split changes no value. Checked by filling the same tensor with one
// thread and with several, and a short fill (below the parallel threshold) against the long one's prefix; the
// normal fill's moments against the requested mean and standard deviation.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace sy {
namespace {

constexpr int64_t kN = 3 * (int64_t{1} << 16) + 5;  // above the parallel threshold, not a multiple of the threads

// Runs `fill` with `threads` OpenMP threads and restores the previous count.
template <class F>
void with_threads(int threads, F fill) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  fill();
  omp_set_num_threads(before);
}

TEST(CpuRandomFill, NormalValuesDoNotDependOnTheThreads) {
  const auto be = make_cpu_backend();
  std::vector<float> one(kN), many(kN), prefix(1000);
  with_threads(1, [&] { be->fill_random_normal({.dst = one.data(), .n = kN, .seed = 41, .stddev = 0.5f}); });
  with_threads(4, [&] { be->fill_random_normal({.dst = many.data(), .n = kN, .seed = 41, .stddev = 0.5f}); });
  EXPECT_EQ(one, many);
  with_threads(4, [&] { be->fill_random_normal({.dst = prefix.data(), .n = 1000, .seed = 41, .stddev = 0.5f}); });
  EXPECT_EQ(prefix, std::vector<float>(one.begin(), one.begin() + 1000));

  // N(0.25, 0.5²) over kN draws: the sample mean's standard error is 0.5 / √kN ≈ 0.0011, the sample standard
  // deviation's 0.5 / √(2 kN) ≈ 0.0008; five of each either way.
  std::vector<float> shifted(kN);
  with_threads(
      4, [&] { be->fill_random_normal({.dst = shifted.data(), .n = kN, .seed = 41, .mean = 0.25f, .stddev = 0.5f}); });
  double sum = 0, sq = 0;
  for (float v : shifted) sum += v;
  const double mean = sum / kN;
  for (float v : shifted) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.25, 5 * 0.5 / std::sqrt(double(kN)));
  EXPECT_NEAR(std::sqrt(sq / (kN - 1)), 0.5, 5 * 0.5 / std::sqrt(2.0 * kN));
}

TEST(CpuRandomFill, Q4BytesDoNotDependOnTheThreads) {
  const auto be = make_cpu_backend();
  std::vector<uint8_t> one(kN), many(kN);
  std::vector<uint16_t> scales(kN / 32);
  RandomQ4Args a{.format = WeightFormat::int4_group,
                 .dst = one.data(),
                 .n_bytes = kN,
                 .group_scales = scales.data(),
                 .n_groups = static_cast<int64_t>(scales.size()),
                 .seed = 8,
                 .group_scale = 0.01f};
  with_threads(1, [&] { be->fill_random_q4(a); });
  a.dst = many.data();
  with_threads(4, [&] { be->fill_random_q4(a); });
  EXPECT_EQ(one, many);
}

}  // namespace
}  // namespace sy
