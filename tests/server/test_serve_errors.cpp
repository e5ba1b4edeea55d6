// `switchyard serve` refuses bad requests, each with its status and an OpenAI error body, and keeps
// serving: a corpus of malformed, mistyped, oversized, unauthorised, half-sent and dropped requests, then
// a good one.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/fixture.h"
#include "common/poisoned_checkpoint.h"
#include "server/server_process.h"

namespace sy::test {
namespace {

using json = nlohmann::json;

const std::string kKey = "Authorization: Bearer sk-test\r\n";

struct BadRequest {
  std::string name;
  std::string raw;  // the whole request as sent
  int status;
};

// "1,1,...,1": a prompt of n token ids.
std::string ones(int n) {
  std::string s = "1";
  for (int i = 1; i < n; ++i) s += ",1";
  return s;
}

std::string completion(const std::string& body) { return http_request("POST", "/v1/completions", body, kKey); }
std::string chat(const std::string& body) { return http_request("POST", "/v1/chat/completions", body, kKey); }

std::vector<BadRequest> corpus() {
  std::vector<BadRequest> c = {
      // Authentication: /v1 and the tokenizer routes need the key.
      {"no key", http_request("POST", "/v1/completions", R"({"prompt": "hi"})"), 401},
      {"wrong key", http_request("POST", "/v1/completions", R"({"prompt": "hi"})", "Authorization: Bearer nope\r\n"),
       401},
      {"basic scheme",
       http_request("POST", "/v1/completions", R"({"prompt": "hi"})", "Authorization: Basic sk-test\r\n"), 401},
      {"chat without key", http_request("POST", "/v1/chat/completions", R"({"messages": []})"), 401},
      {"models without key", http_request("GET", "/v1/models", ""), 401},
      {"tokenize without key", http_request("POST", "/tokenize", R"({"prompt": "a"})"), 401},
      // Routes and methods.
      {"unknown route", http_request("GET", "/nope", "", kKey), 404},
      {"unknown /v1 route", http_request("POST", "/v1/nothing", "{}", kKey), 404},
      {"root", http_request("GET", "/", "", kKey), 404},
      {"engines route", http_request("GET", "/v1/engines", "", kKey), 404},
      {"GET completions", http_request("GET", "/v1/completions", "", kKey), 405},
      {"PUT chat", http_request("PUT", "/v1/chat/completions", "{}", kKey), 405},
      {"DELETE models", http_request("DELETE", "/v1/models", "", kKey), 405},
      {"POST health", http_request("POST", "/health", "", kKey), 405},
      {"POST metrics", http_request("POST", "/metrics", "", kKey), 405},
      {"GET tokenize", http_request("GET", "/tokenize", "", kKey), 405},
      // Bodies that are not a JSON object.
      {"truncated JSON", completion("{"), 400},
      {"empty body", completion(""), 400},
      {"null body", completion("null"), 400},
      {"array body", completion("[]"), 400},
      {"string body", completion("\"prompt\""), 400},
      {"trailing comma", completion(R"({"prompt": "x",})"), 400},
      {"invalid UTF-8", completion("{\"prompt\": \"\xff\xfe\"}"), 400},
      {"single quotes", completion("{'prompt': 'x'}"), 400},
      // Completions: missing, empty and mistyped fields.
      {"missing prompt", completion("{}"), 400},
      {"prompt number", completion(R"({"prompt": 5})"), 400},
      {"prompt object", completion(R"({"prompt": {"text": "x"}})"), 400},
      {"empty prompt", completion(R"({"prompt": ""})"), 400},
      {"empty prompt list", completion(R"({"prompt": []})"), 400},
      {"empty id list", completion(R"({"prompt": [[]]})"), 400},
      {"one empty string", completion(R"({"prompt": ["a", ""]})"), 400},
      {"mixed prompt", completion(R"({"prompt": [1, "a"]})"), 400},
      {"negative id", completion(R"({"prompt": [-1]})"), 400},
      {"id beyond vocab", completion(R"({"prompt": [999999]})"), 400},
      {"max_tokens 0", completion(R"({"prompt": "x", "max_tokens": 0})"), 400},
      {"max_tokens negative", completion(R"({"prompt": "x", "max_tokens": -5})"), 400},
      {"max_tokens string", completion(R"({"prompt": "x", "max_tokens": "10"})"), 400},
      {"max_tokens fraction", completion(R"({"prompt": "x", "max_tokens": 1.5})"), 400},
      {"max_tokens too large", completion(R"({"prompt": "x", "max_tokens": 100000})"), 400},
      {"prompt too long", completion(R"({"prompt": [)" + ones(300) + "]}"), 400},
      {"prompt fills the context", completion(R"({"prompt": [)" + ones(256) + "]}"), 400},
      {"temperature string", completion(R"({"prompt": "x", "temperature": "hot"})"), 400},
      {"temperature negative", completion(R"({"prompt": "x", "temperature": -1})"), 400},
      {"top_p zero", completion(R"({"prompt": "x", "top_p": 0})"), 400},
      {"top_p above one", completion(R"({"prompt": "x", "top_p": 1.5})"), 400},
      {"top_k -2", completion(R"({"prompt": "x", "top_k": -2})"), 400},
      {"top_k bool", completion(R"({"prompt": "x", "top_k": true})"), 400},
      {"min_p 2", completion(R"({"prompt": "x", "min_p": 2})"), 400},
      {"n 0", completion(R"({"prompt": "x", "n": 0})"), 400},
      {"n 1000", completion(R"({"prompt": "x", "n": 1000})"), 400},
      {"stop number", completion(R"({"prompt": "x", "stop": 3})"), 400},
      {"stop list with number", completion(R"({"prompt": "x", "stop": ["a", 1]})"), 400},
      {"stream string", completion(R"({"prompt": "x", "stream": "yes"})"), 400},
      {"stream_options without stream", completion(R"({"prompt": "x", "stream_options": {"include_usage": true}})"),
       400},
      {"stream_options list", completion(R"({"prompt": "x", "stream": true, "stream_options": []})"), 400},
      {"logprobs 50", completion(R"({"prompt": "x", "logprobs": 50})"), 400},
      {"logprobs bool", completion(R"({"prompt": "x", "logprobs": true})"), 400},
      {"seed string", completion(R"({"prompt": "x", "seed": "s"})"), 400},
      {"stop_token_ids fraction", completion(R"({"prompt": "x", "stop_token_ids": [1.5]})"), 400},
      {"stop_token_ids not a list", completion(R"({"prompt": "x", "stop_token_ids": 5})"), 400},
      {"model number", completion(R"({"prompt": "x", "model": 3})"), 400},
      {"unknown model", completion(R"({"prompt": "x", "model": "gpt-4"})"), 404},
      {"echo", completion(R"({"prompt": "x", "echo": true})"), 400},
      {"ignore_eos string", completion(R"({"prompt": "x", "ignore_eos": "true"})"), 400},
      // Chat.
      {"missing messages", chat("{}"), 400},
      {"empty messages", chat(R"({"messages": []})"), 400},
      {"messages string", chat(R"({"messages": "hi"})"), 400},
      {"message without role", chat(R"({"messages": [{"content": "x"}]})"), 400},
      {"role number", chat(R"({"messages": [{"role": 5, "content": "x"}]})"), 400},
      {"content number", chat(R"({"messages": [{"role": "user", "content": 5}]})"), 400},
      {"image part", chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"), 400},
      {"top_logprobs without logprobs", chat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
       400},
      {"top_logprobs 50",
       chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 50})"), 400},
      {"chat_template_kwargs list",
       chat(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})"), 400},
      {"tools string", chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": "f"})"), 400},
      {"max_completion_tokens 0",
       chat(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})"), 400},
      {"chat max_tokens too large", chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 250})"),
       400},
      {"template fails: null system content",
       chat(R"({"messages": [{"role": "system", "content": null}, {"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f"}}]})"),
       400},
      {"template fails: tool_calls not a list",
       chat(
           R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": 5}]})"),
       400},
      // Tokenizer routes.
      {"tokenize without prompt", http_request("POST", "/tokenize", "{}", kKey), 400},
      {"tokenize prompt number", http_request("POST", "/tokenize", R"({"prompt": 1})", kKey), 400},
      {"detokenize string", http_request("POST", "/detokenize", R"({"tokens": "x"})", kKey), 400},
      {"detokenize negative", http_request("POST", "/detokenize", R"({"tokens": [-1]})", kKey), 400},
      {"detokenize beyond vocab", http_request("POST", "/detokenize", R"({"tokens": [99999999]})", kKey), 400},
      // The transport: malformed HTTP, oversized header and body.
      {"garbage request line", "GARBAGE\r\n\r\n", 400},
      {"bad content-length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400},
      {"bad chunk size", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"huge header", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(70000, 'a') + "\r\n\r\n", 431},
      {"declared body over the limit",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 17000000\r\n" + kKey + "\r\n{", 413},
      {"body over the limit", completion(R"({"prompt": ")" + std::string(17 << 20, 'a') + "\"}"), 413},
      // Chunk lines and trailers, which Beast's header limit does not bound: refused once a connection holds
      // more than its buffer limit, not buffered until the read timeout (found by reading the fuzz harness).
      {"endless chunk extension",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + kKey + "\r\n5;" +
           std::string(3 << 20, 'a'),
       431},
      {"endless trailer",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + kKey +
           "\r\n0\r\nX-T: " + std::string(3 << 20, 'a'),
       431},
  };
  return c;
}

TEST(ServeErrors, BadRequestCorpusThenAGoodRequest) {
  ServerProcess server(tiny_model_args() + " --api-key sk-test --read-timeout 1");
  const std::vector<BadRequest> bad = corpus();
  ASSERT_GE(bad.size(), 60u);
  for (const BadRequest& b : bad) {
    const HttpResponse r = round_trip(server.port(), b.raw);
    EXPECT_EQ(r.status, b.status) << b.name << ": " << r.body;
    // Every refusal is an OpenAI error body.
    const json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("error")) << b.name << ": " << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << b.name;
    EXPECT_TRUE(body["error"].contains("type") && body["error"].contains("param") && body["error"].contains("code"))
        << b.name;
  }
  // Half-sent requests (a header cut short, a body shorter than its length) time out with 408.
  const std::string half_body =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n" + kKey + "\r\n{\"prompt\":";
  EXPECT_EQ(round_trip(server.port(), half_body, 10.0).status, 408);
  EXPECT_EQ(round_trip(server.port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le", 10.0).status, 408);
  // A flood of connections opened and dropped: some silent, some mid-request.
  for (int i = 0; i < 400; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    if (i % 2 == 1) send_all(fd, completion(R"({"prompt": "flood", "max_tokens": 4})").substr(0, 40 + i % 60));
    close(fd);
  }
  const HttpResponse good =
      round_trip(server.port(), completion(R"({"prompt": "Hello", "max_tokens": 4, "temperature": 0})"));
  ASSERT_EQ(good.status, 200) << good.body;
  const json j = json::parse(good.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(get(server.port(), "/health").status, 200);
  std::printf("bad-request corpus: %zu requests + 2 half-sent + 400 dropped connections\n", bad.size());
}

TEST(ServeErrors, PromptTooLongNamesBothNumbers) {
  ServerProcess server(tiny_model_args());
  const HttpResponse r =
      post(server.port(), "/v1/completions", R"({"prompt": [)" + ones(250) + R"(], "max_tokens": 10})");
  ASSERT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["message"],
            "This model's maximum context length is 256 tokens. However, you requested 260 tokens (250 in the "
            "messages, 10 in the completion). Please reduce the length of the messages or completion.");
}

TEST(ServeErrors, FullQueueIs503) {
  ServerProcess server(tiny_model_args() + " --max-running-requests 1 --max-queued-requests 1");
  const std::string stream = http_request("POST", "/v1/completions",
                                          R"({"prompt": "x", "max_tokens": 250, "ignore_eos": true, "stream": true})");
  Clients running(server.port(), {stream});
  ASSERT_TRUE(running.pump([&] { return !sse_events(running.received(0)).empty(); }, 60.0));
  // A burst of requests arriving together: one sequence slot and one queue place exist, so all but
  // (at most) a few are refused however fast or slow the machine is; no fixed sleep decides it.
  constexpr size_t kBurst = 24;
  const std::vector<std::string> burst(
      kBurst, http_request("POST", "/v1/completions", R"({"prompt": "y", "max_tokens": 16, "ignore_eos": true})"));
  Clients clients(server.port(), burst);
  ASSERT_TRUE(clients.pump([&] { return clients.all_finished(); }, 120.0));
  size_t ok = 0, refused = 0;
  for (size_t i = 0; i < kBurst; ++i) {
    const std::optional<HttpResponse> r = clients.response(i);
    ASSERT_TRUE(r.has_value()) << "request " << i << " got no response: " << clients.received(i);
    if (r->status == 200) {
      ++ok;
      EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 16);
    } else {
      ASSERT_EQ(r->status, 503) << r->body;
      ++refused;
      EXPECT_NE(r->body.find("--max-queued-requests"), std::string::npos) << r->body;
      EXPECT_EQ(json::parse(r->body)["error"]["code"], 503) << r->body;
    }
  }
  EXPECT_GE(refused, 1u);
  EXPECT_GE(ok, 1u);  // the queued one is served once the slot frees
  std::printf("burst of %zu with 1 slot + 1 queue place: %zu served, %zu refused with 503\n", kBurst, ok, refused);
}

// A checkpoint whose embedding row of token 77 is NaN: a request that reads it fails with a 500 (a final
// error event when streamed), the server says why, and requests without it are served as before.
TEST(ServeErrors, NonFiniteLogitsFailTheRequestAndTheServerGoesOn) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sy_serve_nan";
  write_poisoned_copy(fixtures_dir() / "qwen3_moe_base", dir, "model.embed_tokens.weight", 77,
                      std::numeric_limits<float>::quiet_NaN());
  ServerProcess server("--model " + dir.string() + " --tokenizer " + SY_SOURCE_DIR +
                       "/../shared/data/tokenizers/qwen3");
  const std::string poisoned = R"({"prompt": [17, 77, 3], "max_tokens": 4, "ignore_eos": true)";
  const HttpResponse failed = post(server.port(), "/v1/completions", poisoned + "}");
  ASSERT_EQ(failed.status, 500) << failed.body;
  const json error = json::parse(failed.body)["error"];
  EXPECT_EQ(error["code"], "non_finite_logits") << failed.body;
  EXPECT_NE(error["message"].get<std::string>().find("the next-token logits are not finite"), std::string::npos)
      << failed.body;

  const HttpResponse streamed = post(server.port(), "/v1/completions", poisoned + R"(, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> events = sse_events(streamed.body);
  ASSERT_GE(events.size(), 2u) << streamed.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["error"]["code"], "non_finite_logits") << streamed.body;

  // Greedy: sampled at the default temperature 1, the clean prompt's continuation can itself reach token 77
  // and read the poisoned row (about one run in thirty did); its greedy continuation is 76, 28, 28, 85.
  for (int i = 0; i < 2; ++i) {
    const HttpResponse ok = post(server.port(), "/v1/completions",
                                 R"({"prompt": [17, 254, 3], "max_tokens": 4, "ignore_eos": true, "temperature": 0})");
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(json::parse(ok.body)["usage"]["completion_tokens"], 4) << ok.body;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sy::test
