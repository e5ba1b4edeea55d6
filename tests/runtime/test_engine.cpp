// Engine on a random-weight model: batching, chunking and preemption do not change greedy outputs;
// bad requests are refused without disturbing the engine.
#include <gtest/gtest.h>

#include <fstream>

#include "base/check.h"
#include "runtime/engine.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sy_engine_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 48,
      "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 97,
      "num_local_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 40, "max_position_embeddings": 512})";
    backend_ = make_cpu_backend();
    model_ = load_model({.dir = dir_, .random_weights = true, .seed = 5}, *backend_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::vector<int32_t>> run(const std::vector<std::vector<int32_t>>& prompts, EngineConfig config,
                                        int64_t* preemptions = nullptr) {
    Engine engine(*model_, *backend_, config);
    std::vector<int64_t> ids;
    for (const auto& p : prompts) ids.push_back(engine.add({.prompt = p, .max_new_tokens = 12}));
    engine.run();
    engine.check_integrity();
    if (preemptions) *preemptions = engine.scheduler().preemptions();
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) out.push_back(engine.result(id).output);
    return out;
  }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
};

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 9, 13, 2, 77, 31, 8}, {44}, {3, 3, 3, 90, 12, 60, 1, 2, 4, 6, 7}};

TEST_F(EngineTest, BatchingChunkingAndPreemptionKeepGreedyOutputs) {
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : kPrompts) alone.push_back(run({p}, {.block_size = 4, .kv_blocks = 32})[0]);
  EXPECT_EQ(run(kPrompts, {.block_size = 4, .kv_blocks = 32}), alone);
  EXPECT_EQ(run(kPrompts, {.block_size = 3, .kv_blocks = 40, .scheduler = {.max_batch_tokens = 4}}), alone);
  int64_t preemptions = 0;
  // 9 blocks of 4 = 36 slots for 3 sequences that grow to 19 + 13 + 23 tokens: someone is preempted.
  EXPECT_EQ(run(kPrompts, {.block_size = 4, .kv_blocks = 9}, &preemptions), alone);
  EXPECT_GT(preemptions, 0);
}

TEST_F(EngineTest, BadRequestsAreRefusedAndTheEngineKeepsWorking) {
  Engine engine(*model_, *backend_, {.block_size = 4, .kv_blocks = 16});
  EXPECT_THROW(engine.add({.prompt = {}}), Error);
  EXPECT_THROW(engine.add({.prompt = {1, 97}}), Error);
  EXPECT_THROW(engine.add({.prompt = {1}, .max_new_tokens = 0}), Error);
  EXPECT_THROW(engine.add({.prompt = {1}, .max_new_tokens = 600}), Error);
  EXPECT_THROW(engine.add({.prompt = {1}, .sampling = {.temperature = -0.5f}}), Error);
  const int64_t id = engine.add({.prompt = {1, 2}, .max_new_tokens = 3});
  engine.run();
  EXPECT_EQ(engine.result(id).output.size(), 3u);
  engine.check_integrity();
}

TEST_F(EngineTest, StopTokenEndsTheRequest) {
  const auto first = run({kPrompts[0]}, {.block_size = 4, .kv_blocks = 32})[0];
  Engine engine(*model_, *backend_, {.block_size = 4, .kv_blocks = 32});
  const int64_t id = engine.add({.prompt = kPrompts[0], .max_new_tokens = 12, .stop_tokens = {first[2]}});
  engine.run();
  const auto& out = engine.result(id).output;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), first[2]);
  EXPECT_LE(out.size(), 3u);
}

TEST_F(EngineTest, FinishReasonsAbortAndRelease) {
  const auto first = run({kPrompts[0]}, {.block_size = 4, .kv_blocks = 32})[0];
  Engine engine(*model_, *backend_, {.block_size = 4, .kv_blocks = 32});
  const int64_t by_length = engine.add({.prompt = kPrompts[0], .max_new_tokens = 12});
  const int64_t by_stop = engine.add({.prompt = kPrompts[0], .max_new_tokens = 12, .stop_tokens = {first[1]}});
  const int64_t aborted = engine.add({.prompt = kPrompts[2], .max_new_tokens = 12});
  const int64_t never_ran = engine.add({.prompt = kPrompts[1], .max_new_tokens = 12});
  EXPECT_TRUE(engine.abort(never_ran));  // still waiting
  engine.step();
  engine.step();
  EXPECT_GT(engine.kv_usage().used_blocks, 0);
  EXPECT_TRUE(engine.abort(aborted));  // running
  EXPECT_FALSE(engine.abort(aborted));
  engine.check_integrity();
  engine.run();
  EXPECT_EQ(engine.result(by_length).finish_reason, FinishReason::length);
  EXPECT_EQ(engine.result(by_length).output, first);
  EXPECT_EQ(engine.result(by_stop).finish_reason, FinishReason::stop_token);
  EXPECT_EQ(engine.result(aborted).finish_reason, FinishReason::abort);
  EXPECT_TRUE(engine.result(never_ran).output.empty());
  EXPECT_EQ(engine.kv_usage().used_blocks, 0);
  EXPECT_EQ(engine.kv_usage().total_blocks, 32);

  EXPECT_EQ(engine.held_requests(), 4);
  for (int64_t id : {by_length, by_stop, aborted, never_ran}) engine.release(id);
  EXPECT_EQ(engine.held_requests(), 0);
  EXPECT_THROW(engine.result(by_length), Error);
  EXPECT_THROW(engine.abort(by_length), Error);
  // Ids stay unique and increasing after releases; a running request cannot be released.
  const int64_t next = engine.add({.prompt = {1}, .max_new_tokens = 2});
  EXPECT_GT(next, never_ran);
  EXPECT_THROW(engine.release(next), Error);
  engine.run();
  engine.release(next);
  engine.check_integrity();
}

TEST_F(EngineTest, RequestsBeyondTheKvCacheAreRefused) {
  Engine engine(*model_, *backend_, {.block_size = 4, .kv_blocks = 4});
  EXPECT_THROW(engine.add({.prompt = {1, 2, 3, 4, 5, 6, 7, 8}, .max_new_tokens = 9}), Error);  // 17 > 16 slots
  EXPECT_THROW(engine.add({.prompt = {1}, .logprobs = kMaxLogprobs + 1}), Error);
  const int64_t id = engine.add({.prompt = {1, 2, 3, 4, 5, 6, 7, 8}, .max_new_tokens = 8, .logprobs = 2});
  engine.run();
  EXPECT_EQ(engine.result(id).output.size(), 8u);
  EXPECT_EQ(engine.result(id).logprobs.size(), 8u);
}

}  // namespace
}  // namespace sy
