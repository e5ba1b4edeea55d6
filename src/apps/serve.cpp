// `switchyard serve`: load a model (on one rank or every rank of a layout, started under mpirun as
// generate is), size its KV cache from the memory left, and serve the OpenAI API over HTTP (src/server)
// from rank 0 until SIGINT or SIGTERM.
#include <algorithm>
#include <csignal>
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
#include "parallel/rank_groups.h"
#include "planner/report.h"
#include "runtime/kv_cache.h"
#include "runtime/serving.h"
#include "server/server.h"
#include "text/generation_config.h"

namespace sy {

namespace {

struct ServeOptions {
  std::string model;
  std::string tokenizer;  // default: the model folder
  std::string device = "cpu";
  std::string kv_dtype = "auto";  // --kv-dtype
  bool random_weights = false;
  bool check_finite = false;
  uint64_t seed = 0;
  int64_t layers = 0;
  int64_t block_size = 16;
  bool no_prefix_cache = false;
  std::string dp_placement = "prefix";
  // As SGLang's chunked prefill and vLLM's step budget on 80-141 GB GPUs; on the H200 it gave a lower TPOT
  // than 2,048 at every concurrency measured (docs/perf-notes.md, "the server against its engine").
  int64_t max_batch_tokens = 8192;
  int64_t max_running_requests = 256;
  int64_t max_model_len = 0;  // 0: the model's context
  double kv_memory_fraction = 0.9;
  LayoutFlags layout;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;
  std::string served_model_name;
  int64_t max_queued_requests = 0;
  double read_timeout = 30.0;
  double drain_timeout = 30.0;
};

std::string folder_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// What every rank checks alike before any weight is read.
struct ServeChecked {
  GenerateLayout layout;
  TextModel text;
  std::vector<int32_t> eos;
  int64_t max_model_len = 0;
};

ServeChecked check_serve(const ServeOptions& o, int launched_ranks) {
  GenerateLayout layout = check_generate_layout(o.layout, {.model_dir = o.model,
                                                           .random_weights = o.random_weights,
                                                           .max_layers = o.layers,
                                                           .max_batch_tokens = o.max_batch_tokens,
                                                           .kv_tokens = 0,
                                                           .kv_dtype = o.kv_dtype,
                                                           .launched_ranks = launched_ranks});
  const std::string tokenizer_dir = o.tokenizer.empty() ? o.model : o.tokenizer;
  TextModel text = load_text_model(tokenizer_dir);
  std::vector<int32_t> eos = text::load_eos_token_ids(o.model, tokenizer_dir, &text.tokenizer);
  const ConfigJson config = ConfigJson::load(o.model);
  const int64_t context = config.get_int("max_position_embeddings", 0, 0);
  SY_CHECK(context > 0 || o.max_model_len > 0,
           "{} gives no max_position_embeddings; give the context with --max-model-len", config.source());
  SY_CHECK(context == 0 || o.max_model_len <= context,
           "--max-model-len {} is beyond the model's context of {} (max_position_embeddings in {})", o.max_model_len,
           context, config.source());
  return ServeChecked{.layout = std::move(layout),
                      .text = std::move(text),
                      .eos = std::move(eos),
                      .max_model_len = o.max_model_len > 0 ? o.max_model_len : context};
}

// Loads this rank's part of the model, sizes the KV pool (the smallest any rank can hold, so that every
// rank's engine is alike) and serves: rank 0 runs HTTP, the other ranks follow its loop.
int serve(const ServeOptions& o, const ServeChecked& c, Communicator* world, const ParallelGroups* groups,
          const std::string& device) {
  const int rank = world != nullptr ? world->rank() : 0;
  auto backend = make_backend(device, parse_kv_dtype(o.kv_dtype));
  auto model = load_model({.dir = o.model,
                           .random_weights = o.random_weights,
                           .seed = o.seed,
                           .max_layers = o.layers,
                           .parallel = groups,
                           .check_finite = o.check_finite},
                          *backend);
  KvSizing kv = size_kv_pool({.geometry = model->info().kv,
                              .kv_dtype = backend->kv_storage_dtype(),
                              .index_dtype = backend->weight_dtype(),
                              .block_size = o.block_size,
                              .free_bytes = backend->memory_info().free_bytes,
                              .kv_memory_fraction = o.kv_memory_fraction,
                              .max_model_len = c.max_model_len,
                              .max_running_requests = o.max_running_requests});
  if (world != nullptr && world->size() > 1) {
    std::vector<int64_t> blocks(static_cast<size_t>(world->size()));
    world->all_gather(&kv.blocks, blocks.data(), 1, DType::i64);
    kv.blocks = *std::min_element(blocks.begin(), blocks.end());
    kv.capacity_tokens = kv.blocks * o.block_size;
    kv.bytes = static_cast<size_t>(kv.blocks) * kv.bytes_per_block;
  }
  Engine engine(*model, *backend,
                {.block_size = o.block_size,
                 .kv_blocks = kv.blocks,
                 .prefix_cache = !o.no_prefix_cache,
                 .scheduler = {.max_batch_tokens = o.max_batch_tokens,
                               .max_seqs = o.max_running_requests,
                               .prefix_placement = o.dp_placement == "prefix"}});
  ServingLoop loop(engine, world);
  if (rank != 0) {
    // Rank 0 ends every rank's loop after its drain; a signal that mpirun forwards must not end this one first.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    loop.run();
    return 0;
  }

  const std::string name = o.served_model_name.empty() ? folder_name(o.model) : o.served_model_name;
  const ModelInfo& info = model->info();
  log_info("model    {} ({}, {} layers, {:.1f} MiB of weights on rank 0) on {}", name, info.architecture, info.n_layers,
           static_cast<double>(info.weight_bytes) / (1 << 20), device);
  log_info("layout   {}", c.layout.check.sizes.world_size() > 1 ? describe_sizes(c.layout.check.sizes) : "one rank");
  log_info("KV cache {} tokens ({} blocks of {}, {:.1f} MiB on rank 0, {}); max model len {}", kv.capacity_tokens,
           kv.blocks, o.block_size, static_cast<double>(kv.bytes) / (1 << 20),
           kv.capped ? fmt::format("{} running requests x {} tokens", o.max_running_requests, c.max_model_len)
                     : fmt::format("{:.0f}% of the memory left", o.kv_memory_fraction * 100),
           c.max_model_len);
  log_info("batch    at most {} tokens and {} sequences per step; prefix cache {}", o.max_batch_tokens,
           o.max_running_requests, o.no_prefix_cache ? "off" : "on (whole blocks of prompt tokens)");

  server::ServeConfig sc;
  sc.http = {.host = o.host, .port = o.port, .read_timeout_seconds = o.read_timeout};
  sc.settings = {.model_name = name,
                 .model_root = o.model,
                 .max_model_len = c.max_model_len,
                 .vocab_size = info.vocab_size,
                 .eos_token_ids = c.eos,
                 .api_key = o.api_key,
                 .max_queued_requests = o.max_queued_requests};
  sc.drain_seconds = o.drain_timeout;
  return server::run_server(sc, loop, c.text.tokenizer, c.text.chat_template ? &*c.text.chat_template : nullptr);
}

// One rank of an mpirun launch, as generate runs one.
int run_serve_rank(const ServeOptions& o, Launch& launch) {
  Communicator& world = launch.join_world();
  std::optional<ServeChecked> checked;
  if (!launch.check_on_every_rank([&] { checked = check_serve(o, world.size()); })) return 2;
  const LayoutCheck& check = checked->layout.check;
  const RankGroups rank = make_rank_groups(world, Mapping(check.sizes), check.request.pp_layers, o.device);
  print_layout(world, check, checked->layout.placed ? &*checked->layout.placed : nullptr);
  return serve(o, *checked, &world, rank.groups.get(), rank.device);
}

int run_serve(const ServeOptions& o, Launch& launch) {
  if (launch.under_mpirun()) return run_serve_rank(o, launch);
  const ServeChecked checked = check_serve(o, 0);
  const int world = checked.layout.check.sizes.world_size();
  if (world > 1) launch.rerun_under_mpirun(world);
  return serve(o, checked, nullptr, nullptr, o.device);
}

}  // namespace

CommandMain add_serve_command(CLI::App& app, Launch& launch) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI API (completions, chat, streaming) over HTTP");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json + safetensors)")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "folder of the tokenizer and chat template (default: --model)");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  add_kv_dtype_flag(cmd, o->kv_dtype);
  cmd->add_flag("--random-weights", o->random_weights, "draw seeded random weights; only config.json is read");
  cmd->add_flag("--check-finite", o->check_finite,
                "check every layer's output for NaN/Inf (slow: a debug mode) to name the first that went non-finite");
  cmd->add_option("--seed", o->seed, "random-weight seed");
  cmd->add_option("--layers", o->layers, "keep only the first N layers")->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", o->block_size, "KV cache block size in tokens")->check(CLI::Range(1, 4096));
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache,
                "compute every prompt in full (by default whole blocks of a prompt that an earlier request computed "
                "are reused)");
  cmd->add_option("--dp-placement", o->dp_placement,
                  "under --dp: `prefix` puts a request on the dp rank caching its longest prefix unless that rank has "
                  "more than 4 requests over the least loaded; `least-loaded` ignores the cache")
      ->check(CLI::IsMember({"prefix", "least-loaded"}))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "tokens per forward pass (prefill chunk size)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-running-requests", o->max_running_requests, "sequences per forward pass")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-model-len", o->max_model_len, "longest prompt + completion (default: the model's context)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-memory-fraction", o->kv_memory_fraction,
                  "share of the memory left after the weights that the KV cache may take")
      ->check(CLI::Range(0.01, 1.0));
  add_layout_flags(cmd, o->layout);
  cmd->add_option("--host", o->host, "address to listen on");
  cmd->add_option("--port", o->port, "port to listen on (0: a free one, printed at start)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1 requests");
  cmd->add_option("--served-model-name", o->served_model_name, "the model's name in the API (default: its folder's)");
  cmd->add_option("--max-queued-requests", o->max_queued_requests,
                  "refuse requests with 503 while this many wait (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--read-timeout", o->read_timeout, "seconds a request may take to arrive (408 after)")
      ->check(CLI::Range(0.1, 3600.0))
      ->group("Advanced");
  cmd->add_option("--drain-timeout", o->drain_timeout,
                  "seconds in-flight requests get after SIGINT/SIGTERM before they are aborted")
      ->check(CLI::Range(0.0, 3600.0))
      ->group("Advanced");
  return [o, &launch] { return run_serve(*o, launch); };
}

}  // namespace sy
