// Timing helpers of the bench commands (bench_timing.h).
#include "apps/bench_timing.h"

#include <algorithm>
#include <random>

namespace sy {

double us_since(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(BenchClock::now() - t0).count();
}

double ms_since(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

namespace {

// Elements [drawn, n) of `dst` (backend memory) as copies of its first `drawn`, in doubling device copies.
void repeat_prefix(Backend& be, void* dst, int64_t drawn, int64_t n, size_t elem) {
  auto* base = static_cast<char*>(dst);
  for (int64_t done = drawn; done < n;) {
    const int64_t chunk = std::min(done, n - done);
    be.copy_on_device(base + static_cast<size_t>(done) * elem, base, static_cast<size_t>(chunk) * elem);
    done += chunk;
  }
}

}  // namespace

std::unique_ptr<DeviceBuffer> random_floats(Backend& be, int64_t n, uint64_t seed, float stddev) {
  auto buf = be.alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
  std::vector<float> host(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  for (auto& v : host) v = normal(rng);
  be.copy_to_device(buf->data(), host.data(), host.size() * sizeof(float));
  repeat_prefix(be, buf->data(), static_cast<int64_t>(host.size()), n, sizeof(float));
  return buf;
}

void fill_random_weights(Backend& be, void* dst, int64_t n, uint64_t seed, float stddev) {
  const int64_t drawn = std::min<int64_t>(n, int64_t{1} << 20);
  be.fill_random_normal({.dst = dst, .n = drawn, .seed = seed, .stddev = stddev});
  repeat_prefix(be, dst, drawn, n, dtype_size(be.weight_dtype()));
}

double measure_copy_bandwidth(Backend& be) {
  const size_t bytes = be.device() == Device::cpu ? (size_t(256) << 20) : (size_t(1) << 30);
  auto a = be.alloc(bytes), b = be.alloc(bytes);
  fill_random_weights(be, a->data(), static_cast<int64_t>(bytes / dtype_size(be.weight_dtype())), 1, 1.0f);
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    be.synchronize();
    const auto t0 = BenchClock::now();
    be.copy_on_device(b->data(), a->data(), bytes);
    be.synchronize();
    if (i >= 3) t.push_back(ms_since(t0));
  }
  return 2.0 * static_cast<double>(bytes) / (median(t) * 1e-3);
}

double slowest_median(Communicator& world, const std::vector<double>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  std::vector<double> all(mine.size() * static_cast<size_t>(world.size()));
  world.all_gather(mine.data(), all.data(), n, DType::f64);
  std::vector<double> slowest(mine.size(), 0.0);
  for (size_t r = 0; r < static_cast<size_t>(world.size()); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) slowest[i] = std::max(slowest[i], all[r * mine.size() + i]);
  }
  return median(slowest);
}

double time_collective(Communicator& world, Backend& be, int warmup, int iters, const std::function<void()>& prepare,
                       const std::function<void()>& op) {
  std::vector<double> us;
  for (int i = 0; i < warmup + iters; ++i) {
    if (prepare) prepare();
    be.synchronize();
    world.barrier();
    const auto t0 = BenchClock::now();
    op();
    be.synchronize();
    if (i >= warmup) us.push_back(us_since(t0));
  }
  return slowest_median(world, us);
}

}  // namespace sy
