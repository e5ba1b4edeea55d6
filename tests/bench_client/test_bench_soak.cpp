// `switchyard bench soak` as a user runs it: against `switchyard serve` on the bundled tiny model (1,024
// clients for 20 s with client disconnects and malformed requests mixed in: no well-formed request fails,
// every malformed one gets its 4xx, memory flat, the server still serving after), and against the fake
// server, which answers malformed requests as if they were fine and fails some streams: the soak fails.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "bench_client/fake_openai_server.h"
#include "bench_client/soak.h"
#include "common/run_switchyard.h"
#include "server/server_process.h"

namespace sy::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path json_path() {
  return fs::temp_directory_path() /
         ("bench-soak-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
          std::to_string(getpid()) + ".json");
}

json read_json(const fs::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  json j = json::parse(f, nullptr, false);
  fs::remove(path);
  return j;
}

TEST(BenchSoak, ThousandClientsWithFaultsAgainstSwitchyardServe) {
  ServerProcess server(tiny_model_args() + " --max-running-requests 256");
  const fs::path out = json_path();
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's quarantine holds freed memory on purpose (up to 256 MiB): memory is only shown.
  const std::string rss_bound = " --max-rss-growth 100";
#else
  const std::string rss_bound;
#endif
  const CommandResult r =
      run_switchyard("bench soak --base-url http://127.0.0.1:" + std::to_string(server.port()) +
                     " --clients 1024 --duration 20 --window 5 --disconnect-fraction 0.1 --malformed-fraction 0.1"
                     " --random-input-len 8 --random-output-len 6 --random-vocab-size 150000 --json " +
                     out.string() + rss_bound);
  EXPECT_EQ(r.code, 0) << r.out << server.log().substr(0, 4000);
  const json j = read_json(out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["failed"], 0) << r.out;
  EXPECT_EQ(j["malformed_wrong"], 0) << r.out;
  EXPECT_GT(j["completed"].get<int64_t>(), 1024) << r.out;
  // (A cut drawn past a stream's last chunk leaves it complete.)
  EXPECT_GT(j["cut_by_client"].get<int64_t>(), 50) << r.out;
  // Every kind of malformed request was sent at least once and answered as it must be.
  std::set<std::string> sent;
  for (const auto& [name, n] : j["malformed_by_case"].items()) {
    if (n.get<int64_t>() > 0) sent.insert(name);
  }
  const auto cases = bench::malformed_cases(bench::parse_base_url("http://127.0.0.1:1"), "/v1/completions", "m");
  EXPECT_EQ(sent.size(), cases.size()) << j["malformed_by_case"].dump();
  // Memory was sampled through the run, from the server's own gauges.
  EXPECT_GE(j["samples_t_rss_fds"].size(), 15u);
  EXPECT_GT(j["first_window_rss_bytes"].get<double>(), 0.0);
  std::printf("soak: %ld completed, %ld cut, %ld malformed; RSS %.1f -> %.1f MiB (%+.1f%%), open files %.0f -> %.0f\n",
              static_cast<long>(j["completed"].get<int64_t>()), static_cast<long>(j["cut_by_client"].get<int64_t>()),
              static_cast<long>(j["malformed"].get<int64_t>()), j["first_window_rss_bytes"].get<double>() / (1 << 20),
              j["last_window_rss_bytes"].get<double>() / (1 << 20), 100 * j["rss_growth"].get<double>(),
              j["baseline_open_fds"].get<double>(), j["after_open_fds"].get<double>());
  // The soak's 1,024 connections are closed again.
  EXPECT_GT(j["baseline_open_fds"].get<double>(), 2.0);
  EXPECT_LE(j["after_open_fds"].get<double>(), j["baseline_open_fds"].get<double>() + 16.0);

  // The server still serves, and its resident-memory gauge is what the kernel says.
  const HttpResponse health = get(server.port(), "/health");
  EXPECT_EQ(health.status, 200);
  const std::string page = get(server.port(), "/metrics").body;
  const double gauge = metric(page, "process_resident_memory_bytes");
  const double kernel = 1024.0 * static_cast<double>(server.rss_kib());
  EXPECT_GT(gauge, 0.8 * kernel);
  EXPECT_LT(gauge, 1.25 * kernel);
  EXPECT_GT(metric(page, "process_open_fds"), 2.0);
  EXPECT_EQ(server.stop(SIGTERM, 30.0), 0) << server.log().substr(0, 4000);
}

TEST(BenchSoak, WrongAnswersFailuresAndNoMemoryGaugeFailTheSoak) {
  // The fake server streams most malformed bodies as if they were fine, fails every 7th completion, and
  // exports no process gauges.
  FakeOpenAiServer fake({.fail_every = 7});
  const fs::path out = json_path();
  const CommandResult r =
      run_switchyard("bench soak --base-url http://127.0.0.1:" + std::to_string(fake.port()) +
                     " --clients 16 --duration 2 --window 1 --reply-timeout 3 --json " + out.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("result: FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory was not measured"), std::string::npos) << r.out;
  const json j = read_json(out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_GT(j["failed"].get<int64_t>(), 0) << r.out;
  EXPECT_GT(j["malformed_wrong"].get<int64_t>(), 0) << r.out;
  EXPECT_EQ(j["passed"], false);
}

TEST(BenchSoak, BadSettingsSayWhat) {
  // --model given: nothing is asked of the server before the settings are checked.
  const std::string base = "bench soak --port 1 --model m ";
  for (const auto& [flags, named] : std::vector<std::pair<std::string, std::string>>{
           {"--clients 0", "--clients 0"},
           {"--clients 1000000", "--clients 1000000"},
           {"--duration 1e300", "--duration 1e+300"},
           {"--duration 10 --window 20", "--window 20"},
           {"--disconnect-fraction 0.7 --malformed-fraction 0.7", "summing to at most 1"},
           {"--max-rss-growth -1", "--max-rss-growth -1"}}) {
    const CommandResult r = run_switchyard(base + flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.out;
    EXPECT_NE(r.out.find(named), std::string::npos) << flags << ": " << r.out;
  }
}

}  // namespace
}  // namespace sy::test
