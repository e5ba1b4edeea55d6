// The Beast/Asio connection state machine: read a request (header, then body, under one timer), hand it
// to the handler, write its reply (whole, or chunked as it is produced) while watching the socket for the
// client going away, then read the next request or close.
#include "server/http_server.h"

#include <sys/resource.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <unordered_set>
#include <vector>

#include "base/check.h"
#include "base/log.h"

namespace sy::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t kHeaderLimit = 64 << 10;
// Bytes read ahead while a reply is produced (a pipelined request); past this the socket is left alone.
constexpr size_t kReadAheadLimit = 1 << 20;
// After an error reply that closes the connection, what the client still sends is read and dropped for
// this long, so that it sees the reply rather than a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
// The most bytes a connection holds unparsed: the read-ahead, or one header, chunk line or trailer (Beast
// bounds the header by kHeaderLimit, but neither chunk lines nor trailers). Past it the request gets a 431.
constexpr size_t kBufferLimit = kReadAheadLimit + kHeaderLimit;

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// The OpenAI error body the transport's own refusals carry (the router's share the shape).
std::string transport_error(int status, const std::string& message, const char* type) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":{}}}}})", escaped, type, status);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerConfig config;
  HttpHandler handler;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry_accept{io};
  asio::steady_timer grace{io};
  std::unordered_set<Session*> sessions;  // open connections; touched on the io thread only
  bool shutting_down = false;

  void accept();
  void session_closed(Session* s) {
    sessions.erase(s);
    if (shutting_down && sessions.empty()) finish();
  }
  // Ends run(): every connection is closed (pending waits, such as the server's signal wait, are dropped).
  void finish() {
    grace.cancel();
    io.stop();
  }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : socket_(std::move(socket)), timer_(server.io), server_(server) {}
  ~Session() {
    if (!closed_) server_.session_closed(this);
  }

  void start() {
    server_.sessions.insert(this);
    read_request();
  }

  asio::io_context& io() { return server_.io; }
  uint64_t exchange() const { return exchange_; }

  bool current(uint64_t exchange) const { return exchange == exchange_ && !closed_ && !response_done_; }

  void reply(uint64_t exchange, int status, std::string body, std::string_view content_type) {
    if (!current(exchange) || response_started_) return;
    response_started_ = true;
    response_done_ = true;
    std::string out = head(status, content_type);
    out += fmt::format("Content-Length: {}\r\n\r\n", body.size());
    out += body;
    queue(std::move(out));
  }

  void start_stream(uint64_t exchange, std::string_view content_type) {
    if (!current(exchange) || response_started_) return;
    response_started_ = true;
    queue(head(200, content_type) + "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
  }

  void send_chunk(uint64_t exchange, std::string_view data) {
    if (!current(exchange) || !response_started_ || data.empty()) return;
    queue(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
  }

  void end_stream(uint64_t exchange) {
    if (!current(exchange) || !response_started_) return;
    response_done_ = true;
    queue("0\r\n\r\n");
  }

  void on_client_gone(uint64_t exchange, std::function<void()> f) {
    if (exchange != exchange_) return;
    if (gone_) {
      f();
      return;
    }
    on_gone_ = std::move(f);
  }
  bool gone() const { return gone_ || closed_; }

  // The server stops: an idle connection closes now, a busy one after its reply.
  void shutdown() {
    if (state_ == State::reading) return close();
    keep_alive_ = false;
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    state_ = State::closed;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
    client_gone();
    server_.session_closed(this);
  }

 private:
  enum class State { reading, handling, lingering, closed };

  std::string head(int status, std::string_view content_type) const {
    return fmt::format("HTTP/1.1 {} {}\r\nServer: switchyard\r\nContent-Type: {}\r\n{}", status,
                       sv(http::obsolete_reason(static_cast<http::status>(status))), content_type,
                       keep_alive_ ? "" : "Connection: close\r\n");
  }

  void read_request() {
    if (closed_) return;
    if (server_.shutting_down) return close();
    state_ = State::reading;
    ++exchange_;
    response_started_ = response_done_ = next_wanted_ = timed_out_ = false;
    on_gone_ = nullptr;
    parser_.emplace();
    parser_->body_limit(server_.config.body_limit);
    parser_->header_limit(kHeaderLimit);
    timer_.expires_after(seconds(server_.config.read_timeout_seconds));
    timer_.async_wait([self = shared_from_this(), ex = exchange_](error_code ec) {
      if (ec || self->exchange_ != ex || self->state_ != State::reading) return;
      self->timed_out_ = true;
      error_code ignored;
      self->socket_.cancel(ignored);
    });
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) return on_read_error(ec);
    if (parser_->is_done()) return dispatch();
    const auto& h = parser_->get();
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue), [self = shared_from_this()](error_code ec2, size_t) {
        if (ec2) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->on_read_error(ec);
      self->dispatch();
    });
  }

  void on_read_error(error_code ec) {
    timer_.cancel();
    const bool started = parser_->got_some() || buffer_.size() > 0;
    if (timed_out_) {
      if (!started) return close();
      return refuse(408, "the request did not arrive whole within the read timeout", "RequestTimeoutError");
    }
    if (ec == http::error::body_limit) {
      return refuse(
          413, fmt::format("the request body is larger than the server's limit of {} bytes", server_.config.body_limit),
          "RequestEntityTooLargeError");
    }
    if (ec == http::error::header_limit) {
      return refuse(431, "the request header is too large", "RequestHeaderFieldsTooLargeError");
    }
    if (ec == http::error::buffer_overflow) {
      return refuse(431, "a chunk line or the trailer of the request is too large", "RequestHeaderFieldsTooLargeError");
    }
    if (ec.category() == error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      return refuse(400, fmt::format("malformed HTTP request: {}", ec.message()), "BadRequestError");
    }
    close();  // the client closed or reset the connection, or the server is stopping
  }

  // An error reply of the transport itself, after which the connection closes.
  void refuse(int status, const std::string& message, const char* type) {
    state_ = State::handling;
    keep_alive_ = false;
    reply(exchange_, status, transport_error(status, message, type), "application/json");
  }

  void dispatch() {
    timer_.cancel();
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive();
    state_ = State::handling;
    HttpRequest r;
    r.method = std::string(sv(req.method_string()));
    const std::string_view target = sv(req.target());
    r.path = std::string(target.substr(0, target.find('?')));
    r.authorization = std::string(sv(req[http::field::authorization]));
    r.body = std::move(req.body());
    r.received = std::chrono::steady_clock::now();
    watch();
    server_.handler(std::move(r), std::make_shared<HttpExchange>(shared_from_this()));
  }

  // While a reply is produced the socket is read, so that a client that closes is noticed at once (and
  // its request aborted); bytes that arrive are kept for the next request.
  void watch() {
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      self->watching_ = false;
      if (self->closed_) return;
      if (!ec) {
        self->buffer_.commit(n);
        if (self->next_wanted_) return self->read_request();
        if (self->buffer_.size() < kReadAheadLimit) self->watch();
        return;
      }
      if (ec == asio::error::operation_aborted) {
        if (self->next_wanted_) self->read_request();
        return;
      }
      self->close();
    });
  }

  void queue(std::string data) {
    out_pending_ += data;
    if (!writing_) flush();
  }

  void flush() {
    writing_ = true;
    out_writing_.swap(out_pending_);
    out_pending_.clear();
    asio::async_write(socket_, asio::buffer(out_writing_), [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      if (self->out_writing_.capacity() > (64 << 10)) {
        std::string().swap(self->out_writing_);
      } else {
        self->out_writing_.clear();
      }
      if (self->closed_) return;
      if (ec) return self->close();
      if (!self->out_pending_.empty()) return self->flush();
      if (self->response_done_) self->after_response();
    });
  }

  void after_response() {
    if (!keep_alive_ || server_.shutting_down) return linger();
    if (watching_) {
      next_wanted_ = true;
      error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    read_request();
  }

  // Half-close, read and drop what the client still sends for a moment, then close.
  void linger() {
    state_ = State::lingering;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    timer_.expires_after(kLingerTime);
    timer_.async_wait([self = shared_from_this()](error_code e) {
      if (!e) self->close();
    });
    if (!watching_) drain();
  }

  void drain() {
    static std::array<char, 16384> sink;  // written and never read; the io thread is the only user
    socket_.async_read_some(asio::buffer(sink), [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close();
      self->drain();
    });
  }

  void client_gone() {
    if (gone_) return;
    gone_ = true;
    if (on_gone_) {
      auto f = std::move(on_gone_);
      on_gone_ = nullptr;
      f();
    }
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_{kBufferLimit};
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::reading;
  uint64_t exchange_ = 0;  // the request being read or answered; an HttpExchange of an older one is stale
  bool keep_alive_ = true;
  bool response_started_ = false;
  bool response_done_ = false;
  bool timed_out_ = false;
  bool watching_ = false;
  bool next_wanted_ = false;
  bool writing_ = false;
  bool gone_ = false;
  bool closed_ = false;
  std::string out_pending_;
  std::string out_writing_;
  std::function<void()> on_gone_;
};

HttpExchange::HttpExchange(std::shared_ptr<Session> session) : session_(std::move(session)) {
  exchange_ = session_->exchange();
}

void HttpExchange::reply(int status, std::string body, std::string_view content_type) {
  session_->reply(exchange_, status, std::move(body), content_type);
}
void HttpExchange::start_stream(std::string_view content_type) { session_->start_stream(exchange_, content_type); }
void HttpExchange::send_event(std::string_view data) { session_->send_chunk(exchange_, data); }
void HttpExchange::end_stream() { session_->end_stream(exchange_); }
void HttpExchange::on_client_gone(std::function<void()> on_gone) {
  session_->on_client_gone(exchange_, std::move(on_gone));
}
bool HttpExchange::client_gone() const { return session_->gone(); }
void HttpExchange::post(std::function<void()> f) const { asio::post(session_->io(), std::move(f)); }

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: wait a moment instead of spinning.
      log_warn("accept failed: {}; retrying", ec.message());
      retry_accept.expires_after(std::chrono::milliseconds(100));
      retry_accept.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<Session>(std::move(socket), *this)->start();
    accept();
  });
}

HttpServer::HttpServer(const HttpServerConfig& config, HttpHandler handler) : impl_(std::make_unique<Impl>()) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  impl_->config = config;
  impl_->handler = std::move(handler);
  error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(config.host, std::to_string(config.port), ec);
  SY_CHECK(!ec && !endpoints.empty(), "cannot resolve --host {}: {}", config.host, ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  SY_CHECK(!ec, "cannot listen on {}:{}: {}; pick another --port (0 picks a free one)", config.host, config.port,
           ec.message());
  impl_->accept();
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }
asio::io_context& HttpServer::io() { return impl_->io; }
void HttpServer::run() { impl_->io.run(); }

void HttpServer::stop_accepting() {
  asio::post(impl_->io, [impl = impl_.get()] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry_accept.cancel();
  });
}

void HttpServer::shutdown() {
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->shutting_down = true;
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry_accept.cancel();
    const std::vector<Session*> open(impl->sessions.begin(), impl->sessions.end());
    for (Session* s : open) s->shutdown();
    if (impl->sessions.empty()) return impl->finish();
    impl->grace.expires_after(seconds(impl->config.shutdown_grace_seconds));
    impl->grace.async_wait([impl](error_code ec) {
      if (ec) return;
      const std::vector<Session*> left(impl->sessions.begin(), impl->sessions.end());
      for (Session* s : left) s->close();
    });
  });
}

}  // namespace sy::server
