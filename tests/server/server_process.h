// A `switchyard serve` process started by a test (port 0, the port read from its log), and a small
// blocking HTTP/1.1 client over loopback for talking to it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sy::test {

// The bundled model with a tokenizer: config.json only (random weights), Qwen3's tokenizer.
inline std::string tiny_model_args() {
  return std::string("--model ") + SY_SOURCE_DIR +
         "/tests/fixtures/text/qwen3_tiny_random --random-weights --tokenizer " + SY_SOURCE_DIR +
         "/../shared/data/tokenizers/qwen3";
}

class ServerProcess {
 public:
  // Starts `switchyard serve --port 0 <args>` and waits (up to 60 s) for its "listening on" line.
  explicit ServerProcess(const std::string& args) {
    char path[] = "/tmp/switchyard-serve-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    log_path_ = path;
    const std::string cmd = std::string("exec ") + SY_BINARY + " serve --port 0 " + args;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fd);
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 600; ++i) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, listening)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("switchyard serve exited before listening:\n" + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("switchyard serve did not start listening in 60 s:\n" + log());
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(log_path_.c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // VmRSS of /proc/PID/status, in KiB.
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }
  // Sends `signo` and waits up to `seconds` for the exit; the exit code, or -1 on a timeout or a signal death.
  int stop(int signo, double seconds) {
    kill(pid_, signo);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

struct HttpResponse {
  int status = 0;                              // 0: no response (connection closed or timed out first)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
};

// Parses one whole response from `raw`; nullopt while it is incomplete.
inline std::optional<HttpResponse> parse_response(const std::string& raw, bool closed) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::nullopt;
  HttpResponse r;
  std::istringstream head(raw.substr(0, head_end));
  std::string line;
  std::getline(head, line);
  if (line.size() < 12) return std::nullopt;
  r.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(c));
    r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
  }
  size_t pos = head_end + 4;
  if (r.status == 100) return parse_response(raw.substr(pos), closed);
  if (r.headers.count("content-length") != 0) {
    const size_t n = std::stoul(r.headers["content-length"]);
    if (raw.size() < pos + n) return std::nullopt;
    r.body = raw.substr(pos, n);
    return r;
  }
  if (r.headers["transfer-encoding"] == "chunked") {
    while (true) {
      const size_t eol = raw.find("\r\n", pos);
      if (eol == std::string::npos) return std::nullopt;
      const size_t n = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
      if (raw.size() < eol + 2 + n + 2) return std::nullopt;
      if (n == 0) return r;
      r.body += raw.substr(eol + 2, n);
      pos = eol + 2 + n + 2;
    }
  }
  if (!closed) return std::nullopt;
  r.body = raw.substr(pos);
  return r;
}

// Sends `raw` on a new connection and reads one response (up to `timeout` seconds).
inline HttpResponse round_trip(int port, const std::string& raw, double timeout = 30.0) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, raw);
  std::string in;
  char buf[65536];
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  bool closed = false;
  while (std::chrono::steady_clock::now() < end) {
    if (auto r = parse_response(in, closed)) {
      close(fd);
      return *r;
    }
    if (closed) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed = true;
      continue;
    }
    in.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return {};
}

inline std::string http_request(const std::string& method, const std::string& path, const std::string& body,
                                const std::string& extra_headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

inline HttpResponse post(int port, const std::string& path, const std::string& body, const std::string& headers = "") {
  return round_trip(port, http_request("POST", path, body, headers));
}

inline HttpResponse get(int port, const std::string& path, const std::string& headers = "") {
  return round_trip(port, http_request("GET", path, "", headers));
}

// Many requests at once over their own connections, read by one poll() loop (no thread per client).
class Clients {
 public:
  Clients(int port, const std::vector<std::string>& requests) : conns_(requests.size()) {
    for (size_t i = 0; i < requests.size(); ++i) {
      conns_[i].fd = connect_to(port);
      if (conns_[i].fd < 0 || !send_all(conns_[i].fd, requests[i])) conns_[i].closed = true;
    }
  }
  ~Clients() {
    for (auto& c : conns_) {
      if (c.fd >= 0) close(c.fd);
    }
  }
  Clients(const Clients&) = delete;
  Clients& operator=(const Clients&) = delete;

  size_t size() const { return conns_.size(); }
  const std::string& received(size_t i) const { return conns_[i].in; }
  // The whole response, once it has arrived.
  std::optional<HttpResponse> response(size_t i) const { return parse_response(conns_[i].in, conns_[i].closed); }
  bool finished(size_t i) const { return conns_[i].closed || response(i).has_value(); }
  bool all_finished() const {
    for (size_t i = 0; i < size(); ++i) {
      if (!finished(i)) return false;
    }
    return true;
  }
  // Closes connection i, as a client that goes away.
  void drop(size_t i) {
    close(conns_[i].fd);
    conns_[i].fd = -1;
    conns_[i].closed = true;
  }
  // Reads what arrives until `done()` holds (true) or `timeout` seconds pass (false).
  bool pump(const std::function<bool()>& done, double timeout) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    std::vector<pollfd> fds;
    std::vector<size_t> index;
    char buf[65536];
    while (!done()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      fds.clear();
      index.clear();
      for (size_t i = 0; i < conns_.size(); ++i) {
        if (conns_[i].closed) continue;
        fds.push_back({conns_[i].fd, POLLIN, 0});
        index.push_back(i);
      }
      if (fds.empty()) return done();
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Conn& c = conns_[index[k]];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          c.closed = true;
        } else {
          c.in.append(buf, static_cast<size_t>(n));
        }
      }
    }
    return true;
  }

 private:
  struct Conn {
    int fd = -1;
    std::string in;
    bool closed = false;
  };
  std::vector<Conn> conns_;
};

// The `data:` payloads of an event stream, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (true) {
    const size_t start = body.find("data: ", pos);
    if (start == std::string::npos) break;
    const size_t end = body.find("\n\n", start);
    if (end == std::string::npos) break;
    events.push_back(body.substr(start + 6, end - start - 6));
    pos = end + 2;
  }
  return events;
}

// A value of a Prometheus sample line "name{labels} value" (the first line starting with `prefix`).
inline double metric(const std::string& page, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = page.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || page[pos - 1] == '\n') {
      const size_t eol = page.find('\n', pos);
      const std::string line = page.substr(pos, eol - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  return -1.0;
}

}  // namespace sy::test
