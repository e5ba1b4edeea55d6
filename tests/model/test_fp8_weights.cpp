// Block-scaled FP8 checkpoints (DeepSeek-V3's form, quantization_config.weight_block_size): the bundled
// Qwen3-MoE fixture quantised here to F8_E4M3 in 32x32 blocks (edge blocks included: 80 and 36 are not
// multiples of 32), with the writer's rule (scale = block amax / 448, nearest E4M3 value), computes exactly
// what an F32 copy holding its dequantised weights computes. Values and the dequantisation come from the
// E4M3 definition written out below, not from the loader. The byte counts of the loader and of the planner
// equal the safetensors tensors' bytes; missing, mis-shaped and mistyped scales, and F8 weights without a
// block-FP8 config, are refused with the tensor named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "arch/model_desc.h"
#include "base/check.h"
#include "common/fixture.h"
#include "io/safetensors.h"
#include "model/bind.h"
#include "model/model.h"
#include "planner/weights.h"
#include "runtime/engine.h"

namespace sy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kBlock = 32;

// OCP FP8 E4M3 ("fn": no infinities): sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0 is
// subnormal (m / 8 * 2^-6); S.1111.111 is NaN. Largest finite value 448.
float e4m3_value(uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  const double magnitude =
      exponent == 0 ? mantissa / 8.0 * std::ldexp(1.0, -6) : (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
  return static_cast<float>(sign ? -magnitude : magnitude);
}

// The code whose value is nearest to x (|x| <= 448).
uint8_t nearest_e4m3(float x) {
  uint8_t best = 0;
  float best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_value(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    const float err = std::fabs(v - x);
    if (err < best_err) {
      best_err = err;
      best = static_cast<uint8_t>(c);
    }
  }
  return best;
}

// A linear weight of the description (attention projections, dense and expert MLPs): what DeepSeek-V3's
// checkpoints store in FP8. Embeddings, the LM head, norms and the router stay as they are.
bool quantised(const std::string& name, const Shape& shape) {
  return shape.rank() == 2 && name.find("embed_tokens") == std::string::npos && name != "lm_head.weight" &&
         !name.ends_with("mlp.gate.weight");
}

class Fp8Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path source = test::fixtures_dir() / "qwen3_moe_base";
    root_ = fs::temp_directory_path() / ("sy_fp8_" + std::to_string(getpid()));
    fs::create_directories(root_ / "fp8");
    fs::create_directories(root_ / "dequantised");
    json config = json::parse(std::ifstream(source / "config.json"));
    json dequantised_config = config;
    dequantised_config["torch_dtype"] = "float32";
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {kBlock, kBlock}}};
    std::ofstream(root_ / "fp8/config.json") << config.dump(2);
    std::ofstream(root_ / "dequantised/config.json") << dequantised_config.dump(2);

    const Checkpoint ck = Checkpoint::open(source);
    std::vector<TensorToWrite> fp8, f32;
    for (const TensorInfo* t : ck.tensors()) {
      std::vector<float> w(static_cast<size_t>(t->shape.numel()));
      convert_to_f32(t->data, t->dtype, w.data(), w.size());
      if (!quantised(t->name, t->shape)) {
        const auto* bytes = reinterpret_cast<const std::byte*>(t->data);
        raw_data_.emplace_back(bytes, bytes + t->shape.numel() * static_cast<int64_t>(dtype_size(t->dtype)));
        fp8.push_back({t->name, t->dtype, t->shape, raw_data_.back().data()});
        f32_data_.push_back(std::move(w));
        f32.push_back({t->name, DType::f32, t->shape, f32_data_.back().data()});
        continue;
      }
      const int64_t rows = t->shape[0], cols = t->shape[1];
      const int64_t grid_rows = (rows + kBlock - 1) / kBlock, grid_cols = (cols + kBlock - 1) / kBlock;
      std::vector<uint8_t> q(w.size());
      std::vector<float> scales(static_cast<size_t>(grid_rows * grid_cols)), deq(w.size());
      for (int64_t br = 0; br < grid_rows; ++br) {
        for (int64_t bc = 0; bc < grid_cols; ++bc) {
          float amax = 0;
          for (int64_t r = br * kBlock; r < std::min(rows, (br + 1) * kBlock); ++r)
            for (int64_t c = bc * kBlock; c < std::min(cols, (bc + 1) * kBlock); ++c)
              amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
          const float scale = amax > 0 ? amax / 448.0f : 1.0f;
          scales[static_cast<size_t>(br * grid_cols + bc)] = scale;
          for (int64_t r = br * kBlock; r < std::min(rows, (br + 1) * kBlock); ++r) {
            for (int64_t c = bc * kBlock; c < std::min(cols, (bc + 1) * kBlock); ++c) {
              const auto i = static_cast<size_t>(r * cols + c);
              q[i] = nearest_e4m3(std::clamp(w[i] / scale, -448.0f, 448.0f));
              deq[i] = e4m3_value(q[i]) * scale;
            }
          }
        }
      }
      fp8_data_.push_back(std::move(q));
      f32_data_.push_back(std::move(scales));
      fp8.push_back({t->name, DType::f8_e4m3, t->shape, fp8_data_.back().data()});
      fp8.push_back({t->name + "_scale_inv", DType::f32, {grid_rows, grid_cols}, f32_data_.back().data()});
      f32_data_.push_back(std::move(deq));
      f32.push_back({t->name, DType::f32, t->shape, f32_data_.back().data()});
      ++quantised_tensors_;
    }
    write_safetensors(root_ / "fp8/model.safetensors", fp8);
    write_safetensors(root_ / "dequantised/model.safetensors", f32);
    fp8_tensors_ = fp8;
  }
  static void TearDownTestSuite() {
    fs::remove_all(root_);
    fp8_data_.clear();
    f32_data_.clear();
    raw_data_.clear();
  }

  // The prompt-position logits of a prompt and 8 greedy tokens after it.
  static RequestResult run(const fs::path& dir) {
    const std::unique_ptr<Backend> backend = make_cpu_backend();
    const std::unique_ptr<Model> model = load_model({.dir = dir}, *backend);
    Engine engine(*model, *backend, {.block_size = 4, .kv_blocks = 64, .scheduler = {.max_batch_tokens = 64}});
    const int64_t id = engine.add({.prompt = {3, 17, 254, 99, 120, 7, 1}, .max_new_tokens = 8, .keep_logits = true});
    engine.run();
    return engine.result(id);
  }

  // Loads a copy of the FP8 folder whose tensors `edit` changed; the error, or "" when it loads.
  static std::string load_error(const std::function<void(std::vector<TensorToWrite>&)>& edit, bool keep_quant = true) {
    const fs::path dir = root_ / "edited";
    fs::remove_all(dir);
    fs::create_directories(dir);
    json config = json::parse(std::ifstream(root_ / "fp8/config.json"));
    if (!keep_quant) config.erase("quantization_config");
    std::ofstream(dir / "config.json") << config.dump(2);
    std::vector<TensorToWrite> tensors = fp8_tensors_;
    edit(tensors);
    write_safetensors(dir / "model.safetensors", tensors);
    try {
      const std::unique_ptr<Backend> backend = make_cpu_backend();
      load_model({.dir = dir}, *backend);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  static inline fs::path root_;
  static inline std::vector<std::vector<uint8_t>> fp8_data_;
  static inline std::vector<std::vector<float>> f32_data_;
  static inline std::vector<std::vector<std::byte>> raw_data_;  // the tensors kept as they are
  static inline std::vector<TensorToWrite> fp8_tensors_;
  static inline int quantised_tensors_ = 0;
};

TEST_F(Fp8Checkpoint, ComputesWhatItsDequantisedWeightsCompute) {
  ASSERT_GT(quantised_tensors_, 100);  // 4 layers x (4 attention + 8 experts x 3)
  const RequestResult fp8 = run(root_ / "fp8");
  const RequestResult f32 = run(root_ / "dequantised");
  EXPECT_EQ(fp8.output, f32.output);
  ASSERT_EQ(fp8.logits.size(), f32.logits.size());
  // The same fp32 weights: the same arithmetic.
  EXPECT_EQ(fp8.logits, f32.logits);
}

TEST_F(Fp8Checkpoint, LoaderAndPlannerCountTheTensorsBytes) {
  int64_t file_bytes = 0;
  for (const TensorToWrite& t : fp8_tensors_) file_bytes += t.shape.numel() * static_cast<int64_t>(dtype_size(t.dtype));
  const ModelDesc desc = load_model_desc(root_ / "fp8");
  ASSERT_TRUE(desc.quant.block_fp8);
  const Checkpoint ckpt = Checkpoint::open(root_ / "fp8");
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store{.checks_only = true};
  WeightLoader loader(&ckpt, 0, *backend, store);
  build_model(desc, {.dir = ckpt.dir()}, loader, store, *backend);
  EXPECT_EQ(static_cast<int64_t>(store.checkpoint_bytes), file_bytes);
  EXPECT_EQ(weights_from_config(desc).total().bytes, file_bytes);
  EXPECT_EQ(weights_from_checkpoint(desc, ckpt).total().bytes, file_bytes);
}

// A rank's slice (rows, or columns, not on block boundaries) reads what the same slice of the
// dequantised weight holds.
TEST_F(Fp8Checkpoint, SlicesDequantiseWithTheirOwnBlocks) {
  const Checkpoint fp8 = Checkpoint::open(root_ / "fp8");
  const Checkpoint f32 = Checkpoint::open(root_ / "dequantised");
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::string name = "model.layers.1.self_attn.o_proj.weight";  // [80, 120]: blocks of 32 with edges
  const Shape shape{80, 120};
  const auto* want = reinterpret_cast<const float*>(f32.find(name)->data);
  for (const Slice& slice : {Slice{.dim = 0, .start = 16, .count = 40}, Slice{.dim = 1, .start = 8, .count = 70}}) {
    WeightStore store;
    WeightLoader loader(&fp8, 0, *backend, store);
    loader.set_quant({.block_fp8 = true, .block_rows = kBlock, .block_cols = kBlock});
    std::vector<float> got(static_cast<size_t>(slice.dim == 0 ? slice.count * 120 : 80 * slice.count));
    loader.load_into(name, shape, got.data(), WeightInit::normal, slice);
    for (int64_t r = 0; r < (slice.dim == 0 ? slice.count : 80); ++r) {
      for (int64_t c = 0; c < (slice.dim == 1 ? slice.count : 120); ++c) {
        const int64_t src_r = slice.dim == 0 ? slice.start + r : r, src_c = slice.dim == 1 ? slice.start + c : c;
        const int64_t width = slice.dim == 1 ? slice.count : 120;
        ASSERT_EQ(got[static_cast<size_t>(r * width + c)], want[src_r * 120 + src_c])
            << "slice along " << slice.dim << ", element " << r << ", " << c;
      }
    }
  }
}

TEST_F(Fp8Checkpoint, BadScalesAreNamed) {
  const std::string w = "model.layers.2.mlp.experts.5.down_proj.weight";
  const auto drop = [&](std::vector<TensorToWrite>& t) {
    std::erase_if(t, [&](const TensorToWrite& x) { return x.name == w + "_scale_inv"; });
  };
  std::string err = load_error(drop);
  EXPECT_NE(err.find(w + "_scale_inv"), std::string::npos) << err;
  EXPECT_NE(err.find("[3, 2]"), std::string::npos) << err;  // 80 x 36 in blocks of 32

  static const float wrong_grid[4] = {1, 1, 1, 1};
  err = load_error([&](std::vector<TensorToWrite>& t) {
    drop(t);
    t.push_back({w + "_scale_inv", DType::f32, {2, 2}, wrong_grid});
  });
  EXPECT_NE(err.find("[2, 2]"), std::string::npos) << err;
  EXPECT_NE(err.find("needs [3, 2]"), std::string::npos) << err;

  static const int32_t ints[6] = {1, 1, 1, 1, 1, 1};
  err = load_error([&](std::vector<TensorToWrite>& t) {
    drop(t);
    t.push_back({w + "_scale_inv", DType::i32, {3, 2}, ints});
  });
  EXPECT_NE(err.find("dtype I32"), std::string::npos) << err;

  err = load_error([](std::vector<TensorToWrite>&) {}, /*keep_quant=*/false);
  EXPECT_NE(err.find("F8_E4M3"), std::string::npos) << err;
  EXPECT_NE(err.find("weight_block_size"), std::string::npos) << err;
}

}  // namespace
}  // namespace sy
