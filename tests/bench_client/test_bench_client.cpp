// The pieces of bench serve's client: event-stream parsing, percentiles, URLs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/check.h"
#include "bench_client/dataset.h"
#include "bench_client/http_call.h"
#include "bench_client/load.h"
#include "bench_client/report.h"
#include "bench_client/sse.h"

namespace sy::bench {
namespace {

std::vector<std::string> feed_all(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<std::string> events;
  for (const auto& piece : pieces) p.feed(piece, [&](std::string_view d) { events.emplace_back(d); });
  return events;
}

TEST(Sse, EventsSplitAnywhere) {
  const std::string stream = "data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: comment\nevent: x\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "[DONE]"};
  EXPECT_EQ(feed_all({stream}), want);
  // Every split point, and one byte at a time.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    EXPECT_EQ(feed_all({stream.substr(0, cut), stream.substr(cut)}), want) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  EXPECT_EQ(feed_all(bytes), want);
}

TEST(Sse, MultiLineDataAndUnfinishedEvent) {
  EXPECT_EQ(feed_all({"data: one\ndata:two\n\n"}), std::vector<std::string>{"one\ntwo"});
  EXPECT_TRUE(feed_all({"data: never ended\n"}).empty());
  EXPECT_TRUE(feed_all({"\n\nid: 3\n\n"}).empty());
}

TEST(Report, PercentilesAsNumpy) {
  // numpy: percentile([1, 2, 3, 4, 10], [50, 90, 99]) = [3, 7.6, 9.76]; std (ddof 0) = 3.1623.
  const Distribution d = distribution_ms({0.004, 0.001, 0.010, 0.002, 0.003});
  EXPECT_NEAR(d.mean, 4.0, 1e-9);
  EXPECT_NEAR(d.median, 3.0, 1e-9);
  EXPECT_NEAR(d.p90, 7.6, 1e-9);
  EXPECT_NEAR(d.p99, 9.76, 1e-9);
  EXPECT_NEAR(d.std, 3.16227766, 1e-6);
  EXPECT_NEAR(d.max, 10.0, 1e-9);
  EXPECT_EQ(distribution_ms({}).p99, 0.0);
}

TEST(Report, CountsCompletedFailedAndTpot) {
  const std::vector<PromptRow> rows = {{.prompt = "a", .prompt_len = 10, .output_len = 5},
                                       {.prompt = "b", .prompt_len = 20, .output_len = 5},
                                       {.prompt = "c", .prompt_len = 30, .output_len = 5}};
  LoadResult r{.outcomes = {{.success = true,
                             .ttft_s = 0.1,
                             .latency_s = 0.5,
                             .itl_s = {0.1, 0.1, 0.1, 0.1},
                             .output_tokens = 5,
                             .chunks = 5},
                            {.success = false, .error = "HTTP 500: x"},
                            {.success = true, .ttft_s = 0.2, .latency_s = 0.2, .output_tokens = 1, .chunks = 1}},
               .duration_s = 2.0};
  const ServeMetrics m = compute_metrics(rows, r);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 40);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_NEAR(m.output_throughput, 3.0, 1e-9);
  EXPECT_NEAR(m.tpot.mean, 100.0, 1e-9);  // (0.5 - 0.1) / 4; the one-token request has no TPOT
  EXPECT_NEAR(m.concurrency, 0.35, 1e-9);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].second, 1);
}

TEST(Url, Forms) {
  const BaseUrl a = parse_base_url("http://127.0.0.1:30000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "30000");
  EXPECT_EQ(a.prefix, "");
  const BaseUrl b = parse_base_url("http://example.org/api/");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.prefix, "/api");
  EXPECT_THROW(parse_base_url("https://example.org"), Error);
  EXPECT_THROW(parse_base_url("127.0.0.1:30000"), Error);
}

}  // namespace
}  // namespace sy::bench

namespace sy::bench {
namespace {

// --shared-prefix-len / --num-groups: prompt i starts with group i % N's prefix, then its own random part.
TEST(Dataset, SharedPrefixGroups) {
  const RandomDatasetSpec spec{.num_prompts = 9,
                               .input_len = 20,
                               .output_len = 4,
                               .range_ratio = 0.5,
                               .vocab_size = 1000,
                               .seed = 3,
                               .shared_prefix_len = 32,
                               .num_groups = 3};
  const std::vector<PromptRow> rows = make_random_id_prompts(spec);
  ASSERT_EQ(rows.size(), 9u);
  const auto ids = [&](size_t i) { return rows[i].prompt.get<std::vector<int64_t>>(); };
  const auto head = [&](size_t i) {
    const std::vector<int64_t> p = ids(i);
    return std::vector<int64_t>(p.begin(), p.begin() + 32);
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].prompt_len, static_cast<int64_t>(ids(i).size()));
    EXPECT_GE(rows[i].prompt_len, 32 + 10);
    EXPECT_LE(rows[i].prompt_len, 32 + 20);
    EXPECT_EQ(head(i), head(i % 3)) << i;
  }
  EXPECT_NE(head(0), head(1));
  EXPECT_NE(head(1), head(2));
  EXPECT_NE(ids(0), ids(3));  // the suffixes are the prompts' own
  // Without the option the prompts are the drawn lengths alone.
  RandomDatasetSpec plain = spec;
  plain.shared_prefix_len = 0;
  for (const PromptRow& r : make_random_id_prompts(plain)) EXPECT_LE(r.prompt_len, 20);
  RandomDatasetSpec bad = spec;
  bad.num_groups = 10;
  try {
    make_random_id_prompts(bad);
    ADD_FAILURE() << "10 groups for 9 prompts were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-groups 10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sy::bench
