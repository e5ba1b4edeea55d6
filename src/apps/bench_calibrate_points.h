// `bench calibrate`'s points (bench_calibrate_points.cpp): each op's inputs set up in backend memory as the model's
// blocks call it, ready to be timed (bench_calibrate_ops.cpp).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/bench_calibrate.h"
#include "apps/bench_timing.h"
#include "backend/backend.h"

namespace sy {

// A point that cannot be timed here: why.
struct PointSkip {
  std::string why;
};

// Weights kept for the points of one series (same shapes, growing rows), by name.
using SeriesWeights = std::map<std::string, std::unique_ptr<DeviceBuffer>>;

// The weights the cold ops (linear_cold, moe_experts_cold) rotate through: one buffer of cold_pool_bytes() of
// random weights (twice the last-level cache, at least 256 MiB), made at the first cold point and kept for the
// run. Each call of a cold op reads its weights at the next offset, so that a call's weights were last read a
// pool's length of bytes ago, beyond a CPU's caches, as a decode step's layers each read their own weights once
// (the other ops call one operand over and over, hot).

// Copies of one op's weights side by side: call i reads copy i mod count, at base + (i mod count) · stride.
struct WeightCopies {
  const char* base = nullptr;
  size_t stride = 0;
  size_t count = 1;
  const void* at(size_t i) const { return base + (i % count) * stride; }
};

class ColdPool {
 public:
  explicit ColdPool(size_t bytes = cold_pool_bytes(host_caches().last_level_bytes)) : bytes_(bytes) {}
  size_t bytes() const { return bytes_; }
  // As many page-aligned copies of `bytes` as the pool holds; count 0 when it holds fewer than two (weights that
  // large pass the caches by themselves).
  WeightCopies copies(Backend& be, size_t bytes, std::mt19937_64& rng);
  // As many copies of `bytes` as fit in the pool's first `pool_bytes` (at least one): calls rotating through them
  // re-read each copy after pool_bytes of reads (linear_pool).
  WeightCopies copies_within(Backend& be, size_t bytes, size_t pool_bytes, std::mt19937_64& rng);

 private:
  size_t bytes_;
  std::unique_ptr<DeviceBuffer> buf_;
};

// The backend memory of one point, freed with it; allocations beyond `limit` bytes skip the point.
class PointMemory {
 public:
  PointMemory(Backend& be, SeriesWeights& series, ColdPool& cold, double limit, std::mt19937_64& rng)
      : be_(be), series_(series), cold_(cold), limit_(limit), rng_(rng) {}

  float* floats(int64_t n) { return take(static_cast<size_t>(n) * sizeof(float))->as<float>(); }
  // N(0, stddev²) f32 values (the activations every backend takes).
  float* random(int64_t n, float stddev = 1.0f) {
    check_fits(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
    owned_.push_back(random_floats(be_, n, rng_(), stddev));
    return owned_.back()->as<float>();
  }
  // N(0, stddev²) values in the backend's weight dtype; `key` keeps them for the rest of the series.
  void* weights(int64_t n, float stddev, const std::string& key = "") {
    if (!key.empty()) {
      const std::string k = fmt::format("{}:{}", key, n);
      if (auto it = series_.find(k); it != series_.end()) return it->second->data();
      check_fits(weight_bytes(n));
      auto buf = be_.alloc(weight_bytes(n));
      fill_random_weights(be_, buf->data(), n, rng_(), stddev);
      return series_.emplace(k, std::move(buf)).first->second->data();
    }
    DeviceBuffer* buf = take(weight_bytes(n));
    fill_random_weights(be_, buf->data(), n, rng_(), stddev);
    return buf->data();
  }
  // Copies of `n` weights for a cold op to rotate through (ColdPool); one (the series' own, as weights(n, ..,
  // key)) when they are too large for the pool to hold two.
  WeightCopies cold_weights(int64_t n, const std::string& key) {
    const WeightCopies c = cold_.copies(be_, weight_bytes(n), rng_);
    return c.count > 0 ? c : WeightCopies{.base = static_cast<const char*>(weights(n, 0.02f, key))};
  }
  // Copies of `n` weights filling the first `pool_bytes` of the cold pool (ColdPool::copies_within).
  WeightCopies pool_weights(int64_t n, size_t pool_bytes) {
    return cold_.copies_within(be_, weight_bytes(n), pool_bytes, rng_);
  }
  int32_t* ints(const std::vector<int32_t>& host) {
    DeviceBuffer* buf = take(std::max<size_t>(host.size(), 1) * sizeof(int32_t));
    be_.copy_to_device(buf->data(), host.data(), host.size() * sizeof(int32_t));
    return buf->as<int32_t>();
  }
  int32_t* ints(int64_t n) { return take(static_cast<size_t>(n) * sizeof(int32_t))->as<int32_t>(); }
  void* host(size_t bytes) {
    owned_.push_back(be_.alloc_host(bytes));
    return owned_.back()->data();
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  size_t weight_bytes(int64_t n) const {
    return static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(be_.weight_dtype());
  }
  void check_fits(size_t bytes) {
    used_ += static_cast<double>(bytes);
    if (used_ > limit_) {
      throw PointSkip{fmt::format("needs more than the {:.2f} GB of device memory free for it", limit_ / 1e9)};
    }
  }
  DeviceBuffer* take(size_t bytes) {
    check_fits(std::max<size_t>(bytes, 1));
    owned_.push_back(be_.alloc(std::max<size_t>(bytes, 1)));
    return owned_.back().get();
  }

  Backend& be_;
  SeriesWeights& series_;
  ColdPool& cold_;
  double limit_;
  std::mt19937_64& rng_;
  double used_ = 0;
  std::vector<std::unique_ptr<DeviceBuffer>> owned_;
};

// One point ready to time: the call that issues the op once.
struct Prepared {
  std::function<void()> issue;
  bool capturable = true;  // false: the op waits for the device itself (host copies, sampling)
  CalibPoint recorded;     // the dims as written (moe_experts adds the experts its routing touched)
};

using PrepareFn = Prepared (*)(PointMemory&, Backend&, const CalibPoint&);

// µs per call of `p` as `t` says (bench_calibrate_timing.cpp): a call to size the scratch memory and one timed alone,
// then `t.repeats` batches of back-to-back calls lasting at least t.batch_us (one call a batch when both single
// calls filled one), replayed as one captured graph where t.graphs and the backend allow; the median batch's time
// per call.
double time_prepared(Backend& be, const Prepared& p, const TimingPolicy& t);
// `calls` captured calls replayed as one graph: the median of t.repeats replays per call; once, a batch shorter than
// half of t.batch_us is captured again with more calls.
double time_captured(Backend& be, const Prepared& p, const TimingPolicy& t, int calls);

struct OpEntry {
  OpSpec spec;
  PrepareFn prepare = nullptr;
};

// Every op of the profile: its name (the Backend method's), its dims, and how a point is set up.
const std::vector<OpEntry>& op_entries();
// The entry of `op`; sy::Error when there is none.
const OpEntry& find_op(const std::string& op);

}  // namespace sy
