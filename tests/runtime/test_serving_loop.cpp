// ServingLoop on the qwen3_moe_base fixture: tokens through the loop equal Engine::run's; requests from
// several threads; aborts free KV blocks; stop() drains or aborts within its bound; bad requests and
// throwing sinks leave the loop serving; logprobs equal a log-softmax computed here; memory stays bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "base/check.h"
#include "common/fixture.h"
#include "runtime/serving.h"

namespace sy {
namespace {

using namespace std::chrono_literals;

// Every event of every request, and a wait for a number of requests to have ended.
class Events {
 public:
  TokenSink sink() {
    return [this](const TokenEvent& e) {
      std::lock_guard lock(mu_);
      events_[e.request].push_back(e);
      if (e.finish != FinishReason::none) ++ended_;
      cv_.notify_all();
    };
  }
  bool wait_ended(int n, std::chrono::seconds timeout = 60s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ended_ >= n; });
  }
  // Waits until request `id` has at least `n` tokens.
  bool wait_tokens(int64_t id, size_t n, std::chrono::seconds timeout = 60s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return tokens_locked(id).size() >= n || ended_locked(id); });
  }
  std::vector<TokenEvent> of(int64_t id) {
    std::lock_guard lock(mu_);
    return events_[id];
  }
  std::vector<int32_t> tokens(int64_t id) {
    std::lock_guard lock(mu_);
    return tokens_locked(id);
  }
  FinishReason finish(int64_t id) {
    std::lock_guard lock(mu_);
    const auto& ev = events_[id];
    return ev.empty() ? FinishReason::none : ev.back().finish;
  }
  int ended() {
    std::lock_guard lock(mu_);
    return ended_;
  }

 private:
  std::vector<int32_t> tokens_locked(int64_t id) {
    std::vector<int32_t> out;
    for (const auto& e : events_[id]) {
      if (e.has_token) out.push_back(e.token);
    }
    return out;
  }
  bool ended_locked(int64_t id) {
    const auto& ev = events_[id];
    return !ev.empty() && ev.back().finish != FinishReason::none;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::vector<TokenEvent>> events_;
  int ended_ = 0;
};

// A sink that takes a millisecond per event, so that a long request outlasts what a test does meanwhile.
TokenSink slow(TokenSink sink) {
  return [sink = std::move(sink)](const TokenEvent& e) {
    std::this_thread::sleep_for(1ms);
    sink(e);
  };
}

// Runs loop.run() on a thread; the destructor stops the loop (no drain) and joins.
class LoopThread {
 public:
  explicit LoopThread(ServingLoop& loop)
      : loop_(loop), thread_([this] {
          try {
            loop_.run();
          } catch (const std::exception& e) {
            std::lock_guard lock(mu_);
            error_ = e.what();
          }
        }) {}
  ~LoopThread() {
    loop_.stop(0);
    if (thread_.joinable()) thread_.join();
  }
  // stop(drain) and join; returns the seconds run() took to return after stop().
  double stop_and_join(double drain_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    loop_.stop(drain_seconds);
    thread_.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::string error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  ServingLoop& loop_;
  std::mutex mu_;
  std::string error_;
  std::thread thread_;
};

class ServingLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = make_cpu_backend().release();
    model_ = load_model({.dir = test::fixtures_dir() / "qwen3_moe_base"}, *backend_).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete backend_;
  }
  static EngineConfig config() {
    return {.block_size = 4, .kv_blocks = 96, .scheduler = {.max_batch_tokens = 24, .max_seqs = 8}};
  }
  static Engine make_engine() { return Engine(*model_, *backend_, config()); }

  static Backend* backend_;
  static Model* model_;
};
Backend* ServingLoopTest::backend_ = nullptr;
Model* ServingLoopTest::model_ = nullptr;

std::vector<ServeRequest> mixed_requests() {
  return {
      {.prompt = {5, 9, 13, 2, 77, 31, 8}, .max_new_tokens = 9},
      {.prompt = {44}, .max_new_tokens = 5, .sampling = {.temperature = 0.9f, .seed = 7}},
      {.prompt = {3, 3, 3, 90, 12, 60, 1, 2, 4, 6, 7, 200, 300}, .max_new_tokens = 12},
      {.prompt = {100, 101},
       .max_new_tokens = 7,
       .sampling = {.temperature = 1.3f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f, .seed = 123}},
      {.prompt = {250, 17, 18, 19}, .max_new_tokens = 10, .sampling = {.temperature = 0.7f, .seed = 99}},
  };
}

Request engine_request(const ServeRequest& r) {
  return {.prompt = r.prompt, .max_new_tokens = r.max_new_tokens, .sampling = r.sampling, .stop_tokens = r.stop_tokens};
}

TEST_F(ServingLoopTest, TokensEqualEngineRun) {
  const auto requests = mixed_requests();
  std::vector<std::vector<int32_t>> expected;
  {
    Engine engine = make_engine();
    std::vector<int64_t> ids;
    for (const auto& r : requests) ids.push_back(engine.add(engine_request(r)));
    engine.run();
    for (int64_t id : ids) expected.push_back(engine.result(id).output);
  }
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  std::vector<int64_t> ids;
  for (const auto& r : requests) ids.push_back(loop.submit(r, events.sink()));  // all taken in at one boundary
  LoopThread thread(loop);
  ASSERT_TRUE(events.wait_ended(static_cast<int>(requests.size())));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(events.tokens(ids[i]), expected[i]) << "request " << i;
    const auto ev = events.of(ids[i]);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().finish, FinishReason::length);
    EXPECT_TRUE(ev.back().has_token);
    for (size_t j = 0; j < ev.size(); ++j) {
      EXPECT_EQ(ev[j].output_tokens, static_cast<int64_t>(j + 1));
      EXPECT_EQ(ev[j].prompt_tokens, static_cast<int64_t>(requests[i].prompt.size()));
      if (j + 1 < ev.size()) {
        EXPECT_EQ(ev[j].finish, FinishReason::none);
      }
    }
  }
  EXPECT_LT(thread.stop_and_join(10), 5.0);
  EXPECT_EQ(thread.error(), "");
  const ServingStats s = loop.stats();
  int64_t prompt = 0, generated = 0;
  for (const auto& r : requests) prompt += static_cast<int64_t>(r.prompt.size());
  for (const auto& e : expected) generated += static_cast<int64_t>(e.size());
  EXPECT_EQ(s.prompt_tokens_total, prompt);
  EXPECT_EQ(s.generation_tokens_total, generated);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.kv_usage, 0.0);
  EXPECT_EQ(s.kv_capacity_tokens, 96 * 4);
  EXPECT_EQ(engine.held_requests(), 0);
}

TEST_F(ServingLoopTest, StopTokenEndsWithStopReason) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  const int64_t probe = loop.submit({.prompt = {5, 9, 13}, .max_new_tokens = 6}, events.sink());
  ASSERT_TRUE(events.wait_ended(1));
  const auto first = events.tokens(probe);
  ASSERT_EQ(first.size(), 6u);
  const int64_t id = loop.submit({.prompt = {5, 9, 13}, .max_new_tokens = 6, .stop_tokens = {first[2]}}, events.sink());
  ASSERT_TRUE(events.wait_ended(2));
  const auto out = events.tokens(id);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), first[2]);
  EXPECT_EQ(events.finish(id), FinishReason::stop_token);
  EXPECT_STREQ(finish_reason_name(events.finish(id)), "stop");
}

TEST_F(ServingLoopTest, RequestsFromSeveralThreadsAllFinish) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  constexpr int kThreads = 4, kPerThread = 20;
  std::mutex ids_mu;
  std::map<int64_t, int64_t> wanted;  // id → max_new_tokens
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int64_t n = 1 + (t * kPerThread + i) % 9;
        const std::vector<int32_t> prompt = {static_cast<int32_t>(t * 50 + i), static_cast<int32_t>(i + 1), 7};
        const int64_t id = loop.submit({.prompt = prompt,
                                        .max_new_tokens = n,
                                        .sampling = {.temperature = 1.0f, .seed = static_cast<uint64_t>(i)}},
                                       events.sink());
        std::lock_guard lock(ids_mu);
        EXPECT_TRUE(wanted.emplace(id, n).second) << "id " << id << " given twice";
        if (i % 5 == 0) std::this_thread::sleep_for(1ms);
      }
    });
  }
  for (auto& s : submitters) s.join();
  ASSERT_TRUE(events.wait_ended(kThreads * kPerThread));
  for (const auto& [id, n] : wanted) {
    EXPECT_EQ(static_cast<int64_t>(events.tokens(id).size()), n) << "request " << id;
    EXPECT_EQ(events.finish(id), FinishReason::length);
  }
  thread.stop_and_join(10);
  EXPECT_EQ(thread.error(), "");
  engine.check_integrity();
  EXPECT_EQ(engine.kv_usage().used_blocks, 0);
  EXPECT_EQ(engine.held_requests(), 0);
}

TEST_F(ServingLoopTest, AbortMidRunFreesKvBlocks) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  const int64_t id = loop.submit({.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9}, .max_new_tokens = 200}, slow(events.sink()));
  const int64_t other = loop.submit({.prompt = {11, 12}, .max_new_tokens = 4}, events.sink());
  ASSERT_TRUE(events.wait_tokens(id, 3));
  EXPECT_GT(loop.stats().kv_usage, 0.0);
  loop.abort(id);
  ASSERT_TRUE(events.wait_ended(2));
  const auto ev = events.of(id);
  EXPECT_EQ(ev.back().finish, FinishReason::abort);
  EXPECT_FALSE(ev.back().has_token);
  EXPECT_LT(ev.back().output_tokens, 200);
  EXPECT_EQ(ev.back().output_tokens, static_cast<int64_t>(events.tokens(id).size()));
  EXPECT_EQ(events.tokens(other).size(), 4u);
  loop.abort(id);     // finished: ignored
  loop.abort(12345);  // unknown: ignored
  loop.abort(-1);
  thread.stop_and_join(10);
  EXPECT_EQ(thread.error(), "");
  EXPECT_EQ(events.of(id).size(), ev.size());  // no second final event
  engine.check_integrity();
  EXPECT_EQ(engine.kv_usage().used_blocks, 0);
  EXPECT_EQ(loop.stats().kv_usage, 0.0);
}

TEST_F(ServingLoopTest, AbortBeforeTakenInStillEnds) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  const int64_t id = loop.submit({.prompt = {1, 2, 3}, .max_new_tokens = 5}, events.sink());
  const int64_t kept = loop.submit({.prompt = {1, 2, 3}, .max_new_tokens = 5}, events.sink());
  loop.abort(id);
  LoopThread thread(loop);
  ASSERT_TRUE(events.wait_ended(2));
  const auto ev = events.of(id);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].has_token);
  EXPECT_EQ(ev[0].finish, FinishReason::abort);
  EXPECT_EQ(ev[0].prompt_tokens, 3);
  EXPECT_EQ(events.tokens(kept).size(), 5u);
  thread.stop_and_join(10);
  EXPECT_EQ(engine.held_requests(), 0);
}

TEST_F(ServingLoopTest, StopDrainsOrAbortsWithinTheBound) {
  {
    // A long drain: every request completes.
    Engine engine = make_engine();
    ServingLoop loop(engine, nullptr);
    Events events;
    LoopThread thread(loop);
    std::vector<int64_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back(loop.submit({.prompt = {i + 1, 40}, .max_new_tokens = 8}, events.sink()));
    thread.stop_and_join(60);
    EXPECT_THROW(loop.submit({.prompt = {1}, .max_new_tokens = 1}, events.sink()), Error);
    for (int64_t id : ids) {
      EXPECT_EQ(events.finish(id), FinishReason::length);
      EXPECT_EQ(events.tokens(id).size(), 8u);
    }
  }
  {
    // A short drain: long requests are aborted soon after it passes.
    Engine engine = make_engine();
    ServingLoop loop(engine, nullptr);
    Events events;
    LoopThread thread(loop);
    std::vector<int64_t> ids;
    for (int i = 0; i < 6; ++i) {
      ids.push_back(loop.submit({.prompt = {i + 1, 40}, .max_new_tokens = 240}, slow(events.sink())));
    }
    ASSERT_TRUE(events.wait_tokens(ids[0], 1));
    const double seconds = thread.stop_and_join(0.05);  // 240 tokens take at least 240 ms
    EXPECT_LT(seconds, 1.0);
    EXPECT_EQ(events.ended(), 6);
    for (int64_t id : ids) EXPECT_EQ(events.finish(id), FinishReason::abort);
    engine.check_integrity();
    EXPECT_EQ(engine.kv_usage().used_blocks, 0);
    EXPECT_EQ(engine.held_requests(), 0);
  }
}

TEST_F(ServingLoopTest, InvalidSubmitsThrowAndTheLoopKeepsServing) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  const int64_t vocab = model_->info().vocab_size;
  const std::vector<ServeRequest> bad = {
      {.prompt = {}},
      {.prompt = {1, static_cast<int32_t>(vocab)}},
      {.prompt = {-3}},
      {.prompt = {1}, .max_new_tokens = 0},
      {.prompt = std::vector<int32_t>(200, 1), .max_new_tokens = 57},  // 257 > max_position_embeddings 256
      {.prompt = {1}, .sampling = {.temperature = -1.0f}},
      {.prompt = {1}, .sampling = {.min_p = 1.5f}},
      {.prompt = {1}, .logprobs = 21},
      {.prompt = {1}, .logprobs = -2},
  };
  for (const auto& r : bad) {
    EXPECT_THROW(loop.submit(r, events.sink()), Error) << "prompt of " << r.prompt.size();
  }
  EXPECT_THROW(loop.submit({.prompt = {1}}, TokenSink{}), Error);
  const int64_t id = loop.submit({.prompt = {1, 2}, .max_new_tokens = 3}, events.sink());
  ASSERT_TRUE(events.wait_ended(1));
  EXPECT_EQ(events.tokens(id).size(), 3u);
  EXPECT_EQ(loop.stats().waiting, 0);
}

TEST_F(ServingLoopTest, ThrowingSinkAbortsOnlyItsRequest) {
  Engine engine = make_engine();
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  std::atomic<int> calls{0};
  std::atomic<bool> heard_end{false};
  const int64_t bad = loop.submit({.prompt = {3, 4}, .max_new_tokens = 50}, [&](const TokenEvent& e) {
    ++calls;
    if (e.finish != FinishReason::none) {
      heard_end = e.finish == FinishReason::abort;
      return;
    }
    throw std::runtime_error("connection gone");
  });
  const int64_t good = loop.submit({.prompt = {3, 4}, .max_new_tokens = 6}, events.sink());
  ASSERT_TRUE(events.wait_ended(1));
  EXPECT_EQ(events.tokens(good).size(), 6u);
  thread.stop_and_join(10);
  EXPECT_EQ(thread.error(), "");
  EXPECT_EQ(calls.load(), 2);  // the first token (threw), then the abort
  EXPECT_TRUE(heard_end.load());
  (void)bad;
  engine.check_integrity();
  EXPECT_EQ(engine.held_requests(), 0);
}

// Logprobs of the loop's events against log_softmax of the engine's kept logits, computed here in double.
TEST_F(ServingLoopTest, LogprobsAreLogSoftmaxOfTheRawLogits) {
  const std::vector<int32_t> prompt = {7, 8, 9, 10};
  constexpr int32_t kTopLogprobs = 5;
  const int64_t vocab = model_->info().vocab_size;
  for (const SamplingParams sampling : {SamplingParams{}, SamplingParams{.temperature = 0.8f, .seed = 4}}) {
    Engine reference = make_engine();
    const int64_t rid =
        reference.add({.prompt = prompt, .max_new_tokens = 6, .sampling = sampling, .keep_logits = true});
    reference.run();
    const RequestResult& want = reference.result(rid);

    Engine engine = make_engine();
    ServingLoop loop(engine, nullptr);
    Events events;
    LoopThread thread(loop);
    const int64_t id = loop.submit(
        {.prompt = prompt, .max_new_tokens = 6, .sampling = sampling, .logprobs = kTopLogprobs}, events.sink());
    ASSERT_TRUE(events.wait_ended(1));
    const auto ev = events.of(id);
    ASSERT_EQ(ev.size(), want.output.size());
    for (size_t j = 0; j < ev.size(); ++j) {
      EXPECT_EQ(ev[j].token, want.output[j]);
      const float* row = want.logits.data() + (prompt.size() - 1 + j) * static_cast<size_t>(vocab);
      double m = row[0];
      for (int64_t v = 0; v < vocab; ++v) m = std::max(m, double(row[v]));
      double z = 0;
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(double(row[v]) - m);
      const auto lp = [&](int32_t t) { return double(row[t]) - m - std::log(z); };
      EXPECT_NEAR(ev[j].logprob, lp(ev[j].token), 1e-5);
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      for (int32_t v = 0; v < vocab; ++v) order[static_cast<size_t>(v)] = v;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      ASSERT_EQ(ev[j].top_logprobs.size(), static_cast<size_t>(kTopLogprobs));
      for (int32_t i = 0; i < kTopLogprobs; ++i) {
        EXPECT_EQ(ev[j].top_logprobs[static_cast<size_t>(i)].first, order[static_cast<size_t>(i)]);
        EXPECT_NEAR(ev[j].top_logprobs[static_cast<size_t>(i)].second, lp(order[static_cast<size_t>(i)]), 1e-5);
      }
    }
  }
}

TEST_F(ServingLoopTest, MemoryStaysBoundedOverManyRequests) {
  Engine engine(*model_, *backend_,
                {.block_size = 4, .kv_blocks = 96, .scheduler = {.max_batch_tokens = 64, .max_seqs = 32}});
  ServingLoop loop(engine, nullptr);
  Events events;
  LoopThread thread(loop);
  constexpr int kRequests = 2000;
  for (int i = 0; i < kRequests; ++i) {
    loop.submit({.prompt = {static_cast<int32_t>(i % 300 + 1), 2}, .max_new_tokens = 1 + i % 2}, events.sink());
    if (i % 200 == 199) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(events.wait_ended(kRequests, 120s));
  thread.stop_and_join(10);
  EXPECT_EQ(engine.held_requests(), 0);
  engine.check_integrity();
  EXPECT_EQ(engine.kv_usage().used_blocks, 0);
  EXPECT_EQ(loop.stats().generation_tokens_total, kRequests / 2 * 3);
  EXPECT_EQ(loop.stats().prompt_tokens_total, 2 * kRequests);
}

// A model whose forward fails on its third call: the loop logs it, ends every request and rethrows.
class FailingModel : public StepRunner {
 public:
  explicit FailingModel(StepRunner& inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_.info(); }
  void forward(const ForwardBatch& b, const KvCacheView& kv, float* logits) override {
    SY_CHECK(++calls_ < 3, "device lost (forward call {})", calls_);
    inner_.forward(b, kv, logits);
  }

 private:
  StepRunner& inner_;
  int calls_ = 0;
};

TEST_F(ServingLoopTest, StepErrorsSurfaceFromRun) {
  Executor executor(*model_, *backend_);
  FailingModel failing(executor);
  Engine engine(failing, *backend_, config());
  ServingLoop loop(engine, nullptr);
  Events events;
  const int64_t id = loop.submit({.prompt = {1, 2}, .max_new_tokens = 10}, events.sink());
  EXPECT_THROW(loop.run(), Error);
  EXPECT_EQ(events.finish(id), FinishReason::abort);
  EXPECT_EQ(events.tokens(id).size(), 2u);
  EXPECT_THROW(loop.submit({.prompt = {1}, .max_new_tokens = 1}, events.sink()), Error);
}

}  // namespace
}  // namespace sy
