// `switchyard generate`: run prompts (token ids) through a model on the CPU and print the continuations.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "base/check.h"
#include "io/npy.h"
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

int run_generate(const GenerateOptions& o) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : o.prompt_ids) prompts.push_back(parse_ids(p));
  SY_CHECK(o.logits_out.empty() || prompts.size() == 1, "--logits-out takes one prompt, got {}", prompts.size());
  int64_t total_tokens = 0;
  for (const auto& p : prompts) total_tokens += static_cast<int64_t>(p.size()) + o.max_tokens;
  check_single_rank_layout(o.layout, o.model, o.random_weights, o.layers, o.max_batch_tokens, total_tokens);

  auto backend = make_backend(o.device);
  auto model = load_model({.dir = o.model, .random_weights = o.random_weights, .seed = o.seed,
                           .max_layers = o.layers},
                          *backend);
  EngineConfig config{.block_size = o.block_size,
                      .kv_blocks = (total_tokens + o.block_size - 1) / o.block_size + static_cast<int64_t>(prompts.size()),
                      .scheduler = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = 256}};
  Engine engine(*model, *backend, config);
  std::vector<int64_t> ids;
  for (const auto& p : prompts) {
    ids.push_back(engine.add({.prompt = p, .max_new_tokens = o.max_tokens,
                              .sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p,
                                           .seed = o.seed},
                              .keep_logits = !o.logits_out.empty()}));
  }
  const auto t0 = std::chrono::steady_clock::now();
  engine.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

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

}  // namespace

CommandMain add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "run prompts through a model and print the new token ids");
  cmd->add_option("--model", o->model, "Hugging Face model folder (config.json + safetensors)")->required();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids; repeat for a batch")
      ->required();
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
  return [o] { return run_generate(*o); };
}

}  // namespace sy
