// Prometheus metrics of the server (text exposition format 0.0.4), named as vLLM names them under a
// `switchyard:` prefix: engine gauges and counters from ServingStats, per-request histograms recorded here.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/serving.h"

namespace sy::server {

// A cumulative histogram with fixed upper bounds (le), +Inf implied.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of `name` with the label set `labels` ("model_name=\"m\"").
  void render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// What one finished request (one choice) contributes to the histograms.
struct RequestTiming {
  double queue_seconds = -1.0;        // arrival to first scheduled; < 0 when unknown
  double first_token_seconds = -1.0;  // arrival to first token; < 0 when none came
  double e2e_seconds = 0.0;
  std::vector<double> inter_token_seconds;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  std::string finish_reason;  // "stop", "length", "abort"
};

class Metrics {
 public:
  Metrics(const std::string& model_name, int64_t max_model_len);
  // Thread-safe.
  void record(const RequestTiming& t);
  // The /metrics page. Thread-safe.
  std::string render(const ServingStats& stats) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mutex_;
  Histogram ttft_, tpot_, itl_, e2e_, queue_, prompt_tokens_, generation_tokens_;
  uint64_t success_stop_ = 0, success_length_ = 0, success_abort_ = 0;
};

// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(int64_t max);

}  // namespace sy::server
