// A run's metrics under SGLang bench_serving's names and JSON keys (so its readers read our files), its
// result table, and the summary of a concurrency sweep.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_client/dataset.h"
#include "bench_client/load.h"

namespace sy::bench {

// What the JSON records about how the run was made.
struct RunConfig {
  std::string label;    // the line this run belongs to on a plot ("switchyard", "transformers")
  std::string backend;  // "completions" | "chat"
  std::string base_url;
  std::string model;
  std::string dataset_name;  // "random" | "sharegpt"
  int64_t num_prompts = 0;
  double request_rate = 0.0;    // inf: all at once
  int64_t max_concurrency = 0;  // 0: no limit
  int64_t random_input_len = 0;
  int64_t random_output_len = 0;
  double random_range_ratio = 0.0;
  int64_t shared_prefix_len = 0;  // random dataset: tokens of the prefix each group's prompts share
  int64_t num_groups = 1;
  std::optional<int64_t> sharegpt_output_len;
  bool ignore_eos = false;
  uint64_t seed = 0;
};

// mean, median, std, p90, p95, p99 and max of a list of times, in ms (all 0 for an empty list, as SGLang).
struct Distribution {
  double mean = 0, median = 0, std = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};
Distribution distribution_ms(std::vector<double> seconds);

struct ServeMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;   // prompt tokens of the completed requests
  int64_t total_output = 0;  // output tokens of the completed requests
  double duration_s = 0.0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0, total_throughput = 0;
  double concurrency = 0;  // achieved: the sum of the requests' latencies over the duration
  Distribution ttft, tpot, itl, e2e;
  std::vector<std::pair<std::string, int64_t>> errors;  // distinct errors in order of first sight, with counts
};

// TPOT of a request = (latency - TTFT) / (output tokens - 1), for requests of more than one output token.
ServeMetrics compute_metrics(const std::vector<PromptRow>& rows, const LoadResult& result);

nlohmann::json metrics_json(const RunConfig& config, const ServeMetrics& m);
// The table SGLang prints, then the first distinct errors when requests failed.
void print_metrics(std::FILE* out, const RunConfig& config, const ServeMetrics& m);
// One line per level of a sweep.
void print_summary(std::FILE* out, const std::vector<std::pair<RunConfig, ServeMetrics>>& runs);

}  // namespace sy::bench
