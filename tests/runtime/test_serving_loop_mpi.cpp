// ServingLoop over several ranks (the mpi tier): rank 0 takes requests from another thread, the other
// ranks follow its step boundaries; greedy tokens equal one rank's, an abort and an idle pause are
// carried to every rank, and every rank's engine ends empty. run() is on the main thread on every rank,
// as MPI's FUNNELED thread level asks.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "backend/backend.h"
#include "base/check.h"
#include "common/fixture.h"
#include "common/mpi_test_main.h"
#include "parallel/groups.h"
#include "parallel/mapping.h"
#include "runtime/serving.h"

namespace sy {
namespace {

using namespace std::chrono_literals;

Communicator* g_world = nullptr;

const EngineConfig kConfig{.block_size = 4, .kv_blocks = 96, .scheduler = {.max_batch_tokens = 16, .max_seqs = 8}};

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 9, 13, 2, 77, 31, 8}, {44}, {3, 3, 3, 90, 12, 60, 1, 2}, {100, 101}, {250, 17, 18, 19}};
constexpr int64_t kNewTokens = 8;

std::vector<std::vector<int32_t>> one_rank_tokens(const test::Fixture& f) {
  auto backend = make_cpu_backend();
  auto model = load_model({.dir = f.dir}, *backend);
  Engine engine(*model, *backend, kConfig);
  std::vector<int64_t> ids;
  for (const auto& p : kPrompts) ids.push_back(engine.add({.prompt = p, .max_new_tokens = kNewTokens}));
  engine.run();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(engine.result(id).output);
  return out;
}

struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, std::vector<TokenEvent>> by_request;
  int ended = 0;
  TokenSink sink() {
    return [this](const TokenEvent& e) {
      std::lock_guard lock(mu);
      by_request[e.request].push_back(e);
      if (e.finish != FinishReason::none) ++ended;
      cv.notify_all();
    };
  }
  void wait(const std::function<bool()>& done) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 60s, done);
  }
};

void serve_with(const std::vector<std::pair<Axis, int>>& sizes) {
  ASSERT_NE(g_world, nullptr);
  const test::Fixture f = test::load_fixture("qwen3_moe_base");
  const auto want = one_rank_tokens(f);

  LayoutRequest request;
  for (const auto& [axis, n] : sizes) request.set(axis, n);
  const auto groups = make_parallel_groups(*g_world, Mapping(resolve_layout_sizes(request, g_world->size()).sizes));
  auto backend = make_cpu_backend();
  auto model = load_model({.dir = f.dir, .parallel = groups.get()}, *backend);
  Engine engine(*model, *backend, kConfig);
  ServingLoop loop(engine, g_world);

  if (g_world->rank() != 0) {
    EXPECT_THROW(loop.submit({.prompt = {1}}, [](const TokenEvent&) {}), Error);
    loop.run();
  } else {
    Events events;
    std::vector<int64_t> ids(kPrompts.size());
    int64_t aborted = -1;
    std::thread client([&] {
      ids[0] = loop.submit({.prompt = kPrompts[0], .max_new_tokens = kNewTokens}, events.sink());
      ids[1] = loop.submit({.prompt = kPrompts[1], .max_new_tokens = kNewTokens}, events.sink());
      events.wait([&] { return events.ended >= 2; });
      // Idle: rank 0 sleeps on its condition variable, the followers in their next broadcast.
      std::this_thread::sleep_for(200ms);
      for (size_t i = 2; i < kPrompts.size(); ++i) {
        ids[i] = loop.submit({.prompt = kPrompts[i], .max_new_tokens = kNewTokens}, events.sink());
      }
      // Slowed by its sink (on rank 0's loop, so every rank's steps), so that it is still running when aborted.
      aborted = loop.submit({.prompt = {7, 7, 7}, .max_new_tokens = 200}, [sink = events.sink()](const TokenEvent& e) {
        std::this_thread::sleep_for(2ms);
        sink(e);
      });
      events.wait([&] { return !events.by_request[aborted].empty(); });
      loop.abort(aborted);
      events.wait([&] { return events.ended >= static_cast<int>(kPrompts.size()) + 1; });
      loop.stop(10);
    });
    loop.run();
    client.join();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      std::vector<int32_t> got;
      for (const TokenEvent& e : events.by_request[ids[i]]) {
        if (e.has_token) got.push_back(e.token);
      }
      EXPECT_EQ(got, want[i]) << "prompt " << i;
      EXPECT_EQ(events.by_request[ids[i]].back().finish, FinishReason::length);
    }
    ASSERT_FALSE(events.by_request[aborted].empty());
    EXPECT_EQ(events.by_request[aborted].back().finish, FinishReason::abort);
    EXPECT_LT(events.by_request[aborted].back().output_tokens, 200);
  }
  // Every rank applied the same boundaries: the same steps, nothing held, every block free.
  EXPECT_EQ(engine.held_requests(), 0);
  EXPECT_EQ(engine.kv_usage().used_blocks, 0);
  engine.check_integrity();
  std::vector<float> steps(static_cast<size_t>(g_world->size()));
  const auto mine = static_cast<float>(engine.steps());
  g_world->all_gather(&mine, steps.data(), 1, DType::f32);
  for (float s : steps) EXPECT_EQ(s, mine);
}

TEST(ServingLoopMpi, TensorParallel) { serve_with({{Axis::tp, 2}}); }
TEST(ServingLoopMpi, ExpertParallel) { serve_with({{Axis::ep, 2}}); }

}  // namespace
}  // namespace sy

int main(int argc, char** argv) {
  return sy::test::run_mpi_tests(argc, argv, "test_serving_loop_mpi", [](sy::Communicator* w) { sy::g_world = w; });
}
