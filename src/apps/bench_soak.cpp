// `switchyard bench soak`: a server under faults for a bounded time (bench_client/soak.h): well-formed
// streams, streams cut by the client, malformed requests; passes when no well-formed request failed, every
// malformed one got its 4xx, and the server's resident memory in the last window is within a bound of
// the first window's, and its open files are back to what they were before the soak.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "base/check.h"
#include "bench_client/dataset.h"
#include "bench_client/http_call.h"
#include "bench_client/soak.h"

namespace sy {

namespace {

using bench::Backend;
using nlohmann::json;

struct BenchSoakOptions {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string backend = "completions";
  std::string model;
  std::string api_key;
  int64_t clients = 1024;
  double duration = 180.0;
  double window = 60.0;
  double disconnect_fraction = 0.1;
  double malformed_fraction = 0.1;
  double max_rss_growth = 0.10;
  double reply_timeout = 60.0;
  int64_t random_input_len = 128;
  int64_t random_output_len = 32;
  double random_range_ratio = 0.25;
  int64_t random_vocab_size = 32000;
  int64_t num_prompts = 1000;
  bool ignore_eos = false;
  uint64_t seed = 1;
  std::string json_path;
};

double mib(double bytes) { return bytes / (1 << 20); }

json result_json(const BenchSoakOptions& o, const std::string& model, const bench::SoakResult& r, bool passed) {
  json samples = json::array();
  for (const auto& s : r.samples) samples.push_back({s.t_s, s.resident_bytes, s.open_fds});
  return {{"model", model},
          {"backend", o.backend},
          {"clients", o.clients},
          {"duration_s", r.duration_s},
          {"window_s", o.window},
          {"disconnect_fraction", o.disconnect_fraction},
          {"malformed_fraction", o.malformed_fraction},
          {"completed", r.completed},
          {"failed", r.failed},
          {"cut_by_client", r.cut},
          {"output_tokens", r.output_tokens},
          {"malformed", r.malformed},
          {"malformed_wrong", r.malformed_wrong},
          {"malformed_by_case", r.malformed_by_case},
          {"failures", r.failures},
          {"first_window_rss_bytes", r.first_window_rss},
          {"last_window_rss_bytes", r.last_window_rss},
          {"rss_growth", r.rss_growth()},
          {"baseline_rss_bytes", r.baseline.resident_bytes},
          {"after_rss_bytes", r.after.resident_bytes},
          {"baseline_open_fds", r.baseline.open_fds},
          {"after_open_fds", r.after.open_fds},
          {"samples_t_rss_fds", samples},
          {"passed", passed}};
}

int run_bench_soak(const BenchSoakOptions& o) {
  const bench::BaseUrl url =
      bench::parse_base_url(o.base_url.empty() ? fmt::format("http://{}:{}", o.host, o.port) : o.base_url);
  SY_CHECK(o.backend == "completions" || o.backend == "chat", "--backend {}: expected completions or chat", o.backend);
  SY_CHECK(o.num_prompts > 0, "--num-prompts {}: must be positive", o.num_prompts);
  SY_CHECK(o.max_rss_growth >= 0, "--max-rss-growth {}: expected a fraction >= 0 (0.1: 10%)", o.max_rss_growth);
  const Backend backend = o.backend == "chat" ? Backend::chat : Backend::completions;
  const std::string api_key = !o.api_key.empty()              ? o.api_key
                              : std::getenv("OPENAI_API_KEY") ? std::getenv("OPENAI_API_KEY")
                                                              : "";
  bench::HttpSession server(url, api_key);
  bench::RequestOptions request{.model = o.model.empty() ? bench::served_model(server).first : o.model,
                                .ignore_eos = o.ignore_eos};
  const bench::RandomDatasetSpec spec{.num_prompts = o.num_prompts,
                                      .input_len = o.random_input_len,
                                      .output_len = o.random_output_len,
                                      .range_ratio = o.random_range_ratio,
                                      .vocab_size = o.random_vocab_size,
                                      .seed = o.seed};
  std::vector<bench::PromptRow> rows;
  if (backend == Backend::completions) {
    rows = bench::make_random_id_prompts(spec);
  } else {
    bench::RemoteTokenizer tokenizer(server);
    rows = bench::make_random_text_prompts(spec, tokenizer);
  }
  std::vector<std::string> bodies;
  for (const auto& row : rows) bodies.push_back(bench::make_request_body(backend, row, request, row.output_len));

  const bench::SoakSpec soak{
      .load = {.url = url, .route = bench::backend_route(backend), .api_key = api_key},
      .clients = o.clients,
      .duration_s = o.duration,
      .window_s = o.window,
      .disconnect_fraction = o.disconnect_fraction,
      .malformed_fraction = o.malformed_fraction,
      .reply_timeout_s = o.reply_timeout,
      .seed = o.seed,
      .model = request.model,
      .progress = isatty(STDERR_FILENO) != 0,
  };
  bench::check_soak_spec(soak);
  fmt::print("bench soak: {} clients for {} s at {}{}, model {}; {:.0f}% cut by the client, {:.0f}% malformed\n",
             o.clients, o.duration, url.str(), soak.load.route, request.model, 100 * o.disconnect_fraction,
             100 * o.malformed_fraction);
  std::fflush(stdout);
  const bench::SoakResult r = bench::run_soak(soak, bodies);

  std::vector<std::string> why;
  if (r.failed > 0) why.push_back(fmt::format("{} well-formed requests failed", r.failed));
  if (r.malformed_wrong > 0) why.push_back(fmt::format("{} malformed requests got a wrong answer", r.malformed_wrong));
  if (r.first_window_rss <= 0 || r.last_window_rss <= 0) {
    why.push_back("the server's /metrics has no process_resident_memory_bytes, so its memory was not measured");
  } else if (r.rss_growth() > o.max_rss_growth) {
    why.push_back(
        fmt::format("resident memory grew {:.1f}% (more than {:.0f}%)", 100 * r.rss_growth(), 100 * o.max_rss_growth));
  }
  // Every connection of the soak is closed by then: the server's descriptors are back where they were,
  // give or take a few (logs, a connection being torn down).
  constexpr double kFdSlack = 16;
  if (r.baseline.open_fds >= 0 && r.after.open_fds > r.baseline.open_fds + kFdSlack) {
    why.push_back(fmt::format("the server holds {} open files after the soak, {} before it (connections not closed?)",
                              r.after.open_fds, r.baseline.open_fds));
  }
  const bool passed = why.empty();
  fmt::print("{:<44} {:.1f} s\n", "duration (requests in flight drained)", r.duration_s);
  fmt::print("{:<44} {} ({} output tokens)\n", "well-formed streams completed", r.completed, r.output_tokens);
  fmt::print("{:<44} {}\n", "well-formed streams failed", r.failed);
  fmt::print("{:<44} {}\n", "streams cut by the client", r.cut);
  fmt::print("{:<44} {} ({} answered wrongly)\n", "malformed requests", r.malformed, r.malformed_wrong);
  std::vector<std::string> cases;
  for (const auto& [name, n] : r.malformed_by_case) cases.push_back(fmt::format("{} {}", name, n));
  fmt::print("  {}\n", fmt::join(cases, ", "));
  fmt::print("{:<44} {:.1f} MiB, {:.1f} MiB ({:+.1f}%)\n",
             fmt::format("server RSS, most in first / last {} s", o.window), mib(r.first_window_rss),
             mib(r.last_window_rss), 100 * r.rss_growth());
  fmt::print("{:<44} {:.1f} MiB, {:.1f} MiB\n", "server RSS before / after the soak", mib(r.baseline.resident_bytes),
             mib(r.after.resident_bytes));
  fmt::print("{:<44} {} / {}\n", "server open files before / after the soak", r.baseline.open_fds, r.after.open_fds);
  for (const auto& f : r.failures) fmt::print("  failure: {}\n", f);
  fmt::print("result: {}{}\n", passed ? "PASS" : "FAIL: ", fmt::join(why, "; "));
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    SY_CHECK(f.good(), "--json {}: cannot write it", o.json_path);
    f << result_json(o, request.model, r, passed).dump() << "\n";
    fmt::print("wrote {}\n", o.json_path);
  }
  return passed ? 0 : 1;
}

}  // namespace

CommandMain add_bench_soak_command(CLI::App& bench_cmd) {
  auto o = std::make_shared<BenchSoakOptions>();
  CLI::App* cmd = bench_cmd.add_subcommand(
      "soak", "a server under faults: streams, client disconnects and malformed requests for a bounded time");
  cmd->add_option("--base-url", o->base_url, "http://HOST:PORT[/PREFIX] of the server (else --host/--port)");
  cmd->add_option("--host", o->host, "server host")->capture_default_str();
  cmd->add_option("--port", o->port, "server port")->capture_default_str();
  cmd->add_option("--backend", o->backend, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "model name to send (else the first of /v1/models)");
  cmd->add_option("--api-key", o->api_key, "bearer token (else $OPENAI_API_KEY)");
  cmd->add_option("--clients", o->clients, "requests in flight at all times")->capture_default_str();
  cmd->add_option("--duration", o->duration, "seconds during which new requests start")->capture_default_str();
  cmd->add_option("--window", o->window, "seconds: memory is compared between the first and the last window")
      ->capture_default_str();
  cmd->add_option("--disconnect-fraction", o->disconnect_fraction,
                  "share of requests the client cuts after 0 to 8 text chunks")
      ->capture_default_str();
  cmd->add_option("--malformed-fraction", o->malformed_fraction, "share of requests that are malformed")
      ->capture_default_str();
  cmd->add_option("--max-rss-growth", o->max_rss_growth, "most growth of the server's resident memory (0.1: 10%)")
      ->capture_default_str();
  cmd->add_option("--reply-timeout", o->reply_timeout,
                  "seconds a malformed request may wait for its answer, and streams may run past the end")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Advanced");
  cmd->add_option("--random-input-len", o->random_input_len, "most prompt tokens")->capture_default_str();
  cmd->add_option("--random-output-len", o->random_output_len, "most output tokens")->capture_default_str();
  cmd->add_option("--random-range-ratio", o->random_range_ratio, "lengths drawn from [ratio*len, len]")
      ->capture_default_str();
  cmd->add_option("--random-vocab-size", o->random_vocab_size, "random prompt ids are drawn below this")
      ->capture_default_str();
  cmd->add_option("--num-prompts", o->num_prompts, "distinct well-formed requests, sent round-robin")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "send ignore_eos: every request runs to its max_tokens");
  cmd->add_option("--seed", o->seed, "seed of the prompts and of the faults")->capture_default_str();
  cmd->add_option("--json", o->json_path, "write the figures and the memory samples here");
  return [o] { return run_bench_soak(*o); };
}

}  // namespace sy
