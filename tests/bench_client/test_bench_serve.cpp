// `switchyard bench serve` as a user runs it: against the fake streaming server (counts, failures, sweeps,
// chat prompts built through /tokenize, ShareGPT files, 1,024 streams) and against `switchyard serve` on
// the bundled tiny model.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_client/fake_openai_server.h"
#include "server/server_process.h"

namespace sy::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct BenchRun {
  int rc = -1;
  std::string output;  // stdout and stderr
};

BenchRun bench_serve(const std::string& args) {
  const std::string cmd = std::string(SY_BINARY) + " bench serve " + args + " 2>&1";
  BenchRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

json read_json(const fs::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

class BenchServe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bench-serve-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string url(int port) { return " --base-url http://127.0.0.1:" + std::to_string(port); }

TEST_F(BenchServe, CompletionsAgainstFakeServerCountsEverything) {
  FakeOpenAiServer server;
  const BenchRun r = bench_serve(url(server.port()) +
                                 " --dataset random --num-prompts 50 --random-input-len 32 --random-output-len 16"
                                 " --random-range-ratio 1 --max-concurrency 8 --json " +
                                 out("run.json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("Output token throughput (tok/s):"), std::string::npos) << r.output;
  const json j = read_json(out("run.json"));
  for (const char* key : {"backend",
                          "dataset_name",
                          "request_rate",
                          "max_concurrency",
                          "random_input_len",
                          "random_output_len",
                          "random_range_ratio",
                          "duration",
                          "completed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "input_throughput",
                          "output_throughput",
                          "total_throughput",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "p90_ttft_ms",
                          "p99_ttft_ms",
                          "mean_tpot_ms",
                          "median_tpot_ms",
                          "p90_tpot_ms",
                          "p99_tpot_ms",
                          "mean_itl_ms",
                          "median_itl_ms",
                          "p90_itl_ms",
                          "p95_itl_ms",
                          "p99_itl_ms",
                          "mean_e2e_latency_ms",
                          "median_e2e_latency_ms",
                          "p90_e2e_latency_ms",
                          "p99_e2e_latency_ms",
                          "concurrency",
                          "std_ttft_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["completed"], 50);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_input_tokens"], 50 * 32);
  EXPECT_EQ(j["total_output_tokens"], 50 * 16);
  EXPECT_EQ(j["max_concurrency"], 8);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_GT(j["output_throughput"].get<double>(), 0.0);
  EXPECT_EQ(server.completion_requests(), 51);  // one warmup request
}

TEST_F(BenchServe, FailedAndCutRequestsAreCountedAsFailed) {
  // Requests 0..69: every 5th fails with 500 (14), every 7th of the others is cut halfway (10 - 2 = 8).
  FakeOpenAiServer server({.fail_every = 5, .cut_every = 7});
  const BenchRun r = bench_serve(url(server.port()) +
                                 " --num-prompts 70 --random-input-len 8 --random-output-len 10 --random-range-ratio 1"
                                 " --max-concurrency 1 --warmup-requests 0 --json " +
                                 out("run.json"));
  EXPECT_EQ(r.rc, 1) << r.output;  // a run with failures exits 1
  const json j = read_json(out("run.json"));
  EXPECT_EQ(j["completed"], 48);
  EXPECT_EQ(j["failed"], 22);
  EXPECT_EQ(j["total_output_tokens"], 48 * 10);
  EXPECT_NE(r.output.find("22 of 70 requests failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("HTTP 500"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stream cut after 5 chunks"), std::string::npos) << r.output;
}

// A stream whose tokens decode to no text has no text chunk; the server's usage still says it generated,
// so it counts as completed (its first text came at the end), and without usage it cannot be told apart
// from a stream that produced nothing, so it fails.
TEST_F(BenchServe, StreamsWithoutTextCountByTheirUsage) {
  FakeOpenAiServer server({.silent_every = 4});
  const std::string args = url(server.port()) +
                           " --num-prompts 20 --random-input-len 8 --random-output-len 10 --random-range-ratio 1"
                           " --max-concurrency 1 --warmup-requests 0 --json ";
  const BenchRun with_usage = bench_serve(args + out("usage.json"));
  ASSERT_EQ(with_usage.rc, 0) << with_usage.output;
  const json a = read_json(out("usage.json"));
  EXPECT_EQ(a["completed"], 20);
  EXPECT_EQ(a["total_output_tokens"], 20 * 10);
  const BenchRun without = bench_serve(args + out("no-usage.json") + " --no-stream-usage");
  EXPECT_EQ(without.rc, 1) << without.output;
  const json b = read_json(out("no-usage.json"));
  EXPECT_EQ(b["completed"], 15);
  EXPECT_EQ(b["failed"], 5);
  EXPECT_NE(without.output.find("the stream ended without any text"), std::string::npos) << without.output;
}

TEST_F(BenchServe, SweepWritesOneFilePerLevelAndASummary) {
  FakeOpenAiServer server;
  const BenchRun r = bench_serve(url(server.port()) +
                                 " --num-prompts 4,20 --random-input-len 8 --random-output-len 6 --random-range-ratio 1"
                                 " --max-concurrency 1,10 --request-rate 2000 --seed 3 --label fake --json " +
                                 out("sweep.json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json a = read_json(out("sweep-c1.json"));
  const json b = read_json(out("sweep-c10.json"));
  EXPECT_EQ(a["completed"], 4);
  EXPECT_EQ(a["max_concurrency"], 1);
  EXPECT_EQ(b["completed"], 20);
  EXPECT_EQ(b["total_output_tokens"], 120);
  EXPECT_EQ(b["request_rate"], 2000.0);
  EXPECT_EQ(b["label"], "fake");
  EXPECT_NE(r.output.find("output tok/s"), std::string::npos) << r.output;
}

TEST_F(BenchServe, ChatPromptsAreBuiltThroughTokenize) {
  FakeOpenAiServer server;
  const BenchRun r = bench_serve(url(server.port()) +
                                 " --backend chat --num-prompts 12 --random-input-len 20 --random-output-len 5"
                                 " --random-range-ratio 0.5 --no-stream-usage --json " +
                                 out("chat.json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = read_json(out("chat.json"));
  EXPECT_EQ(j["backend"], "chat");
  EXPECT_EQ(j["completed"], 12);
  // Without usage the output is counted in chunks; the fake tokenizer keeps every length as drawn.
  EXPECT_GE(j["total_output_tokens"].get<int>(), 12 * 2);
  EXPECT_LE(j["total_output_tokens"].get<int>(), 12 * 5);
  EXPECT_GE(j["total_input_tokens"].get<int>(), 12 * 10);
  EXPECT_LE(j["total_input_tokens"].get<int>(), 12 * 20);
}

TEST_F(BenchServe, SharegptFile) {
  json convs = json::array();
  for (int i = 0; i < 6; ++i) {
    convs.push_back({{"id", std::to_string(i)},
                     {"conversations",
                      {{{"from", "human"}, {"value", "w1 w2 w3 w" + std::to_string(i)}},
                       {{"from", "gpt"}, {"value", "w5 w6 w7"}}}}});
  }
  convs.push_back({{"id", "short"}, {"conversations", {{{"from", "human"}, {"value", "w1 w2"}}}}});
  std::ofstream(out("sharegpt.json")) << convs.dump();
  FakeOpenAiServer server;
  BenchRun r = bench_serve(url(server.port()) + " --dataset sharegpt " + out("sharegpt.json") +
                           " --num-prompts 5 --json " + out("a.json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  json j = read_json(out("a.json"));
  EXPECT_EQ(j["completed"], 5);
  EXPECT_EQ(j["dataset_name"], "sharegpt");
  EXPECT_EQ(j["total_input_tokens"], 5 * 4);
  EXPECT_EQ(j["total_output_tokens"], 5 * 3);  // the second turn's tokens
  r = bench_serve(url(server.port()) + " --dataset sharegpt " + out("sharegpt.json") +
                  " --num-prompts 5 --sharegpt-output-len 9 --json " + out("b.json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(read_json(out("b.json"))["total_output_tokens"], 5 * 9);
  r = bench_serve(url(server.port()) + " --dataset sharegpt " + out("sharegpt.json") + " --num-prompts 7");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("6 usable conversations"), std::string::npos) << r.output;
}

TEST_F(BenchServe, BadFlagsAndUnreachableServerSayWhat) {
  BenchRun r = bench_serve("--base-url https://example.org");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("https is not spoken"), std::string::npos) << r.output;
  r = bench_serve("--base-url http://127.0.0.1:1 --num-prompts 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("is the server running there?"), std::string::npos) << r.output;
  FakeOpenAiServer server;
  r = bench_serve(url(server.port()) + " --max-concurrency 1,2 --num-prompts 1,2,3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("one per level"), std::string::npos) << r.output;
}

double children_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// 1,024 streams of 128 chunks on one client thread; the throughput and the client's CPU time per chunk are
// printed, not asserted (timings are benchmarks: docs/perf-notes.md records them).
TEST_F(BenchServe, ThousandStreamsAgainstFakeServer) {
  FakeOpenAiServer server;
  const double cpu_before = children_cpu_seconds();
  const BenchRun r = bench_serve(url(server.port()) +
                                 " --num-prompts 1024 --max-concurrency 1024 --random-input-len 16"
                                 " --random-output-len 128 --random-range-ratio 1 --json " +
                                 out("k.json"));
  const double client_cpu = children_cpu_seconds() - cpu_before;
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = read_json(out("k.json"));
  EXPECT_EQ(j["completed"], 1024);
  EXPECT_EQ(j["total_output_tokens"], 1024 * 128);
  EXPECT_GT(j["concurrency"].get<double>(), 1.0);
  std::printf(
      "1024 streams x 128 chunks: %.0f output tok/s, duration %.2f s, median ITL %.3f ms; client CPU %.2f s "
      "(user + system, warmup and start included) = %.1f us per chunk\n",
      j["output_throughput"].get<double>(), j["duration"].get<double>(), j["median_itl_ms"].get<double>(), client_cpu,
      client_cpu / (1024.0 * 128.0) * 1e6);
}

TEST_F(BenchServe, AgainstSwitchyardServeOnTinyModel) {
  ServerProcess server(tiny_model_args());
  BenchRun r = bench_serve(url(server.port()) +
                           " --num-prompts 8 --random-input-len 16 --random-output-len 8 --random-range-ratio 1"
                           " --max-concurrency 4 --ignore-eos --json " +
                           out("c.json"));
  ASSERT_EQ(r.rc, 0) << r.output << server.log();
  json j = read_json(out("c.json"));
  EXPECT_EQ(j["completed"], 8);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_input_tokens"], 8 * 16);
  EXPECT_EQ(j["total_output_tokens"], 8 * 8);  // from the server's usage
  EXPECT_GT(j["median_tpot_ms"].get<double>(), 0.0);
  r = bench_serve(url(server.port()) +
                  " --backend chat --num-prompts 4 --random-input-len 12 --random-output-len 6 --random-range-ratio 1"
                  " --ignore-eos --warmup-requests 0 --json " +
                  out("chat.json"));
  ASSERT_EQ(r.rc, 0) << r.output << server.log();
  j = read_json(out("chat.json"));
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["total_output_tokens"], 4 * 6);
  EXPECT_EQ(j["total_input_tokens"], 4 * 12);  // text re-encoded by the server's tokenizer to the drawn length
}

}  // namespace
}  // namespace sy::test
