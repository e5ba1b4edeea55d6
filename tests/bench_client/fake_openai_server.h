// A tiny OpenAI-compatible streaming server for testing `bench serve`: loopback, port 0, its own thread.
// Every completion streams max_tokens chunks at once (one write each, no model), then usage and [DONE];
// it can be told to answer some requests with 500 or to cut their stream halfway.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

namespace sy::test {

struct FakeServerOptions {
  int fail_every = 0;  // > 0: completion requests n with n % fail_every == fail_every - 1 get a 500
  int cut_every = 0;   // > 0: those with n % cut_every == cut_every - 1 (and not failed) close after half the chunks
  // > 0: those with n % silent_every == silent_every - 1 generate tokens that decode to no text: no text
  // chunks, only the usage chunk (when asked) and [DONE].
  int silent_every = 0;
};

// Routes: GET /v1/models, POST /v1/completions and /v1/chat/completions (streaming only), POST /tokenize
// (a word "w<id>" is token <id>; any other word is token 0) and POST /detokenize (ids to "w<id>" words).
class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerOptions options = {});
  ~FakeOpenAiServer();
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  int port() const { return port_; }
  int64_t completion_requests() const { return completions_; }

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int64_t> completions_{0};
};

}  // namespace sy::test
