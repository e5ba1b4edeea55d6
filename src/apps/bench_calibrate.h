// `switchyard bench calibrate`, the parts its files share: the machine profile it writes (the planner's input;
// README "bench calibrate" has the format), the grid of points each op is timed at (bench_calibrate_grid.cpp), the
// ops set up and timed through the Backend (bench_calibrate_ops.cpp), the collectives (bench_calibrate_comm.cpp)
// and the JSON writer (bench_calibrate_json.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arch/model_desc.h"
#include "backend/backend.h"
#include "parallel/communicator.h"

namespace sy {

// The integer dims of one point of an op, in the order of its table's "dims".
using CalibPoint = std::vector<int64_t>;

struct TimedPoint {
  CalibPoint dims;
  double us = 0;  // per call
  // CPU ranks: the same point timed by rank 0 while the other ranks wait (a step where only some ranks work, as
  // a pipeline's stages at batch 1); 0: not timed.
  double alone_us = 0;
};

// One entry of "ops": an op's time as a function of its dims.
struct MeasuredOp {
  std::string op;
  std::vector<std::string> dims;
  std::vector<TimedPoint> points;
};

// One entry of "collectives": dims ranks (the group size) and bytes.
struct CollectiveTable {
  std::string kind;  // all_reduce, all_gather, all_to_all_v, send_recv
  std::vector<TimedPoint> points;
};

// A point left out: it did not fit in memory, a smaller one of its series exceeded the cut, or the time budget
// was spent.
struct SkippedPoint {
  std::string op;
  CalibPoint point;
  std::string why;
};

// What time_ops' recheck did (OpsRun): the points it timed again, how many of them came out faster, and how many
// points dominated_points still names after it.
struct RecheckCount {
  int retimed = 0;
  int faster = 0;
  int left = 0;
};

struct MachineSection {
  std::string device;  // "cuda" or "cpu"
  std::string name;    // the GPU's name or the CPU's model
  double memory_gb = 0;
  std::string host;
  int cpu_threads = 0;  // OpenMP threads of this rank (the CPU backend's kernels)
  int ranks = 1;
  std::string transport;  // "none", "mpi" or "nccl"
  std::string date;       // ISO 8601 UTC
  bool quick = false;
  int passes = 1;                   // over the ops' grid (OpsRun::passes)
  std::string weight_dtype;         // "bf16" or "f32"
  std::vector<std::string> models;  // the model folders whose shapes made the grid (--model); empty: built-in
  double cache_mb = 0;              // the CPU's last-level cache (HostCaches), 0 when unknown
  double cold_pool_mb = 0;          // what the cold ops rotate their weights through (cold_pool_bytes); CPU only
  RecheckCount recheck;             // rank 0's (every rank picks the same points)
};

// One point of the skew beyond the caches (StepSection::skew_cold).
struct SkewColdPoint {
  double rows = 0;        // of each product
  double segment_us = 0;  // the median rank's own segment
  double fraction = 0;    // the wait at the closing barrier over that segment
};

struct StepSection {
  double launch_us = 0;        // host time to issue one small op eagerly, back to back
  double sync_us = 0;          // Backend::synchronize with nothing queued
  double graph_launch_us = 0;  // one captured graph of one tiny op, minus the op; 0 where nothing is captured
  double copy_to_host_us = 0;  // a 4-byte device-to-host copy
  // Ranks sharing a host: (segment µs, wait / segment) — segments of work each closed by a barrier take this
  // fraction longer than the slowest rank's own segments plus the barrier; empty on one rank.
  std::vector<std::pair<double, double>> skew;
  // The same for products whose weights come from memory (time_skew_cold), the fraction of the median rank's own
  // segment: (rows, segment µs, fraction); empty on one rank.
  std::vector<SkewColdPoint> skew_cold;
};

struct CalibrationProfile {
  MachineSection machine;
  double copy_gb_s = 0;       // device copy bandwidth, bytes read + written
  double matrix_tflop_s = 0;  // the rate of the linear point with the most FLOPs
  StepSection step;
  std::vector<MeasuredOp> ops;
  std::vector<CollectiveTable> collectives;
  std::vector<SkippedPoint> skipped;
};

// The profile as the JSON contract spells it, and as the text written: one line per point (bench_calibrate_json.cpp).
nlohmann::ordered_json profile_json(const CalibrationProfile& p);
std::string profile_text(const CalibrationProfile& p);

// How each point is timed: after warm-up, `repeats` batches of N back-to-back calls (captured as one graph and
// replayed where the backend can capture), N chosen so that a batch lasts at least batch_us; the median of
// batch time / N.
struct TimingPolicy {
  bool graphs = false;
  double batch_us = 1000;
  int repeats = 3;
  int max_calls = 4096;
  double cut_us = 50000;  // a call slower than this ends its series (larger points are not timed)
};

// The points of one op, in series: each series runs from its cheapest point to its dearest, so that a call over
// the cut skips the rest of it.
struct OpGrid {
  std::string op;
  double weight = 1;  // share of the time budget, against the other ops' weights
  std::vector<std::vector<CalibPoint>> series;
};

// What a CPU calibration sizes its cold weights and its cache curve's product from (bench_calibrate_grid.cpp).
struct HostCaches {
  size_t last_level_bytes = 0;  // the CPU's largest cache level (sysfs, else sysconf); 0 when unknown
  int threads = 1;              // this rank's OpenMP threads
};
HostCaches host_caches();  // read once a process
// The bytes the cold ops (linear_cold, moe_experts_cold) rotate their weights through: twice the last-level cache,
// at least 256 MiB, in whole MiB. A pool the L3 holds is not cold: the GPU machines' hosts have 300 MB of it.
size_t cold_pool_bytes(size_t last_level_bytes);
// The f32 weights of linear_pool's product (elements, k = 1,024): 64 Ki a thread (256 KiB, within a core's L2),
// at least 256 Ki (1 MiB). One MiB over 16 threads is 64 KiB a thread, and the call then times its own overhead
// whatever the pool (16 µs from 1 to 256 MiB at one rank of the GPU host: docs/perf-notes.md item 46).
int64_t pool_weight_elems(int threads);
// linear_pool's pools in MiB: from the product's own weights up to the cold pool.
std::vector<int64_t> pool_sizes_mb(const HostCaches& host);

// The grid of every op on `device` (full, or the quick one that runs in seconds on a small CPU), in the order
// they are measured (bench_calibrate_grid.cpp). With `models` (bench calibrate --model), the full grid holds the
// shapes of those models only, at every tp, ep and etp slice, in place of the built-in models and generic shapes.
// `host` sizes the CPU's cache-curve points.
std::vector<OpGrid> calibration_grid(Device device, bool quick, const std::vector<ModelDesc>& models = {},
                                     const HostCaches& host = host_caches());

// Which points each pass of a calibration times (time_ops, OpsRun::passes), coverage before repeats
// (docs/perf-notes.md item 41): the first pass every point its share of the time reaches; a later pass times again
// what an earlier one timed in at most kRetimeMaxSeconds, and times for the first time the points an earlier pass's
// time ran out before; never a point that failed, nor one past a series' cut (bench_calibrate_grid.cpp).
class PassLedger {
 public:
  // A point an earlier pass took longer than this over (preparing and timing) is not timed again: the 1 GB
  // streaming product, 2-3 s on two cores, would take a later pass's whole share of its op, and its calls already
  // span far more than a disturbance.
  static constexpr double kRetimeMaxSeconds = 0.25;
  enum class Turn {
    first,  // no pass has timed it yet: time it
    again,  // timed before, cheaply: time it again
    leave,  // failed, past a cut, or too dear to time again
  };
  [[nodiscard]] Turn turn(const std::string& op, const CalibPoint& point) const;
  // The first timing's wall seconds (preparing and timing); later ones leave it as it is.
  void timed(const std::string& op, const CalibPoint& point, double seconds);
  // Failed (memory, a library refusing the shape) or past a series' cut: no pass times it.
  void close(const std::string& op, const CalibPoint& point);

 private:
  std::map<std::pair<std::string, CalibPoint>, double> cost_;  // wall seconds; negative: closed
};

// The first pass's share of a calibration's time: the rest is what the later passes would need to time the
// first's points again (on two cores a later pass took a fifth of the first's time over the same points,
// kRetimeShare; docs/perf-notes.md item 36), 1 / (1 + kRetimeShare (passes - 1)): 0.71 for three passes.
double first_pass_share(int passes);

// A cold expert point's routings (moe_experts_cold): `ids` (top_k a token) and its rotations by top_k, every id
// plus r · top_k modulo n_experts for r = 0 .. n_experts / gcd(n_experts, top_k) - 1; each keeps the tokens' distinct
// experts and how many experts are touched, and together they visit each expert about once per copy of the
// weights (bench_calibrate_grid.cpp; docs/perf-notes.md item 44).
std::vector<std::vector<int32_t>> expert_rotations(const std::vector<int32_t>& ids, int64_t n_experts, int64_t top_k);

// The ops of the profile, their dims, and the setup of one point (bench_calibrate_ops.cpp).
struct OpSpec {
  std::string op;
  std::vector<std::string> dims;
};
const std::vector<OpSpec>& calibrated_ops();

// Every point of `grid` timed on `be` within `seconds` (split over the ops by weight); points that do not fit
// in memory (`memory_share` of the free memory) or are cut go to `skipped`. rank0 logs progress.
struct OpsRun {
  Backend& be;
  TimingPolicy timing;
  double seconds = 0;
  double memory_share = 1;  // of the device's free memory this rank may take (ranks sharing the host)
  bool log = false;
  // CPU ranks sharing the host: each point timed by all of them at once, the slowest kept, then by rank 0 alone
  // (nullptr: one rank, or GPUs of their own).
  Communicator* lockstep = nullptr;
  // Passes over the whole grid, each in its share of `seconds` and with timing.repeats / passes of the repeats
  // (at least one); a point's time is the middle of the passes that timed it (the median of three). CPU ranks on a
  // shared host measured single points 0.7-1.6x apart from one calibration to the next minutes later
  // (docs/perf-notes.md item 36): passes spread each point's samples over the run instead of a few milliseconds.
  int passes = 1;
  // After the passes, the points dominated_points names are timed again (each the median of timing.repeats
  // batches, twice over while any is left) and keep the faster of the two times: a disturbance only adds time.
  // The passes leave this share of `seconds` to it; what the recheck does not need is not used.
  double recheck_share = 0.1;
};
std::vector<MeasuredOp> time_ops(const OpsRun& run, const std::vector<OpGrid>& grid, std::vector<SkippedPoint>& skipped,
                                 RecheckCount* recheck = nullptr);

// The points of `op` (indices into its points) that took over kDominatedFactor times as long as a point at least
// as large in every dim, and larger in one, and over kDominatedMarginUs longer: more work in every dim is never
// that much faster, so such a time met a disturbance (a CPU host busy while the point was timed: r18's 1-rank
// profile had 196 of them, its second calibration 63, the H200 host's 19; docs/perf-notes.md item 55). Points
// with a dim of 0 or less are not compared.
inline constexpr double kDominatedFactor = 2.0;
inline constexpr double kDominatedMarginUs = 20.0;
std::vector<size_t> dominated_points(const MeasuredOp& op);

// time_ops' recheck (OpsRun::recheck_share) of `tables` already timed, within `seconds`: the points
// dominated_points names timed again through `ledger` (one timed over PassLedger::kRetimeMaxSeconds is left), each
// the median of run.timing.repeats batches, the faster of its two times kept. `keys`: by op, the grid point each
// of its table's points was timed at (the recorded dims may differ: the experts a routing touched).
RecheckCount recheck_dominated(const OpsRun& run, double seconds, PassLedger& ledger,
                               const std::map<std::string, std::vector<CalibPoint>>& keys,
                               std::vector<MeasuredOp>& tables);

// launch, sync, graph launch and 4-byte read-back costs (bench_calibrate_ops.cpp).
StepSection time_step_costs(Backend& be, const TimingPolicy& timing);

// A square linear's rate in FLOP/s, for when the grid timed no linear point.
double time_matrix_rate(Backend& be, const TimingPolicy& timing);

// The collectives over groups of 2, 4, ... consecutive ranks of `world` (every group of a size at once, as the
// tp groups of a layout run), bytes 4 KiB .. 64 MiB in steps of 4 (quick: 4 KiB .. 64 KiB); send_recv between
// ranks 0 and 1 of each pair. Collective over `world` (bench_calibrate_comm.cpp).
struct CollectivesRun {
  Communicator& world;
  Backend& be;
  std::string device;  // the device name the ranks run ("cpu", "cuda"): NCCL groups for a GPU in an NCCL build
  bool quick = false;
};
struct CollectivesResult {
  std::vector<CollectiveTable> tables;
  std::string transport;  // "mpi" or "nccl"
};
CollectivesResult time_collectives(const CollectivesRun& run);

// StepSection::skew at segments of about 100 µs, 1 ms and 10 ms of memory-bound work (quick: one of 300 µs), all
// ranks at once. Collective over `world` (bench_calibrate_comm.cpp).
// Rounds of the skew's measurement at each size (the median kept); `rounds` (may be null) gets every round's
// fraction, size by size.
constexpr int kSkewRounds = 5;
std::vector<std::pair<double, double>> time_skew(Communicator& world, Backend& be, bool quick,
                                                 std::vector<std::vector<double>>* rounds = nullptr);

// StepSection::skew_cold: the skew of segments of products that read their weights from memory (rows 1 and 64,
// each product's weights the next of 16 copies of 4 MiB; segments of about 1 and 10 ms; quick: rows 1, 300 µs),
// against the median rank's own segments rather than the slowest's: the planner's tables beyond the caches keep the
// median rank's times (cost_model.cpp), so a rank slower than the median for a whole step is this wait too.
// kSkewColdRounds rounds a size, the median kept; `rounds` as for time_skew. Collective over `world`.
constexpr int kSkewColdRounds = 3;
std::vector<SkewColdPoint> time_skew_cold(Communicator& world, Backend& be, bool quick,
                                          std::vector<std::vector<double>>* rounds = nullptr);

// The largest of every rank's `us` (each rank's own timing of the same work), on every rank. Collective.
double slowest_rank(Communicator& world, double us);
// The median of every rank's `us` (the upper one of an even count), on every rank. Collective.
double median_rank(Communicator& world, double us);

}  // namespace sy
