// Metrics from the requests' outcomes, and how they are written and printed.
#include "bench_client/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sy::bench {

using nlohmann::json;

namespace {

// numpy.percentile's default: linear between the two nearest ranks.
double percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const auto hi = static_cast<size_t>(std::ceil(rank));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

Distribution distribution_ms(std::vector<double> seconds) {
  if (seconds.empty()) return {};
  for (double& s : seconds) s *= 1000.0;
  std::sort(seconds.begin(), seconds.end());
  const double n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double var = 0.0;
  for (double s : seconds) var += (s - mean) * (s - mean);
  return {.mean = mean,
          .median = percentile(seconds, 50),
          .std = std::sqrt(var / n),
          .p90 = percentile(seconds, 90),
          .p95 = percentile(seconds, 95),
          .p99 = percentile(seconds, 99),
          .max = seconds.back()};
}

ServeMetrics compute_metrics(const std::vector<PromptRow>& rows, const LoadResult& result) {
  ServeMetrics m;
  std::vector<double> ttfts, tpots, itls, e2es;
  for (size_t i = 0; i < result.outcomes.size(); ++i) {
    const RequestOutcome& o = result.outcomes[i];
    if (!o.success) {
      ++m.failed;
      auto seen = std::find_if(m.errors.begin(), m.errors.end(), [&](const auto& e) { return e.first == o.error; });
      if (seen != m.errors.end()) {
        ++seen->second;
      } else {
        m.errors.emplace_back(o.error, 1);
      }
      continue;
    }
    ++m.completed;
    m.total_input += rows[i].prompt_len;
    m.total_output += o.output_tokens;
    ttfts.push_back(o.ttft_s);
    e2es.push_back(o.latency_s);
    itls.insert(itls.end(), o.itl_s.begin(), o.itl_s.end());
    if (o.output_tokens > 1) tpots.push_back((o.latency_s - o.ttft_s) / static_cast<double>(o.output_tokens - 1));
  }
  m.duration_s = result.duration_s;
  const double d = result.duration_s > 0 ? result.duration_s : 1.0;
  m.request_throughput = static_cast<double>(m.completed) / d;
  m.input_throughput = static_cast<double>(m.total_input) / d;
  m.output_throughput = static_cast<double>(m.total_output) / d;
  m.total_throughput = static_cast<double>(m.total_input + m.total_output) / d;
  m.concurrency = std::accumulate(e2es.begin(), e2es.end(), 0.0) / d;
  m.ttft = distribution_ms(ttfts);
  m.tpot = distribution_ms(tpots);
  m.itl = distribution_ms(itls);
  m.e2e = distribution_ms(e2es);
  return m;
}

json metrics_json(const RunConfig& c, const ServeMetrics& m) {
  json j = {
      {"label", c.label},
      {"backend", c.backend},
      {"base_url", c.base_url},
      {"model", c.model},
      {"dataset_name", c.dataset_name},
      {"num_prompts", c.num_prompts},
      // SGLang writes Python's Infinity, which strict JSON readers refuse; "inf" reads back with float().
      {"request_rate", std::isfinite(c.request_rate) ? json(c.request_rate) : json("inf")},
      {"max_concurrency", c.max_concurrency > 0 ? json(c.max_concurrency) : json(nullptr)},
      {"sharegpt_output_len", c.sharegpt_output_len ? json(*c.sharegpt_output_len) : json(nullptr)},
      {"random_input_len", c.random_input_len},
      {"random_output_len", c.random_output_len},
      {"random_range_ratio", c.random_range_ratio},
      {"shared_prefix_len", c.shared_prefix_len},
      {"num_groups", c.num_groups},
      {"ignore_eos", c.ignore_eos},
      {"seed", c.seed},
      {"duration", m.duration_s},
      {"completed", m.completed},
      {"failed", m.failed},
      {"total_input_tokens", m.total_input},
      {"total_output_tokens", m.total_output},
      {"request_throughput", m.request_throughput},
      {"input_throughput", m.input_throughput},
      {"output_throughput", m.output_throughput},
      {"total_throughput", m.total_throughput},
      {"concurrency", m.concurrency},
  };
  const std::pair<const char*, const Distribution*> dists[] = {
      {"ttft_ms", &m.ttft}, {"tpot_ms", &m.tpot}, {"itl_ms", &m.itl}, {"e2e_latency_ms", &m.e2e}};
  for (const auto& [name, d] : dists) {
    j[fmt::format("mean_{}", name)] = d->mean;
    j[fmt::format("median_{}", name)] = d->median;
    j[fmt::format("std_{}", name)] = d->std;
    j[fmt::format("p90_{}", name)] = d->p90;
    j[fmt::format("p95_{}", name)] = d->p95;
    j[fmt::format("p99_{}", name)] = d->p99;
    j[fmt::format("max_{}", name)] = d->max;
  }
  json errors = json::array();
  for (const auto& [what, count] : m.errors) errors.push_back({{"error", what}, {"count", count}});
  j["errors"] = std::move(errors);
  return j;
}

namespace {

void line(std::FILE* out, const std::string& name, const std::string& value) {
  fmt::print(out, "{:<40} {:<10}\n", name, value);
}
void line(std::FILE* out, const std::string& name, double value) { line(out, name, fmt::format("{:.2f}", value)); }
// "----title----", 50 wide, as Python's "{:-^50}".
void rule(std::FILE* out, const std::string& title, char fill) {
  const size_t pad = title.size() < 50 ? 50 - title.size() : 0;
  fmt::print(out, "{}{}{}\n", std::string(pad / 2, fill), title, std::string(pad - pad / 2, fill));
}

}  // namespace

void print_metrics(std::FILE* out, const RunConfig& c, const ServeMetrics& m) {
  fmt::print(out, "\n");
  rule(out, " Serving Benchmark Result ", '=');
  line(out, "Backend:", c.backend);
  line(out, "Traffic request rate:", std::isfinite(c.request_rate) ? fmt::format("{}", c.request_rate) : "inf");
  line(out, "Max request concurrency:", c.max_concurrency > 0 ? fmt::format("{}", c.max_concurrency) : "not set");
  line(out, "Successful requests:", fmt::format("{}", m.completed));
  line(out, "Failed requests:", fmt::format("{}", m.failed));
  line(out, "Benchmark duration (s):", m.duration_s);
  line(out, "Total input tokens:", fmt::format("{}", m.total_input));
  line(out, "Total generated tokens:", fmt::format("{}", m.total_output));
  line(out, "Request throughput (req/s):", m.request_throughput);
  line(out, "Input token throughput (tok/s):", m.input_throughput);
  line(out, "Output token throughput (tok/s):", m.output_throughput);
  line(out, "Total token throughput (tok/s):", m.total_throughput);
  line(out, "Concurrency:", m.concurrency);
  rule(out, "End-to-End Latency", '-');
  line(out, "Mean E2E Latency (ms):", m.e2e.mean);
  line(out, "Median E2E Latency (ms):", m.e2e.median);
  line(out, "P90 E2E Latency (ms):", m.e2e.p90);
  line(out, "P99 E2E Latency (ms):", m.e2e.p99);
  rule(out, "Time to First Token", '-');
  line(out, "Mean TTFT (ms):", m.ttft.mean);
  line(out, "Median TTFT (ms):", m.ttft.median);
  line(out, "P90 TTFT (ms):", m.ttft.p90);
  line(out, "P99 TTFT (ms):", m.ttft.p99);
  rule(out, "Time per Output Token (excl. 1st token)", '-');
  line(out, "Mean TPOT (ms):", m.tpot.mean);
  line(out, "Median TPOT (ms):", m.tpot.median);
  line(out, "P90 TPOT (ms):", m.tpot.p90);
  line(out, "P99 TPOT (ms):", m.tpot.p99);
  rule(out, "Inter-Token Latency", '-');
  line(out, "Mean ITL (ms):", m.itl.mean);
  line(out, "Median ITL (ms):", m.itl.median);
  line(out, "P90 ITL (ms):", m.itl.p90);
  line(out, "P95 ITL (ms):", m.itl.p95);
  line(out, "P99 ITL (ms):", m.itl.p99);
  line(out, "Max ITL (ms):", m.itl.max);
  fmt::print(out, "{}\n", std::string(50, '='));
  if (m.failed > 0) {
    fmt::print(out, "{} of {} requests failed; the first errors:\n", m.failed, m.failed + m.completed);
    for (size_t i = 0; i < m.errors.size() && i < 5; ++i) {
      fmt::print(out, "  {} x {}\n", m.errors[i].second, m.errors[i].first);
    }
  }
}

void print_summary(std::FILE* out, const std::vector<std::pair<RunConfig, ServeMetrics>>& runs) {
  fmt::print(out, "\n{:>11} {:>9} {:>6} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11} {:>8}\n", "concurrency", "completed",
             "failed", "output tok/s", "total tok/s", "TTFT ms", "TPOT ms", "ITL ms", "E2E ms", "achieved");
  fmt::print(out, "{:>11} {:>9} {:>6} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11} {:>8}\n", "", "", "", "", "", "median",
             "median", "median", "median", "");
  for (const auto& [c, m] : runs) {
    fmt::print(out, "{:>11} {:>9} {:>6} {:>12.1f} {:>12.1f} {:>11.2f} {:>11.2f} {:>11.2f} {:>11.1f} {:>8.1f}\n",
               c.max_concurrency > 0 ? fmt::format("{}", c.max_concurrency) : "inf", m.completed, m.failed,
               m.output_throughput, m.total_throughput, m.ttft.median, m.tpot.median, m.itl.median, m.e2e.median,
               m.concurrency);
  }
}

}  // namespace sy::bench
