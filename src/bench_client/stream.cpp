// The streaming request of the load clients: connect or reuse, write, read the header, then each event as
// it arrives; the text chunks timed, usage read, error events and cut connections reported.
#include "bench_client/stream.h"

#include <netinet/tcp.h>
#include <sys/resource.h>

#include <boost/asio/connect.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <limits>
#include <memory>

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

void raise_open_files_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(StreamHost& host, size_t index, const std::string& body, std::optional<tcp::socket> idle,
         int64_t cut_after_chunks);
  void start();

 private:
  void connect();
  void write();
  void read_header();
  void read_error_body();
  void read_body();
  void take_body(Clock::time_point now);
  void on_event(std::string_view data, Clock::time_point now);
  bool retry_on_new_connection();
  bool cut_now() const { return cut_after_ >= 0 && out_.chunks >= cut_after_; }
  void finish(std::string error);

  StreamHost& host_;
  size_t index_;
  tcp::socket socket_;
  bool reused_;  // the socket was kept alive from an earlier request
  int64_t cut_after_;
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

Stream::Stream(StreamHost& host, size_t index, const std::string& body, std::optional<tcp::socket> idle,
               int64_t cut_after_chunks)
    : host_(host),
      index_(index),
      socket_(idle ? std::move(*idle) : tcp::socket(host.io())),
      reused_(idle.has_value()),
      cut_after_(cut_after_chunks),
      request_(http::verb::post, host.spec().url.prefix + host.spec().route, 11) {
  request_.set(http::field::host, host.spec().url.host);
  request_.set(http::field::user_agent, "switchyard-bench-serve");
  request_.set(http::field::content_type, "application/json");
  request_.set(http::field::accept, "text/event-stream");
  if (!host.spec().api_key.empty()) request_.set(http::field::authorization, "Bearer " + host.spec().api_key);
  request_.body() = body;
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
  asio::async_connect(socket_, host_.endpoints(),
                      [self = shared_from_this()](const error_code& ec, const tcp::endpoint&) {
                        if (ec) return self->finish("connect: " + ec.message());
                        self->socket_.set_option(tcp::no_delay(true));
                        self->write();
                      });
}

void Stream::write() {
  http::async_write(socket_, request_, [self = shared_from_this()](const error_code& ec, size_t) {
    if (ec) {
      if (self->retry_on_new_connection()) return;
      return self->finish("send: " + ec.message());
    }
    self->read_header();
  });
}

// A kept-alive connection may have been closed by the server while idle: such a request has had no answer
// yet, so it is sent again on a new connection.
bool Stream::retry_on_new_connection() {
  if (!reused_ || (parser_ && parser_->is_header_done())) return false;
  reused_ = false;
  error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(host_.io());
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
      if (self->retry_on_new_connection()) return;
      return self->finish("no response: " + ec.message());
    }
    if (self->parser_->get().result() != http::status::ok) return self->read_error_body();
    self->take_body(Clock::now());
    if (self->parser_->is_done() || self->cut_now()) return self->finish(self->event_error_);
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
    if (self->parser_->is_done() || self->cut_now()) return self->finish("");
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
  const bool done = parser_ && parser_->is_done();
  out_.cut_by_client = error.empty() && cut_after_ >= 0 && !done;
  if (error.empty() && out_.chunks == 0 && !out_.cut_by_client) {
    // Tokens that decode to no text (a random model's padded vocabulary rows, skipped special tokens) make
    // no chunk; with the server's usage the request still generated, and its first text came at the end.
    if (usage_tokens_ > 0) {
      out_.ttft_s = out_.latency_s;
    } else {
      error = "the stream ended without any text";
    }
  }
  out_.success = error.empty() && !out_.cut_by_client;
  out_.error = std::move(error);
  std::optional<tcp::socket> keep;
  if (out_.success && done && parser_->keep_alive()) {
    keep.emplace(std::move(socket_));
  } else {
    error_code ignored;
    socket_.close(ignored);
  }
  host_.stream_done(index_, std::move(out_), std::move(keep));
}

}  // namespace

void start_stream(StreamHost& host, size_t index, const std::string& body, std::optional<tcp::socket> idle,
                  int64_t cut_after_chunks) {
  std::make_shared<Stream>(host, index, body, std::move(idle), cut_after_chunks)->start();
}

}  // namespace sy::bench
