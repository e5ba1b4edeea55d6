// Where a server lives (--base-url or --host/--port) and a blocking keep-alive HTTP/1.1 session for the
// few calls made before a run (/v1/models, /tokenize, /detokenize).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace sy::bench {

struct BaseUrl {
  std::string host;    // "127.0.0.1"
  std::string port;    // "30000"
  std::string prefix;  // path before /v1/..., "" or "/api" (no trailing slash)

  std::string str() const { return "http://" + host + ":" + port + prefix; }
};

// "http://host[:port][/prefix]"; sy::Error for anything else (https is not spoken).
BaseUrl parse_base_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};

// One connection, opened on first use and reopened once when the server has closed it.
class HttpSession {
 public:
  explicit HttpSession(BaseUrl url, std::string api_key = "");
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // `target` is appended to the prefix; sy::Error when the server cannot be reached.
  HttpReply get(const std::string& target);
  HttpReply post(const std::string& target, const nlohmann::json& body);
  // post(), then the reply as JSON; sy::Error naming the route, the status and the body when it is not a 200.
  nlohmann::json post_json(const std::string& target, const nlohmann::json& body);

  const BaseUrl& url() const { return url_; }

 private:
  struct Conn;
  HttpReply call(const std::string& method, const std::string& target, const std::string& body);
  BaseUrl url_;
  std::string api_key_;
  std::unique_ptr<Conn> conn_;
};

// The model the server names first in /v1/models, and its max_model_len when it gives one (else 0);
// sy::Error saying to name it with --model when there is none.
std::pair<std::string, int64_t> served_model(HttpSession& session);

}  // namespace sy::bench
