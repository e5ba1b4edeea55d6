// `switchyard generate`: run prompts (token ids) through a model and print the continuations, on one rank
// or on every rank of a layout (started under mpirun, by the user or by generate itself).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/launch.h"
#include "base/check.h"
#include "base/log.h"
#include "io/npy.h"
#include "parallel/groups.h"
#include "parallel/machine.h"
#include "parallel/rank_groups.h"
#include "planner/report.h"
#include "runtime/engine.h"

namespace sy {

namespace {

struct GenerateOptions {
  std::string model;
  std::string device = "cpu";
  std::vector<std::string> prompt_ids;
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string logits_out;
  bool random_weights = false;
  int64_t layers = 0;
  int64_t block_size = 16;
  int64_t max_batch_tokens = 512;
  LayoutFlags layout;
  int fail_on_rank = -1;  // -1: off
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SY_CHECK(used == item.size() && !item.empty() && v >= 0 && v <= INT32_MAX,
             "--prompt-ids: '{}' is not a token id; give comma-separated non-negative integers like 1,2,3", item);
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

std::vector<std::vector<int32_t>> parse_prompts(const GenerateOptions& o) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : o.prompt_ids) prompts.push_back(parse_ids(p));
  SY_CHECK(o.logits_out.empty() || prompts.size() == 1, "--logits-out takes one prompt, got {}", prompts.size());
  return prompts;
}

int64_t total_tokens(const GenerateOptions& o, const std::vector<std::vector<int32_t>>& prompts) {
  int64_t total = 0;
  for (const auto& p : prompts) total += static_cast<int64_t>(p.size()) + o.max_tokens;
  return total;
}

// The checks of one rank's run, alike on every rank: prompts, layout, the debugging flag.
GenerateLayout check_run(const GenerateOptions& o, const std::vector<std::vector<int32_t>>& prompts,
                         int launched_ranks) {
  GenerateLayout layout = check_generate_layout(o.layout, {.model_dir = o.model,
                                                           .random_weights = o.random_weights,
                                                           .max_layers = o.layers,
                                                           .max_batch_tokens = o.max_batch_tokens,
                                                           .kv_tokens = total_tokens(o, prompts),
                                                           .launched_ranks = launched_ranks});
  const int world = layout.check.sizes.world_size();
  SY_CHECK(o.fail_on_rank < world, "--fail-on-rank {}: the layout runs {} rank{} (0 to {})", o.fail_on_rank, world,
           world == 1 ? "" : "s", world - 1);
  return layout;
}

}  // namespace

void print_layout(Communicator& world, const LayoutCheck& check, const Cluster* cluster) {
  struct RankPlace {
    char host[64];
    int64_t pid;
  };
  RankPlace mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::snprintf(mine.host, sizeof(mine.host), "?");
  mine.pid = getpid();
  std::vector<RankPlace> places(static_cast<size_t>(world.size()));
  world.all_gather(&mine, places.data(), sizeof(RankPlace), DType::u8);
  if (world.rank() != 0) return;

  const ParallelSizes& z = check.sizes;
  const std::string asked = check.request.flags(), resolved = layout_flags(z);
  std::string out =
      fmt::format("layout   {}{}: {}\n", asked, asked == resolved ? "" : " → " + resolved, describe_sizes(z));
  for (const auto& n : check.completions) out += "note     " + n + "\n";
  for (size_t p = 0, first = 0; p < check.stage_layers.size();
       first += static_cast<size_t>(check.stage_layers[p]), ++p) {
    const size_t stage_size = static_cast<size_t>(z.stage_size());
    out += fmt::format("stage {}  ranks {}-{}, layers {}-{} ({}){}{}\n", p, p * stage_size, (p + 1) * stage_size - 1,
                       first, first + static_cast<size_t>(check.stage_layers[p]) - 1, check.stage_layers[p],
                       p == 0 ? ", embedding" : "", p + 1 == check.stage_layers.size() ? ", LM head" : "");
  }
  const Mapping mapping(z);
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "host", "pid"});
  if (cluster != nullptr) rows[0].insert(rows[0].end(), {"node", "gpu", "numa"});
  rows[0].insert(rows[0].end(), {"pp", "dp", "tp", "edp", "ep", "etp", "dtp", "tp group", "dp group", "pp group",
                                 "ep group", "etp group", "edp group", "dense_tp group"});
  for (int r = 0; r < mapping.world_size(); ++r) {
    const RankPlace& place = places[static_cast<size_t>(r)];
    std::vector<std::string> row = {std::to_string(r), std::string(place.host, strnlen(place.host, sizeof(place.host))),
                                    std::to_string(place.pid)};
    if (cluster != nullptr) {
      const Placement p = cluster->place(r);
      row.insert(row.end(), {std::to_string(p.node), std::to_string(p.local_gpu), std::to_string(p.numa)});
    }
    const RankCoords k = mapping.coords(r);
    for (int c : {k.pp_rank, k.dp_rank, k.tp_rank, k.edp_rank, k.ep_rank, k.etp_rank, k.dense_tp_rank}) {
      row.push_back(std::to_string(c));
    }
    for (Axis a : {Axis::tp, Axis::dp, Axis::pp, Axis::ep, Axis::etp, Axis::edp, Axis::dense_tp}) {
      row.push_back(format_ranks(mapping.group(a, r)));
    }
    rows.push_back(std::move(row));
  }
  std::vector<bool> left(rows[0].size(), false);
  left[1] = true;
  for (size_t i = rows[0].size() - 7; i < rows[0].size(); ++i) left[i] = true;
  out += format_table(rows, left);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

namespace {

// Loads the model (this rank's part of it, with `groups`), runs every prompt and, on rank 0, prints the
// tokens and the throughput line and writes --logits-out.
int generate(const GenerateOptions& o, const std::vector<std::vector<int32_t>>& prompts, const ParallelGroups* groups,
             const std::string& device) {
  const int rank = groups != nullptr ? groups->world->rank() : 0;
  const int64_t total = total_tokens(o, prompts);
  auto backend = make_backend(device);
  auto model = load_model(
      {.dir = o.model, .random_weights = o.random_weights, .seed = o.seed, .max_layers = o.layers, .parallel = groups},
      *backend);
  EngineConfig config{.block_size = o.block_size,
                      .kv_blocks = (total + o.block_size - 1) / o.block_size + static_cast<int64_t>(prompts.size()),
                      .scheduler = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = 256}};
  Engine engine(*model, *backend, config);
  std::vector<int64_t> ids;
  for (const auto& p : prompts) {
    ids.push_back(
        engine.add({.prompt = p,
                    .max_new_tokens = o.max_tokens,
                    .sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed},
                    .keep_logits = !o.logits_out.empty()}));
  }
  SY_CHECK(rank != o.fail_on_rank, "--fail-on-rank {}: rank {} stops here on purpose, before the first forward pass",
           o.fail_on_rank, rank);
  const auto t0 = std::chrono::steady_clock::now();
  engine.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank != 0) return 0;

  int64_t generated = 0;
  for (int64_t id : ids) {
    const auto& r = engine.result(id);
    std::string line;
    for (int32_t t : r.output) {
      if (!line.empty()) line += ',';
      line += std::to_string(t);
    }
    std::printf("%s\n", line.c_str());
    generated += static_cast<int64_t>(r.output.size());
  }
  std::printf("generated %lld tokens for %zu prompt(s) in %.3f s: %.1f tokens/s (%lld forward passes)\n",
              static_cast<long long>(generated), prompts.size(), seconds, static_cast<double>(generated) / seconds,
              static_cast<long long>(engine.steps()));
  if (!o.logits_out.empty()) {
    const auto& r = engine.result(ids[0]);
    const int64_t vocab = model->info().vocab_size;
    write_npy_f32(o.logits_out, r.logits.data(), {static_cast<int64_t>(r.logits.size()) / vocab, vocab});
  }
  return 0;
}

// One rank of an mpirun launch: checks agreed on by every rank, the groups of the layout, the layout
// printed by rank 0, then the run.
int run_generate_rank(const GenerateOptions& o, Launch& launch) {
  Communicator& world = launch.join_world();
  std::vector<std::vector<int32_t>> prompts;
  GenerateLayout layout;
  if (!launch.check_on_every_rank([&] {
        prompts = parse_prompts(o);
        layout = check_run(o, prompts, world.size());
      })) {
    return 2;
  }
  const LayoutCheck& check = layout.check;
  const RankGroups rank = make_rank_groups(world, Mapping(check.sizes), check.request.pp_layers, o.device);
  print_layout(world, check, layout.placed ? &*layout.placed : nullptr);
  if (world.rank() == 0) log_info("device {} on rank 0; collectives over {}", rank.device, rank.transport);
  return generate(o, prompts, rank.groups.get(), rank.device);
}

int run_generate(const GenerateOptions& o, Launch& launch) {
  if (launch.under_mpirun()) return run_generate_rank(o, launch);
  const auto prompts = parse_prompts(o);
  const LayoutCheck check = check_run(o, prompts, 0).check;
  const int world = check.sizes.world_size();
  if (world > 1) launch.rerun_under_mpirun(world);
  if (o.layout.any_layout_flag()) log_info("layout {}: {}", check.request.flags(), describe_sizes(check.sizes));
  return generate(o, prompts, nullptr, o.device);
}

}  // namespace

CommandMain add_generate_command(CLI::App& app, Launch& launch) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "run prompts through a model and print the new token ids");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json + safetensors)")->required();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids; repeat for a batch")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate per prompt")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", o->top_p, "nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "sampling and random-weight seed");
  cmd->add_option("--logits-out", o->logits_out, "write float32 logits [positions, vocab] as .npy");
  cmd->add_flag("--random-weights", o->random_weights, "draw seeded random weights; only config.json is read");
  cmd->add_option("--layers", o->layers, "keep only the first N layers")->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", o->block_size, "KV cache block size in tokens")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "tokens per forward pass (prefill chunk size)")
      ->check(CLI::Range(1, 1 << 20));
  add_layout_flags(cmd, o->layout);
  cmd->add_option("--fail-on-rank", o->fail_on_rank,
                  "debugging: this rank stops with an error before the first forward pass, to check that one "
                  "failed rank ends every rank of the launch")
      ->check(CLI::NonNegativeNumber)
      ->group("Debugging");
  return [o, &launch] { return run_generate(*o, launch); };
}

}  // namespace sy
