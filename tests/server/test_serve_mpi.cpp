// `switchyard serve` over two CPU ranks (--tp 2, started under mpirun by serve itself) serves the same
// greedy text as one rank, streamed or not, and a SIGTERM to rank 0 drains every rank and exits 0.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
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
  std::smatch m;
  const std::string log = server.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(\n\s*0\s+\S+\s+(\d+)\s)"))) << log;
  kill(std::stoi(m[1]), SIGTERM);
  EXPECT_EQ(server.stop(0, 60.0), 0) << server.log();
}

}  // namespace
}  // namespace sy::test
