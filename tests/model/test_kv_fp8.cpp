// The FP8 E4M3 KV cache (--kv-dtype fp8) on the CPU backend, the GPU's oracle: every value the cache stores is the
// E4M3 rounding of what the fp32 model computes, under the checkpoint's per-tensor scales (exact, from the E4M3
// definition); the logits stay within a bound of transformers' derived from that rounding; and bad scales are
// refused with what to do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "base/check.h"
#include "common/fixture.h"
#include "io/safetensors.h"
#include "kernels/e4m3.h"
#include "runtime/engine.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

// Scales of layer l in the checkpoints written here: not powers of two, so that x / scale rounds.
float k_scale_of(int64_t l) { return 0.0173f * static_cast<float>(l + 1); }
float v_scale_of(int64_t l) { return 0.0291f / static_cast<float>(l + 1); }
std::vector<float> k_scales_of(int64_t n) {
  std::vector<float> s;
  for (int64_t l = 0; l < n; ++l) s.push_back(k_scale_of(l));
  return s;
}
std::vector<float> v_scales_of(int64_t n) {
  std::vector<float> s;
  for (int64_t l = 0; l < n; ++l) s.push_back(v_scale_of(l));
  return s;
}

// A copy of fixture `name`'s model folder with FP8 KV-cache scales (k_scales[l], v_scales[l]) added for its first
// k_scales.size() layers (ModelOpt's names for GQA, self_attn.k_scale for MLA).
fs::path write_scaled_copy(const std::string& name, const fs::path& dst, const std::vector<float>& k_scales,
                           const std::vector<float>& v_scales, bool mla) {
  const fs::path src = test::model_dir(name);
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.path().extension() != ".safetensors" && e.path().filename() != "model.safetensors.index.json") {
      fs::copy_file(e.path(), dst / e.path().filename());
    }
  }
  const Checkpoint ck = Checkpoint::open(src);
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo* t : ck.tensors()) tensors.push_back({t->name, t->dtype, t->shape, t->data});
  for (size_t l = 0; l < k_scales.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    if (mla) {
      tensors.push_back({p + "k_scale", DType::f32, Shape{}, &k_scales[l]});
    } else {
      tensors.push_back({p + "k_proj.k_scale", DType::f32, Shape{}, &k_scales[l]});
      tensors.push_back({p + "v_proj.v_scale", DType::f32, Shape{}, &v_scales[l]});
    }
  }
  write_safetensors(dst / "model.safetensors", tensors);
  return dst;
}

// The K (MLA: latent) and V caches of every layer after one prefill of `prompt` through `model`, on the host.
struct CacheContents {
  std::vector<std::vector<float>> k, v;  // [layer][slot · row]
};
CacheContents prefill_and_read(Model& model, Backend& backend, const std::vector<int32_t>& prompt) {
  constexpr int64_t kBlock = 4;
  const auto len = static_cast<int64_t>(prompt.size());
  const int64_t blocks = (len + kBlock - 1) / kBlock;
  KvPool pool(backend, model.info().kv, blocks, kBlock);
  ForwardBatch b{.tokens = prompt, .n_seqs = 1, .max_blocks = blocks, .logit_rows = {static_cast<int32_t>(len - 1)}};
  for (int32_t i = 0; i < len; ++i) {
    b.positions.push_back(i);
    b.token_seq.push_back(0);
    b.slots.push_back(i);
  }
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  Executor exec(model, backend);
  std::vector<float> logits(static_cast<size_t>(model.info().vocab_size));
  exec.forward(b, pool.view(), logits.data());
  const KvGeometry& g = model.info().kv;
  CacheContents out;
  for (int64_t l = 0; l < g.n_layers; ++l) {
    const auto k_n = static_cast<size_t>(len * g.kv_heads * g.head_dim);
    const auto v_n = static_cast<size_t>(len * g.kv_heads * g.v_head_dim);
    out.k.emplace_back(k_n);
    out.v.emplace_back(v_n);
    backend.copy_to_host(out.k.back().data(), pool.view().k[static_cast<size_t>(l)], k_n * sizeof(float));
    if (v_n > 0) backend.copy_to_host(out.v.back().data(), pool.view().v[static_cast<size_t>(l)], v_n * sizeof(float));
  }
  return out;
}

class KvFp8 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = test::load_fixture(GetParam());
    const std::string arch = [&] {
      std::ifstream in(fixture_.dir / "config.json");
      return nlohmann::json::parse(in).at("architectures").at(0).get<std::string>();
    }();
    mla_ = arch.find("Deepseek") != std::string::npos || arch.find("GlmMoeDsa") != std::string::npos;
    tmp_ = fs::temp_directory_path() / ("sy_kv_fp8_" + GetParam() + "_" + std::to_string(::getpid()));
  }
  void TearDown() override { fs::remove_all(tmp_); }

  test::Fixture fixture_;
  bool mla_ = false;
  fs::path tmp_;
};

// Layer 0's K and V see the same input with either cache, so the fp8 cache must hold exactly the E4M3 rounding
// of the fp32 run's values under the layer's scales; every later layer's values must lie on their scaled E4M3 grid.
TEST_P(KvFp8, StoresTheE4m3RoundingOfEachValue) {
  auto f32_backend = make_cpu_backend();
  auto f32_model = load_model({.dir = fixture_.dir}, *f32_backend);
  const int64_t n_layers = f32_model->info().n_layers;
  const fs::path scaled = write_scaled_copy(GetParam(), tmp_, k_scales_of(n_layers), v_scales_of(n_layers), mla_);
  auto fp8_backend = make_cpu_backend(false, KvDType::fp8);
  ASSERT_EQ(fp8_backend->kv_dtype(), DType::f8_e4m3);
  auto fp8_model = load_model({.dir = scaled}, *fp8_backend);
  // The CPU keeps the rounded values in fp32, so a step reads as many KV bytes as with the fp32 cache (the floor of
  // bench latency counts the bytes as stored: 4 a value here, 1 on the GPU).
  EXPECT_EQ(fp8_backend->kv_storage_dtype(), DType::f32);
  EXPECT_EQ(fp8_model->info().cost.kv_bytes_per_token, f32_model->info().cost.kv_bytes_per_token);
  const auto& prompt = fixture_.prompts[static_cast<size_t>(fixture_.greedy_prompt)];
  const CacheContents plain = prefill_and_read(*f32_model, *f32_backend, prompt);
  const CacheContents fp8 = prefill_and_read(*fp8_model, *fp8_backend, prompt);
  ASSERT_EQ(plain.k.size(), fp8.k.size());

  int64_t changed = 0;
  for (size_t i = 0; i < plain.k[0].size(); ++i) {
    const float want = e4m3_round_trip(plain.k[0][i], k_scale_of(0));
    ASSERT_EQ(fp8.k[0][i], want) << "layer 0 K element " << i << " (fp32 " << plain.k[0][i] << ")";
    changed += want != plain.k[0][i];
  }
  for (size_t i = 0; i < plain.v[0].size(); ++i) {
    ASSERT_EQ(fp8.v[0][i], e4m3_round_trip(plain.v[0][i], v_scale_of(0))) << "layer 0 V element " << i;
  }
  EXPECT_GT(changed, static_cast<int64_t>(plain.k[0].size() / 2));  // the rounding did something
  for (size_t l = 0; l < fp8.k.size(); ++l) {
    const auto li = static_cast<int64_t>(l);
    for (const float x : fp8.k[l]) ASSERT_EQ(x, e4m3_round_trip(x, k_scale_of(li))) << "layer " << l << " K";
    for (const float x : fp8.v[l]) ASSERT_EQ(x, e4m3_round_trip(x, v_scale_of(li))) << "layer " << l << " V";
  }
}

// Against transformers' logits (fp32 K and V), with per-layer scales calibrated as FP8 exporters calibrate them
// (scale = amax / 448 over the values the prompts write, so that they use E4M3's normal range; with scale 1.0 the
// tiny fixtures' values, |x| ~ 0.01, would sit among E4M3's subnormals, whose error is absolute, not relative).
//
// The bound: E4M3 keeps 3 mantissa bits, so a normal value x is stored with relative error at most u = 2^-4 (half
// a step of 2^-3); under a calibrated scale nearly every value is normal (those below amax · 2^-6 / 448 lose at
// most amax · 2^-10 / 448). V's error moves a layer's attention output (a convex combination of V rows) by at most
// u of its size; K's error moves each score s = scale·q·k by at most u·|s|, which moves the softmax weights by a
// factor within e^(±2u|s|), about 2u|s| for the scores of these models (|s| of order 1). So each layer's attention
// output changes by at most about (1 + 2|s|)·u ≈ 3u relative to its size. That output is one of the two terms each
// layer adds to the residual stream, the final norm rescales the stream and the LM head is linear, so L layers move
// the logits by at most about 3u·L relative to their largest magnitude (first order; the MoE routing amplifies a
// change only where two experts' scores are within that change of each other, as the sparse indexer's top-k choice
// does). The conformance tolerance is added for the fp32 arithmetic itself. Measured when this was written: 0.18-0.21
// (about 3u) for the fixtures with dense attention, 0.66 for GLM-5's with the sparse indexer (bounds 0.56-0.75); a
// bf16 KV cache (u = 2^-9) on the same fixtures gives 0.004-0.008, the same multiple of its u.
TEST_P(KvFp8, LogitsStayWithinTheE4m3BoundOfTransformers) {
  auto plain_backend = make_cpu_backend();
  auto plain_model = load_model({.dir = fixture_.dir}, *plain_backend);
  const int64_t vocab = plain_model->info().vocab_size, layers = plain_model->info().n_layers;
  std::vector<float> k_amax(static_cast<size_t>(layers)), v_amax(static_cast<size_t>(layers));
  for (const auto& p : fixture_.prompts) {
    const CacheContents c = prefill_and_read(*plain_model, *plain_backend, p);
    for (size_t l = 0; l < c.k.size(); ++l) {
      for (const float x : c.k[l]) k_amax[l] = std::max(k_amax[l], std::fabs(x));
      for (const float x : c.v[l]) v_amax[l] = std::max(v_amax[l], std::fabs(x));
    }
  }
  std::vector<float> k_scales, v_scales;
  for (size_t l = 0; l < k_amax.size(); ++l) {
    k_scales.push_back(k_amax[l] / kE4m3Max);
    v_scales.push_back(mla_ ? 1.0f : v_amax[l] / kE4m3Max);
  }
  const fs::path scaled = write_scaled_copy(GetParam(), tmp_, k_scales, v_scales, mla_);
  auto backend = make_cpu_backend(false, KvDType::fp8);
  auto model = load_model({.dir = scaled}, *backend);
  constexpr double kU = 1.0 / 16;
  const double bound = 3 * kU * static_cast<double>(layers) + test::kLogitTolerance;
  const EngineConfig config{.block_size = 4, .kv_blocks = 64, .scheduler = {.max_batch_tokens = 512}};
  Engine engine(*model, *backend, config);
  Engine plain(*plain_model, *plain_backend, config);
  std::vector<int64_t> ids, plain_ids;
  for (const auto& p : fixture_.prompts) {
    ids.push_back(engine.add({.prompt = p, .max_new_tokens = 1, .keep_logits = true}));
    plain_ids.push_back(plain.add({.prompt = p, .max_new_tokens = 1, .keep_logits = true}));
  }
  engine.run();
  plain.run();
  double worst = 0.0, worst_plain = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto len = static_cast<int64_t>(fixture_.prompts[i].size());
    const float* want = fixture_.prompt_logits[i].data.data();
    const auto& got = engine.result(ids[i]).logits;
    ASSERT_GE(static_cast<int64_t>(got.size()), len * vocab);
    const double err = test::max_relative_row_error(got.data(), want, len, vocab);
    EXPECT_LE(err, bound) << "prompt " << i << ": " << layers << " layers, bound " << bound;
    worst = std::max(worst, err);
    worst_plain =
        std::max(worst_plain, test::max_relative_row_error(plain.result(plain_ids[i]).logits.data(), want, len, vocab));
  }
  // The rounding must show: without it the engine is closer to transformers (else the cache was not rounded).
  EXPECT_GT(worst, worst_plain) << "fp8 KV changed nothing";
  RecordProperty("max_relative_logit_error", std::to_string(worst));
  RecordProperty("bound", std::to_string(bound));
}

TEST_P(KvFp8, ScalesForSomeLayersOnlyAreRefused) {
  auto probe = make_cpu_backend();
  const int64_t n_layers = load_model({.dir = fixture_.dir}, *probe)->info().n_layers;
  ASSERT_GE(n_layers, 2);
  const fs::path partial =
      write_scaled_copy(GetParam(), tmp_, k_scales_of(n_layers - 1), v_scales_of(n_layers - 1), mla_);
  auto fp8 = make_cpu_backend(false, KvDType::fp8);
  try {
    load_model({.dir = partial}, *fp8);
    FAIL() << "scales for " << n_layers - 1 << " of " << n_layers << " layers were accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(n_layers - 1) + " of its " + std::to_string(n_layers) + " layers"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("layer " + std::to_string(n_layers - 1)), std::string::npos) << what;
    EXPECT_NE(what.find("--kv-dtype bf16"), std::string::npos) << what;
  }
  // Without --kv-dtype fp8 the scales are not read, so the same checkpoint loads.
  EXPECT_NO_THROW(load_model({.dir = partial}, *probe));
}

TEST_P(KvFp8, ScalesThatAreNotPositiveAndFiniteAreRefused) {
  auto probe = make_cpu_backend();
  const int64_t n_layers = load_model({.dir = fixture_.dir}, *probe)->info().n_layers;
  auto fp8 = make_cpu_backend(false, KvDType::fp8);
  for (const float bad : {0.0f, -0.5f, std::nanf(""), INFINITY}) {
    std::vector<float> k = k_scales_of(n_layers);
    k.back() = bad;
    const fs::path dir = write_scaled_copy(GetParam(), tmp_, k, v_scales_of(n_layers), mla_);
    try {
      load_model({.dir = dir}, *fp8);
      FAIL() << "scale " << bad << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("positive and finite"), std::string::npos) << what;
      EXPECT_NE(what.find("model.layers." + std::to_string(n_layers - 1) + ".self_attn."), std::string::npos) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvFp8,
                         ::testing::Values("qwen3_moe_base", "mixtral_base", "deepseek_v3_base", "glm_moe_dsa_base"));

TEST(KvDTypeFlag, NamesTheAllowedValues) {
  EXPECT_EQ(parse_kv_dtype("auto"), KvDType::native);
  EXPECT_EQ(parse_kv_dtype("bf16"), KvDType::bf16);
  EXPECT_EQ(parse_kv_dtype("fp8"), KvDType::fp8);
  for (const char* bad : {"fp4", "FP8", "e4m3", "", "int8"}) {
    try {
      parse_kv_dtype(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not one of auto, bf16, fp8"), std::string::npos) << e.what();
    }
  }
}

TEST(KvDTypeFlag, BackendsReportTheirKvTypes) {
  EXPECT_EQ(make_cpu_backend()->kv_dtype(), DType::f32);
  EXPECT_EQ(make_cpu_backend(true)->kv_dtype(), DType::bf16);
  EXPECT_EQ(make_cpu_backend(false, KvDType::bf16)->kv_dtype(), DType::bf16);
  const auto fp8 = make_cpu_backend(false, KvDType::fp8);
  EXPECT_EQ(fp8->kv_dtype(), DType::f8_e4m3);
  EXPECT_EQ(fp8->kv_storage_dtype(), DType::f32);  // the CPU keeps each rounded value in fp32
}

}  // namespace
}  // namespace sy
