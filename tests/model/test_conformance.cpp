// Conformance with Hugging Face transformers: every fixture's logits at every prompt position and its
// greedy continuation, alone, batched with the other prompts, and with the prompt prefilled in chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/fixture.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

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

// Prefix cache: the greedy prompt run once fills the cache; the same prompt again (its cached blocks cover
// all of it but the last, partial block), then the prompt extended by the first k greedy tokens (cached
// blocks reaching into what the first request generated, the cached prefix ending inside the extended
// prompt's last block) must continue as transformers does. Each generated token's logprob equals the one the
// same request gets with the cache off within 1e-5 relative, and the reference logits' log_softmax within
// the conformance tolerance.
TEST_P(Conformance, CachedPrefixContinuesAsTransformers) {
  const auto g = static_cast<size_t>(fixture_.greedy_prompt);
  const auto& prompt = fixture_.prompts[g];
  const auto steps = static_cast<int64_t>(fixture_.greedy_tokens.size());
  // Logprobs of each generated token, and cached prompt tokens, of `p` generating `n` tokens.
  struct Run {
    std::vector<int32_t> output;
    std::vector<float> logprobs;
    int64_t cached = 0;
  };
  const auto run = [&](Engine& engine, const std::vector<int32_t>& p, int64_t n) {
    const int64_t id = engine.add({.prompt = p, .max_new_tokens = n, .logprobs = 0});
    engine.run();
    engine.check_integrity();
    Run r{.output = engine.result(id).output, .cached = engine.result(id).cached_tokens};
    for (const TokenLogprobs& l : engine.result(id).logprobs) r.logprobs.push_back(l.logprob);
    return r;
  };
  const int64_t k = std::min<int64_t>(5, steps - 1);
  std::vector<int32_t> extended = prompt;
  extended.insert(extended.end(), fixture_.greedy_tokens.begin(), fixture_.greedy_tokens.begin() + k);
  EngineConfig off = engine_config(512);
  off.prefix_cache = false;
  Engine scratch(*model_, *backend_, off);
  const Run want_full = run(scratch, prompt, steps), want_ext = run(scratch, extended, steps - k);
  EXPECT_EQ(want_full.cached, 0);

  Engine engine(*model_, *backend_, engine_config(512));
  const Run first = run(engine, prompt, steps);
  EXPECT_EQ(first.cached, 0);
  const Run again = run(engine, prompt, steps);
  const Run ext = run(engine, extended, steps - k);
  const auto len = static_cast<int64_t>(prompt.size());
  EXPECT_EQ(again.cached, (len - 1) / 4 * 4);  // whole blocks, the last prompt token always computed
  EXPECT_EQ(ext.cached, (len + k - 1) / 4 * 4);
  EXPECT_GT(engine.scheduler().prefix_hit_tokens(), 0);
  const auto expect_close = [&](const Run& got, const Run& want, int64_t from, const char* what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(got.output, std::vector<int32_t>(fixture_.greedy_tokens.begin() + from, fixture_.greedy_tokens.end()));
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t j = 0; j < got.logprobs.size(); ++j) {
      EXPECT_NEAR(got.logprobs[j], want.logprobs[j], 1e-5 * std::max(1.0f, std::abs(want.logprobs[j]))) << "step " << j;
      // The reference's logprob of the same token: log_softmax of transformers' logits row.
      const float* row = fixture_.greedy_logits.data.data() + (from + static_cast<int64_t>(j)) * vocab_;
      const TokenLogprobs ref = token_logprobs(row, vocab_, got.output[j], 0);
      EXPECT_NEAR(got.logprobs[j], ref.logprob, test::kLogitTolerance * std::max(1.0f, std::abs(ref.logprob)))
          << "step " << j;
    }
  };
  expect_close(first, want_full, 0, "first run");
  expect_close(again, want_full, 0, "same prompt, cached");
  expect_close(ext, want_ext, k, "extended prompt, cached into the generated tokens");
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
