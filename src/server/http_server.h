// HTTP/1.1 transport over Boost.Beast and Asio: every connection is a few asynchronous operations on one
// io thread (no thread per connection), keep-alive, a body limit (413), a read timeout (408, or a plain
// close for an idle keep-alive connection), and replies either whole or as a chunked event stream.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace sy::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string body;
  std::string authorization;                       // the Authorization header, "" when absent
  std::chrono::steady_clock::time_point received;  // when the whole request had arrived
};

class Session;

// One request's reply channel. Every method must be called on the io thread (post() gets there from
// another thread); calls after the client has gone are ignored.
class HttpExchange {
 public:
  explicit HttpExchange(std::shared_ptr<Session> session);

  void reply(int status, std::string body, std::string_view content_type = "application/json");
  // A streamed reply: the header now, then send_event() for each `data: ...\n\n` block, then end_stream().
  void start_stream(std::string_view content_type = "text/event-stream");
  void send_event(std::string_view data);
  void end_stream();
  // `on_gone` runs (on the io thread) once, when the client closes the connection before the reply ended.
  void on_client_gone(std::function<void()> on_gone);
  bool client_gone() const;
  // Runs `f` on the io thread.
  void post(std::function<void()> f) const;

 private:
  std::shared_ptr<Session> session_;
  uint64_t exchange_ = 0;  // which of the connection's requests this answers
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 30000;                     // 0: a free port, see HttpServer::port()
  size_t body_limit = 16 << 20;         // bytes; a larger body is refused with 413
  double read_timeout_seconds = 30.0;   // a request must arrive whole within this (else 408), and a kept-alive
                                        // connection that sends nothing is closed after it
  double shutdown_grace_seconds = 5.0;  // after shutdown(): replies still being written get this long
};

class HttpServer {
 public:
  // Binds and listens (throws sy::Error naming the address when it cannot), with the soft limit of open
  // files raised to the hard one so that thousands of connections fit. `handler` runs on the io thread.
  HttpServer(const HttpServerConfig& config, HttpHandler handler);
  ~HttpServer();
  int port() const;
  boost::asio::io_context& io();
  // Runs the io thread's loop until shutdown() has closed every connection (then it stops the io
  // context, dropping any other wait on it).
  void run();
  // Thread-safe: stop accepting new connections.
  void stop_accepting();
  // Thread-safe: close idle connections, let replies in progress finish (bounded by the grace period),
  // then end run().
  void shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sy::server
