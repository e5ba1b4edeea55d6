// A soak of an OpenAI-compatible server under faults: a fixed number of clients for a bounded time, each
// sending one request after another, most of them well-formed streams, some cut by the client part-way
// (a user who goes away), some malformed (bad JSON, wrong types, unknown routes, broken HTTP, oversized
// headers and bodies, truncated bodies), while the server's memory and open files are sampled from its
// /metrics (process_resident_memory_bytes, process_open_fds, as the Prometheus clients export them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench_client/load.h"

namespace sy::bench {

// A malformed request and the status the server must answer it with (0: no reply is awaited, the client
// closes first).
struct MalformedCase {
  std::string name;
  std::string bytes;  // the whole request as sent
  int expected_status = 400;
  bool close_after_write = false;
};

// The malformed requests of a soak against `route` (/v1/completions or /v1/chat/completions) of `model`.
std::vector<MalformedCase> malformed_cases(const BaseUrl& url, const std::string& route, const std::string& model);

struct SoakSpec {
  LoadSpec load;              // url, route, api_key
  int64_t clients = 1024;     // requests in flight at all times
  double duration_s = 180.0;  // new requests start until then; those in flight finish
  double window_s = 60.0;     // memory is compared between the first and the last window
  double disconnect_fraction = 0.1;
  double malformed_fraction = 0.1;
  int64_t max_cut_chunks = 8;  // a cut request closes after 0..this many text chunks
  double sample_interval_s = 1.0;
  double reply_timeout_s = 60.0;  // a malformed request unanswered this long is a failure
  uint64_t seed = 1;
  std::string model;  // for the malformed bodies
  bool progress = false;
};

struct MemorySample {
  double t_s = 0.0;  // after the start
  double resident_bytes = -1.0;
  double open_fds = -1.0;
};

struct SoakResult {
  double duration_s = 0.0;
  int64_t completed = 0;   // well-formed streams that ended normally
  int64_t failed = 0;      // well-formed streams that did not (any error, cut by the server, an error event)
  int64_t cut = 0;         // streams the client cut on purpose
  int64_t cut_failed = 0;  // of those, ones that had failed before the cut
  int64_t output_tokens = 0;
  int64_t malformed = 0;
  int64_t malformed_wrong = 0;  // answered with another status, not as an OpenAI error, or not at all
  std::map<std::string, int64_t> malformed_by_case;
  std::vector<std::string> failures;  // the first few, each one line
  MemorySample baseline;              // before the first client connected
  std::vector<MemorySample> samples;  // each interval while new requests started
  MemorySample after;                 // once every request had ended and the client's connections closed
  // Largest resident memory in the first and in the last window; growth = last / first - 1.
  double first_window_rss = -1.0, last_window_rss = -1.0;

  double rss_growth() const { return first_window_rss > 0 ? last_window_rss / first_window_rss - 1.0 : 0.0; }
};

// sy::Error naming the setting when `spec` is out of its bounds (clients, durations, fractions).
void check_soak_spec(const SoakSpec& spec);

// `bodies`: the well-formed streaming requests, sent round-robin.
SoakResult run_soak(const SoakSpec& spec, const std::vector<std::string>& bodies);

}  // namespace sy::bench
