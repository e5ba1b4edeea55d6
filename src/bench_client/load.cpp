// One io_context on the calling thread drives every request (bench_client/stream.cpp), each started when
// it has arrived and a slot is free.
#include "bench_client/load.h"

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>

#include "base/check.h"
#include "bench_client/stream.h"

namespace sy::bench {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* backend_route(Backend backend) {
  switch (backend) {
    case Backend::completions:
      return "/v1/completions";
    case Backend::chat:
      return "/v1/chat/completions";
  }
  return "";
}

std::string make_request_body(Backend backend, const PromptRow& row, const RequestOptions& options,
                              int64_t max_tokens) {
  json body = {{"model", options.model}, {"max_tokens", max_tokens}, {"temperature", 0.0}, {"stream", true}};
  switch (backend) {
    case Backend::completions:
      body["prompt"] = row.prompt;
      break;
    case Backend::chat:
      body["messages"] = json::array({{{"role", "user"}, {"content", row.prompt}}});
      break;
  }
  if (options.stream_usage) body["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  if (options.extra_body.is_object()) body.update(options.extra_body);
  return body.dump();
}

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class Runner : public StreamHost {
 public:
  Runner(const LoadSpec& spec, const std::vector<std::string>& bodies) : spec_(spec), bodies_(bodies) {
    raise_open_files_limit();
    tcp::resolver resolver(io_);
    error_code ec;
    endpoints_ = resolver.resolve(spec.url.host, spec.url.port, ec);
    SY_CHECK(!ec, "{}: cannot resolve {}: {}", spec.url.str(), spec.url.host, ec.message());
    outcomes_.resize(bodies.size());
    limit_ = spec.max_concurrency > 0 ? static_cast<size_t>(spec.max_concurrency) : bodies.size();
    // Arrival times: all at 0, or a Poisson process (exponential gaps) of the given rate.
    arrivals_.assign(bodies.size(), 0.0);
    if (std::isfinite(spec.request_rate)) {
      SY_CHECK(spec.request_rate > 0, "--request-rate {}: expected a positive rate or inf", spec.request_rate);
      std::mt19937_64 rng(spec.seed);
      std::exponential_distribution<double> gap(spec.request_rate);
      for (size_t i = 1; i < arrivals_.size(); ++i) arrivals_[i] = arrivals_[i - 1] + gap(rng);
    }
  }

  LoadResult run() {
    begin_ = Clock::now();
    last_done_ = begin_;
    arrive();
    io_.run();
    if (spec_.progress) std::fputc('\n', stderr);
    return {.outcomes = std::move(outcomes_), .duration_s = seconds(last_done_ - begin_)};
  }

  asio::io_context& io() override { return io_; }
  const tcp::resolver::results_type& endpoints() const override { return endpoints_; }
  const LoadSpec& spec() const override { return spec_; }

  void stream_done(size_t index, RequestOutcome outcome, std::optional<tcp::socket> keep) override {
    outcomes_[index] = std::move(outcome);
    if (keep) idle_.push_back(std::move(*keep));
    --in_flight_;
    ++finished_;
    if (!outcomes_[index].success) ++failed_;
    last_done_ = Clock::now();
    show_progress(false);
    launch_ready();
  }

 private:
  // Moves every request whose arrival time has come to the ready queue, then waits for the next one.
  void arrive() {
    const double now = seconds(Clock::now() - begin_);
    while (next_ < arrivals_.size() && arrivals_[next_] <= now) ready_.push_back(next_++);
    launch_ready();
    if (next_ < arrivals_.size()) {
      timer_.expires_at(begin_ +
                        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals_[next_])));
      timer_.async_wait([this](const error_code& ec) {
        if (!ec) arrive();
      });
    }
  }

  void launch_ready() {
    while (in_flight_ < limit_ && !ready_.empty()) {
      const size_t i = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      std::optional<tcp::socket> idle;
      if (!idle_.empty()) {
        idle.emplace(std::move(idle_.back()));
        idle_.pop_back();
      }
      start_stream(*this, i, bodies_[i], std::move(idle));
    }
  }

  void show_progress(bool force) {
    if (!spec_.progress) return;
    const auto now = Clock::now();
    if (!force && finished_ != bodies_.size() && now - last_progress_ < std::chrono::milliseconds(100)) return;
    last_progress_ = now;
    constexpr size_t kWidth = 40;
    const size_t filled = bodies_.empty() ? kWidth : finished_ * kWidth / bodies_.size();
    std::fprintf(stderr, "\r%s [%s%s] %zu/%zu%s  %.1f s", spec_.progress_label.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(), finished_, bodies_.size(),
                 failed_ ? fmt::format(" ({} failed)", failed_).c_str() : "", seconds(now - begin_));
    std::fflush(stderr);
  }

  const LoadSpec& spec_;
  const std::vector<std::string>& bodies_;
  asio::io_context io_{1};
  asio::steady_timer timer_{io_};
  tcp::resolver::results_type endpoints_;
  std::vector<double> arrivals_;  // seconds after the start
  std::vector<RequestOutcome> outcomes_;
  std::vector<tcp::socket> idle_;  // kept-alive connections between requests
  std::deque<size_t> ready_;       // arrived, waiting for a free slot
  size_t limit_ = 0;
  size_t next_ = 0;
  size_t in_flight_ = 0;
  size_t finished_ = 0;
  size_t failed_ = 0;
  Clock::time_point begin_;
  Clock::time_point last_done_;
  Clock::time_point last_progress_;
};

}  // namespace

LoadResult run_load(const LoadSpec& spec, const std::vector<std::string>& bodies) {
  Runner runner(spec, bodies);
  return runner.run();
}

}  // namespace sy::bench
