// Non-finite numbers at run time: a request whose next-token logits hold a NaN or an infinity is ended
// with FinishReason::error and a message naming the step (and, with check_finite, the first block whose
// output went non-finite), never sampled; the other requests of the same steps are untouched.
#include <gtest/gtest.h>

#include <limits>

#include "base/check.h"
#include "common/fixture.h"
#include "common/poisoned_checkpoint.h"
#include "runtime/engine.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kPoisonedToken = 77;

class NonFinite : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = test::fixtures_dir() / "qwen3_moe_base";
    dir_ = fs::temp_directory_path() /
           ("sy_nonfinite_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Run {
    std::vector<RequestResult> results;
    int64_t steps = 0;
  };
  Run run(const fs::path& dir, bool check_finite, const std::vector<std::vector<int32_t>>& prompts) {
    auto model = load_model({.dir = dir, .check_finite = check_finite}, *backend_);
    Engine engine(*model, *backend_, {.block_size = 4, .kv_blocks = 64});
    std::vector<int64_t> ids;
    for (const auto& p : prompts) ids.push_back(engine.add({.prompt = p, .max_new_tokens = 6}));
    engine.run();
    Run r;
    for (int64_t id : ids) r.results.push_back(engine.result(id));
    r.steps = engine.steps();
    return r;
  }

  fs::path source_, dir_;
  std::unique_ptr<Backend> backend_;
};

const std::vector<int32_t> kClean = {17, 254, 3, 99, 120};
const std::vector<int32_t> kPoisoned = {17, 254, kPoisonedToken, 99, 120};

TEST_F(NonFinite, NanEmbeddingRowFailsOnlyTheRequestsThatReadIt) {
  test::write_poisoned_copy(source_, dir_, "model.embed_tokens.weight", kPoisonedToken,
                            std::numeric_limits<float>::quiet_NaN());
  const Run clean = run(source_, false, {kClean});
  const Run got = run(dir_, false, {kClean, kPoisoned});
  // The clean prompt decodes as it does on the untouched checkpoint.
  EXPECT_EQ(got.results[0].finish_reason, FinishReason::length);
  EXPECT_EQ(got.results[0].output, clean.results[0].output);
  // The poisoned one ends at its first sampling step, with no token and a one-line reason.
  const RequestResult& bad = got.results[1];
  EXPECT_TRUE(bad.finished);
  EXPECT_EQ(bad.finish_reason, FinishReason::error);
  EXPECT_TRUE(bad.output.empty());
  EXPECT_EQ(std::string(finish_reason_name(bad.finish_reason)), "error");
  EXPECT_NE(bad.error.find("engine step 0: the next-token logits are not finite"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("--check-finite"), std::string::npos) << bad.error;
  EXPECT_EQ(bad.error.find('\n'), std::string::npos) << bad.error;
}

TEST_F(NonFinite, CheckFiniteNamesTheFirstBlockThatWentNonFinite) {
  // The embedding row: the embedding is the first block whose output is not finite.
  test::write_poisoned_copy(source_, dir_, "model.embed_tokens.weight", kPoisonedToken,
                            std::numeric_limits<float>::quiet_NaN());
  const RequestResult embedded = run(dir_, true, {kPoisoned}).results[0];
  EXPECT_EQ(embedded.finish_reason, FinishReason::error);
  EXPECT_NE(embedded.error.find("the first non-finite activation of the step was the embedding output (first at "
                                "token 2 of the step"),
            std::string::npos)
      << embedded.error;

  // An infinite norm weight in front of layer 1's experts: layer 0 and layer 1's attention stay finite.
  test::write_poisoned_copy(source_, dir_, "model.layers.1.post_attention_layernorm.weight", -1,
                            std::numeric_limits<float>::infinity());
  const Run layer = run(dir_, true, {kClean});
  const RequestResult& r = layer.results[0];
  EXPECT_EQ(r.finish_reason, FinishReason::error);
  EXPECT_NE(r.error.find("the first non-finite activation of the step was the layer 1 FFN output"), std::string::npos)
      << r.error;
  EXPECT_EQ(layer.steps, 1);  // the prompt's prefill step ended it
}

}  // namespace
}  // namespace sy
