// `switchyard serve` over two CPU ranks (--tp 2, started under mpirun by serve itself) serves the same
// greedy text as one rank, streamed or not, and a SIGTERM to rank 0 drains every rank and exits 0; a rank
// killed with SIGKILL while a stream is in flight ends the server, with a message naming it, within 10 s.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "server/server_process.h"

namespace sy::test {
namespace {

using json = nlohmann::json;

// The fixture with real weights (vocabulary of 384, so prompts are token ids; Qwen3's tokenizer decodes
// them), so that every layout computes the same model.
std::string fixture_args() {
  return std::string("--model ") + SY_SOURCE_DIR + "/tests/fixtures/qwen3_moe_base --tokenizer " + SY_SOURCE_DIR +
         "/../shared/data/tokenizers/qwen3";
}

std::vector<std::string> greedy_texts(int port) {
  std::vector<std::string> texts;
  for (const json& prompt : {json{1, 2, 3, 4}, json{7, 100, 42}, json{300, 5, 6, 7, 8, 9}}) {
    for (bool stream : {false, true}) {
      json body = {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
      if (stream) body["stream"] = true;
      const HttpResponse r = post(port, "/v1/completions", body.dump());
      EXPECT_EQ(r.status, 200) << r.body;
      std::string text;
      if (!stream) {
        text = json::parse(r.body)["choices"][0]["text"];
      } else {
        for (const std::string& e : sse_events(r.body)) {
          if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
        }
      }
      texts.push_back(text);
    }
  }
  return texts;
}

// The pid the layout table shows for `rank` (its row: the rank, its host, its pid), or -1.
pid_t rank_pid(const std::string& log, int rank) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("\\n\\s*" + std::to_string(rank) + "\\s+\\S+\\s+(\\d+)\\s"))) return -1;
  return std::stoi(m[1]);
}

// Whether `pid` exists and is not a zombie (the state in /proc/PID/stat, after the command's parenthesis).
bool running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(ServeMpi, TwoRanksServeTheTextOfOne) {
  std::vector<std::string> one;
  {
    ServerProcess server(fixture_args());
    one = greedy_texts(server.port());
    for (const auto& t : one) EXPECT_FALSE(t.empty());
    EXPECT_EQ(server.stop(SIGTERM, 30.0), 0);
  }
  ServerProcess server(fixture_args() + " --tp 2");
  EXPECT_EQ(greedy_texts(server.port()), one);
  // mpirun reports a signal it gets as a failure; the server's own stop is a signal to rank 0, whose pid
  // the layout table shows.
  const pid_t rank0 = rank_pid(server.log(), 0);
  ASSERT_GT(rank0, 0) << server.log();
  kill(rank0, SIGTERM);
  EXPECT_EQ(server.stop(0, 60.0), 0) << server.log();
}

TEST(ServeMpi, KillingARankEndsTheServerWithinTenSeconds) {
  ServerProcess server(fixture_args() + " --tp 2");
  const pid_t rank0 = rank_pid(server.log(), 0);
  const pid_t victim = rank_pid(server.log(), 1);
  ASSERT_GT(rank0, 0) << server.log();
  ASSERT_GT(victim, 0) << server.log();
  // Streams as long as the fixture's context allows, killed at their first token.
  const json body = {{"prompt", json{1, 2, 3}}, {"max_tokens", 250}, {"ignore_eos", true}, {"stream", true}};
  Clients clients(server.port(), std::vector<std::string>(16, http_request("POST", "/v1/completions", body.dump())));
  ASSERT_TRUE(clients.pump([&] { return sse_events(clients.received(0)).size() >= 2; }, 60.0)) << server.log();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  const int code = server.stop(0, 10.0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 10.0) << "the server still runs 10 s after rank 1 was killed:\n" << server.log();
  EXPECT_NE(code, 0) << server.log();
  EXPECT_NE(server.log().find("process rank 1 "), std::string::npos) << server.log();
  while (running(rank0) && std::chrono::steady_clock::now() - killed < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(running(rank0)) << "rank 0 (pid " << rank0 << ") still runs 10 s after rank 1 was killed";
  // The streams in flight end (their connections close) rather than hang.
  EXPECT_TRUE(clients.pump([&] { return clients.all_finished(); }, 5.0));
  std::printf("rank 1 of 2 killed during a stream: the server exited with code %d after %.2f s\n", code, seconds);
}

}  // namespace
}  // namespace sy::test
