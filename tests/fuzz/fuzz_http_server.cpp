// libFuzzer: the bytes a client sends to the HTTP transport (server/http_server.cpp). One server with small
// limits runs on 127.0.0.1 for the whole process; each input is written to a fresh connection whose write
// side is then shut, and what comes back must be well-formed HTTP/1.1 replies that the transport or this
// harness's handler can send, the server must close within a few seconds, and a fresh connection must still
// get its 200. A failed check aborts, which libFuzzer reports with the input.
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fuzz_util.h"
#include "server/http_server.h"

namespace {

namespace http = boost::beast::http;
using sy::server::HttpExchange;
using sy::server::HttpRequest;

constexpr size_t kBodyLimit = 4096;
// The whole exchange of one connection must end within this: the server sees the client's end of input at
// once, so only a connection the server forgets to close can take this long.
constexpr auto kDeadline = std::chrono::seconds(5);
constexpr int kStreamEvents = 3;
constexpr std::string_view kStreamBody = "data: 0\n\ndata: 1\n\ndata: 2\n\n";
// What the transport (100, 400, 408, 413, 431) and the handler below (200) can answer.
constexpr int kStatuses[] = {100, 200, 400, 408, 413, 431};

[[noreturn]] void fail(std::string_view what, std::string_view reply) {
  std::fprintf(stderr, "fuzz_http_server: %.*s\n--- the server's reply, %zu bytes ---\n%.*s\n--- end ---\n",
               static_cast<int>(what.size()), what.data(), reply.size(), static_cast<int>(reply.size()), reply.data());
  std::abort();
}

[[noreturn]] void fail_errno(std::string_view call, std::string_view reply) {
  fail(fmt::format("{} failed: {}", call, std::strerror(errno)), reply);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string echo_body(const HttpRequest& r) {
  return fmt::format(R"({{"method":{},"path":{},"body_bytes":{}}})", json_string(r.method), json_string(r.path),
                     r.body.size());
}

// One event per turn of the io loop, so that the stream's writes interleave with the socket's other work.
void send_events(std::shared_ptr<HttpExchange> exchange, int next) {
  if (exchange->client_gone()) return;
  if (next == kStreamEvents) return exchange->end_stream();
  exchange->send_event(fmt::format("data: {}\n\n", next));
  exchange->post([exchange, next] { send_events(exchange, next + 1); });
}

// GET or POST /stream: a chunked event stream of kStreamEvents events; anything else: 200 with the method,
// path and body size.
void handle(HttpRequest r, std::shared_ptr<HttpExchange> exchange) {
  if (r.path == "/stream" && (r.method == "GET" || r.method == "POST")) {
    exchange->start_stream();
    exchange->post([exchange] { send_events(exchange, 0); });
    return;
  }
  exchange->reply(200, echo_body(r));
}

// The server's port. The server is made on the first call and never destroyed: its io thread runs until the
// process exits.
int server_port() {
  static sy::server::HttpServer* server = nullptr;
  static const int port = [] {
    server = new sy::server::HttpServer(
        {.host = "127.0.0.1", .port = 0, .body_limit = kBodyLimit, .read_timeout_seconds = 1.0}, handle);
    const int p = server->port();
    std::thread([] { server->run(); }).detach();
    return p;
  }();
  return port;
}

// Waits for `events` on `fd` until `deadline` (through the signals libFuzzer's timers send); false once the
// deadline has passed.
bool wait_for(int fd, short events, short& revents, std::chrono::steady_clock::time_point deadline,
              std::string_view reply) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) fail_errno("poll", reply);
    if (ready == 0) return false;
    revents = p.revents;
    return true;
  }
}

// Connects, writes `request` while reading what comes back, then (with `half_close`) shuts the write side,
// and reads until the server closes. Aborts if that takes longer than kDeadline or the server resets the
// connection (it would have dropped bytes it was sent).
std::string send_and_read(std::string_view request, bool half_close) {
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  const auto late = [&](std::string_view what) { fail(fmt::format("{} within {} s", what, kDeadline.count()), reply); };
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket", reply);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  short revents = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) fail_errno("connect", reply);
    if (!wait_for(fd, POLLOUT, revents, deadline, reply)) late("no connection");
    int error = 0;
    socklen_t len = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) fail_errno("getsockopt", reply);
    errno = error;
    if (error != 0) fail_errno("connect", reply);
  }
  size_t sent = 0;
  bool shut = false;
  for (;;) {
    if (half_close && !shut && sent == request.size()) {
      if (shutdown(fd, SHUT_WR) != 0) fail_errno("shutdown", reply);
      shut = true;
    }
    const short events = static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0));
    if (!wait_for(fd, events, revents, deadline, reply)) {
      late(fmt::format("the server did not close the connection ({} of {} bytes written)", sent, request.size()));
    }
    if ((revents & POLLOUT) != 0) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("send", reply);
    }
    if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[16384];
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n == 0) break;
      if (n > 0) reply.append(buf, static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("recv", reply);
    }
  }
  // The server has closed (or half-closed and is draining): a reset instead of a close leaves no TIME_WAIT
  // socket behind, which two connections an input would otherwise pile up past the ephemeral ports.
  const linger reset{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
  return reply;
}

bool has_status(int status) {
  for (const int s : kStatuses) {
    if (s == status) return true;
  }
  return false;
}

bool ends_with_body_bytes(std::string_view body, size_t limit) {
  constexpr std::string_view kKey = ",\"body_bytes\":";
  const size_t at = body.rfind(kKey);
  if (!body.starts_with("{\"method\":\"") || at == std::string_view::npos || !body.ends_with('}')) return false;
  const std::string_view digits = body.substr(at + kKey.size(), body.size() - at - kKey.size() - 1);
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  return std::stoul(std::string(digits)) <= limit;
}

// Checks one complete reply against what its status allows.
void check_reply(const http::response<http::string_body>& m, std::string_view raw, std::string_view all) {
  const int status = m.result_int();
  if (!has_status(status)) fail(fmt::format("a reply with status {}, which nothing here sends", status), all);
  if (m.version() != 11) fail("a reply that is not HTTP/1.1", all);
  if (status == 100) {
    if (raw != "HTTP/1.1 100 Continue\r\n\r\n") fail("a 100 reply other than the transport's", all);
    return;
  }
  if (m[http::field::server] != "switchyard") fail("a reply without 'Server: switchyard'", all);
  if (m.has_content_length() == m.chunked()) fail("a reply framed by neither or both of length and chunks", all);
  if (status == 200 && m.chunked()) {
    if (m[http::field::content_type] != "text/event-stream") fail("a stream that is not text/event-stream", all);
    if (m.body() != kStreamBody) fail("a stream whose events are not the handler's", all);
  } else if (status == 200) {
    if (m[http::field::content_type] != "application/json") fail("a reply that is not application/json", all);
    if (!ends_with_body_bytes(m.body(), kBodyLimit)) {
      fail(fmt::format("a 200 whose body is not the handler's echo of a body within {} bytes", kBodyLimit), all);
    }
  } else {
    // The transport's refusals: an OpenAI error body, and the connection closes after them.
    if (m.keep_alive()) fail(fmt::format("a {} that does not close the connection", status), all);
    if (m.body().find(fmt::format(R"("code":{}}}}})", status)) == std::string::npos) {
      fail(fmt::format("a {} without its error body", status), all);
    }
  }
}

struct Replies {
  std::vector<int> statuses;  // of the complete replies, in order
  bool cut = false;           // the last reply stops short
};

// Parses what a connection got back as a sequence of replies. Only the last may stop short: the transport
// takes the client's end of input for the client going away, and drops the rest of the reply it was
// writing (a stream's later events, pipelined requests' replies).
Replies parse_replies(std::string_view all) {
  Replies out;
  std::string_view rest = all;
  while (!rest.empty()) {
    constexpr std::string_view kStart = "HTTP/1.1 ";
    if (!rest.starts_with(kStart) && !kStart.starts_with(rest)) fail("a reply that does not start 'HTTP/1.1 '", all);
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    boost::beast::error_code ec;
    size_t used = 0;
    while (!parser.is_done()) {
      const size_t n = parser.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
      used += n;
      if (ec == http::error::need_more && n > 0) {
        ec = {};
        continue;
      }
      if (ec) break;
    }
    if (ec == http::error::need_more) {
      if (parser.is_header_done()) {
        const http::response<http::string_body>& m = parser.get();
        if (!has_status(m.result_int())) {
          fail(fmt::format("a reply with status {}, which nothing here sends", m.result_int()), all);
        }
        if (m.has_content_length() == m.chunked()) fail("a reply framed by neither or both of length and chunks", all);
      }
      out.cut = true;
      return out;
    }
    if (ec) fail(fmt::format("a reply that is not well-formed HTTP: {}", ec.message()), all);
    const http::response<http::string_body>& m = parser.get();
    check_reply(m, rest.substr(0, used), all);
    if (m.result_int() == 100 && !out.statuses.empty() && out.statuses.back() == 100) {
      fail("two 100 replies without a final reply between them", all);
    }
    out.statuses.push_back(m.result_int());
    rest.remove_prefix(used);
    if (m.result_int() != 100 && !m.keep_alive() && !rest.empty()) {
      fail("bytes after a reply that closes the connection", all);
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parse_replies(send_and_read(sy::fuzz::as_text(data, size), /*half_close=*/true));

  // The server goes on serving: a well-formed request on a fresh connection gets its whole 200.
  const std::string reply = send_and_read("GET /health HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n", false);
  const Replies r = parse_replies(reply);
  if (r.cut || r.statuses != std::vector<int>{200}) fail("after the input, a fresh request did not get its 200", reply);
  return 0;
}
