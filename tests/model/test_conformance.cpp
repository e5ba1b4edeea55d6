// Conformance with Hugging Face transformers: every fixture's logits at every prompt position and its
// greedy continuation, alone, batched with the other prompts, and with the prompt prefilled in chunks.
#include <gtest/gtest.h>

#include "common/fixture.h"
#include "runtime/engine.h"

namespace sy {
namespace {

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = test::load_fixture(GetParam());
    backend_ = make_cpu_backend();
    model_ = load_model({.dir = fixture_.dir}, *backend_);
    vocab_ = model_->info().vocab_size;
  }

  EngineConfig engine_config(int64_t max_batch_tokens) const {
    return {.block_size = 4, .kv_blocks = 64, .scheduler = {.max_batch_tokens = max_batch_tokens, .max_seqs = 16}};
  }

  // Checks the prompt-position logits of prompt i and, for the greedy prompt, the continuation.
  void expect_matches(const RequestResult& r, size_t i, bool greedy) {
    const auto& prompt = fixture_.prompts[i];
    const auto len = static_cast<int64_t>(prompt.size());
    ASSERT_GE(static_cast<int64_t>(r.logits.size()), len * vocab_);
    const auto& want = fixture_.prompt_logits[i];
    ASSERT_EQ(want.shape, (std::vector<int64_t>{len, vocab_}));
    const double prompt_err = test::max_relative_row_error(r.logits.data(), want.data.data(), len, vocab_);
    EXPECT_LE(prompt_err, test::kLogitTolerance) << "prompt " << i;
    worst_ = std::max(worst_, prompt_err);
    if (!greedy) return;
    EXPECT_EQ(r.output, fixture_.greedy_tokens);
    // Engine row len - 1 + j predicts greedy token j.
    const auto steps = static_cast<int64_t>(fixture_.greedy_tokens.size());
    ASSERT_EQ(static_cast<int64_t>(r.logits.size()), (len + steps - 1) * vocab_);
    const double gen_err = test::max_relative_row_error(r.logits.data() + (len - 1) * vocab_,
                                                        fixture_.greedy_logits.data.data(), steps, vocab_);
    EXPECT_LE(gen_err, test::kLogitTolerance) << "greedy continuation";
    worst_ = std::max(worst_, gen_err);
  }

  Request request(size_t i, bool greedy) const {
    return {.prompt = fixture_.prompts[i],
            .max_new_tokens = greedy ? static_cast<int64_t>(fixture_.greedy_tokens.size()) : 1,
            .keep_logits = true};
  }

  void TearDown() override { RecordProperty("max_relative_logit_error", std::to_string(worst_)); }

  test::Fixture fixture_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  double worst_ = 0.0;
};

TEST_P(Conformance, EachPromptAlone) {
  for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
    const bool greedy = static_cast<int>(i) == fixture_.greedy_prompt;
    Engine engine(*model_, *backend_, engine_config(512));
    const int64_t id = engine.add(request(i, greedy));
    engine.run();
    expect_matches(engine.result(id), i, greedy);
  }
}

// All prompts in one continuous batch; with a small token budget the batches mix one prompt's decode
// tokens with another's prefill chunks.
TEST_P(Conformance, BatchedWithMixedPrefillAndDecode) {
  for (int64_t budget : {512, 8}) {
    Engine engine(*model_, *backend_, engine_config(budget));
    std::vector<int64_t> ids;
    for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
      ids.push_back(engine.add(request(i, static_cast<int>(i) == fixture_.greedy_prompt)));
    }
    engine.run();
    for (size_t i = 0; i < ids.size(); ++i) {
      SCOPED_TRACE("budget " + std::to_string(budget));
      expect_matches(engine.result(ids[i]), i, static_cast<int>(i) == fixture_.greedy_prompt);
    }
    engine.check_integrity();
  }
}

TEST_P(Conformance, ChunkedPrefill) {
  for (int64_t chunk : {1, 3, 5}) {
    Engine engine(*model_, *backend_, engine_config(chunk));
    const auto g = static_cast<size_t>(fixture_.greedy_prompt);
    const int64_t id = engine.add(request(g, true));
    engine.run();
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    expect_matches(engine.result(id), g, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Conformance, ::testing::ValuesIn(test::fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(ConformanceFixtures, AllFamiliesPresent) {
  const auto names = test::fixture_names();
  // Trailing underscores keep deepseek_v32_* from counting as deepseek_v3_*.
  for (const char* family : {"qwen3_moe_", "mixtral_", "deepseek_v3_", "glm4_moe_", "deepseek_v32_", "glm_moe_dsa_"}) {
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(family, 0) == 0; }))
        << "no fixture for " << family;
  }
}

}  // namespace
}  // namespace sy
