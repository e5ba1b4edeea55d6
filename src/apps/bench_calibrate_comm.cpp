// `bench calibrate`'s collectives: all-reduce, all-gather, all-to-all-v (equal blocks) and the pipeline's send/recv,
// through the model's own ModelComm, over tp groups of 2, 4, ... consecutive ranks made as a layout makes them
// (make_rank_groups with --tp g --dp W/g), every group of a size at once; and the ranks' skew, what a collective
// waits for the slowest of them beyond their own work.
//
// bytes, per rank: all_reduce the buffer reduced; all_gather the gathered result (all ranks' parts together);
// all_to_all_v what one rank sends in all (bytes/ranks to each rank, itself included); send_recv the message.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>

#include "apps/bench_calibrate.h"
#include "apps/bench_timing.h"
#include "model/parallel.h"
#include "parallel/rank_groups.h"

namespace sy {

namespace {

// Group sizes: the powers of two from 2 that divide the world, and the world.
std::vector<int> group_sizes(int world) {
  std::vector<int> sizes;
  for (int g = 2; g < world; g *= 2) {
    if (world % g == 0) sizes.push_back(g);
  }
  sizes.push_back(world);
  return sizes;
}

// From 256 bytes: a small model's batch-1 collectives move 1-4 KB and the expert dispatch's counts a few bytes, where
// the 4 KB point is not all latency yet (r19's 4-rank all-reduce: 8.9 µs at 4 KB, 17.0 at 16 KB; docs/perf-notes.md
// item 57).
std::vector<int64_t> byte_sizes(bool quick) {
  std::vector<int64_t> v;
  for (int64_t b = 256; b <= (quick ? int64_t{64} << 10 : int64_t{64} << 20); b *= 4) v.push_back(b);
  return v;
}

}  // namespace

CollectivesResult time_collectives(const CollectivesRun& run) {
  Communicator& world = run.world;
  Backend& be = run.be;
  const int W = world.size();
  const int warmup = run.quick ? 1 : 3, iters = run.quick ? 3 : 10;
  CollectivesResult result{
      .tables = {{.kind = "all_reduce"}, {.kind = "all_gather"}, {.kind = "all_to_all_v"}, {.kind = "send_recv"}},
      .transport = "mpi"};
  std::vector<TimedPoint>& reduce = result.tables[0].points;
  std::vector<TimedPoint>& gather = result.tables[1].points;
  std::vector<TimedPoint>& all_to_all = result.tables[2].points;
  std::vector<TimedPoint>& send_recv = result.tables[3].points;
  const std::vector<int64_t> sizes = byte_sizes(run.quick);
  const int64_t largest = sizes.back() / 4;  // floats
  const auto source = random_floats(be, largest, 11 + static_cast<uint64_t>(world.rank()));
  auto work = be.alloc(static_cast<size_t>(largest) * sizeof(float));
  const std::vector<int> sizes_of_groups = group_sizes(W);
  for (int g : sizes_of_groups) {
    const RankGroups groups =
        make_rank_groups(world, Mapping({.tp = g, .dp = W / g, .etp = g, .edp = W / g, .dense_tp = g}), {}, run.device);
    if (groups.transport == "NCCL") result.transport = "nccl";
    Communicator& group = *groups.groups->tp;
    ModelComm comm(be);
    auto gathered = be.alloc(static_cast<size_t>(largest) * sizeof(float));
    for (int64_t bytes : sizes) {
      const int64_t floats = bytes / 4;
      reduce.push_back({.dims = {g, bytes},
                        .us = time_collective(
                            world, be, warmup, iters,
                            [&] { be.copy_on_device(work->data(), source->data(), static_cast<size_t>(bytes)); },
                            [&] { comm.all_reduce(group, work->as<float>(), floats); })});
      const int64_t part = std::max<int64_t>(1, floats / g);
      gather.push_back({.dims = {g, part * g * 4}, .us = time_collective(world, be, warmup, iters, nullptr, [&] {
                                                     comm.all_gather(group, source->as<float>(), gathered->as<float>(),
                                                                     part);
                                                   })});
      const std::vector<int64_t> blocks(static_cast<size_t>(g), part);
      all_to_all.push_back({.dims = {g, part * g * 4}, .us = time_collective(world, be, warmup, iters, nullptr, [&] {
                                                         comm.all_to_all_v(group, source->data(), blocks,
                                                                           gathered->data(), blocks, DType::f32);
                                                       })});
      if (g != sizes_of_groups.front()) continue;
      // The pipeline boundary: rank 0 of each group of the smallest size sends to its rank 1.
      send_recv.push_back({.dims = {2, bytes}, .us = time_collective(world, be, warmup, iters, nullptr, [&] {
                                                 if (group.rank() == 0)
                                                   comm.send(group, source->data(), floats, DType::f32, 1);
                                                 if (group.rank() == 1)
                                                   comm.recv(group, work->data(), floats, DType::f32, 0);
                                               })});
    }
  }
  return result;
}

namespace {

// Every rank's `us`, sorted, on every rank. Collective.
std::vector<float> every_rank(Communicator& world, double us) {
  const auto mine = static_cast<float>(us);
  std::vector<float> all(static_cast<size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::f32);
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace

double slowest_rank(Communicator& world, double us) { return every_rank(world, us).back(); }
double median_rank(Communicator& world, double us) {
  const std::vector<float> all = every_rank(world, us);
  return all[all.size() / 2];
}

namespace {

// Per iteration of `step`, µs, on this rank: `iters` of them after a barrier.
double mean_us(Communicator& world, int iters, const std::function<void()>& step) {
  world.barrier();
  const auto t0 = BenchClock::now();
  for (int i = 0; i < iters; ++i) step();
  return us_since(t0) / iters;
}

// One round of the skew at one segment: every rank's own segments (all at work at once, as in a step), the
// reference rank's mean kept (`reference`: slowest_rank or median_rank); the barrier alone; then segments each
// closed by a barrier, as a step's collectives close them. Returns (the wait as a fraction of the reference
// segment, the reference segment in µs).
std::pair<double, double> skew_round(Communicator& world, int iters, const std::function<void()>& segment,
                                     double (*reference)(Communicator&, double)) {
  const double own = reference(world, mean_us(world, iters, segment));
  const double barrier = mean_us(world, iters, [&] { world.barrier(); });
  const double synced = mean_us(world, iters, [&] {
    segment();
    world.barrier();
  });
  return {std::max(0.0, (synced - barrier - own) / own), own};
}

// The median of a size's rounds (by fraction), every round's fraction appended to *rounds when given.
std::pair<double, double> median_round(std::vector<std::pair<double, double>> by_round,
                                       std::vector<std::vector<double>>* rounds) {
  if (rounds != nullptr) {
    rounds->emplace_back();
    for (const auto& [f, us] : by_round) rounds->back().push_back(f);
  }
  std::sort(by_round.begin(), by_round.end());
  return by_round[by_round.size() / 2];
}

}  // namespace

std::vector<std::pair<double, double>> time_skew(Communicator& world, Backend& be, bool quick,
                                                 std::vector<std::vector<double>>* rounds) {
  // The work of a segment: y += x over a buffer beyond the L2, called `calls` times; a call's time is taken as
  // the segments run, every rank at once (the slowest rank's mean), since one rank timing alone while the others
  // poll in a collective is no measure of it.
  constexpr int64_t kFloats = int64_t{1} << 20;
  auto x = random_floats(be, kFloats, 21), y = random_floats(be, kFloats, 22 + static_cast<uint64_t>(world.rank()));
  const auto segment = [&](int calls) {
    for (int i = 0; i < calls; ++i) be.add(y->as<float>(), x->as<float>(), kFloats);
    be.synchronize();
  };
  segment(3);
  const double one_us = slowest_rank(world, mean_us(world, 20, [&] { segment(1); }));
  std::vector<std::pair<double, double>> out;
  // Each size measured in kSkewRounds rounds, the median round kept: single rounds measured +23-47% on a host whose
  // steps showed none of that waiting (the eighth round, docs/perf-notes.md item 27), as if the machine's speed
  // moved between a round's unsynced and synced halves.
  const int n_rounds = quick ? 1 : kSkewRounds;
  for (const double target : quick ? std::vector<double>{300} : std::vector<double>{100, 1000, 10000}) {
    const int calls = std::max(1, static_cast<int>(std::lround(target / std::max(one_us, 1.0))));
    const int iters = std::clamp(static_cast<int>(200000 / target), 10, 200);
    std::vector<std::pair<double, double>> by_round;  // (fraction, segment µs)
    for (int r = 0; r < n_rounds; ++r) {
      by_round.push_back(skew_round(
          world, iters, [&] { segment(calls); }, slowest_rank));
    }
    const auto [f, us] = median_round(std::move(by_round), rounds);
    out.emplace_back(us, f);
  }
  return out;
}

std::vector<SkewColdPoint> time_skew_cold(Communicator& world, Backend& be, bool quick,
                                          std::vector<std::vector<double>>* rounds) {
  // The work of a segment: products of `rows` rows by [1024 x 1024] weights, each call the next of kCopies copies
  // (64 MiB of f32 a rank: every call reads its weights from memory, as a step's layers beyond the caches do).
  constexpr int64_t kN = 1024, kK = 1024, kCopies = 16, kMaxRows = 64;
  const size_t matrix_bytes = static_cast<size_t>(kN * kK) * dtype_size(be.weight_dtype());
  auto pool = be.alloc(matrix_bytes * kCopies);
  fill_random_weights(be, pool->data(), kN * kK * kCopies, 31 + static_cast<uint64_t>(world.rank()), 0.03f);
  auto x = random_floats(be, kMaxRows * kK, 32);
  auto y = be.alloc(static_cast<size_t>(kMaxRows * kN) * sizeof(float));
  int64_t next = 0;
  const auto segment = [&](int64_t rows, int calls) {
    for (int i = 0; i < calls; ++i) {
      const auto* w = static_cast<const std::byte*>(pool->data()) + matrix_bytes * static_cast<size_t>(next);
      be.linear(x->as<float>(), w, nullptr, y->as<float>(), rows, kN, kK);
      next = (next + 1) % kCopies;
    }
    be.synchronize();
  };
  std::vector<SkewColdPoint> out;
  const int n_rounds = quick ? 1 : kSkewColdRounds;
  for (const int64_t rows : quick ? std::vector<int64_t>{1} : std::vector<int64_t>{1, kMaxRows}) {
    segment(rows, kCopies);
    const double one_us = median_rank(world, mean_us(world, 10, [&] { segment(rows, 1); }));
    int last_calls = 0;
    for (const double target : quick ? std::vector<double>{300} : std::vector<double>{1000, 10000}) {
      // A product longer than the shorter target gives one segment of one call; the same segment is not timed twice.
      const int calls = std::max(1, static_cast<int>(std::lround(target / std::max(one_us, 1.0))));
      if (calls == last_calls) continue;
      last_calls = calls;
      const int iters = std::clamp(static_cast<int>(200000 / (calls * std::max(one_us, 1.0))), 10, 200);
      std::vector<std::pair<double, double>> by_round;  // (fraction, segment µs)
      for (int r = 0; r < n_rounds; ++r) {
        by_round.push_back(skew_round(
            world, iters, [&] { segment(rows, calls); }, median_rank));
      }
      const auto [f, us] = median_round(std::move(by_round), rounds);
      out.push_back({.rows = static_cast<double>(rows), .segment_us = us, .fraction = f});
    }
  }
  return out;
}

}  // namespace sy
