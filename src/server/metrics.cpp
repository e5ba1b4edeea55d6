// Prometheus text exposition of the serving metrics, buckets as vLLM chooses them.
#include "server/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace sy::server {

namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) { return fmt::format("{}", v); }

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += fmt::format("{}{{{}}} {}\n", name, labels, number(v));
}

// The gauges the Prometheus clients' process collector exports (unlabelled, as they name them): resident
// and virtual memory from /proc/self/statm, open file descriptors from /proc/self/fd. A soak watches them
// for leaks (switchyard bench soak).
void process_gauges(std::string& out) {
  std::ifstream statm("/proc/self/statm");
  int64_t virtual_pages = 0, resident_pages = 0;
  if (statm >> virtual_pages >> resident_pages) {
    const auto page = static_cast<double>(sysconf(_SC_PAGESIZE));
    header(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    out += fmt::format("process_virtual_memory_bytes {}\n", number(static_cast<double>(virtual_pages) * page));
    header(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    out += fmt::format("process_resident_memory_bytes {}\n", number(static_cast<double>(resident_pages) * page));
  }
  std::error_code ec;
  int64_t fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
  if (!ec) {
    header(out, "process_open_fds", "gauge", "Number of open file descriptors.");
    // The directory's own descriptor, open while it was listed, is not counted.
    out += fmt::format("process_open_fds {}\n", fds - 1);
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, number(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, number(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

std::vector<double> buckets_1_2_5(int64_t max) {
  std::vector<double> b;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max) return b;
      b.push_back(static_cast<double>(m * scale));
    }
  }
}

Metrics::Metrics(const std::string& model_name, int64_t max_model_len)
    : labels_(fmt::format("model_name=\"{}\"", escape_label(model_name))),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      tpot_(
          {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      queue_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
              30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      prompt_tokens_(buckets_1_2_5(max_model_len)),
      generation_tokens_(buckets_1_2_5(max_model_len)) {}

void Metrics::record(const RequestTiming& t) {
  std::lock_guard lock(mutex_);
  if (t.queue_seconds >= 0.0) queue_.observe(t.queue_seconds);
  if (t.first_token_seconds >= 0.0) ttft_.observe(t.first_token_seconds);
  for (double s : t.inter_token_seconds) itl_.observe(s);
  if (t.output_tokens > 1 && t.first_token_seconds >= 0.0) {
    tpot_.observe((t.e2e_seconds - t.first_token_seconds) / static_cast<double>(t.output_tokens - 1));
  }
  e2e_.observe(t.e2e_seconds);
  prompt_tokens_.observe(static_cast<double>(t.prompt_tokens));
  generation_tokens_.observe(static_cast<double>(t.output_tokens));
  if (t.finish_reason == "stop") ++success_stop_;
  if (t.finish_reason == "length") ++success_length_;
  if (t.finish_reason == "abort") ++success_abort_;
}

std::string Metrics::render(const ServingStats& s) const {
  std::string out;
  const auto gauge = [&](const char* name, const char* help, double v) {
    const std::string n = std::string("switchyard:") + name;
    header(out, n, "gauge", help);
    sample(out, n, labels_, v);
  };
  const auto counter = [&](const char* name, const char* help, double v) {
    const std::string n = std::string("switchyard:") + name;
    header(out, n, "counter", help);
    sample(out, n, labels_, v);
  };
  gauge("num_requests_running", "Number of requests in model execution batches.", static_cast<double>(s.running));
  gauge("num_requests_waiting", "Number of requests waiting to be processed.", static_cast<double>(s.waiting));
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
  gauge("kv_cache_capacity_tokens", "Tokens the KV cache holds.", static_cast<double>(s.kv_capacity_tokens));
  counter("prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(s.prompt_tokens_total));
  counter("generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(s.generation_tokens_total));
  counter("num_preemptions_total", "Cumulative number of preemptions from the engine.",
          static_cast<double>(s.preemptions));
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (at first admission).",
          static_cast<double>(s.prefix_query_tokens));
  counter("prefix_cache_hits_total", "Prompt tokens the prefix cache supplied.",
          static_cast<double>(s.prefix_hit_tokens));
  gauge("prefix_cache_hit_rate", "Prefix-cache hits over queries since start, in tokens (0 before any query).",
        s.prefix_query_tokens > 0
            ? static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(s.prefix_query_tokens)
            : 0.0);
  // Per kind of step (decode only, or prefill tokens mixed in): how the time per output token splits.
  for (const auto& [name, help, field] :
       {std::tuple{"steps_total", "Forward passes run by the serving loop.", &StepTotals::steps},
        std::tuple{"step_tokens_total", "Tokens forwarded (decode and prefill) by the serving loop.",
                   &StepTotals::tokens}}) {
    const std::string n = std::string("switchyard:") + name;
    header(out, n, "counter", help);
    for (const auto& [kind, totals] : {std::pair{"decode", &s.decode_steps}, std::pair{"mixed", &s.mixed_steps}}) {
      sample(out, n, fmt::format("{},kind=\"{}\"", labels_, kind), static_cast<double>(totals->*field));
    }
  }
  {
    const std::string n = "switchyard:step_seconds_total";
    header(out, n, "counter",
           "Seconds of serving-loop iterations that ran a forward pass (taking requests in, the pass, sampling, "
           "handing tokens out).");
    for (const auto& [kind, totals] : {std::pair{"decode", &s.decode_steps}, std::pair{"mixed", &s.mixed_steps}}) {
      sample(out, n, fmt::format("{},kind=\"{}\"", labels_, kind), totals->seconds);
    }
  }
  std::lock_guard lock(mutex_);
  {
    const std::string n = "switchyard:request_success_total";
    header(out, n, "counter", "Count of successfully processed requests.");
    for (const auto& [reason, count] :
         {std::pair{"stop", success_stop_}, std::pair{"length", success_length_}, std::pair{"abort", success_abort_}}) {
      sample(out, n, fmt::format("{},finished_reason=\"{}\"", labels_, reason), static_cast<double>(count));
    }
  }
  ttft_.render(out, "switchyard:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels_);
  tpot_.render(out, "switchyard:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
               labels_);
  itl_.render(out, "switchyard:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels_);
  e2e_.render(out, "switchyard:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
              labels_);
  queue_.render(out, "switchyard:request_queue_time_seconds",
                "Histogram of time spent waiting in the queue in seconds.", labels_);
  prompt_tokens_.render(out, "switchyard:request_prompt_tokens", "Number of prefill tokens processed.", labels_);
  generation_tokens_.render(out, "switchyard:request_generation_tokens", "Number of generation tokens processed.",
                            labels_);
  process_gauges(out);
  return out;
}

}  // namespace sy::server
