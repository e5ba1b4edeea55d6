// The soak's clients on one io_context: each slot sends a request, waits for its end, and sends the next
// until the duration is up; a timer samples the server's /metrics each interval.
#include "bench_client/soak.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "bench_client/stream.h"

namespace sy::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A request's bytes; `framed`: a Content-Length for the body is added (else extra_headers frame it).
std::string raw_request(const BaseUrl& url, const std::string& method, const std::string& target,
                        const std::string& body, const std::string& extra_headers = "", bool framed = true) {
  std::string r = fmt::format("{} {}{} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n", method, url.prefix,
                              target, url.host);
  r += extra_headers;
  if (framed && (!body.empty() || method == "POST")) r += fmt::format("Content-Length: {}\r\n", body.size());
  return r + "\r\n" + body;
}

}  // namespace

std::vector<MalformedCase> malformed_cases(const BaseUrl& url, const std::string& route, const std::string& model) {
  const bool chat = route.find("chat") != std::string::npos;
  json base = {{"model", model}, {"max_tokens", 4}};
  if (chat) {
    base["messages"] = json::array({{{"role", "user"}, {"content", "hello"}}});
  } else {
    base["prompt"] = "hello";
  }
  const auto with = [&](const char* key, json value) {
    json b = base;
    b[key] = std::move(value);
    return b.dump();
  };
  const std::string input_key = chat ? "messages" : "prompt";
  json missing = base;
  missing.erase(input_key);
  // A body in which one value is written by hand (JSON that a serialiser would not produce).
  const auto raw_value = [&](const char* key, const std::string& value) {
    json b = base;
    b[key] = "@@";
    std::string s = b.dump();
    return s.replace(s.find("\"@@\""), 4, value);
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string ok = base.dump();
  std::vector<MalformedCase> cases = {
      {"invalid_json", raw_request(url, "POST", route, ok.substr(0, ok.size() - 1))},
      {"not_an_object", raw_request(url, "POST", route, "[1, 2, 3]")},
      {"missing_input", raw_request(url, "POST", route, missing.dump())},
      {"wrong_type", raw_request(url, "POST", route, with("max_tokens", "four"))},
      {"negative_max_tokens", raw_request(url, "POST", route, with("max_tokens", -4))},
      {"negative_temperature", raw_request(url, "POST", route, with("temperature", -1.0))},
      {"number_overflow", raw_request(url, "POST", route, raw_value("max_tokens", "1e400"))},
      {"invalid_utf8", raw_request(url, "POST", route, raw_value(chat ? "user" : "prompt", "\"\xff\xfe\""))},
      {"deep_nesting", raw_request(url, "POST", route, raw_value(chat ? "user" : "prompt", deep))},
      {"unknown_model", raw_request(url, "POST", route, with("model", "no-such-model")), 404},
      {"unknown_route", raw_request(url, "POST", "/v1/no_such_route", ok), 404},
      {"wrong_method", raw_request(url, "GET", route, ""), 405},
      {"bad_request_line", "HELLO WORLD\r\n\r\n"},
      {"bad_header", fmt::format("POST {}{} HTTP/1.1\r\nHost {}\r\n\r\n", url.prefix, route, url.host)},
      {"bad_chunk_size",
       raw_request(url, "POST", route, "", "Transfer-Encoding: chunked\r\n", false) + "zz\r\nabc\r\n0\r\n\r\n"},
      {"header_too_large", raw_request(url, "POST", route, ok, "X-Padding: " + std::string(70000, 'a') + "\r\n"), 431},
      {"body_too_large", raw_request(url, "POST", route, "", "Content-Length: 1073741824\r\n", false), 413},
      {"truncated_body",
       fmt::format("POST {}{} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{}", url.prefix, route, url.host,
                   ok.size() + 100, ok),
       0, true},
  };
  return cases;
}

namespace {

// One exchange of raw bytes: connect, write, then read one response (or close at once).
class RawExchange : public std::enable_shared_from_this<RawExchange> {
 public:
  // status 0 and an empty error: closed after writing, as asked; status -1: no response, `error` says why.
  using Done = std::function<void(int status, std::string body, std::string error)>;

  RawExchange(asio::io_context& io, const tcp::resolver::results_type& endpoints, const std::string& bytes,
              bool close_after_write, double timeout_s, Done done)
      : socket_(io),
        timer_(io),
        endpoints_(endpoints),
        bytes_(bytes),
        close_after_write_(close_after_write),
        timeout_s_(timeout_s),
        done_(std::move(done)) {}

  void start() {
    timer_.expires_after(duration(timeout_s_));
    timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->finished_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->socket_.close(ignored);
    });
    asio::async_connect(socket_, endpoints_, [self = shared_from_this()](const error_code& ec, const tcp::endpoint&) {
      if (ec) return self->finish(-1, fmt::format("connect: {}", ec.message()));
      asio::async_write(self->socket_, asio::buffer(self->bytes_), [self](const error_code& wec, size_t) {
        if (self->close_after_write_ && !wec) return self->finish(0, "");
        // A server that refuses a request early (431, 413) may close before all of it is written: its
        // reply is still read.
        self->read();
      });
    });
  }

 private:
  void read() {
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_.header_limit(1 << 20);
    http::async_read(socket_, buffer_, parser_, [self = shared_from_this()](const error_code& ec, size_t) {
      if (self->parser_.is_header_done() && (!ec || self->parser_.is_done())) {
        return self->finish(self->parser_.get().result_int(), "");
      }
      if (self->timed_out_) return self->finish(-1, fmt::format("no reply in {} s", self->timeout_s_));
      self->finish(-1, fmt::format("closed without a whole reply: {}", ec.message()));
    });
  }

  void finish(int status, std::string error) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    error_code ignored;
    socket_.close(ignored);
    done_(status, status > 0 ? std::move(parser_.get().body()) : std::string(), std::move(error));
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  const tcp::resolver::results_type& endpoints_;
  const std::string& bytes_;
  bool close_after_write_;
  double timeout_s_;
  Done done_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool finished_ = false;
  bool timed_out_ = false;
};

// The value of an unlabelled sample `name` in a Prometheus text page, or -1.
double sample_value(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ' ') {
      try {
        return std::stod(line.substr(name.size() + 1));
      } catch (const std::exception&) {
        return -1.0;
      }
    }
  }
  return -1.0;
}

// An OpenAI error body: {"error": {"message": "...", ...}}.
bool is_openai_error(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
         j["error"]["message"].is_string();
}

// Bounds of a soak's settings: connections one client process can hold, and a week of time (so that
// every deadline fits the clock's integer ticks).
constexpr int64_t kMaxClients = 1 << 16;
constexpr double kMaxSeconds = 7 * 24 * 3600.0;

}  // namespace

void check_soak_spec(const SoakSpec& spec) {
  SY_CHECK(spec.clients > 0 && spec.clients <= kMaxClients,
           "--clients {}: expected 1 to {} (each is an open connection)", spec.clients, kMaxClients);
  SY_CHECK(
      spec.duration_s > 0 && spec.duration_s <= kMaxSeconds && spec.window_s > 0 && spec.window_s <= spec.duration_s,
      "--duration {} and --window {}: expected 0 < window <= duration <= {} s", spec.duration_s, spec.window_s,
      kMaxSeconds);
  SY_CHECK(spec.reply_timeout_s > 0 && spec.reply_timeout_s <= kMaxSeconds && spec.sample_interval_s > 0,
           "--reply-timeout {}: expected 0 < seconds <= {}", spec.reply_timeout_s, kMaxSeconds);
  SY_CHECK(spec.disconnect_fraction >= 0 && spec.malformed_fraction >= 0 &&
               spec.disconnect_fraction + spec.malformed_fraction <= 1,
           "--disconnect-fraction {} and --malformed-fraction {}: expected fractions in [0, 1] summing to at most 1",
           spec.disconnect_fraction, spec.malformed_fraction);
}

namespace {

class Soak : public StreamHost {
 public:
  Soak(const SoakSpec& spec, const std::vector<std::string>& bodies) : spec_(spec), bodies_(bodies), rng_(spec.seed) {
    SY_CHECK(!bodies.empty(), "a soak needs at least one request body");
    check_soak_spec(spec);
    raise_open_files_limit();
    tcp::resolver resolver(io_);
    error_code ec;
    endpoints_ = resolver.resolve(spec.load.url.host, spec.load.url.port, ec);
    SY_CHECK(!ec, "{}: cannot resolve {}: {}", spec.load.url.str(), spec.load.url.host, ec.message());
    cases_ = malformed_cases(spec.load.url, spec.load.route, spec.model);
    metrics_request_ = raw_request(spec.load.url, "GET", "/metrics", "", "Connection: close\r\n");
  }

  SoakResult run() {
    // A baseline before any client connects, and the last sample once they have all gone.
    begin_ = Clock::now();
    result_.baseline = sample_alone();
    begin_ = Clock::now();
    end_ = begin_ + duration(spec_.duration_s);
    for (int64_t i = 0; i < spec_.clients; ++i) launch();
    sample();
    deadline_.expires_at(end_ + duration(spec_.reply_timeout_s));
    deadline_.async_wait([this](const error_code& ec) {
      if (ec || in_flight_ == 0) return;
      add_failure(
          fmt::format("{} requests still in flight {} s after the soak's end", in_flight_, spec_.reply_timeout_s));
      result_.failed += static_cast<int64_t>(in_flight_);
      hung_ = true;
      io_.stop();
    });
    io_.run();
    if (spec_.progress) std::fputc('\n', stderr);
    result_.duration_s = seconds(Clock::now() - begin_);
    if (!hung_) {
      idle_.clear();  // the kept-alive connections close; the server gets a moment to see it
      std::this_thread::sleep_for(std::chrono::seconds(1));
      result_.after = sample_alone();
    }
    summarize_memory();
    return std::move(result_);
  }

  asio::io_context& io() override { return io_; }
  const tcp::resolver::results_type& endpoints() const override { return endpoints_; }
  const LoadSpec& spec() const override { return spec_.load; }

  void stream_done(size_t, RequestOutcome outcome, std::optional<tcp::socket> keep) override {
    if (keep) idle_.push_back(std::move(*keep));
    if (outcome.cut_by_client) {
      ++result_.cut;
    } else if (outcome.success) {
      ++result_.completed;
      result_.output_tokens += outcome.output_tokens;
    } else {
      ++result_.failed;
      add_failure("well-formed request: " + outcome.error);
    }
    finished_one();
  }

 private:
  void launch() {
    if (Clock::now() >= end_) return;  // this client is done
    ++in_flight_;
    const double u = uniform_(rng_);
    if (u < spec_.malformed_fraction) {
      const MalformedCase& c = cases_[std::uniform_int_distribution<size_t>(0, cases_.size() - 1)(rng_)];
      std::make_shared<RawExchange>(
          io_, endpoints_, c.bytes, c.close_after_write, spec_.reply_timeout_s,
          [this, &c](int status, std::string body, std::string error) { malformed_done(c, status, body, error); })
          ->start();
      return;
    }
    const int64_t cut = u < spec_.malformed_fraction + spec_.disconnect_fraction
                            ? std::uniform_int_distribution<int64_t>(0, spec_.max_cut_chunks)(rng_)
                            : -1;
    std::optional<tcp::socket> idle;
    if (!idle_.empty()) {
      idle.emplace(std::move(idle_.back()));
      idle_.pop_back();
    }
    const size_t i = next_++;
    start_stream(*this, i, bodies_[i % bodies_.size()], std::move(idle), cut);
  }

  void malformed_done(const MalformedCase& c, int status, const std::string& body, const std::string& error) {
    ++result_.malformed;
    ++result_.malformed_by_case[c.name];
    if (c.close_after_write) {
      if (!error.empty()) {
        ++result_.malformed_wrong;
        add_failure(fmt::format("malformed request {}: {}", c.name, error));
      }
    } else if (status != c.expected_status || !is_openai_error(body)) {
      ++result_.malformed_wrong;
      add_failure(fmt::format("malformed request {}: expected {} with an OpenAI error body, got {}{}", c.name,
                              c.expected_status, status > 0 ? std::to_string(status) : error,
                              status > 0 ? ": " + body.substr(0, 200) : ""));
    }
    finished_one();
  }

  void finished_one() {
    --in_flight_;
    launch();
    if (in_flight_ == 0) deadline_.cancel();  // past the end: every client is done
  }

  void add_failure(std::string line) {
    if (result_.failures.size() < 10) result_.failures.push_back(std::move(line));
  }

  // GET /metrics on the io thread, every interval until the duration is up.
  void sample() {
    const double t = seconds(Clock::now() - begin_);
    std::make_shared<RawExchange>(io_, endpoints_, metrics_request_, false, spec_.reply_timeout_s,
                                  [this, t](int status, std::string body, std::string) {
                                    if (status == 200) result_.samples.push_back(parse_sample(body, t));
                                    show_progress(t);
                                  })
        ->start();
    if (Clock::now() >= end_) return;
    sampler_.expires_after(duration(spec_.sample_interval_s));
    sampler_.async_wait([this](const error_code& ec) {
      if (!ec) sample();
    });
  }

  static MemorySample parse_sample(const std::string& page, double t) {
    return {.t_s = t,
            .resident_bytes = sample_value(page, "process_resident_memory_bytes"),
            .open_fds = sample_value(page, "process_open_fds")};
  }

  // One sample while nothing else runs on the io context (bounded by the reply timeout).
  MemorySample sample_alone() {
    const double t = seconds(Clock::now() - begin_);
    MemorySample out{.t_s = t};
    std::make_shared<RawExchange>(io_, endpoints_, metrics_request_, false, spec_.reply_timeout_s,
                                  [&out, t](int status, std::string body, std::string) {
                                    if (status == 200) out = parse_sample(body, t);
                                  })
        ->start();
    io_.restart();
    io_.run();
    io_.restart();
    return out;
  }

  void show_progress(double t) {
    if (!spec_.progress) return;
    const MemorySample* last = result_.samples.empty() ? nullptr : &result_.samples.back();
    std::fprintf(stderr, "\rsoak %.0f/%.0f s: %ld completed, %ld cut, %ld malformed, %ld failed, rss %.1f MiB   ", t,
                 spec_.duration_s, static_cast<long>(result_.completed), static_cast<long>(result_.cut),
                 static_cast<long>(result_.malformed), static_cast<long>(result_.failed + result_.malformed_wrong),
                 last != nullptr ? last->resident_bytes / (1 << 20) : -1.0);
    std::fflush(stderr);
  }

  // The largest resident memory of the first window and of the last (samples taken while new requests
  // still started).
  void summarize_memory() {
    for (const MemorySample& s : result_.samples) {
      if (s.resident_bytes < 0) continue;
      if (s.t_s <= spec_.window_s) result_.first_window_rss = std::max(result_.first_window_rss, s.resident_bytes);
      if (s.t_s >= spec_.duration_s - spec_.window_s && s.t_s <= spec_.duration_s) {
        result_.last_window_rss = std::max(result_.last_window_rss, s.resident_bytes);
      }
    }
  }

  const SoakSpec& spec_;
  const std::vector<std::string>& bodies_;
  asio::io_context io_{1};
  asio::steady_timer sampler_{io_};
  asio::steady_timer deadline_{io_};
  tcp::resolver::results_type endpoints_;
  std::vector<MalformedCase> cases_;
  std::string metrics_request_;
  std::vector<tcp::socket> idle_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  size_t next_ = 0;
  size_t in_flight_ = 0;
  bool hung_ = false;  // requests were still in flight at the deadline
  Clock::time_point begin_, end_;
  SoakResult result_;
};

}  // namespace

SoakResult run_soak(const SoakSpec& spec, const std::vector<std::string>& bodies) {
  Soak soak(spec, bodies);
  return soak.run();
}

}  // namespace sy::bench
