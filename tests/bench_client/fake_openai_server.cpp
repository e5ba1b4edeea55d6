// The fake server's connections: read a request, answer it (a whole JSON reply, or a chunked event stream
// written one chunk per write), then read the next on the same connection.
#include "bench_client/fake_openai_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace sy::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using nlohmann::json;

struct FakeOpenAiServer::State {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  FakeServerOptions options;
  std::atomic<int64_t>* completions = nullptr;
};

namespace {

std::string http_chunk(const std::string& data) {
  std::ostringstream s;
  s << std::hex << data.size() << "\r\n" << data << "\r\n";
  return s.str();
}

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(FakeOpenAiServer::State& state, tcp::socket socket) : state_(state), socket_(std::move(socket)) {}

  void read() {
    request_ = {};
    http::async_read(socket_, buffer_, request_, [self = shared_from_this()](const error_code& ec, size_t) {
      if (!ec) self->answer();
    });
  }

 private:
  void answer() {
    const std::string target(request_.target());
    if (target == "/v1/models") {
      return reply(
          200, json{{"object", "list"},
                    {"data", json::array({{{"id", "fake-model"}, {"object", "model"}, {"max_model_len", 100000}}})}});
    }
    const json body = json::parse(request_.body(), nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return reply(400, json{{"error", {{"message", "not a JSON object"}}}});
    if (target == "/tokenize") {
      json ids = json::array();
      std::istringstream words(body.value("prompt", ""));
      std::string w;
      while (words >> w) ids.push_back(w.size() > 1 && w[0] == 'w' ? std::stoll(w.substr(1)) : 0);
      return reply(200, json{{"tokens", ids}, {"count", ids.size()}});
    }
    if (target == "/detokenize") {
      std::string text;
      for (const auto& id : body["tokens"]) text += (text.empty() ? "w" : " w") + std::to_string(id.get<int64_t>());
      return reply(200, json{{"prompt", text}});
    }
    if (target != "/v1/completions" && target != "/v1/chat/completions") {
      return reply(404, json{{"error", {{"message", "no route " + target}}}});
    }
    const int64_t n = (*state_.completions)++;
    const auto& o = state_.options;
    if (o.fail_every > 0 && n % o.fail_every == o.fail_every - 1) {
      return reply(500, json{{"error", {{"message", "told to fail request " + std::to_string(n)}}}});
    }
    chat_ = target == "/v1/chat/completions";
    // Lax on purpose (a soak must catch it): a max_tokens that is not an integer is taken as 16.
    tokens_ =
        body.contains("max_tokens") && body["max_tokens"].is_number_integer() ? body["max_tokens"].get<int64_t>() : 16;
    usage_ = body.contains("stream_options") && body["stream_options"].is_object() &&
             body["stream_options"].value("include_usage", false);
    prompt_tokens_ =
        body.contains("prompt") && body["prompt"].is_array() ? static_cast<int64_t>(body["prompt"].size()) : 0;
    cut_at_ = o.cut_every > 0 && n % o.cut_every == o.cut_every - 1 ? tokens_ / 2 : -1;
    sent_ = o.silent_every > 0 && n % o.silent_every == o.silent_every - 1 ? tokens_ : 0;
    out_ = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    write_next();
  }

  // The header, then one event per write: text chunks, the usage chunk, [DONE], the last chunk.
  void write_next() {
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](const error_code& ec, size_t) {
      if (ec) return;
      self->stream_step();
    });
  }

  void stream_step() {
    if (sent_ == cut_at_) {
      error_code ignored;
      socket_.close(ignored);
      return;
    }
    if (sent_ < tokens_) {
      // The event spliced from fixed text around the token's text, so that the fake costs little per chunk.
      const bool last = sent_ + 1 == tokens_;
      const char* head =
          chat_
              ? R"({"id":"fake","object":"chat.completion.chunk","model":"fake-model","choices":[{"index":0,"delta":{"content":" w)"
              : R"({"id":"fake","object":"text_completion","model":"fake-model","choices":[{"index":0,"text":" w)";
      const char* tail = chat_ ? (last ? R"("},"finish_reason":"length"}]})" : R"("},"finish_reason":null}]})")
                               : (last ? R"(","finish_reason":"length"}]})" : R"(","finish_reason":null}]})");
      out_ = http_chunk("data: " + (head + std::to_string(sent_) + tail) + "\n\n");
      ++sent_;
      return write_next();
    }
    if (sent_ == tokens_) {
      out_.clear();
      if (usage_) {
        const json u = {{"choices", json::array()},
                        {"usage",
                         {{"prompt_tokens", prompt_tokens_},
                          {"completion_tokens", tokens_},
                          {"total_tokens", prompt_tokens_ + tokens_}}}};
        out_ += http_chunk("data: " + u.dump() + "\n\n");
      }
      out_ += http_chunk("data: [DONE]\n\n") + "0\r\n\r\n";
      ++sent_;
      return write_next();
    }
    read();
  }

  void reply(int status, const json& body) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::content_type, "application/json");
    res->body() = body.dump();
    res->prepare_payload();
    http::async_write(socket_, *res, [self = shared_from_this(), res](const error_code& ec, size_t) {
      if (!ec) self->read();
    });
  }

  FakeOpenAiServer::State& state_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  std::string out_;
  bool chat_ = false;
  bool usage_ = false;
  int64_t tokens_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t sent_ = 0;
  int64_t cut_at_ = -1;
};

void accept(FakeOpenAiServer::State& state) {
  state.acceptor.async_accept([&state](const error_code& ec, tcp::socket socket) {
    if (ec) return;
    socket.set_option(tcp::no_delay(true));
    std::make_shared<Connection>(state, std::move(socket))->read();
    accept(state);
  });
}

}  // namespace

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions options) : state_(std::make_unique<State>()) {
  state_->options = options;
  state_->completions = &completions_;
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(ep.protocol());
  state_->acceptor.set_option(asio::socket_base::reuse_address(true));
  state_->acceptor.bind(ep);
  state_->acceptor.listen(4096);
  port_ = state_->acceptor.local_endpoint().port();
  accept(*state_);
  thread_ = std::thread([s = state_.get()] { s->io.run(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
  state_->io.stop();
  thread_.join();
}

}  // namespace sy::test
