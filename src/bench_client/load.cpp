// One io_context on the calling thread drives every request: connect (or take an idle kept-alive
// connection), write, read the header, then read the event stream as it arrives, timing each chunk.
#include "bench_client/load.h"

#include <netinet/tcp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>

#include "base/check.h"
#include "bench_client/sse.h"

namespace sy::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
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

// Thousands of sockets need more than the usual soft limit of 1,024 open files.
void raise_open_files_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

class Runner;

// One request from its start to its outcome.
class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(Runner& runner, size_t index, std::optional<tcp::socket> idle);
  void start();

 private:
  void connect();
  void write();
  void read_header();
  void read_error_body();
  void read_body();
  void take_body(Clock::time_point now);
  void on_event(std::string_view data, Clock::time_point now);
  bool retry_on_new_connection(const error_code& ec);
  void finish(std::string error);

  Runner& runner_;
  size_t index_;
  tcp::socket socket_;
  bool reused_;  // the socket was kept alive from an earlier request
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  std::optional<http::response_parser<http::string_body>> parser_;
  SseParser sse_;
  Clock::time_point start_;
  Clock::time_point last_;
  RequestOutcome out_;
  int64_t usage_tokens_ = -1;
  std::string event_error_;
};

class Runner {
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

  asio::io_context& io() { return io_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  const LoadSpec& spec() const { return spec_; }
  const std::string& body(size_t i) const { return bodies_[i]; }

  void done(size_t index, RequestOutcome outcome, std::optional<tcp::socket> keep) {
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
      std::make_shared<Stream>(*this, i, std::move(idle))->start();
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

Stream::Stream(Runner& runner, size_t index, std::optional<tcp::socket> idle)
    : runner_(runner),
      index_(index),
      socket_(idle ? std::move(*idle) : tcp::socket(runner.io())),
      reused_(idle.has_value()),
      request_(http::verb::post, runner.spec().url.prefix + runner.spec().route, 11) {
  request_.set(http::field::host, runner.spec().url.host);
  request_.set(http::field::user_agent, "switchyard-bench-serve");
  request_.set(http::field::content_type, "application/json");
  request_.set(http::field::accept, "text/event-stream");
  if (!runner.spec().api_key.empty()) request_.set(http::field::authorization, "Bearer " + runner.spec().api_key);
  request_.body() = runner.body(index);
  request_.prepare_payload();
}

void Stream::start() {
  start_ = Clock::now();
  if (reused_) {
    write();
  } else {
    connect();
  }
}

void Stream::connect() {
  asio::async_connect(socket_, runner_.endpoints(),
                      [self = shared_from_this()](const error_code& ec, const tcp::endpoint&) {
                        if (ec) return self->finish("connect: " + ec.message());
                        self->socket_.set_option(tcp::no_delay(true));
                        self->write();
                      });
}

void Stream::write() {
  http::async_write(socket_, request_, [self = shared_from_this()](const error_code& ec, size_t) {
    if (ec) {
      if (self->retry_on_new_connection(ec)) return;
      return self->finish("send: " + ec.message());
    }
    self->read_header();
  });
}

// A kept-alive connection may have been closed by the server while idle: such a request has had no answer
// yet, so it is sent again on a new connection.
bool Stream::retry_on_new_connection(const error_code& ec) {
  if (!reused_ || (parser_ && parser_->is_header_done())) return false;
  (void)ec;
  reused_ = false;
  error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(runner_.io());
  buffer_.clear();
  parser_.reset();
  connect();
  return true;
}

void Stream::read_header() {
  parser_.emplace();
  // Not boost::none: Beast 1.74 then refuses every Content-Length.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](const error_code& ec, size_t) {
    if (ec) {
      if (self->retry_on_new_connection(ec)) return;
      return self->finish("no response: " + ec.message());
    }
    if (self->parser_->get().result() != http::status::ok) return self->read_error_body();
    self->take_body(Clock::now());
    if (self->parser_->is_done()) return self->finish("");
    self->read_body();
  });
}

void Stream::read_error_body() {
  http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](const error_code&, size_t) {
    const auto& res = self->parser_->get();
    self->finish(fmt::format("HTTP {}: {}", res.result_int(), res.body().substr(0, 300)));
  });
}

void Stream::read_body() {
  http::async_read_some(socket_, buffer_, *parser_, [self = shared_from_this()](const error_code& ec, size_t) {
    const auto now = Clock::now();
    self->take_body(now);
    if (!self->event_error_.empty()) return self->finish(self->event_error_);
    if (ec) {
      return self->finish(fmt::format("stream cut after {} chunks: {}", self->out_.chunks, ec.message()));
    }
    if (self->parser_->is_done()) return self->finish("");
    self->read_body();
  });
}

void Stream::take_body(Clock::time_point now) {
  std::string& body = parser_->get().body();
  if (body.empty()) return;
  sse_.feed(body, [&](std::string_view data) { on_event(data, now); });
  body.clear();
}

void Stream::on_event(std::string_view data, Clock::time_point now) {
  if (!event_error_.empty() || data == "[DONE]") return;
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    event_error_ = fmt::format("an event that is not a JSON object: {}", data.substr(0, 200));
    return;
  }
  if (const auto e = j.find("error"); e != j.end()) {
    event_error_ = fmt::format("error event: {}", e->dump().substr(0, 300));
    return;
  }
  if (const auto choices = j.find("choices"); choices != j.end() && choices->is_array() && !choices->empty()) {
    const json& c = choices->front();
    const json* text = nullptr;
    if (const auto t = c.find("text"); t != c.end()) {
      text = &*t;
    } else if (const auto d = c.find("delta"); d != c.end() && d->is_object()) {
      if (const auto content = d->find("content"); content != d->end()) text = &*content;
    }
    if (text != nullptr && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      if (out_.chunks == 0) {
        out_.ttft_s = seconds(now - start_);
      } else {
        out_.itl_s.push_back(seconds(now - last_));
      }
      last_ = now;
      ++out_.chunks;
    }
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (const auto n = u->find("completion_tokens"); n != u->end() && n->is_number_integer()) {
      usage_tokens_ = n->get<int64_t>();
    }
  }
}

void Stream::finish(std::string error) {
  out_.latency_s = seconds(Clock::now() - start_);
  out_.output_tokens = usage_tokens_ >= 0 ? usage_tokens_ : out_.chunks;
  if (error.empty() && out_.chunks == 0) {
    // Tokens that decode to no text (a random model's padded vocabulary rows, skipped special tokens) make
    // no chunk; with the server's usage the request still generated, and its first text came at the end.
    if (usage_tokens_ > 0) {
      out_.ttft_s = out_.latency_s;
    } else {
      error = "the stream ended without any text";
    }
  }
  out_.success = error.empty();
  out_.error = std::move(error);
  std::optional<tcp::socket> keep;
  if (out_.success && parser_ && parser_->is_done() && parser_->keep_alive()) {
    keep.emplace(std::move(socket_));
  } else {
    error_code ignored;
    socket_.close(ignored);
  }
  runner_.done(index_, std::move(out_), std::move(keep));
}

}  // namespace

LoadResult run_load(const LoadSpec& spec, const std::vector<std::string>& bodies) {
  Runner runner(spec, bodies);
  return runner.run();
}

}  // namespace sy::bench
