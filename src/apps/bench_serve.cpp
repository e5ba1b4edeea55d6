// `switchyard bench serve`: the serving benchmark, an HTTP client of any OpenAI-compatible server (no engine
// code on its path). Builds the prompts, warms up, runs one load per --max-concurrency level, prints and
// writes SGLang bench_serving's metrics per level, a summary of the sweep, and optionally a plot.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "base/check.h"
#include "bench_client/dataset.h"
#include "bench_client/http_call.h"
#include "bench_client/load.h"
#include "bench_client/report.h"

namespace sy {

namespace {

namespace fs = std::filesystem;
using bench::Backend;
using nlohmann::json;

struct BenchServeOptions {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string backend = "completions";
  std::vector<std::string> dataset{"random"};  // "random" | "sharegpt FILE"
  int64_t random_input_len = 1024;
  int64_t random_output_len = 1024;
  double random_range_ratio = 0.0;
  int64_t random_vocab_size = 32000;
  int64_t shared_prefix_len = 0;
  int64_t num_groups = 1;
  int64_t sharegpt_output_len = 0;
  std::vector<int64_t> num_prompts{1000};
  std::vector<int64_t> max_concurrency;
  std::string request_rate = "inf";
  uint64_t seed = 1;
  bool ignore_eos = false;
  bool no_stream_usage = false;
  int warmup_requests = 1;
  std::string json_path;
  std::string model;
  std::string label;
  std::string tokenizer_url;
  std::string api_key;
  std::string extra_request_body;
  std::string plot_path;
  std::vector<std::string> plot_also;
};

double parse_rate(const std::string& s) {
  if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
  try {
    size_t used = 0;
    const double r = std::stod(s, &used);
    if (used == s.size() && r > 0) return r;
  } catch (const std::exception&) {
  }
  SY_FAIL("--request-rate {}: expected requests per second (> 0) or inf", s);
}

// FILE, or FILE with "-c<level>" before its extension when a sweep writes one file per level.
std::string level_path(const std::string& path, int64_t level, bool sweep) {
  if (!sweep) return path;
  const fs::path p(path);
  const std::string tag = level > 0 ? fmt::format("-c{}", level) : "-cinf";
  return (p.parent_path() / (p.stem().string() + tag + p.extension().string())).string();
}

// The script next to the working directory (a checkout) or next to the binary's build folder.
std::string find_plot_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& p : {fs::path("bench/plot_serve.py"), exe.parent_path().parent_path() / "bench/plot_serve.py"}) {
    if (fs::exists(p)) return p.string();
  }
  SY_FAIL("--plot: bench/plot_serve.py not found (run from the repository root)");
}

// SY_PLOT_PYTHON, else the build folder's plot-venv (made by bench/plot_serve.py --setup), else python3.
std::string plot_python() {
  if (const char* p = std::getenv("SY_PLOT_PYTHON")) return p;
  std::error_code ec;
  const fs::path venv = fs::read_symlink("/proc/self/exe", ec).parent_path() / "plot-venv/bin/python3";
  return fs::exists(venv) ? venv.string() : "python3";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_bench_serve(const BenchServeOptions& o) {
  const bench::BaseUrl url =
      bench::parse_base_url(o.base_url.empty() ? fmt::format("http://{}:{}", o.host, o.port) : o.base_url);
  SY_CHECK(o.backend == "completions" || o.backend == "chat", "--backend {}: expected completions or chat", o.backend);
  const Backend backend = o.backend == "chat" ? Backend::chat : Backend::completions;
  const std::string& dataset = o.dataset.front();
  SY_CHECK((dataset == "random" && o.dataset.size() == 1) || (dataset == "sharegpt" && o.dataset.size() == 2),
           "--dataset {}: expected `random` or `sharegpt FILE`", fmt::join(o.dataset, " "));
  const double rate = parse_rate(o.request_rate);
  for (int64_t c : o.max_concurrency) SY_CHECK(c > 0, "--max-concurrency {}: each level must be positive", c);
  // Level 0: no limit.
  const std::vector<int64_t> levels = o.max_concurrency.empty() ? std::vector<int64_t>{0} : o.max_concurrency;
  SY_CHECK(o.num_prompts.size() == 1 || o.num_prompts.size() == levels.size(),
           "--num-prompts has {} values for {} --max-concurrency levels: give one, or one per level",
           o.num_prompts.size(), levels.size());
  SY_CHECK(o.plot_path.empty() || !o.json_path.empty(), "--plot {} draws the --json files: give --json FILE too",
           o.plot_path);
  const std::string api_key = !o.api_key.empty()              ? o.api_key
                              : std::getenv("OPENAI_API_KEY") ? std::getenv("OPENAI_API_KEY")
                                                              : "";
  bench::RequestOptions request{.ignore_eos = o.ignore_eos, .stream_usage = !o.no_stream_usage};
  if (!o.extra_request_body.empty()) {
    request.extra_body = json::parse(o.extra_request_body, nullptr, false);
    SY_CHECK(request.extra_body.is_object(), "--extra-request-body {}: expected a JSON object", o.extra_request_body);
  }

  bench::HttpSession server(url, api_key);
  // With --model the server's list is not needed (transformers serve lists only models of the Hub cache).
  auto [served, max_model_len] =
      o.model.empty() ? bench::served_model(server) : std::pair<std::string, int64_t>{o.model, 0};
  request.model = served;

  // The prompts: enough for the largest level, each level taking the first ones.
  int64_t most_prompts = 0;
  for (int64_t n : o.num_prompts) {
    SY_CHECK(n > 0, "--num-prompts {}: must be positive", n);
    most_prompts = std::max(most_prompts, n);
  }
  bench::HttpSession tokenizer_session(o.tokenizer_url.empty() ? url : bench::parse_base_url(o.tokenizer_url), api_key);
  bench::RemoteTokenizer tokenizer(tokenizer_session);
  std::vector<bench::PromptRow> rows;
  if (dataset == "random") {
    const bench::RandomDatasetSpec spec{.num_prompts = most_prompts,
                                        .input_len = o.random_input_len,
                                        .output_len = o.random_output_len,
                                        .range_ratio = o.random_range_ratio,
                                        .vocab_size = o.random_vocab_size,
                                        .seed = o.seed,
                                        .shared_prefix_len = o.shared_prefix_len,
                                        .num_groups = o.num_groups};
    rows = backend == Backend::completions ? bench::make_random_id_prompts(spec)
                                           : bench::make_random_text_prompts(spec, tokenizer);
  } else {
    rows = bench::read_sharegpt_prompts(
        {.path = o.dataset[1],
         .num_prompts = most_prompts,
         .output_len = o.sharegpt_output_len > 0 ? std::optional<int64_t>(o.sharegpt_output_len) : std::nullopt,
         .max_model_len = max_model_len,
         .seed = o.seed},
        tokenizer);
  }
  std::vector<std::string> bodies;
  for (const auto& row : rows) bodies.push_back(bench::make_request_body(backend, row, request, row.output_len));
  int64_t input_tokens = 0;
  for (const auto& row : rows) input_tokens += row.prompt_len;
  fmt::print("bench serve: {} {} at {}, model {}, {} prompts ({} input tokens)\n", o.backend,
             bench::backend_route(backend), url.str(), request.model, rows.size(), input_tokens);
  std::fflush(stdout);

  bench::LoadSpec load{.url = url, .route = bench::backend_route(backend), .api_key = api_key, .seed = o.seed};
  if (o.warmup_requests > 0) {
    const std::vector<std::string> warm(
        static_cast<size_t>(o.warmup_requests),
        bench::make_request_body(backend, rows.front(), request, std::min<int64_t>(rows.front().output_len, 32)));
    const bench::LoadResult w = bench::run_load(load, warm);
    size_t ok = 0;
    for (const auto& r : w.outcomes) ok += r.success ? 1 : 0;
    SY_CHECK(ok > 0, "all {} warmup requests failed; the first: {}", w.outcomes.size(), w.outcomes.front().error);
    fmt::print("warmup: {} of {} requests succeeded in {:.2f} s\n", ok, w.outcomes.size(), w.duration_s);
  }

  const bool sweep = levels.size() > 1;
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<std::pair<bench::RunConfig, bench::ServeMetrics>> runs;
  std::vector<std::string> written;
  for (size_t l = 0; l < levels.size(); ++l) {
    const auto n = static_cast<size_t>(o.num_prompts.size() == 1 ? o.num_prompts[0] : o.num_prompts[l]);
    const std::vector<bench::PromptRow> level_rows(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n));
    const std::vector<std::string> level_bodies(bodies.begin(), bodies.begin() + static_cast<std::ptrdiff_t>(n));
    load.max_concurrency = levels[l];
    load.request_rate = rate;
    load.progress = tty;
    load.progress_label = levels[l] > 0 ? fmt::format("c={}", levels[l]) : "c=inf";
    const bench::LoadResult result = bench::run_load(load, level_bodies);
    const bench::RunConfig config{
        .label = o.label.empty() ? request.model : o.label,
        .backend = o.backend,
        .base_url = url.str(),
        .model = request.model,
        .dataset_name = dataset,
        .num_prompts = static_cast<int64_t>(n),
        .request_rate = rate,
        .max_concurrency = levels[l],
        .random_input_len = o.random_input_len,
        .random_output_len = o.random_output_len,
        .random_range_ratio = o.random_range_ratio,
        .shared_prefix_len = o.shared_prefix_len,
        .num_groups = o.num_groups,
        .sharegpt_output_len = o.sharegpt_output_len > 0 ? std::optional<int64_t>(o.sharegpt_output_len) : std::nullopt,
        .ignore_eos = o.ignore_eos,
        .seed = o.seed};
    const bench::ServeMetrics m = bench::compute_metrics(level_rows, result);
    bench::print_metrics(stdout, config, m);
    if (!o.json_path.empty()) {
      const std::string path = level_path(o.json_path, levels[l], sweep);
      std::ofstream f(path);
      SY_CHECK(f.good(), "--json {}: cannot write it", path);
      f << bench::metrics_json(config, m).dump() << "\n";
      written.push_back(path);
    }
    std::fflush(stdout);
    runs.emplace_back(config, m);
  }
  if (sweep) bench::print_summary(stdout, runs);
  if (!written.empty()) fmt::print("wrote {}\n", fmt::join(written, ", "));
  if (!o.plot_path.empty()) {
    std::string cmd = fmt::format("{} {} --out {}", shell_quote(plot_python()), shell_quote(find_plot_script()),
                                  shell_quote(o.plot_path));
    for (const auto& f : written) cmd += " " + shell_quote(f);
    for (const auto& f : o.plot_also) cmd += " " + shell_quote(f);
    std::fflush(stdout);
    const int rc = std::system(cmd.c_str());
    SY_CHECK(rc == 0, "--plot: `{}` failed (exit {}); the JSON files are written, plot them later with it", cmd, rc);
  }
  int64_t failed = 0;
  for (const auto& run : runs) failed += run.second.failed;
  return failed > 0 ? 1 : 0;
}

}  // namespace

CommandMain add_bench_serve_command(CLI::App& bench_cmd) {
  auto o = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = bench_cmd.add_subcommand(
      "serve", "load an OpenAI-compatible server over HTTP; SGLang bench_serving's metrics and JSON keys");
  cmd->add_option("--base-url", o->base_url, "http://HOST:PORT[/PREFIX] of the server (else --host/--port)");
  cmd->add_option("--host", o->host, "server host")->capture_default_str();
  cmd->add_option("--port", o->port, "server port")->capture_default_str();
  cmd->add_option("--backend", o->backend, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "random, or sharegpt FILE (ShareGPT's JSON layout)")
      ->expected(1, 2)
      ->capture_default_str();
  cmd->add_option("--random-input-len", o->random_input_len, "most prompt tokens")->capture_default_str();
  cmd->add_option("--random-output-len", o->random_output_len, "most output tokens")->capture_default_str();
  cmd->add_option("--random-range-ratio", o->random_range_ratio,
                  "lengths drawn from [ratio*len, len]; 1 makes them all len")
      ->capture_default_str();
  cmd->add_option("--random-vocab-size", o->random_vocab_size, "random prompt ids are drawn below this")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-len", o->shared_prefix_len,
                  "random dataset: every prompt starts with one of --num-groups shared random prefixes of this many "
                  "tokens, then its own random part of --random-input-len")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--num-groups", o->num_groups, "random dataset: distinct shared prefixes (prompt i takes i % N)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--sharegpt-output-len", o->sharegpt_output_len, "output tokens of every sharegpt request");
  cmd->add_option("--num-prompts", o->num_prompts, "requests per level: one value, or one per concurrency level")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency, "most requests in flight; a list (1,10,64) runs each")
      ->delimiter(',');
  cmd->add_option("--request-rate", o->request_rate, "Poisson arrivals per second, or inf (all at once)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the prompts and arrivals")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "send ignore_eos: every request runs to its max_tokens");
  cmd->add_flag("--no-stream-usage", o->no_stream_usage,
                "do not ask for stream_options.include_usage (output tokens are then counted as chunks)");
  cmd->add_option("--warmup-requests", o->warmup_requests, "requests sent (at once) before the first level")
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "write the metrics here (with several levels: FILE-c<level>.json)");
  cmd->add_option("--model", o->model, "model name to send (else the first of /v1/models)");
  cmd->add_option("--label", o->label, "the run's name in the JSON and on plots (else the model name)");
  cmd->add_option("--tokenizer-url", o->tokenizer_url,
                  "a server whose /tokenize and /detokenize build text prompts (else --base-url)");
  cmd->add_option("--api-key", o->api_key, "bearer token (else $OPENAI_API_KEY)");
  cmd->add_option("--extra-request-body", o->extra_request_body, "a JSON object merged into every request");
  cmd->add_option("--plot", o->plot_path, "draw the --json files (and --plot-also) with bench/plot_serve.py");
  cmd->add_option("--plot-also", o->plot_also, "other runs' JSON files to draw on the same plot");
  return [o] { return run_bench_serve(*o); };
}

}  // namespace sy
