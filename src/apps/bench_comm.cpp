// `switchyard bench comm`: the collectives of a layout measured on the ranks of a launch — all-reduce bus
// bandwidth at the sizes a model's decode and prefill steps reduce and over a size sweep, and EP dispatch /
// combine exchanged exactly as the model exchanges them, next to a plain all-to-all of the same bytes.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "apps/bench_timing.h"
#include "apps/commands.h"
#include "apps/launch.h"
#include "arch/model_desc.h"
#include "base/check.h"
#include "model/parallel.h"
#include "parallel/rank_groups.h"
#include "planner/report.h"

namespace sy {

namespace {

struct CommOptions {
  int ranks = 0;  // 0: the ranks of the mpirun launch
  std::string device = "cpu";
  std::string model;  // empty: the all-reduce sweep only
  std::vector<int64_t> tokens = {1, 64, 256, 4096};
  std::string min_bytes = "4K";
  std::string max_bytes = "256M";
  int iters = 20;
  int warmup = 5;
  uint64_t seed = 0;
  std::string json;
};

// "4096", "4K", "4KiB", "256M", "1G" (binary multiples).
int64_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  if (unit.size() == 3 && unit.substr(1) == "iB") unit.resize(1);
  int shift = -1;
  if (unit.empty()) shift = 0;
  if (unit == "K" || unit == "k") shift = 10;
  if (unit == "M") shift = 20;
  if (unit == "G") shift = 30;
  SY_CHECK(used > 0 && v > 0 && shift >= 0 && v <= (int64_t{1} << (40 - shift)),
           "{} '{}' is not a size in bytes; give a positive integer with an optional K, M or G (KiB, MiB, GiB), "
           "e.g. 4K or 256M, up to 1T",
           flag, text);
  return static_cast<int64_t>(v) << shift;
}

std::string format_size(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string fixed(double v, int precision) { return fmt::format("{:.{}f}", v, precision); }

// What every rank checks before the first collective.
struct CommPlan {
  std::vector<int64_t> sweep;      // all-reduce sizes in bytes, min_bytes × 2^i up to max_bytes
  std::optional<ModelDesc> shape;  // with --model
};

CommPlan check_options(const CommOptions& o, int ranks) {
  SY_CHECK(ranks >= 2, "bench comm measures collectives between ranks; give --ranks 2 or more (got {})", ranks);
  SY_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be >= 1 and --warmup >= 0, got {} and {}", o.iters, o.warmup);
  CommPlan plan;
  const int64_t lo = parse_bytes("--min-bytes", o.min_bytes), hi = parse_bytes("--max-bytes", o.max_bytes);
  SY_CHECK(lo % 4 == 0 && hi % 4 == 0, "--min-bytes {} and --max-bytes {} must be multiples of 4 (f32 elements)", lo,
           hi);
  SY_CHECK(lo <= hi, "--min-bytes {} exceeds --max-bytes {}", format_size(lo), format_size(hi));
  for (int64_t b = lo; b <= hi; b *= 2) plan.sweep.push_back(b);
  for (int64_t t : o.tokens) SY_CHECK(t >= 1, "--tokens must be >= 1, got {}", t);
  if (!o.model.empty()) {
    plan.shape = load_model_desc(o.model);
    const MoeDesc& m = plan.shape->moe;
    SY_CHECK(m.n_experts > 0 && m.top_k > 0, "{}: {} has no routed experts to dispatch to", o.model,
             plan.shape->architecture);
    SY_CHECK(m.n_experts % ranks == 0,
             "the {} experts of {} cannot be spread evenly over ep {} (--ranks {}); give a --ranks that divides {}",
             m.n_experts, plan.shape->architecture, ranks, ranks, m.n_experts);
  }
  return plan;
}

// One rank's part in the measurements, with the communicators the model would use for --tp W --ep W.
struct CommRank {
  Communicator& world;
  Communicator& group;  // every rank of the launch, as the tp group and the MoE stage of --tp W --ep W
  Backend& backend;
  ModelComm& comm;
  const CommOptions& o;
};

struct AllReduceRow {
  std::string label;
  std::optional<int64_t> tokens;
  int64_t bytes = 0;
  double us = 0, algbw = 0, busbw = 0;  // GB/s
};

// In-place all-reduce of `bytes`, from the same data every iteration.
AllReduceRow time_all_reduce(const CommRank& r, int64_t bytes, const DeviceBuffer& source, DeviceBuffer& work) {
  const int64_t count = bytes / 4;
  const double us = time_collective(
      r.world, r.backend, r.o.warmup, r.o.iters,
      [&] { r.backend.copy_on_device(work.data(), source.data(), static_cast<size_t>(bytes)); },
      [&] { r.comm.all_reduce(r.group, work.as<float>(), count); });
  AllReduceRow row{.bytes = bytes, .us = us};
  const double n = r.group.size();
  row.algbw = static_cast<double>(bytes) / (row.us * 1e-6) / 1e9;
  row.busbw = row.algbw * 2.0 * (n - 1.0) / n;  // nccl-tests' bus bandwidth of an all-reduce
  return row;
}

std::vector<AllReduceRow> bench_all_reduce(const CommRank& r, const CommPlan& plan) {
  std::vector<AllReduceRow> rows;
  if (plan.shape) {
    for (int64_t t : r.o.tokens) {
      rows.push_back(
          {.label = fmt::format("{} token{}", t, t == 1 ? "" : "s"), .tokens = t, .bytes = t * plan.shape->hidden * 4});
    }
  }
  for (int64_t b : plan.sweep) rows.push_back({.label = "sweep", .bytes = b});
  int64_t largest = 0;
  for (const auto& row : rows) largest = std::max(largest, row.bytes);
  const auto source = random_floats(r.backend, largest / 4, r.o.seed + 7919 * static_cast<uint64_t>(r.world.rank()));
  auto work = r.backend.alloc(static_cast<size_t>(largest));
  for (auto& row : rows) {
    const AllReduceRow timed = time_all_reduce(r, row.bytes, *source, *work);
    row.us = timed.us, row.algbw = timed.algbw, row.busbw = timed.busbw;
  }
  return rows;
}

struct EpRow {
  int64_t tokens = 0;             // per rank
  int64_t pairs = 0;              // token-expert pairs per rank: tokens · top_k
  double recv_max_over_mean = 0;  // rows the busiest rank's experts receive over the mean
  double activation_bytes = 0;    // activation bytes one rank sends in the dispatch, mean over ranks
  double counts_us = 0, ids_us = 0, dispatch_us = 0, combine_us = 0, step_us = 0, all_to_all_us = 0;
  double dispatch_busbw = 0, combine_busbw = 0, step_busbw = 0, all_to_all_busbw = 0;  // GB/s
};

// nccl-tests' bus bandwidth of an all-to-all: what one rank sends, (n − 1)/n of it to other ranks, over the time.
double all_to_all_busbw(double bytes_per_rank, double us, int n) {
  return bytes_per_rank / (us * 1e-6) / 1e9 * (n - 1.0) / n;
}

// One MoE layer's exchanges for `tokens` tokens on every rank, as moe_forward_parallel runs them with ep = the
// launch's ranks (etp 1, edp 1): the row counts, the local expert ids, the activations out, the results back.
EpRow bench_ep(const CommRank& r, const ModelDesc& shape, int64_t tokens) {
  const int W = r.group.size();
  const auto S = static_cast<size_t>(W);
  const int64_t H = shape.hidden, E = shape.moe.n_experts, K = shape.moe.top_k, per_rank = E / W;
  // Routing drawn uniformly at random: top_k distinct experts per token, seeded per rank and token count.
  std::mt19937_64 rng(r.o.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(r.world.rank() + 1)) ^
                      static_cast<uint64_t>(tokens));
  std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(E - 1));
  std::vector<int32_t> chosen;
  std::vector<std::vector<int32_t>> ids_to(S);  // local expert ids, by destination rank
  for (int64_t t = 0; t < tokens; ++t) {
    chosen.clear();
    while (static_cast<int64_t>(chosen.size()) < K) {
      const int32_t e = expert(rng);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int32_t e : chosen) ids_to[static_cast<size_t>(e / per_rank)].push_back(static_cast<int32_t>(e % per_rank));
  }
  std::vector<int64_t> send_rows(S), send_elems(S);
  std::vector<int32_t> ids;  // in send order: by destination
  for (size_t d = 0; d < S; ++d) {
    send_rows[d] = static_cast<int64_t>(ids_to[d].size());
    send_elems[d] = send_rows[d] * H;
    ids.insert(ids.end(), ids_to[d].begin(), ids_to[d].end());
  }
  const int64_t n_send = tokens * K;
  // The receive side is sized from the counts every iteration exchanges; they do not change between iterations.
  const std::vector<int64_t> recv_rows = r.comm.exchange_counts(r.group, send_rows);
  std::vector<int64_t> recv_elems(S);
  int64_t n_recv = 0;
  for (size_t s = 0; s < S; ++s) {
    recv_elems[s] = recv_rows[s] * H;
    n_recv += recv_rows[s];
  }

  auto dev_ids = r.backend.alloc(static_cast<size_t>(std::max<int64_t>(n_send, 1)) * sizeof(int32_t));
  r.backend.copy_to_device(dev_ids->data(), ids.data(), ids.size() * sizeof(int32_t));
  auto recv_ids = r.backend.alloc(static_cast<size_t>(std::max<int64_t>(n_recv, 1)) * sizeof(int32_t));
  const auto send_act = random_floats(r.backend, n_send * H, r.o.seed + 31 * static_cast<uint64_t>(r.world.rank()));
  auto recv_act = r.backend.alloc(static_cast<size_t>(std::max<int64_t>(n_recv, 1) * H) * sizeof(float));
  auto returned = r.backend.alloc(static_cast<size_t>(std::max<int64_t>(n_send, 1) * H) * sizeof(float));

  // The plain all-to-all: the dispatch's activation elements over all ranks, in equal blocks.
  int64_t total_rows = 0;
  const std::vector<int64_t> all_rows = [&] {
    std::vector<int64_t> v(S);
    const int64_t mine = n_recv;
    r.world.all_gather(&mine, v.data(), 1, DType::i64);
    return v;
  }();
  for (int64_t v : all_rows) total_rows += v;
  const int64_t block = total_rows * H / (static_cast<int64_t>(W) * W);
  const std::vector<int64_t> equal(S, block);
  auto a2a_send = random_floats(r.backend, block * W, r.o.seed + 17 + static_cast<uint64_t>(r.world.rank()));
  auto a2a_recv = r.backend.alloc(static_cast<size_t>(std::max<int64_t>(block * W, 1)) * sizeof(float));

  std::vector<double> counts_us, ids_us, dispatch_us, combine_us, step_us, a2a_us;
  for (int i = 0; i < r.o.warmup + r.o.iters; ++i) {
    const bool timed = i >= r.o.warmup;
    r.backend.synchronize();
    r.world.barrier();
    const auto t0 = BenchClock::now();
    const std::vector<int64_t> counts = r.comm.exchange_counts(r.group, send_rows);
    const double t_counts = us_since(t0);
    SY_CHECK(counts == recv_rows, "rank {}: the row counts changed between iterations", r.world.rank());
    r.comm.all_to_all_v(r.group, dev_ids->data(), send_rows, recv_ids->data(), recv_rows, DType::i32);
    r.backend.synchronize();
    const double t_ids = us_since(t0);
    r.comm.all_to_all_v(r.group, send_act->data(), send_elems, recv_act->data(), recv_elems, DType::f32);
    r.backend.synchronize();
    const double t_dispatch = us_since(t0);
    r.comm.all_to_all_v(r.group, recv_act->data(), recv_elems, returned->data(), send_elems, DType::f32);
    r.backend.synchronize();
    const double t_step = us_since(t0);

    r.world.barrier();
    const auto t1 = BenchClock::now();
    r.comm.all_to_all_v(r.group, a2a_send->data(), equal, a2a_recv->data(), equal, DType::f32);
    r.backend.synchronize();
    const double t_a2a = us_since(t1);
    if (!timed) continue;
    counts_us.push_back(t_counts);
    ids_us.push_back(t_ids - t_counts);
    dispatch_us.push_back(t_dispatch - t_ids);
    combine_us.push_back(t_step - t_dispatch);
    step_us.push_back(t_step);
    a2a_us.push_back(t_a2a);
  }

  EpRow row{.tokens = tokens, .pairs = n_send};
  const double mean_rows = static_cast<double>(total_rows) / W;
  row.recv_max_over_mean =
      mean_rows > 0 ? static_cast<double>(*std::max_element(all_rows.begin(), all_rows.end())) / mean_rows : 0;
  row.activation_bytes = mean_rows * static_cast<double>(H) * sizeof(float);
  row.counts_us = slowest_median(r.world, counts_us);
  row.ids_us = slowest_median(r.world, ids_us);
  row.dispatch_us = slowest_median(r.world, dispatch_us);
  row.combine_us = slowest_median(r.world, combine_us);
  row.step_us = slowest_median(r.world, step_us);
  row.all_to_all_us = slowest_median(r.world, a2a_us);
  row.dispatch_busbw = all_to_all_busbw(row.activation_bytes, row.dispatch_us, W);
  row.combine_busbw = all_to_all_busbw(row.activation_bytes, row.combine_us, W);
  // The step moves the activations twice (out and back) plus the ids and counts.
  const double ids_bytes = mean_rows * sizeof(int32_t) + static_cast<double>(W) * sizeof(int64_t);
  row.step_busbw = all_to_all_busbw(2 * row.activation_bytes + ids_bytes, row.step_us, W);
  row.all_to_all_busbw = all_to_all_busbw(static_cast<double>(block * W) * sizeof(float), row.all_to_all_us, W);
  return row;
}

void print_all_reduce(const std::vector<AllReduceRow>& rows, int n, const std::optional<ModelDesc>& shape) {
  std::vector<std::vector<std::string>> t = {{"all-reduce", "bytes", "time us", "algbw GB/s", "busbw GB/s"}};
  for (const auto& row : rows) {
    t.push_back({row.label, format_size(row.bytes), fixed(row.us, 1), fixed(row.algbw, 2), fixed(row.busbw, 2)});
  }
  const std::string steps =
      shape ? fmt::format("; \"N tokens\": N * hidden {} * 4 bytes, what a step of N tokens reduces after attention",
                          shape->hidden)
            : "";
  std::printf(
      "all-reduce: f32 sum in place over %d ranks (the tp group of --tp %d); busbw = 2(n-1)/n * bytes / "
      "time%s\n%s\n",
      n, n, steps.c_str(), format_table(t, {true, false, false, false, false}).c_str());
}

void print_ep(const std::vector<EpRow>& rows, const ModelDesc& shape, int n, uint64_t seed) {
  std::printf(
      "EP dispatch/combine: %s, hidden %lld, %lld experts top-%lld, ep %d (%lld experts per rank, etp 1), f32 "
      "activations; routing uniform at random (seed %llu); per step: counts, expert ids, activations out, results "
      "back; busbw = (n-1)/n * bytes one rank sends / time; all-to-all: one all_to_all_v of the dispatch's bytes "
      "in equal blocks\n",
      shape.architecture.c_str(), static_cast<long long>(shape.hidden), static_cast<long long>(shape.moe.n_experts),
      static_cast<long long>(shape.moe.top_k), n, static_cast<long long>(shape.moe.n_experts / n),
      static_cast<unsigned long long>(seed));
  std::vector<std::vector<std::string>> t = {{"tokens/rank", "pairs/rank", "recv max/mean", "MB out/rank", "counts us",
                                              "ids us", "dispatch us", "combine us", "step us", "step GB/s",
                                              "dispatch GB/s", "all-to-all us", "all-to-all GB/s"}};
  for (const auto& r : rows) {
    t.push_back({std::to_string(r.tokens), std::to_string(r.pairs), fixed(r.recv_max_over_mean, 2),
                 fixed(r.activation_bytes / 1e6, 3), fixed(r.counts_us, 1), fixed(r.ids_us, 1), fixed(r.dispatch_us, 1),
                 fixed(r.combine_us, 1), fixed(r.step_us, 1), fixed(r.step_busbw, 2), fixed(r.dispatch_busbw, 2),
                 fixed(r.all_to_all_us, 1), fixed(r.all_to_all_busbw, 2)});
  }
  std::printf("%s\n", format_table(t, std::vector<bool>(t[0].size(), false)).c_str());
}

int run_bench_comm_rank(const CommOptions& o, Launch& launch) {
  Communicator& world = launch.join_world();
  CommPlan plan;
  if (!launch.check_on_every_rank([&] {
        SY_CHECK(o.ranks == 0 || o.ranks == world.size(),
                 "mpirun started {} ranks, but --ranks {} was given; start it with mpirun -np {}, or run it without "
                 "mpirun (switchyard then starts the {} ranks itself)",
                 world.size(), o.ranks, o.ranks, o.ranks);
        plan = check_options(o, world.size());
      })) {
    return 2;
  }
  const int W = world.size();
  // The layout --tp W --ep W: its tp group (all-reduce) and its stage (dispatch/combine) are every rank.
  const RankGroups groups = make_rank_groups(world, Mapping({.tp = W, .ep = W, .dense_tp = W}), {}, o.device);
  auto backend = make_backend(groups.device);
  ModelComm comm(*backend);
  const CommRank r{.world = world, .group = *groups.groups->stage, .backend = *backend, .comm = comm, .o = o};
  const bool report = world.rank() == 0;
  if (report) {
    std::printf(
        "bench comm: %d ranks, device %s on rank 0, collectives over %s; median over %d iterations after %d "
        "warm-up of the slowest rank's time, each iteration started together (barrier)\n\n",
        W, groups.device.c_str(), groups.transport.c_str(), o.iters, o.warmup);
    std::fflush(stdout);
  }
  nlohmann::json out = {{"ranks", W},       {"device", groups.device}, {"transport", groups.transport},
                        {"iters", o.iters}, {"warmup", o.warmup},      {"all_reduce", nlohmann::json::array()}};
  const std::vector<AllReduceRow> reduced = bench_all_reduce(r, plan);
  if (report) print_all_reduce(reduced, W, plan.shape);
  for (const auto& row : reduced) {
    out["all_reduce"].push_back({{"label", row.label},
                                 {"tokens", row.tokens ? nlohmann::json(*row.tokens) : nlohmann::json(nullptr)},
                                 {"bytes", row.bytes},
                                 {"time_us", row.us},
                                 {"algbw_gb_s", row.algbw},
                                 {"busbw_gb_s", row.busbw}});
  }
  if (plan.shape) {
    std::vector<EpRow> rows;
    for (int64_t t : o.tokens) rows.push_back(bench_ep(r, *plan.shape, t));
    if (report) print_ep(rows, *plan.shape, W, o.seed);
    nlohmann::json ep = {{"model", plan.shape->architecture},
                         {"hidden", plan.shape->hidden},
                         {"n_experts", plan.shape->moe.n_experts},
                         {"top_k", plan.shape->moe.top_k},
                         {"ep", W},
                         {"seed", o.seed},
                         {"results", nlohmann::json::array()}};
    for (const auto& e : rows) {
      ep["results"].push_back({{"tokens_per_rank", e.tokens},
                               {"pairs_per_rank", e.pairs},
                               {"recv_rows_max_over_mean", e.recv_max_over_mean},
                               {"activation_bytes_per_rank", e.activation_bytes},
                               {"counts_us", e.counts_us},
                               {"ids_us", e.ids_us},
                               {"dispatch_us", e.dispatch_us},
                               {"combine_us", e.combine_us},
                               {"step_us", e.step_us},
                               {"step_busbw_gb_s", e.step_busbw},
                               {"dispatch_busbw_gb_s", e.dispatch_busbw},
                               {"combine_busbw_gb_s", e.combine_busbw},
                               {"all_to_all_us", e.all_to_all_us},
                               {"all_to_all_busbw_gb_s", e.all_to_all_busbw}});
    }
    out["ep"] = ep;
  }
  if (report && !o.json.empty()) {
    std::ofstream f(o.json);
    SY_CHECK(f.good(), "cannot write --json file {}", o.json);
    f << out.dump(2) << "\n";
  }
  return 0;
}

int run_bench_comm(const CommOptions& o, Launch& launch) {
  if (launch.under_mpirun()) return run_bench_comm_rank(o, launch);
  SY_CHECK(o.ranks > 0,
           "bench comm runs on several ranks: give --ranks W (e.g. --ranks 8 for 8 GPUs), or start it "
           "under mpirun -np W");
  check_options(o, o.ranks);
  launch.rerun_under_mpirun(o.ranks);
}

}  // namespace

CommandMain add_bench_comm_command(CLI::App& bench, Launch& launch) {
  auto o = std::make_shared<CommOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "comm", "all-reduce bus bandwidth and EP dispatch/combine between ranks, against a plain all-to-all");
  cmd->add_option("--ranks", o->ranks, "ranks to start under mpirun (default under mpirun: its ranks)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--device", o->device, "cpu or cuda (each rank takes the GPU of its local rank)");
  cmd->add_option("--model", o->model, "model folder (config.json only): all-reduce at its step sizes, EP dispatch");
  cmd->add_option("--tokens", o->tokens, "tokens per rank of the model's steps, e.g. 1,64,256,4096")->delimiter(',');
  cmd->add_option("--min-bytes", o->min_bytes, "smallest all-reduce of the sweep, e.g. 4K");
  cmd->add_option("--max-bytes", o->max_bytes, "largest all-reduce of the sweep (sizes double), e.g. 256M");
  cmd->add_option("--iters", o->iters, "timed iterations per size (the median is reported)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o->warmup, "untimed iterations first")->check(CLI::Range(0, 100000));
  cmd->add_option("--seed", o->seed, "routing and data seed");
  cmd->add_option("--json", o->json, "also write the results as JSON to this file");
  return [o, &launch] { return run_bench_comm(*o, launch); };
}

}  // namespace sy
