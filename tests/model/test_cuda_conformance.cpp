// The CUDA backend on every fixture, against the CPU backend in bf16 emulation (cpu-bf16: the same
// bf16 rounding of weights, matrix-product inputs, embedding rows and KV cache, the same 4-bit weights kept
// and widened exactly or to bf16 as each GPU path does, fp32 accumulation and fp32 routers), with the fixture's prompts
// batched and chunked as in serving: identical greedy tokens and logits within kLogitTolerance.
//
// Why against cpu-bf16 and not the transformers fp32 reference directly: bf16 rounding moves hidden
// states by about 2^-9 relative, and the tiny random fixtures have router top-k gaps down to ~1e-3,
// so which expert a token picks can legitimately differ from an fp32 run; a flipped expert changes
// that token's logits by far more than rounding. The CPU fp32 path is held to transformers at 1e-4 by
// test_model. Here both sides round identically and differ only in fp32 summation order (~1e-6
// relative), which one bf16 rounding step can turn into one bf16 ulp (2^-8) on an element; 1e-2 of the
// row's max-abs logit leaves a margin over the ~1e-3 we measured (bench/results/cuda-tests.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "backend/cuda/cuda_backend.h"
#include "common/fixture.h"
#include "common/fixture_run.h"
#include "runtime/engine.h"

namespace sy {
namespace {

constexpr double kLogitTolerance = 1e-2;

struct FixtureRun {
  std::vector<RequestResult> results;
};

FixtureRun run_fixture(const test::Fixture& f, Backend& backend) {
  auto model = load_model({.dir = f.dir}, backend);
  return {.results = test::run_fixture_prompts(f, *model, backend)};
}

class CudaConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaConformance, MatchesCpuBf16) {
  const auto f = test::load_fixture(GetParam());
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend(/*emulate_bf16=*/true);
  const FixtureRun g = run_fixture(f, *gpu), c = run_fixture(f, *cpu);
  const int64_t vocab = f.greedy_logits.shape[1];
  double worst = 0.0, vs_reference = 0.0;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    const auto& gr = g.results[i];
    const auto& cr = c.results[i];
    EXPECT_EQ(gr.output, cr.output) << "prompt " << i;
    ASSERT_EQ(gr.logits.size(), cr.logits.size());
    const auto rows = static_cast<int64_t>(gr.logits.size()) / vocab;
    const double err = test::max_relative_row_error(gr.logits.data(), cr.logits.data(), rows, vocab);
    EXPECT_LE(err, kLogitTolerance) << "prompt " << i;
    worst = std::max(worst, err);
    const auto len = static_cast<int64_t>(f.prompts[i].size());
    vs_reference = std::max(vs_reference,
                            test::max_relative_row_error(gr.logits.data(), f.prompt_logits[i].data.data(), len, vocab));
  }
  std::printf("[ %s ] CUDA vs cpu-bf16: max relative logit error %.3g; CUDA vs transformers fp32 prompts: %.3g\n",
              GetParam().c_str(), worst, vs_reference);
}

// The same with an FP8 E4M3 KV cache (--kv-dtype fp8; the fixtures carry no scales, so 1.0) on both sides: the GPU
// stores the bytes and widens them exactly, the CPU the same values in fp32, so they differ as above, plus where an
// fp32 summation-order difference moves a k, v or latent value across an E4M3 rounding point: one E4M3 step on that
// element, 2^-3 of it for a normal value and up to all of it for the subnormal ones that scale 1.0 gives these
// fixtures' values of about 0.01 (E4M3's smallest normal is 2^-6), so one such value moves a logit by a few per cent
// of its row's largest. Hence kFp8KvTolerance (the kimi fixtures measured 0.017-0.020 on the H200 against the bf16
// tolerance of 0.01); greedy tokens must still agree.
constexpr double kFp8KvTolerance = 3e-2;

TEST_P(CudaConformance, Fp8KvCacheMatchesCpuBf16WithFp8Kv) {
  const auto f = test::load_fixture(GetParam());
  auto gpu = make_cuda_backend(0, KvDType::fp8);
  auto cpu = make_cpu_backend(/*emulate_bf16=*/true, KvDType::fp8);
  const FixtureRun g = run_fixture(f, *gpu), c = run_fixture(f, *cpu);
  const int64_t vocab = f.greedy_logits.shape[1];
  double worst = 0.0;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    const auto& gr = g.results[i];
    const auto& cr = c.results[i];
    EXPECT_EQ(gr.output, cr.output) << "prompt " << i;
    ASSERT_EQ(gr.logits.size(), cr.logits.size());
    const auto rows = static_cast<int64_t>(gr.logits.size()) / vocab;
    const double err = test::max_relative_row_error(gr.logits.data(), cr.logits.data(), rows, vocab);
    EXPECT_LE(err, kFp8KvTolerance) << "prompt " << i;
    worst = std::max(worst, err);
  }
  std::printf("[ %s ] CUDA vs cpu-bf16, fp8 KV cache: max relative logit error %.3g\n", GetParam().c_str(), worst);
}

// Shapes the fast paths take (head_dim 64 for the warp attention, dims multiples of 8 for the
// small-batch experts), so that decode steps are captured as CUDA graphs and replayed: several steps
// of one shape, batched and alone, against cpu-bf16.
TEST(CudaCapture, ReplayedDecodeStepsMatchCpuBf16) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "sy_cuda_capture";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 3, "vocab_size": 256,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "norm_topk_prob": true,
    "max_position_embeddings": 512})";
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 13, 2, 77, 31, 8}, {44, 3}, {3, 3, 90, 12, 60, 1, 2, 4}};
  std::vector<std::vector<int32_t>> outputs[2];
  std::vector<std::vector<float>> logits[2];
  int i = 0;
  for (const char* device : {"cuda", "cpu-bf16"}) {
    auto backend = make_backend(device);
    auto model = load_model({.dir = dir, .random_weights = true, .seed = 11}, *backend);
    for (bool batched : {true, false}) {
      Engine engine(*model, *backend, {.block_size = 4, .kv_blocks = 64});
      std::vector<int64_t> ids;
      for (const auto& p : prompts) {
        ids.push_back(engine.add({.prompt = p, .max_new_tokens = 20, .keep_logits = true}));
        if (!batched) engine.run();
      }
      engine.run();
      for (int64_t id : ids) {
        outputs[i].push_back(engine.result(id).output);
        logits[i].push_back(engine.result(id).logits);
      }
    }
    ++i;
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t r = 0; r < outputs[0].size(); ++r) {
    EXPECT_EQ(outputs[0][r], outputs[1][r]) << "request " << r;
    ASSERT_EQ(logits[0][r].size(), logits[1][r].size());
    const auto rows = static_cast<int64_t>(logits[0][r].size()) / 256;
    EXPECT_LE(test::max_relative_row_error(logits[0][r].data(), logits[1][r].data(), rows, 256), kLogitTolerance)
        << "request " << r;
  }
  fs::remove_all(dir);
}

// The prefix cache on the GPU: the greedy prompt, then the same prompt extended by k greedy tokens (k
// giving a cached prefix that ends inside the extended prompt's last block, and k making the prompt whole
// blocks, all cached but the last), continue with the tokens and, within the bf16 tolerance, the logprobs
// of the same requests with the cache off.
TEST_P(CudaConformance, CachedPrefixMatchesUncached) {
  const auto f = test::load_fixture(GetParam());
  auto gpu = make_cuda_backend(0);
  auto model = load_model({.dir = f.dir}, *gpu);
  const auto& prompt = f.prompts[static_cast<size_t>(f.greedy_prompt)];
  const auto steps = static_cast<int64_t>(f.greedy_tokens.size());
  const auto len = static_cast<int64_t>(prompt.size());
  std::vector<std::vector<int32_t>> prompts = {prompt};
  for (int64_t k : {int64_t{5}, (4 - len % 4) % 4 + 4}) {
    if (k >= steps) continue;
    std::vector<int32_t> p = prompt;
    p.insert(p.end(), f.greedy_tokens.begin(), f.greedy_tokens.begin() + k);
    prompts.push_back(p);
  }
  std::vector<RequestResult> results[2];
  for (bool cache : {true, false}) {
    Engine engine(*model, *gpu, {.block_size = 4, .kv_blocks = 64, .prefix_cache = cache});
    for (const auto& p : prompts) {
      const int64_t id =
          engine.add({.prompt = p, .max_new_tokens = steps - static_cast<int64_t>(p.size()) + len, .logprobs = 0});
      engine.run();
      engine.check_integrity();
      results[cache ? 0 : 1].push_back(engine.result(id));
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const RequestResult &on = results[0][i], &off = results[1][i];
    EXPECT_EQ(on.cached_tokens, i == 0 ? 0 : (static_cast<int64_t>(prompts[i].size()) - 1) / 4 * 4);
    EXPECT_EQ(off.cached_tokens, 0);
    ASSERT_EQ(on.output, off.output);
    for (size_t j = 0; j < on.logprobs.size(); ++j) {
      EXPECT_NEAR(on.logprobs[j].logprob, off.logprobs[j].logprob,
                  kLogitTolerance * std::max(1.0f, std::abs(off.logprobs[j].logprob)))
          << "step " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaConformance, ::testing::ValuesIn(test::fixture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sy
