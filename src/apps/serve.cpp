// `switchyard serve`: load a model, size its KV cache from the memory left, and serve the OpenAI API over
// HTTP (src/server) until SIGINT or SIGTERM.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/launch.h"
#include "apps/text_input.h"
#include "base/check.h"
#include "base/log.h"
#include "io/model_config.h"
#include "runtime/serving.h"
#include "server/server.h"
#include "text/generation_config.h"

namespace sy {

namespace {

struct ServeOptions {
  std::string model;
  std::string tokenizer;  // default: the model folder
  std::string device = "cpu";
  bool random_weights = false;
  uint64_t seed = 0;
  int64_t layers = 0;
  int64_t block_size = 16;
  int64_t max_batch_tokens = 2048;
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

// MemAvailable of /proc/meminfo in bytes (0 when it cannot be read).
size_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib << 10;
  }
  return 0;
}

struct KvSizing {
  int64_t blocks = 0;
  int64_t tokens = 0;
  size_t bytes = 0;
  std::string basis;  // why this many
};

// Enough blocks for --max-running-requests sequences of max_model_len tokens, capped by
// --kv-memory-fraction of the memory left after the weights.
KvSizing size_kv_cache(const ServeOptions& o, const Model& model, const Backend& backend, int64_t max_model_len) {
  const KvGeometry& g = model.info().kv;
  const size_t token_bytes = static_cast<size_t>(g.n_layers * (g.kv_heads * (g.head_dim + g.v_head_dim) + g.index_head_dim)) *
                             dtype_size(backend.kv_dtype());
  const int64_t wanted = o.max_running_requests * max_model_len;
  int64_t tokens = wanted;
  std::string basis = fmt::format("{} running requests x {} tokens", o.max_running_requests, max_model_len);
  if (backend.device() == Device::cpu) {
    const size_t available = host_available_bytes();
    const auto budget = static_cast<int64_t>(static_cast<double>(available) * o.kv_memory_fraction /
                                             static_cast<double>(std::max<size_t>(token_bytes, 1)));
    if (available > 0 && budget < tokens) {
      tokens = budget;
      basis = fmt::format("{:.0f}% of {:.1f} GiB of host memory available", o.kv_memory_fraction * 100,
                          static_cast<double>(available) / (1 << 30));
    }
  }
  SY_CHECK(tokens >= max_model_len,
           "the KV cache holds {} tokens ({}), less than one sequence of --max-model-len {}; lower --max-model-len "
           "or raise --kv-memory-fraction",
           tokens, basis, max_model_len);
  KvSizing s;
  s.blocks = (tokens + o.block_size - 1) / o.block_size;
  s.tokens = s.blocks * o.block_size;
  s.bytes = static_cast<size_t>(s.tokens) * token_bytes;
  s.basis = std::move(basis);
  return s;
}

int run_serve(const ServeOptions& o, Launch& launch) {
  SY_CHECK(!launch.under_mpirun(), "serve runs as one process for now; start it without mpirun");
  const GenerateLayout layout = check_generate_layout(o.layout, {.model_dir = o.model,
                                                                 .random_weights = o.random_weights,
                                                                 .max_layers = o.layers,
                                                                 .max_batch_tokens = o.max_batch_tokens,
                                                                 .kv_tokens = 0});
  const int world = layout.check.sizes.world_size();
  SY_CHECK(world <= 1,
           "the layout {} runs {} ranks, but serve runs on one rank for now (serving across ranks is the next step); "
           "drop the layout flags",
           layout.check.request.flags(), world);

  const std::string tokenizer_dir = o.tokenizer.empty() ? o.model : o.tokenizer;
  const TextModel text = load_text_model(tokenizer_dir);
  const std::vector<int32_t> eos = text::load_eos_token_ids(o.model, tokenizer_dir, &text.tokenizer);
  const ConfigJson config = ConfigJson::load(o.model);
  const int64_t context = config.get_int("max_position_embeddings", 0, 0);
  SY_CHECK(context > 0 || o.max_model_len > 0,
           "{} gives no max_position_embeddings; give the context with --max-model-len", config.source());
  SY_CHECK(context == 0 || o.max_model_len <= context,
           "--max-model-len {} is beyond the model's context of {} (max_position_embeddings in {})", o.max_model_len,
           context, config.source());
  const int64_t max_model_len = o.max_model_len > 0 ? o.max_model_len : context;

  auto backend = make_backend(o.device);
  auto model = load_model(
      {.dir = o.model, .random_weights = o.random_weights, .seed = o.seed, .max_layers = o.layers}, *backend);
  const KvSizing kv = size_kv_cache(o, *model, *backend, max_model_len);
  Engine engine(*model, *backend,
                {.block_size = o.block_size,
                 .kv_blocks = kv.blocks,
                 .scheduler = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = o.max_running_requests}});
  ServingLoop loop(engine, nullptr);

  const std::string name = o.served_model_name.empty() ? folder_name(o.model) : o.served_model_name;
  log_info("model    {} ({}, {} layers, {:.1f} MiB of weights) on {}", name, model->info().architecture,
           model->info().n_layers, static_cast<double>(model->info().weight_bytes) / (1 << 20), o.device);
  log_info("layout   one rank");
  log_info("KV cache {} tokens ({} blocks of {}, {:.1f} MiB; {}); max model len {}", kv.tokens, kv.blocks,
           o.block_size, static_cast<double>(kv.bytes) / (1 << 20), kv.basis, max_model_len);
  log_info("batch    at most {} tokens and {} sequences per step", o.max_batch_tokens, o.max_running_requests);

  server::ServeConfig sc;
  sc.http = {.host = o.host, .port = o.port, .read_timeout_seconds = o.read_timeout};
  sc.settings = {.model_name = name,
                 .model_root = o.model,
                 .max_model_len = max_model_len,
                 .vocab_size = model->info().vocab_size,
                 .eos_token_ids = eos,
                 .api_key = o.api_key,
                 .max_queued_requests = o.max_queued_requests};
  sc.drain_seconds = o.drain_timeout;
  return server::run_server(sc, loop, text.tokenizer, text.chat_template ? &*text.chat_template : nullptr);
}

}  // namespace

CommandMain add_serve_command(CLI::App& app, Launch& launch) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI API (completions, chat, streaming) over HTTP");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json + safetensors)")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "folder of the tokenizer and chat template (default: --model)");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  cmd->add_flag("--random-weights", o->random_weights, "draw seeded random weights; only config.json is read");
  cmd->add_option("--seed", o->seed, "random-weight seed");
  cmd->add_option("--layers", o->layers, "keep only the first N layers")->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", o->block_size, "KV cache block size in tokens")->check(CLI::Range(1, 4096));
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
  cmd->add_option("--port", o->port, "port to listen on (0: a free one, printed at start)")->check(CLI::Range(0, 65535));
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
