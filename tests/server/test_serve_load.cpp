// `switchyard serve` under load and at its edges: 256 concurrent streaming clients with bounded server
// memory, a client that disconnects mid-stream (its KV blocks freed), SIGTERM during load (streams end,
// exit 0), greedy text equal to `switchyard generate`, stop strings, n, logprobs and the tokenizer routes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/run_switchyard.h"
#include "server/server_process.h"

namespace sy::test {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string stream_request(const std::string& prompt, int max_tokens) {
  const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                     {"temperature", 0}, {"stream", true},           {"stream_options", {{"include_usage", true}}}};
  return http_request("POST", "/v1/completions", body.dump());
}

// A finished stream: 200, ends with [DONE] after a usage chunk; returns its usage and the last finish_reason.
struct StreamSummary {
  bool ok = false;
  std::string why;
  std::string text;
  int64_t completion_tokens = -1;
  std::string finish_reason;
};

StreamSummary summarize(const std::optional<HttpResponse>& r) {
  StreamSummary s;
  if (!r) return {.why = "no whole response"};
  if (r->status != 200) return {.why = "status " + std::to_string(r->status) + ": " + r->body};
  const auto events = sse_events(r->body);
  if (events.size() < 2 || events.back() != "[DONE]") return {.why = "no [DONE] at the end:\n" + r->body};
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    if (e.contains("usage") && e["choices"].empty()) {
      s.completion_tokens = e["usage"]["completion_tokens"].get<int64_t>();
      continue;
    }
    const json& c = e["choices"][0];
    s.text += c.contains("delta") ? c["delta"].value("content", "") : c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
  }
  s.ok = true;
  return s;
}

std::string fmt_prompt(int round, int i) {
  return "client " + std::to_string(i) + " of round " + std::to_string(round);
}

json post_json(int port, const std::string& path, const json& body) {
  const HttpResponse r = post(port, path, body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body, nullptr, false);
}

TEST(ServeLoad, Concurrent256StreamsWithBoundedMemory) {
  ServerProcess server(tiny_model_args() + " --max-running-requests 256");
  constexpr int kClients = 256, kTokens = 6;
  const auto run_round = [&](int round) {
    std::vector<std::string> requests;
    for (int i = 0; i < kClients; ++i) requests.push_back(stream_request(fmt_prompt(round, i), kTokens));
    Clients clients(server.port(), requests);
    ASSERT_TRUE(clients.pump([&] { return clients.all_finished(); }, 240.0)) << "the clients did not finish";
    int errors = 0;
    for (size_t i = 0; i < clients.size(); ++i) {
      const StreamSummary s = summarize(clients.response(i));
      if (!s.ok || s.completion_tokens != kTokens || s.finish_reason != "length") {
        if (++errors <= 3) ADD_FAILURE() << "client " << i << ": " << s.why << " tokens " << s.completion_tokens;
      }
    }
    EXPECT_EQ(errors, 0);
  };
  run_round(0);  // warms the allocator and the engine's buffers for a full batch
  const long before = server.rss_kib();
  run_round(1);
  const long after = server.rss_kib();
  std::printf("server RSS before %ld KiB, after %ld KiB (256 streaming clients)\n", before, after);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's quarantine holds freed memory on purpose (up to 256 MiB): the figures are only shown.
#else
  EXPECT_LE(static_cast<double>(after), 1.10 * static_cast<double>(before));
  EXPECT_GE(static_cast<double>(after), 0.90 * static_cast<double>(before));
#endif
  const std::string metrics = get(server.port(), "/metrics").body;
  EXPECT_EQ(metric(metrics, "switchyard:num_requests_running{"), 0.0);
  EXPECT_EQ(
      metric(metrics, "switchyard:request_success_total{model_name=\"qwen3_tiny_random\",finished_reason=\"length\"}"),
      2.0 * kClients);  // Every request was scheduled, so each has a queue time, as it has a time to first token.
  EXPECT_EQ(metric(metrics, "switchyard:request_queue_time_seconds_count{"), 2.0 * kClients);
  EXPECT_EQ(metric(metrics, "switchyard:time_to_first_token_seconds_count{"), 2.0 * kClients);
  // Every prompt token and every sampled token but each request's last goes through a forward pass once,
  // in a decode step or a mixed one.
  const double forwarded =
      metric(metrics, "switchyard:step_tokens_total{model_name=\"qwen3_tiny_random\",kind=\"decode\"}") +
      metric(metrics, "switchyard:step_tokens_total{model_name=\"qwen3_tiny_random\",kind=\"mixed\"}");
  EXPECT_EQ(forwarded, metric(metrics, "switchyard:prompt_tokens_total{") +
                           metric(metrics, "switchyard:generation_tokens_total{") - 2.0 * kClients);
  // Six tokens per request: after the prefills, some steps decode only.
  EXPECT_GT(metric(metrics, "switchyard:steps_total{model_name=\"qwen3_tiny_random\",kind=\"decode\"}"), 0.0);
  EXPECT_GT(metric(metrics, "switchyard:step_seconds_total{model_name=\"qwen3_tiny_random\",kind=\"mixed\"}"), 0.0);
}

// The tiny model with a context of 4,096 (it has 256), in a folder removed at the end: a request of 3,000 tokens
// runs for seconds, so it cannot finish "length" before the server sees its client go (200 tokens once did, under
// ASan beside another test).
struct LongContextModel {
  fs::path root = fs::temp_directory_path() / ("sy_serve_long_ctx_" + std::to_string(getpid()));
  std::string args;
  LongContextModel() {
    const fs::path dir = root / "qwen3_tiny_random";  // the folder's name is the served model's
    fs::create_directories(dir);
    std::ifstream in(fs::path(SY_SOURCE_DIR) / "tests/fixtures/text/qwen3_tiny_random/config.json");
    json config = json::parse(in);
    config["max_position_embeddings"] = 4096;
    std::ofstream(dir / "config.json") << config.dump(2);
    args = "--model " + dir.string() + " --random-weights --tokenizer " + SY_SOURCE_DIR +
           "/../shared/data/tokenizers/qwen3";
  }
  ~LongContextModel() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  LongContextModel(const LongContextModel&) = delete;
  LongContextModel& operator=(const LongContextModel&) = delete;
};

TEST(ServeLoad, ClientDisconnectFreesItsKvBlocks) {
  const LongContextModel model;  // outlives the server
  ServerProcess server(model.args);
  Clients clients(server.port(), {stream_request("a long story", 3000)});
  // The first content chunk, then the client goes.
  ASSERT_TRUE(clients.pump([&] { return sse_events(clients.received(0)).size() >= 2; }, 60.0));
  const std::string page = get(server.port(), "/metrics").body;
  EXPECT_EQ(metric(page, "switchyard:num_requests_running{"), 1.0);
  EXPECT_GT(metric(page, "switchyard:kv_cache_usage_perc{"), 0.0);
  clients.drop(0);
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    metrics = get(server.port(), "/metrics").body;
    if (metric(metrics, "switchyard:num_requests_running{") == 0.0 &&
        metric(metrics, "switchyard:kv_cache_usage_perc{") == 0.0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(metrics, "switchyard:num_requests_running{"), 0.0);
  EXPECT_EQ(metric(metrics, "switchyard:kv_cache_usage_perc{"), 0.0);
  EXPECT_EQ(
      metric(metrics, "switchyard:request_success_total{model_name=\"qwen3_tiny_random\",finished_reason=\"abort\"}"),
      1.0);
  EXPECT_NE(server.log().find("finish abort"), std::string::npos);
}

TEST(ServeLoad, SigtermDuringLoadEndsStreamsAndExitsZero) {
  ServerProcess server(tiny_model_args() + " --drain-timeout 1");
  std::vector<std::string> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(stream_request("story " + std::to_string(i), 200));
  Clients clients(server.port(), requests);
  ASSERT_TRUE(clients.pump(
      [&] {
        for (size_t i = 0; i < clients.size(); ++i) {
          if (sse_events(clients.received(i)).empty()) return false;
        }
        return true;
      },
      60.0));
  kill(server.pid(), SIGTERM);
  ASSERT_TRUE(clients.pump([&] { return clients.all_finished(); }, 30.0));
  for (size_t i = 0; i < clients.size(); ++i) {
    const StreamSummary s = summarize(clients.response(i));
    EXPECT_TRUE(s.ok) << i << ": " << s.why;
    EXPECT_TRUE(s.finish_reason == "abort" || s.finish_reason == "length") << s.finish_reason;
  }
  EXPECT_EQ(server.stop(0, 30.0), 0) << server.log();
  // No new connection is taken after the signal.
  EXPECT_LT(connect_to(server.port()), 0);
}

TEST(ServeLoad, GreedyTextEqualsGenerate) {
  ServerProcess server(tiny_model_args());
  const std::string prompt = "The quick brown fox";
  const CommandResult gen =
      run_switchyard("generate " + tiny_model_args() + " --prompt '" + prompt + "' --max-tokens 12", true);
  ASSERT_EQ(gen.code, 0) << gen.out;
  const std::string expected = gen.out.substr(0, gen.out.size() - 1);  // generate ends the text with a newline
  const json c =
      post_json(server.port(), "/v1/completions", {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(c["choices"][0]["text"], expected);

  const CommandResult chat =
      run_switchyard("generate " + tiny_model_args() + " --chat 'Hi there' --max-tokens 10", true);
  ASSERT_EQ(chat.code, 0) << chat.out;
  const json r =
      post_json(server.port(), "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "Hi there"}}}}, {"max_tokens", 10}, {"temperature", 0}});
  EXPECT_EQ(r["choices"][0]["message"]["content"], chat.out.substr(0, chat.out.size() - 1));
}

// A stop string cuts the text right before it (the stop string left out), streamed or not.
TEST(ServeApi, StopStringsNLogprobsAndTokenizerRoutes) {
  ServerProcess server(tiny_model_args());
  const int port = server.port();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = post_json(port, "/v1/completions", base)["choices"][0]["text"];
  // A stop string from the middle of the text, cut at character boundaries.
  const auto boundary = [&](size_t p) {
    while (p < full.size() && (static_cast<unsigned char>(full[p]) & 0xC0) == 0x80) ++p;
    return p;
  };
  const size_t a = boundary(full.size() / 3), b = boundary(a + 2);
  ASSERT_LT(b, full.size()) << full;
  const std::string stop = full.substr(a, b - a);
  json with_stop = base;
  with_stop["stop"] = {stop, "a string that never comes"};
  const json cut = post_json(port, "/v1/completions", with_stop);
  EXPECT_EQ(cut["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(cut["choices"][0]["stop_reason"], stop);
  with_stop["stream"] = true;
  const StreamSummary streamed = summarize(post(port, "/v1/completions", with_stop.dump()));
  ASSERT_TRUE(streamed.ok) << streamed.why;
  EXPECT_EQ(streamed.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(streamed.finish_reason, "stop");

  // n choices, each its own sequence; usage counts the prompt once.
  const json n =
      post_json(port, "/v1/completions",
                {{"prompt", {"a b", "c d"}}, {"max_tokens", 3}, {"n", 2}, {"seed", 4}, {"ignore_eos", true}});
  ASSERT_EQ(n["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n["choices"][i]["index"], i);
  EXPECT_EQ(n["usage"]["completion_tokens"], 12);

  // Completions logprobs: one entry per token, k alternatives, offsets into the text.
  const json lp =
      post_json(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 5}, {"logprobs", 2}, {"ignore_eos", true}});
  const json& l = lp["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 5u);
  EXPECT_EQ(l["token_logprobs"].size(), 5u);
  EXPECT_EQ(l["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(l["text_offset"][0], 0);
  EXPECT_LE(l["token_logprobs"][0].get<double>(), 0.0);
  // Chat logprobs: content entries with bytes and top_logprobs.
  const json cl = post_json(port, "/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                             {"max_tokens", 4},
                             {"logprobs", true},
                             {"top_logprobs", 3},
                             {"ignore_eos", true}});
  const json& content = cl["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0]["bytes"].is_array());

  const json t = post_json(port, "/tokenize", {{"prompt", "Hello world"}});
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(post_json(port, "/detokenize", {{"tokens", t["tokens"]}})["prompt"], "Hello world");
  const json models = json::parse(get(port, "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "qwen3_tiny_random");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
}

}  // namespace
}  // namespace sy::test

namespace sy::test {
namespace {

// The prefix cache through the server: the same prompt twice gives the same greedy text, and the second
// response's usage.prompt_tokens_details.cached_tokens (as OpenAI reports prompt caching) counts the whole
// 16-token blocks of its prompt but the last token; /metrics counts the queries and hits. With
// --no-prefix-cache nothing is cached.
TEST(ServeApi, PrefixCacheReportsCachedTokens) {
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
  const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "cache on" : "--no-prefix-cache");
    ServerProcess server(tiny_model_args() + (cache ? "" : " --no-prefix-cache"));
    const int port = server.port();
    const json first = post_json(port, "/v1/completions", body);
    const json second = post_json(port, "/v1/completions", body);
    const int64_t len = first["usage"]["prompt_tokens"].get<int64_t>();
    ASSERT_GT(len, 64);
    const int64_t whole_blocks = (len - 1) / 16 * 16;  // the last prompt token is always computed
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], cache ? whole_blocks : 0);
    EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
    const std::string metrics = get(port, "/metrics").body;
    EXPECT_EQ(metric(metrics, "switchyard:prefix_cache_queries_total{"), cache ? 2.0 * static_cast<double>(len) : 0.0);
    EXPECT_EQ(metric(metrics, "switchyard:prefix_cache_hits_total{"), cache ? static_cast<double>(whole_blocks) : 0.0);
  }
}

}  // namespace
}  // namespace sy::test
