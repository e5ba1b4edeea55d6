// What the bench commands share to time things: the clock and medians, random f32 data in backend memory, the
// device copy bandwidth, and the slowest rank's median of a timed collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "parallel/communicator.h"

namespace sy {

using BenchClock = std::chrono::steady_clock;
double us_since(BenchClock::time_point t0);
double ms_since(BenchClock::time_point t0);
// The middle element (the upper one of an even count); 0 for none.
double median(std::vector<double> v);

// n random f32 values (N(0, stddev²), seeded, never zeros) in backend memory; at least one element is allocated.
// The first 2^20 values are drawn and repeated after that.
std::unique_ptr<DeviceBuffer> random_floats(Backend& be, int64_t n, uint64_t seed, float stddev = 1.0f);

// n values N(0, stddev²) in the backend's weight dtype at `dst` (backend memory): fill_random_normal draws the first
// 2^20 and device copies repeat them (a CPU draws 30 M values a second; a large matrix need not be drawn whole).
void fill_random_weights(Backend& be, void* dst, int64_t n, uint64_t seed, float stddev);

// Device copy bandwidth in bytes/s (copy_on_device of 256 MiB on a CPU, 1 GiB on a GPU), counting bytes read
// plus bytes written; the median of 9 copies after 3 warm-up ones.
double measure_copy_bandwidth(Backend& be);

// Per iteration the slowest rank's time (a collective is done when its last rank is), then the median over
// the iterations. Collective over `world`; every rank passes as many times.
double slowest_median(Communicator& world, const std::vector<double>& mine);

// A collective's time in µs as bench comm and bench calibrate report it: warmup + iters iterations, each running
// `prepare` untimed, then waiting for the device and for every rank of `world` (barrier), then timing `op` until
// the device is done; slowest_median of the timed iterations. Collective over `world`.
double time_collective(Communicator& world, Backend& be, int warmup, int iters, const std::function<void()>& prepare,
                       const std::function<void()>& op);

}  // namespace sy
