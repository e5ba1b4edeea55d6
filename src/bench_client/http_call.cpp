// Blocking HTTP for the calls made before a run; the run itself is load.cpp's asynchronous client.
#include "bench_client/http_call.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <optional>
#include <regex>

#include "base/check.h"

namespace sy::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

BaseUrl parse_base_url(const std::string& url) {
  static const std::regex form(R"(^http://([^/:]+|\[[0-9a-fA-F:]+\])(?::(\d+))?(/.*)?$)");
  std::smatch m;
  SY_CHECK(!url.starts_with("https://"), "--base-url {}: https is not spoken; give the plain http:// address", url);
  SY_CHECK(std::regex_match(url, m, form), "--base-url {}: expected http://HOST[:PORT][/PREFIX]", url);
  BaseUrl b{.host = m[1].str(), .port = m[2].matched ? m[2].str() : "80", .prefix = m[3].str()};
  if (b.host.front() == '[') b.host = b.host.substr(1, b.host.size() - 2);
  while (!b.prefix.empty() && b.prefix.back() == '/') b.prefix.pop_back();
  return b;
}

struct HttpSession::Conn {
  asio::io_context io;
  tcp::socket socket{io};
  beast::flat_buffer buffer;
};

HttpSession::HttpSession(BaseUrl url, std::string api_key) : url_(std::move(url)), api_key_(std::move(api_key)) {}
HttpSession::~HttpSession() = default;

HttpReply HttpSession::call(const std::string& method, const std::string& target, const std::string& body) {
  http::request<http::string_body> req{http::string_to_verb(method), url_.prefix + target, 11};
  req.set(http::field::host, url_.host);
  req.set(http::field::user_agent, "switchyard-bench-serve");
  if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
  if (method == "POST") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  for (int attempt = 0;; ++attempt) {
    const bool reused = conn_ != nullptr;
    try {
      if (!conn_) {
        conn_ = std::make_unique<Conn>();
        tcp::resolver resolver(conn_->io);
        asio::connect(conn_->socket, resolver.resolve(url_.host, url_.port));
      }
      http::write(conn_->socket, req);
      http::response_parser<http::string_body> parser;
      // Not boost::none: Beast 1.74 then refuses every Content-Length.
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      http::read(conn_->socket, conn_->buffer, parser);
      HttpReply reply{.status = static_cast<int>(parser.get().result_int()), .body = std::move(parser.get().body())};
      if (!parser.keep_alive()) conn_.reset();
      return reply;
    } catch (const boost::system::system_error& e) {
      conn_.reset();
      // A kept-alive connection the server has since closed gets one fresh attempt.
      SY_CHECK(reused && attempt == 0, "{} {}{}: {}; is the server running there?", method, url_.str(), target,
               e.code().message());
    }
  }
}

HttpReply HttpSession::get(const std::string& target) { return call("GET", target, ""); }

HttpReply HttpSession::post(const std::string& target, const nlohmann::json& body) {
  return call("POST", target, body.dump());
}

nlohmann::json HttpSession::post_json(const std::string& target, const nlohmann::json& body) {
  const HttpReply r = post(target, body);
  SY_CHECK(r.status == 200, "POST {}{} answered {}: {}", url_.str(), target, r.status, r.body.substr(0, 300));
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  SY_CHECK(!j.is_discarded(), "POST {}{}: the reply is not JSON: {}", url_.str(), target, r.body.substr(0, 300));
  return j;
}

std::pair<std::string, int64_t> served_model(HttpSession& session) {
  const HttpReply r = session.get("/v1/models");
  SY_CHECK(r.status == 200, "GET {}/v1/models answered {}: {}; name the model with --model", session.url().str(),
           r.status, r.body.substr(0, 200));
  const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  SY_CHECK(!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
               j["data"][0].contains("id") && j["data"][0]["id"].is_string(),
           "GET {}/v1/models: no model in {}; name it with --model", session.url().str(), r.body.substr(0, 200));
  const nlohmann::json& m = j["data"][0];
  const int64_t max_len =
      m.contains("max_model_len") && m["max_model_len"].is_number_integer() ? m["max_model_len"].get<int64_t>() : 0;
  return {m["id"].get<std::string>(), max_len};
}

}  // namespace sy::bench
