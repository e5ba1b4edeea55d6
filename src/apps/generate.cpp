// `switchyard generate`: run prompts (text, chat messages or token ids) through a model and print the
// continuations (text streamed as it is generated), on one rank or on every rank of a layout (started
// under mpirun, by the user or by generate itself).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/launch.h"
#include "apps/text_input.h"
#include "base/check.h"
#include "base/log.h"
#include "io/model_config.h"
#include "io/npy.h"
#include "parallel/groups.h"
#include "parallel/machine.h"
#include "parallel/rank_groups.h"
#include "planner/report.h"
#include "runtime/engine.h"
#include "text/generation_config.h"

namespace sy {

namespace {

struct GenerateOptions {
  std::string model;
  std::string device = "cpu";
  std::string kv_dtype = "auto";  // --kv-dtype
  std::vector<std::string> prompt_ids;
  std::string tokenizer;  // folder of the tokenizer and chat template; default: the model's
  std::vector<std::string> prompt_text;
  std::vector<std::string> chat;
  std::string system;
  bool ignore_eos = false;
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string logits_out;
  bool random_weights = false;
  bool check_finite = false;
  int64_t layers = 0;
  int64_t block_size = 16;
  int64_t max_batch_tokens = 512;
  LayoutFlags layout;
  int fail_on_rank = -1;  // -1: off
};

// The prompts of a run, in the order given: token ids as given (--prompt-ids), or text (--prompt, --chat)
// encoded by the model's tokenizer, with the end-of-sequence tokens the run stops at.
struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<bool> is_text;         // per prompt: its continuation is printed as text
  std::optional<TextModel> text;     // loaded when a prompt is text or EOS tokens need the tokenizer
  std::vector<int32_t> stop_tokens;  // EOS tokens of the model folder (none with --ignore-eos)
};

Prompts parse_prompts(const GenerateOptions& o) {
  Prompts p;
  SY_CHECK(!o.prompt_ids.empty() || !o.prompt_text.empty() || !o.chat.empty(),
           "give a prompt: --prompt TEXT, --chat TEXT or --prompt-ids 1,2,3 (each may repeat)");
  SY_CHECK(o.system.empty() || !o.chat.empty(), "--system goes with --chat (it is the chat's system message)");
  const bool any_text = !o.prompt_text.empty() || !o.chat.empty();
  const std::string tokenizer_dir = o.tokenizer.empty() ? o.model : o.tokenizer;
  if (any_text) p.text = load_text_model(tokenizer_dir);
  for (const auto& ids : o.prompt_ids) {
    p.ids.push_back(parse_token_ids(ids, "--prompt-ids"));
    p.is_text.push_back(false);
  }
  for (const auto& t : o.prompt_text) {
    p.ids.push_back(p.text->tokenizer.encode(t, /*add_special_tokens=*/true));
    SY_CHECK(!p.ids.back().empty(), "--prompt '{}' encodes to no tokens; give some text", t);
    p.is_text.push_back(true);
  }
  for (const auto& t : o.chat) {
    p.ids.push_back(encode_chat(*p.text, o.system, t));
    p.is_text.push_back(true);
  }
  SY_CHECK(o.logits_out.empty() || p.ids.size() == 1, "--logits-out takes one prompt, got {}", p.ids.size());
  if (!o.ignore_eos) {
    p.stop_tokens = text::load_eos_token_ids(o.model, tokenizer_dir, p.text ? &p.text->tokenizer : nullptr);
  }
  return p;
}

int64_t total_tokens(const GenerateOptions& o, const Prompts& prompts) {
  int64_t total = 0;
  for (const auto& p : prompts.ids) total += static_cast<int64_t>(p.size()) + o.max_tokens;
  return total;
}

// Every prompt with its new tokens fits the model's context, and its ids the model's vocabulary (checked
// before any weight is read).
void check_context(const GenerateOptions& o, const Prompts& prompts) {
  const ConfigJson config = ConfigJson::load(o.model);
  const int64_t context = config.get_int("max_position_embeddings", 0, 0);
  const int64_t vocab = config.get_int("vocab_size", 0, 0);
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    for (int32_t t : prompts.ids[i]) {
      SY_CHECK(vocab == 0 || t < vocab,
               "prompt {} holds token id {}, outside the model's vocabulary of {} (vocab_size in {}); {}", i, t, vocab,
               config.source(),
               prompts.is_text[i] ? "the tokenizer does not belong to this model: give its own with --tokenizer"
                                  : "give ids below vocab_size");
    }
    if (context == 0) continue;
    const int64_t need = static_cast<int64_t>(prompts.ids[i].size()) + o.max_tokens;
    SY_CHECK(need <= context,
             "prompt {} is {} tokens and --max-tokens is {}: {} tokens do not fit the model's context of {} "
             "(max_position_embeddings in config.json); shorten the prompt or lower --max-tokens",
             i, prompts.ids[i].size(), o.max_tokens, need, context);
  }
}

// The checks of one rank's run, alike on every rank: prompts, layout, the debugging flag.
GenerateLayout check_run(const GenerateOptions& o, const Prompts& prompts, int launched_ranks) {
  // The config's sizes and their products, bounded before anything is sized from them (the layout check
  // below reads them only when a layout is asked for).
  load_model_desc(o.model);
  GenerateLayout layout = check_generate_layout(o.layout, {.model_dir = o.model,
                                                           .random_weights = o.random_weights,
                                                           .max_layers = o.layers,
                                                           .max_batch_tokens = o.max_batch_tokens,
                                                           .kv_tokens = total_tokens(o, prompts),
                                                           .kv_dtype = o.kv_dtype,
                                                           .launched_ranks = launched_ranks});
  check_context(o, prompts);
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

// Prints the continuation of a text prompt while it is generated: each step's new tokens through the
// incremental detokeniser (special tokens such as EOS are not printed).
class TextStream {
 public:
  TextStream(const text::Tokenizer& tokenizer, const Engine& engine, int64_t request)
      : decoder_(tokenizer, /*skip_special_tokens=*/true), engine_(engine), request_(request) {}
  void after_step() {
    const auto& out = engine_.result(request_).output;
    for (; printed_ < out.size(); ++printed_) {
      const std::string piece = decoder_.push(out[printed_]);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    }
    std::fflush(stdout);
  }

 private:
  text::IncrementalDecoder decoder_;
  const Engine& engine_;
  int64_t request_;
  size_t printed_ = 0;
};

// Loads the model (this rank's part of it, with `groups`), runs every prompt and, on rank 0, prints the
// continuations (token ids, or text: streamed when there is one text prompt) and the throughput line, and
// writes --logits-out.
int generate(const GenerateOptions& o, const Prompts& prompts, const ParallelGroups* groups,
             const std::string& device) {
  const int rank = groups != nullptr ? groups->world->rank() : 0;
  const int64_t total = total_tokens(o, prompts);
  auto backend = make_backend(device, parse_kv_dtype(o.kv_dtype));
  auto model = load_model({.dir = o.model,
                           .random_weights = o.random_weights,
                           .seed = o.seed,
                           .max_layers = o.layers,
                           .parallel = groups,
                           .check_finite = o.check_finite},
                          *backend);
  EngineConfig config{.block_size = o.block_size,
                      .kv_blocks = (total + o.block_size - 1) / o.block_size + static_cast<int64_t>(prompts.ids.size()),
                      .scheduler = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = 256}};
  Engine engine(*model, *backend, config);
  std::vector<int64_t> ids;
  for (const auto& p : prompts.ids) {
    ids.push_back(
        engine.add({.prompt = p,
                    .max_new_tokens = o.max_tokens,
                    .sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed},
                    .stop_tokens = prompts.stop_tokens,
                    .keep_logits = !o.logits_out.empty()}));
  }
  SY_CHECK(rank != o.fail_on_rank, "--fail-on-rank {}: rank {} stops here on purpose, before the first forward pass",
           o.fail_on_rank, rank);
  const bool any_text = prompts.text.has_value();
  std::optional<TextStream> stream;
  if (rank == 0 && prompts.ids.size() == 1 && prompts.is_text[0])
    stream.emplace(prompts.text->tokenizer, engine, ids[0]);
  const auto t0 = std::chrono::steady_clock::now();
  engine.run([&] {
    if (stream) stream->after_step();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank != 0) return 0;

  // A prompt the engine ended (its logits went non-finite) fails the run with that one line.
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& r = engine.result(ids[i]);
    if (r.finish_reason == FinishReason::error && stream) std::printf("\n");
    SY_CHECK(r.finish_reason != FinishReason::error, "prompt {} of {}: {}", i, ids.size(), r.error);
  }
  int64_t generated = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& r = engine.result(ids[i]);
    generated += static_cast<int64_t>(r.output.size());
    if (stream) {
      std::printf("\n");
    } else if (prompts.is_text[i]) {
      std::printf("--- prompt %zu ---\n%s\n", i, prompts.text->tokenizer.decode(r.output, true).c_str());
    } else {
      std::string line;
      for (int32_t t : r.output) {
        if (!line.empty()) line += ',';
        line += std::to_string(t);
      }
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
  // With text output, stdout holds only the text.
  std::fprintf(any_text ? stderr : stdout,
               "generated %lld tokens for %zu prompt(s) in %.3f s: %.1f tokens/s (%lld forward passes)\n",
               static_cast<long long>(generated), prompts.ids.size(), seconds, static_cast<double>(generated) / seconds,
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
  Prompts prompts;
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
  CLI::App* cmd = app.add_subcommand("generate", "run prompts through a model and print the continuations");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json + safetensors)")->required();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  add_kv_dtype_flag(cmd, o->kv_dtype);
  cmd->add_option("--prompt", o->prompt_text, "prompt text, encoded by the model's tokenizer; repeat for a batch");
  cmd->add_option("--chat", o->chat, "a user message, rendered through the model's chat template; repeatable");
  cmd->add_option("--system", o->system, "the system message of every --chat prompt");
  cmd->add_option("--tokenizer", o->tokenizer, "folder of the tokenizer and chat template (default: --model)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids; repeat for a batch");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at the model's end-of-sequence tokens");
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate per prompt")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(finite_range(0.0, 100.0));
  cmd->add_option("--top-p", o->top_p, "nucleus sampling mass (1 = off)")->check(finite_range(0.0, 1.0));
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--seed", o->seed, "sampling and random-weight seed");
  cmd->add_option("--logits-out", o->logits_out, "write float32 logits [positions, vocab] as .npy");
  cmd->add_flag("--random-weights", o->random_weights, "draw seeded random weights; only config.json is read");
  cmd->add_flag("--check-finite", o->check_finite,
                "check every layer's output for NaN/Inf (slow: a debug mode) to name the first that went non-finite");
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
