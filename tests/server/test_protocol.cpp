// The OpenAI request parsing and response shapes of the server layer, stop strings held back and cut as
// OpenAI cuts them, and the Prometheus text of the metrics.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/openai_responses.h"
#include "server/request_stream.h"

namespace sy::server {
namespace {

using json = nlohmann::ordered_json;

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 200;
}

std::string param_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.param();
  }
  return "";
}

TEST(OpenAiProtocol, CompletionPromptForms) {
  auto r = parse_completion_request(json::parse(R"({"prompt": "hi", "max_tokens": 3})"));
  EXPECT_EQ(r.prompt_texts, std::vector<std::string>{"hi"});
  EXPECT_EQ(r.sampling.max_tokens, 3);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default
  r = parse_completion_request(json::parse(R"({"prompt": ["a", "b"]})"));
  EXPECT_EQ(r.prompt_texts.size(), 2u);
  r = parse_completion_request(json::parse(R"({"prompt": [1, 2, 3]})"));
  ASSERT_EQ(r.prompt_ids.size(), 1u);
  EXPECT_EQ(r.prompt_ids[0], (std::vector<int32_t>{1, 2, 3}));
  r = parse_completion_request(json::parse(R"({"prompt": [[1], [2, 3]], "max_tokens": 4.0})"));
  EXPECT_EQ(r.prompt_ids.size(), 2u);
  EXPECT_EQ(r.sampling.max_tokens, 4);  // an integral float is an integer, as pydantic's lax mode reads it
}

TEST(OpenAiProtocol, SamplingFields) {
  const auto r = parse_completion_request(json::parse(
      R"({"prompt": "x", "temperature": 0, "top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": 7, "stop": "END",
          "stop_token_ids": [5], "ignore_eos": true, "n": 2, "stream": true, "stream_options": {"include_usage": true},
          "logprobs": 3, "unknown_field": {"ignored": true}, "user": "u"})"));
  const SamplingFields& s = r.sampling;
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.top_k, 0);  // -1 is off
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{5});
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.n, 2);
  EXPECT_TRUE(s.stream && s.include_usage);
  EXPECT_EQ(s.logprobs, 3);
  EXPECT_FALSE(s.max_tokens.has_value());
  // Nulls are "not given", as OpenAI reads them.
  const auto n = parse_completion_request(json::parse(R"({"prompt": "x", "max_tokens": null, "stop": null})"));
  EXPECT_FALSE(n.sampling.max_tokens.has_value());
}

TEST(OpenAiProtocol, BadFieldsAre400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "10"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "logprobs": 50})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "seed": "s"})", "seed"},
      {R"({"prompt": "x", "stop_token_ids": [1.5]})", "stop_token_ids"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "echo": true})", "echo"},
  };
  for (const auto& [body, param] : cases) {
    const json j = json::parse(body);
    EXPECT_EQ(status_of([&] { parse_completion_request(j); }), 400) << body;
    EXPECT_EQ(param_of([&] { parse_completion_request(j); }), param) << body;
  }
  EXPECT_EQ(status_of([] { parse_completion_request(json::parse("{}")); }), 400);
  EXPECT_EQ(status_of([] { parse_body("{not json"); }), 400);
  EXPECT_EQ(status_of([] { parse_body("[1, 2]"); }), 400);
  // Found by fuzz_openai_request: a number beyond double's range was nlohmann's out_of_range, a 500.
  EXPECT_EQ(status_of([] { parse_body(R"({"prompt": "x", "max_tokens": 8e888888})"); }), 400);
  // Nesting is bounded before the parser runs (and before an error message could print the value).
  EXPECT_EQ(status_of([] { parse_body(R"({"prompt": )" + std::string(100000, '[') + std::string(100000, ']') + "}"); }),
            400);
}

TEST(OpenAiProtocol, ChatRequest) {
  const auto r = parse_chat_request(json::parse(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
          "chat_template_kwargs": {"enable_thinking": false}, "tools": [{"type": "function"}]})"));
  EXPECT_EQ(r.messages[0]["content"], "a\nb");  // text parts joined as vLLM's "string" content format does
  EXPECT_EQ(r.sampling.max_tokens, 9);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.tools.size(), 1u);
  for (const char* body :
       {R"({"messages": []})", R"({"messages": "hi"})", R"({"messages": [{"content": "x"}]})",
        R"({"messages": [{"role": "user", "content": 5}]})",
        R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
        R"({"messages": [{"role": "user"}], "top_logprobs": 2})", R"({"messages": [{"role": "user"}], "logprobs": 1})",
        R"({"messages": [{"role": "user"}], "chat_template_kwargs": []})", R"({})"}) {
    EXPECT_EQ(status_of([&] { parse_chat_request(json::parse(body)); }), 400) << body;
  }
}

TEST(OpenAiProtocol, ContextLimitsUseOpenAisWording) {
  EXPECT_EQ(check_context(10, std::nullopt, 256), 246);  // no max_tokens: the rest of the context
  EXPECT_EQ(check_context(10, 246, 256), 246);
  try {
    check_context(10, 300, 256);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(std::string(e.what()),
              "This model's maximum context length is 256 tokens. However, you requested 310 tokens (10 in the "
              "messages, 300 in the completion). Please reduce the length of the messages or completion.");
  }
  EXPECT_EQ(status_of([] { check_context(256, std::nullopt, 256); }), 400);
}

TEST(OpenAiResponses, ErrorBodyShape) {
  const json e = json::parse(error_body(400, "bad 'n'", "n"));
  EXPECT_EQ(e["error"]["message"], "bad 'n'");
  EXPECT_EQ(e["error"]["type"], "BadRequestError");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["code"], 400);
  const json n = json::parse(error_body(404, "x", "", "model_not_found"));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_EQ(n["error"]["code"], "model_not_found");
}

TEST(OpenAiResponses, ChunksAndUsage) {
  const ResponseHeader h{.id = "cmpl-1", .created = 5, .model = "m"};
  const json c = completion_chunk(h, 0, "hi", nullptr, "", nullptr);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(sse(c).substr(0, 6), "data: ");
  EXPECT_EQ(sse(c).substr(sse(c).size() - 2), "\n\n");
  const json u = usage_chunk(h, "chat.completion.chunk", usage(3, 4, 2));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 2);  // as OpenAI reports prompt caching
  const json r =
      chat_response(h, {{.index = 0, .text = "t", .logprobs = nullptr, .finish_reason = "length"}}, usage(1, 1, 0));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  // Invalid UTF-8 never makes dump() throw.
  EXPECT_NO_THROW(dump(json{{"text", std::string("\xff\xfe")}}));
}

// OpenAI's stop semantics: the text ends right before the first stop string, which is not included; text
// that may still become a stop string is not sent until it cannot.
TEST(StopMatcher, HoldsBackAndCuts) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("Hello ").text, "Hello ");
  auto o = m.push("wor E");
  EXPECT_EQ(o.text, "wor ");  // "E" may start "END"
  o = m.push("N");
  EXPECT_EQ(o.text, "");
  o = m.push("X");  // "ENX" is not a stop: released
  EXPECT_EQ(o.text, "ENX");
  o = m.push("a EN");
  EXPECT_EQ(o.text, "a ");
  o = m.push("D and more");
  EXPECT_EQ(o.text, "");
  ASSERT_TRUE(o.matched.has_value());
  EXPECT_EQ(*o.matched, "END");
}

TEST(StopMatcher, EarliestStopWinsWithinOnePiece) {
  StopMatcher m({"b", "a"});
  const auto o = m.push("xxabyy");
  EXPECT_EQ(o.text, "xx");
  EXPECT_EQ(*o.matched, "a");
}

TEST(StopMatcher, FlushReleasesHeldText) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("go ST").text, "go ");
  EXPECT_EQ(m.flush(), "ST");
  StopMatcher none({});
  EXPECT_EQ(none.push("abc").text, "abc");
}

TEST(Metrics, PrometheusText) {
  Metrics m("my \"model\"", 100);
  m.record({.first_token_seconds = 0.05,
            .e2e_seconds = 0.45,
            .inter_token_seconds = {0.1, 0.3},
            .prompt_tokens = 7,
            .output_tokens = 3,
            .finish_reason = "length"});
  const std::string text = m.render({.running = 2,
                                     .waiting = 1,
                                     .kv_usage = 0.25,
                                     .prompt_tokens_total = 7,
                                     .generation_tokens_total = 3,
                                     .decode_steps = {.steps = 2, .seconds = 0.5, .tokens = 4},
                                     .mixed_steps = {.steps = 1, .seconds = 0.25, .tokens = 9}});
  const std::string labels = R"(model_name="my \"model\"")";
  for (const std::string& line :
       std::vector<std::string>{"# TYPE switchyard:num_requests_running gauge",
                                "switchyard:num_requests_running{" + labels + "} 2",
                                "switchyard:num_requests_waiting{" + labels + "} 1",
                                "switchyard:kv_cache_usage_perc{" + labels + "} 0.25",
                                "# TYPE switchyard:prompt_tokens_total counter",
                                "switchyard:generation_tokens_total{" + labels + "} 3",
                                "# TYPE switchyard:steps_total counter",
                                "switchyard:steps_total{" + labels + ",kind=\"decode\"} 2",
                                "switchyard:step_tokens_total{" + labels + ",kind=\"mixed\"} 9",
                                "switchyard:step_seconds_total{" + labels + ",kind=\"decode\"} 0.5",
                                "switchyard:request_success_total{" + labels + ",finished_reason=\"length\"} 1",
                                "switchyard:request_success_total{" + labels + ",finished_reason=\"stop\"} 0",
                                "# TYPE switchyard:time_to_first_token_seconds histogram",
                                "switchyard:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.04\"} 0",
                                "switchyard:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.06\"} 1",
                                "switchyard:time_to_first_token_seconds_bucket{" + labels + ",le=\"+Inf\"} 1",
                                "switchyard:time_to_first_token_seconds_count{" + labels + "} 1",
                                "switchyard:inter_token_latency_seconds_count{" + labels + "} 2",
                                "switchyard:inter_token_latency_seconds_sum{" + labels + "} 0.4",
                                "switchyard:time_per_output_token_seconds_sum{" + labels + "} 0.2",
                                "switchyard:request_prompt_tokens_bucket{" + labels + ",le=\"5\"} 0",
                                "switchyard:request_prompt_tokens_bucket{" + labels + ",le=\"10\"} 1",
                                "switchyard:request_generation_tokens_count{" + labels + "} 1",
                                "switchyard:e2e_request_latency_seconds_count{" + labels + "} 1",
                                "# TYPE switchyard:request_queue_time_seconds histogram"}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line;
  }
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
}

}  // namespace
}  // namespace sy::server
