// `switchyard bench calibrate`: measures this machine for the planner's cost model — each op's time through the
// engine's own Backend as a function of its shapes, the per-step fixed costs, the copy and matrix rates and, over
// several ranks, the collectives — and writes the profile (format: bench_calibrate.h, README "bench calibrate").
// With --ranks W every rank times the ops on its own device at the same time (as the ranks of a layout share the
// host), then the collectives together; rank 0 writes the file.
#include "apps/bench_calibrate.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "apps/bench_timing.h"
#include "apps/commands.h"
#include "apps/launch.h"
#include "base/check.h"
#include "parallel/rank_groups.h"

namespace sy {

namespace {

struct CalibrateOptions {
  std::string device = "cpu";
  int ranks = 0;  // 0: one rank, or the ranks of the mpirun launch
  std::string out;
  bool quick = false;
  double max_seconds = 0;           // 0: the default bound of the device and grid
  int passes = 0;                   // 0: 3 on a CPU's full grid, else 1 (OpsRun::passes)
  double cut_ms = 50;               // TimingPolicy::cut_us, in ms
  std::vector<std::string> models;  // --model: the grid holds these models' shapes only
};

// The models of --model, described (a clear error for a folder without a readable config.json).
std::vector<ModelDesc> described_models(const CalibrateOptions& o) {
  std::vector<ModelDesc> out;
  for (const std::string& dir : o.models) out.push_back(load_model_desc(dir));
  return out;
}

// Default bounds on the whole run: a full calibration within 3 minutes on a GPU and 4 on a CPU; the quick grid
// takes seconds.
double time_bound(const CalibrateOptions& o) {
  if (o.max_seconds > 0) return o.max_seconds;
  if (o.quick) return 60;
  return o.device == "cuda" ? 180 : 240;
}

// Everything checked before anything is measured.
void check_options(const CalibrateOptions& o) {
  SY_CHECK(o.device == "cpu" || o.device == "cuda", "--device must be cpu or cuda, got '{}'", o.device);
  namespace fs = std::filesystem;
  const fs::path out(o.out);
  SY_CHECK(!o.out.empty() && out.has_filename(), "--out '{}' is not a file path; give e.g. --out profile.json", o.out);
  const fs::path folder = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  SY_CHECK(fs::is_directory(folder, ec), "--out {}: the folder {} does not exist; create it or write elsewhere", o.out,
           folder.string());
  SY_CHECK(access(folder.c_str(), W_OK) == 0, "--out {}: the folder {} is not writable", o.out, folder.string());
  SY_CHECK(!fs::is_directory(out, ec), "--out {} is a folder; give a file path in it, e.g. {}/profile.json", o.out,
           o.out);
  SY_CHECK(o.models.empty() || !o.quick, "--model and --quick exclude each other (the quick grid has fixed shapes)");
  described_models(o);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// The best rate any timed linear point reached (FLOP/s); 0 when none was timed. Not the largest product's: that
// can be the single row streaming 1 GB (calibration_grid), whose rate is the memory's.
double best_linear_rate(const std::vector<MeasuredOp>& ops) {
  double rate = 0;
  for (const MeasuredOp& t : ops) {
    if (t.op != "linear") continue;
    for (const TimedPoint& p : t.points) {
      const double flops =
          2.0 * static_cast<double>(p.dims[0]) * static_cast<double>(p.dims[1]) * static_cast<double>(p.dims[2]);
      if (p.us > 0) rate = std::max(rate, flops / (p.us * 1e-6));
    }
  }
  return rate;
}

int calibrate(const CalibrateOptions& o, Communicator* world) {
  const auto start = BenchClock::now();
  const int W = world != nullptr ? world->size() : 1;
  const bool report = world == nullptr || world->rank() == 0;
  const std::string device =
      o.device == "cuda" && world != nullptr && W > 1 ? "cuda:" + std::to_string(local_rank(world->rank())) : o.device;
  auto be = make_backend(device);
  const bool cpu = be->device() == Device::cpu;

  const int passes = o.passes > 0 ? o.passes : (cpu && !o.quick ? 3 : 1);
  CalibrationProfile p;
  p.machine = {.device = cpu ? "cpu" : "cuda",
               .name = be->device_name(),
               .memory_gb = static_cast<double>(be->memory_info().total_bytes) / 1e9,
               .host = host_name(),
               .cpu_threads = omp_get_max_threads(),
               .ranks = W,
               .transport = "none",
               .date = utc_now(),
               .quick = o.quick,
               .passes = passes,
               .weight_dtype = be->weight_dtype() == DType::bf16 ? "bf16" : "f32",
               .models = o.models};
  if (cpu) {
    const HostCaches host = host_caches();
    p.machine.cache_mb = static_cast<double>(host.last_level_bytes) / 1048576.0;
    p.machine.cold_pool_mb = static_cast<double>(cold_pool_bytes(host.last_level_bytes) >> 20);
  }
  const TimingPolicy timing{.graphs = !cpu,
                            .batch_us = o.quick ? 300.0 : 1000.0,
                            .repeats = cpu || o.quick ? 3 : 5,
                            .max_calls = cpu ? 100000 : 4096,
                            .cut_us = o.cut_ms * 1e3};
  const double bound = time_bound(o);
  if (report) {
    const int per_pass = std::max(1, timing.repeats / passes);
    const std::string how =
        passes > 1 ? fmt::format(
                         "each point timed in {} passes over the grid, {} batch{} of back-to-back calls of at "
                         "least {:.1f} ms a pass, its time the median of the passes'",
                         passes, per_pass, per_pass == 1 ? "" : "es", timing.batch_us / 1e3)
                   : fmt::format("each point the median over {} batches of back-to-back calls of at least {:.1f} ms",
                                 timing.repeats, timing.batch_us / 1e3);
    std::printf(
        "bench calibrate: %s (%s), %.0f GB, %d CPU thread%s, %d rank%s, %s grid within %.0f s; %s%s%s\n",
        device.c_str(), p.machine.name.c_str(), p.machine.memory_gb, p.machine.cpu_threads,
        p.machine.cpu_threads == 1 ? "" : "s", W, W == 1 ? "" : "s",
        o.quick ? "quick" : (o.models.empty() ? "full" : "the models'"), bound, how.c_str(),
        timing.graphs ? ", replayed as one captured graph where the op allows" : "",
        cpu && W > 1 ? "; all ranks at once (the slowest kept; the median for the cold ops), then rank 0 alone" : "");
    std::fflush(stdout);
  }

  p.copy_gb_s = measure_copy_bandwidth(*be) / 1e9;
  p.step = time_step_costs(*be, timing);
  // The collectives' time is kept out of the ops' budget (a tenth of the bound).
  const double ops_seconds = std::max(1.0, bound * (W > 1 ? 0.9 : 1.0) - ms_since(start) / 1e3);
  p.ops = time_ops({.be = *be,
                    .timing = timing,
                    .seconds = ops_seconds,
                    .memory_share = cpu ? 1.0 / W : 1.0,
                    .log = report,
                    .lockstep = cpu && world != nullptr && W > 1 ? world : nullptr,
                    .passes = passes},
                   calibration_grid(be->device(), o.quick, described_models(o)), p.skipped, &p.machine.recheck);
  p.matrix_tflop_s = best_linear_rate(p.ops);
  if (p.matrix_tflop_s <= 0) p.matrix_tflop_s = time_matrix_rate(*be, timing);
  p.matrix_tflop_s /= 1e12;
  if (world != nullptr && W > 1) {
    world->barrier();  // the ranks finish their ops at different times
    const auto t0 = BenchClock::now();
    CollectivesResult c = time_collectives({.world = *world, .be = *be, .device = device, .quick = o.quick});
    p.collectives = std::move(c.tables);
    p.machine.transport = c.transport;
    if (report) std::printf("calibrate: collectives over %s, %.1f s\n", c.transport.c_str(), ms_since(t0) / 1e3);
    if (cpu) {
      std::vector<std::vector<double>> rounds;
      p.step.skew = time_skew(*world, *be, o.quick, &rounds);
      if (report) {
        std::printf("calibrate: skew (the median of each size's rounds)");
        for (size_t i = 0; i < p.step.skew.size(); ++i) {
          std::printf(" %.0f us +%.1f%% [", p.step.skew[i].first, 100 * p.step.skew[i].second);
          for (size_t r = 0; r < rounds[i].size(); ++r) std::printf("%s%.1f", r == 0 ? "" : " ", 100 * rounds[i][r]);
          std::printf("]");
        }
        std::printf("\n");
      }
      rounds.clear();
      p.step.skew_cold = time_skew_cold(*world, *be, o.quick, &rounds);
      if (report) {
        std::printf("calibrate: skew beyond the caches (against the median rank; the median of each size's rounds)");
        for (size_t i = 0; i < p.step.skew_cold.size(); ++i) {
          const SkewColdPoint& k = p.step.skew_cold[i];
          std::printf(" m %.0f %.0f us +%.1f%% [", k.rows, k.segment_us, 100 * k.fraction);
          for (size_t r = 0; r < rounds[i].size(); ++r) std::printf("%s%.1f", r == 0 ? "" : " ", 100 * rounds[i][r]);
          std::printf("]");
        }
        std::printf("\n");
      }
    }
  }
  if (!report) return 0;
  size_t points = 0;
  for (const MeasuredOp& t : p.ops) points += t.points.size();
  std::ofstream f(o.out);
  SY_CHECK(f.good(), "cannot write --out {}", o.out);
  f << profile_text(p);
  f.close();
  SY_CHECK(f.good(), "writing --out {} failed", o.out);
  std::printf(
      "bench calibrate: copy %.1f GB/s, matrix %.3g TFLOP/s, launch %.2f us, sync %.2f us, graph launch %.2f us, "
      "read-back %.2f us; %zu points of %zu ops, %zu skipped; wrote %s in %.1f s\n",
      p.copy_gb_s, p.matrix_tflop_s, p.step.launch_us, p.step.sync_us, p.step.graph_launch_us, p.step.copy_to_host_us,
      points, p.ops.size(), p.skipped.size(), o.out.c_str(), ms_since(start) / 1e3);
  return 0;
}

int run_calibrate_rank(const CalibrateOptions& o, Launch& launch) {
  Communicator& world = launch.join_world();
  if (!launch.check_on_every_rank([&] {
        SY_CHECK(o.ranks == 0 || o.ranks == world.size(),
                 "mpirun started {} ranks, but --ranks {} was given; start it with mpirun -np {}, or run it without "
                 "mpirun (switchyard then starts the {} ranks itself)",
                 world.size(), o.ranks, o.ranks, o.ranks);
        check_options(o);
      })) {
    return 2;
  }
  return calibrate(o, &world);
}

int run_calibrate(const CalibrateOptions& o, Launch& launch) {
  if (launch.under_mpirun()) return run_calibrate_rank(o, launch);
  check_options(o);
  if (o.ranks > 1) launch.rerun_under_mpirun(o.ranks);
  return calibrate(o, nullptr);
}

}  // namespace

CommandMain add_bench_calibrate_command(CLI::App& bench, Launch& launch) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "calibrate", "time every op, the step costs and the collectives on this machine; write the planner's profile");
  cmd->add_option("--device", o->device, "cpu or cuda (with --ranks, each rank takes the GPU of its local rank)");
  cmd->add_option("--ranks", o->ranks, "ranks to start under mpirun; 1 or none: no collectives")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--out", o->out, "the profile to write (JSON)")->required();
  cmd->add_flag("--quick", o->quick, "a tiny grid that runs in seconds (tests)");
  cmd->add_option("--model", o->models,
                  "a model folder (config.json) whose shapes make the grid, in place of the built-in models and "
                  "generic shapes; repeat for several")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--max-seconds", o->max_seconds,
                  "bound on the whole run (default: 180 on cuda, 240 on cpu, 60 with --quick); the ops share it by "
                  "weight and points left out are listed in \"skipped\"")
      ->check(finite_range(1, 1e6));
  cmd->add_option("--cut-ms", o->cut_ms,
                  "a point whose one call takes longer than this ends its series: the larger points of that shape "
                  "are listed in \"skipped\", not timed (default 50)")
      ->check(finite_range(1, 1e6));
  cmd->add_option("--passes", o->passes,
                  "passes over the whole grid, each in its share of the time and the repeats spread over them; a "
                  "point's time is the median of its passes' (default: 3 on a CPU, where a point timed in a few "
                  "milliseconds moves by tens of percent from one run to the next; 1 on a GPU and with --quick)")
      ->check(CLI::Range(1, 100));
  return [o, &launch] { return run_calibrate(*o, launch); };
}

}  // namespace sy
