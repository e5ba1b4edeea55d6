// A measured machine profile (`switchyard bench calibrate --out PROFILE.json`, read by `plan --profile`): the
// engine's own ops timed as a function of their shapes, the per-step fixed costs, the copy and matrix rates and
// the collectives by group size and bytes. The format is described in README.md ("switchyard bench calibrate"); this
// reader checks every key it uses and names the file and key of anything malformed.
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sy {

// One measured shape of a table for a set of varying dims: its points agree in every other dim (but outcome
// dims such as "touched"). `point` is its first point; lo and hi span its points in the varying dims; the log_
// vectors hold lg(x + 1) of those (the lookup's distances); members index its points.
struct OpShape {
  std::vector<double> point, lo, hi;
  std::vector<double> log_point, log_lo, log_hi;
  std::vector<size_t> members;
};

// A table's shapes for a set of varying dims, in the order of their first points; shape_dim[d]: dim d tells the
// shapes apart (neither varying nor an outcome).
struct OpShapes {
  std::vector<bool> shape_dim;
  std::vector<OpShape> shapes;
};

// One op's measured points: each row holds a value for every dim, then the time in microseconds per call.
struct OpTable {
  std::vector<std::string> dims;
  std::vector<std::vector<double>> points;
  int dim(const std::string& name) const;  // index of `name`, or -1
  // The shapes for the varying dims `vary` (indices into dims); built on the first lookup of each set and kept (a
  // plan over many layouts looks up the same few tables thousands of times), built again when the points have
  // changed in number.
  const OpShapes& shapes(const std::vector<int>& vary) const;

 private:
  mutable std::map<std::vector<int>, OpShapes> shapes_;
  mutable size_t shapes_points_ = 0;
};

// A point's dims by name: `names` and `values` side by side (a table row, or a query).
struct DimView {
  const std::vector<std::string>* names = nullptr;
  const double* values = nullptr;
  double operator[](std::string_view name) const;  // sy::Error when the point has no such dim
};

// The analytic work of an op at a point: the bytes it must move and the FLOPs it must do. Lookups scale
// measured times by the ratio of these between a measured point and the query.
struct OpWork {
  double bytes = 0;
  double flops = 0;
  // Bytes the op's loops read, where they read some more than once (a CPU attention kernel walks its kv head's
  // cached rows once for each query head of the group, from the caches): lookups scale between shapes by these in
  // place of `bytes` when larger. `bytes` stays what comes from memory (the streaming floor, the cache's share).
  double reads = 0;
};
using WorkFn = std::function<OpWork(const DimView& dims)>;

struct MachineProfile {
  std::string source;  // the file
  std::string device;  // "cuda" or "cpu"
  std::string name;    // GPU or CPU model
  int ranks = 1;       // ranks the profile was measured with (CPU ops: each rank's share of the cores)
  int cpu_threads = 0;
  std::string transport;
  double copy_bytes_per_s = 0;
  double matrix_flops_per_s = 0;
  double launch_s = 0;        // host time to issue one op eagerly
  double sync_s = 0;          // a synchronise with nothing queued
  double graph_launch_s = 0;  // launching one captured graph, beyond its ops
  double copy_to_host_s = 0;  // a 4-byte device-to-host copy
  double weight_bytes = 2;    // per element of the weight dtype the ops were timed with
  // "machine"."recheck"."left": the points bench calibrate's recheck left over twice the time of a point at least as
  // large in every dim (a host busy while they were timed); -1 when the profile does not say (written before the
  // recheck). `plan` notes a profile over kBusyProfilePoints.
  int busy_points = -1;
  // CPU ranks: (segment seconds, fraction) sorted by segment — work split by collectives into segments of that
  // length takes this fraction longer, the ranks waiting for the slowest at each ("step"."skew"); empty: none.
  std::vector<std::pair<double, double>> skew;
  // CPU ranks: the same for products whose weights come from memory, against the median rank's own segments
  // ("step"."skew_cold", bench calibrate's time_skew_cold): {rows, segment seconds, fraction}, sorted; empty: none.
  std::vector<std::array<double, 3>> skew_cold;
  // CPU profiles: the rate at which one rank streams weights from memory while the others do the same, from the
  // largest single-row product of the profile (weights far beyond any cache), or the linear_pool table's largest
  // pool where that is beyond the caches too and read faster (the floor is the fastest the memory was seen to go);
  // 0 without the streaming point. The ops were
  // timed calling one operand over and over, so a small one stays in the caches; in a step whose weights are
  // beyond the caches each layer reads its own from memory, and the cost model holds every op to its bytes at
  // this rate, and takes the products and experts from their "_cold" tables (timed reading their weights from
  // memory) where those hold the step's rows (cost_model.cpp).
  double stream_bytes_per_s = 0;
  // CPU profiles of several ranks: the same rates when rank 0 works alone while the others wait in a collective
  // (from the tables of "ops_alone"); 0 without them.
  double stream_alone_bytes_per_s = 0;
  // CPU profiles with bench calibrate's linear_pool table (a product whose weights rotate through pools of growing
  // size, every rank at once): (pool bytes per rank, fraction) sorted by pool, the fraction of the way from the
  // op's time on its own weights (0) to its time on the largest pool (1), never decreasing; empty without the
  // table. _alone: the same from rank 0 alone ("ops_alone"). See cache_fraction.
  std::vector<std::pair<double, double>> cache_curve, cache_curve_alone;
  std::map<std::string, OpTable> ops;
  // CPU profiles of several ranks: the points of "ops" timed again by rank 0 while the other ranks wait (a step in
  // which only some ranks work: a pipeline's stages at batch 1, attention replicas without a sequence). Empty in
  // other profiles.
  std::map<std::string, OpTable> ops_alone;
  std::map<std::string, OpTable> collectives;  // dims: ranks, bytes

  bool has_op(const std::string& op) const { return ops.count(op) > 0; }
  bool has_op_alone(const std::string& op) const { return ops_alone.count(op) > 0; }
  // Seconds per call of `op` at `query` (a value for every dim of its table, by name). Interpolates log-log
  // over the `vary` dims (one or two, e.g. the rows of a product) among the measured points of the shape
  // nearest to the query in the other dims, each point's time taken relative to its work (so that a shape
  // between or beyond the measured ones scales by its bytes and FLOPs), then multiplies by the query's work.
  // sy::Error when the op is missing or a dim of its table is not in the query.
  // alone: from "ops_alone" (sy::Error when the profile has no such table; see has_op_alone).
  double op_seconds(const std::string& op, const DimView& query, const std::vector<std::string>& vary,
                    const WorkFn& work, bool alone = false) const;
  // The largest `rows` timed in `op`'s table at the query's own shape (every dim but `rows` and the outcome dims
  // equal to the query's); 0 when the table has no point of that shape. sy::Error as op_seconds.
  double largest_timed(const std::string& op, const DimView& query, const std::string& rows) const;
  // Seconds of a collective `kind` over `ranks` ranks moving `bytes` per rank; 0 for one rank. Falls back to
  // the nearest measured group size; beyond the measured bytes, latency plus bytes at the largest measured rate.
  double collective_seconds(const std::string& kind, int ranks, double bytes) const;
  bool has_collective(const std::string& kind) const { return collectives.count(kind) > 0; }
  // The time of a call as the analytic work predicts it: a fixed cost plus the larger of bytes over the
  // copy rate and FLOPs over the matrix rate.
  double work_seconds(const OpWork& w) const;
  // work_seconds with the op's reads in place of its bytes where larger: the measure op_seconds scales by.
  double scaling_seconds(const OpWork& w) const;
  // How far a step whose ranks each re-read `rank_bytes` of weights and caches a step has come from its ops' hot
  // timings (0) to their timings beyond the caches (1): the cache curve at that many bytes (log-linear between
  // pools; 0 below the first, 1 past the last), between rank 0 alone and every rank by `share` (Busy). Requires
  // has_cache_curve().
  bool has_cache_curve() const { return !cache_curve.empty(); }
  double cache_fraction(double rank_bytes, double share) const;
  // The skew fraction of segments `segment_s` long: log-log between the measured segments, the nearest one's
  // beyond them; 0 without skew points.
  double skew_fraction(double segment_s) const;
  // The skew_cold fraction at `rows` rows a product and segments `segment_s` long: at each measured row count
  // log-log over its segments as skew_fraction, then linear in log rows between the row counts, the nearest one's
  // beyond them. Requires has_skew_cold().
  bool has_skew_cold() const { return !skew_cold.empty(); }
  double skew_cold_fraction(double rows, double segment_s) const;
};

// More points than this left over by the recheck: plan says the profile looks timed on a busy host (r18's busy
// 1-rank profile had 196 before any recheck; the H200 host's quiet ones 2-19; docs/perf-notes.md item 55).
inline constexpr int kBusyProfilePoints = 30;

// Reads a profile; sy::Error naming the file and key when malformed (wrong format or version, a missing
// key, a point of the wrong length, a time not finite and positive).
MachineProfile load_profile(const std::filesystem::path& path);
MachineProfile parse_profile(const std::string& text, const std::string& source);

}  // namespace sy
