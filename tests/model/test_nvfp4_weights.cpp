// NVFP4 checkpoints in NVIDIA ModelOpt's exported form (GLM-5 / DeepSeek-R1 NVFP4), on the fixture
// tests/fixtures/glm_moe_dsa_nvfp4 (o_proj, dense MLP, shared and routed experts in NVFP4 groups of 4; made by
// ModelOpt's NVFP4QTensor, tools/fixtures/make_nvfp4_fixture.py). Its logits against transformers are the
// conformance suite's; here: every weight and every rank's slice of it reads what the format's definition
// (written out below, not the loader's) gives; the loader's and the planner's bytes equal the tensors'
// bytes; missing, mis-shaped and mistyped pieces, and a checkpoint its quantisation config does not
// describe, are refused with the tensor named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "arch/model_desc.h"
#include "base/check.h"
#include "common/fixture.h"
#include "common/quant_checkpoint.h"
#include "io/safetensors.h"
#include "model/bind.h"
#include "model/model.h"
#include "planner/weights.h"

namespace sy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kGroup = 4;
const std::string kWeight = "model.layers.2.mlp.experts.3.down_proj.weight";  // [64, 20]: 5 groups, 10 bytes

fs::path fixture() { return test::fixtures_dir() / "glm_moe_dsa_nvfp4"; }

std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

// OCP FP8 E4M3 (fn): sign, 4 exponent bits of bias 7, 3 mantissa bits, exponent 0 subnormal.
float e4m3(uint8_t c) {
  const int exp = (c >> 3) & 15, man = c & 7;
  const double v = exp == 0 ? man / 8.0 * std::ldexp(1.0, -6) : (1.0 + man / 8.0) * std::ldexp(1.0, exp - 7);
  return static_cast<float>((c & 0x80) != 0 ? -v : v);
}

// The format's definition (../shared/quant-formats.md, C): element 2j of a row is the low nibble of byte j,
// 2j + 1 the high one; bit 3 the sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}; times the E4M3 scale of
// group k / group_size and the per-tensor weight_scale_2.
std::vector<float> decode(const Checkpoint& ck, const std::string& weight, int64_t rows, int64_t cols) {
  static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const TensorInfo* packed = ck.find(weight);
  const TensorInfo* scale = ck.find(module_of(weight) + ".weight_scale");
  const TensorInfo* scale2 = ck.find(module_of(weight) + ".weight_scale_2");
  float global = 0.0f;
  std::memcpy(&global, scale2->data, 4);
  const auto* bytes = reinterpret_cast<const uint8_t*>(packed->data);
  const auto* scales = reinterpret_cast<const uint8_t*>(scale->data);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t b = bytes[r * (cols / 2) + k / 2];
      const int nibble = k % 2 == 0 ? b & 15 : b >> 4;
      const float v = (nibble & 8) != 0 ? -magnitude[nibble & 7] : magnitude[nibble & 7];
      out[static_cast<size_t>(r * cols + k)] = v * (e4m3(scales[r * (cols / kGroup) + k / kGroup]) * global);
    }
  }
  return out;
}

class Nvfp4Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("sy_nvfp4_" + std::to_string(getpid()));
    fs::create_directories(root_);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // Loads a copy of the fixture whose tensors `edit` changed and whose hf_quant_config.json `edit_quant`
  // changed (set to null: no such file); the error, or "" when it loads.
  static std::string load_error(
      const test::EditTensors& edit, const test::EditJson& edit_quant = [](json&) {}) {
    return test::load_edited_copy(
        root_ / "edited", fixture(), edit, [](json&) {}, edit_quant);
  }

  static inline fs::path root_;
};

TEST_F(Nvfp4Checkpoint, WeightsAndSlicesReadWhatTheFormatDefines) {
  const Checkpoint ck = Checkpoint::open(fixture());
  const ModelDesc desc = load_model_desc(fixture());
  ASSERT_TRUE(desc.quant.nvfp4);
  ASSERT_EQ(desc.quant.group_size, kGroup);
  EXPECT_TRUE(desc.quant.quantises(kWeight));
  EXPECT_TRUE(desc.quant.quantises("model.layers.0.self_attn.o_proj.weight"));
  EXPECT_FALSE(desc.quant.quantises("model.layers.0.self_attn.kv_b_proj.weight"));
  EXPECT_FALSE(desc.quant.quantises("lm_head.weight"));
  const std::vector<float> want = decode(ck, kWeight, 64, 20);
  // The whole weight, a run of rows, and a run of columns on a group boundary.
  test::expect_slices_read(
      ck, desc.quant, kWeight, 64, 20, want,
      {Slice{}, Slice{.dim = 0, .start = 8, .count = 40}, Slice{.dim = 1, .start = 8, .count = 12}});
  // A column cut inside a group is refused, saying which multiple a layout must keep.
  const std::string err = test::column_cut_error(ck, desc.quant, kWeight, 64, 20, 10, 10);
  EXPECT_NE(err.find("multiple of 4"), std::string::npos) << err;
}

TEST_F(Nvfp4Checkpoint, LoaderAndPlannerCountTheTensorsBytes) {
  const Checkpoint ck = Checkpoint::open(fixture());
  int64_t file_bytes = 0, packed = 0;
  for (const TensorInfo* t : ck.tensors()) {
    file_bytes += static_cast<int64_t>(t->nbytes);
    if (t->dtype == DType::u8) ++packed;
  }
  // 4 o_proj, 1 dense MLP (3), 3 MoE layers x (8 experts + 1 shared) x 3.
  ASSERT_EQ(packed, 4 + 3 + 3 * 9 * 3);
  const ModelDesc desc = load_model_desc(fixture());
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store{.checks_only = true};
  WeightLoader loader(&ck, 0, *backend, store);
  build_model(desc, {.dir = ck.dir()}, loader, store, *backend);
  EXPECT_EQ(static_cast<int64_t>(store.checkpoint_bytes), file_bytes);
  const WeightTable from_config = weights_from_config(desc), from_headers = weights_from_checkpoint(desc, ck);
  EXPECT_EQ(from_config.total().bytes, file_bytes);
  EXPECT_EQ(from_headers.total().bytes, file_bytes);
  EXPECT_EQ(from_headers.total().params, from_config.total().params);  // the packed bytes count two each
  EXPECT_TRUE(from_headers.unrecognised.empty());
}

TEST_F(Nvfp4Checkpoint, BadPiecesAreNamed) {
  const std::string m = module_of(kWeight);
  const auto replace = test::replace_tensor;
  EXPECT_EQ(load_error([](std::vector<TensorToWrite>&) {}), "");

  std::string err = load_error(replace(m + ".weight_scale", DType::f8_e4m3, {}, nullptr));
  EXPECT_NE(err.find(m + ".weight_scale"), std::string::npos) << err;
  EXPECT_NE(err.find("F8_E4M3 [64, 5]"), std::string::npos) << err;

  static const uint16_t bf16_scales[64 * 5] = {};
  err = load_error(replace(m + ".weight_scale", DType::bf16, {64, 5}, bf16_scales));
  EXPECT_NE(err.find("are BF16 [64, 5]"), std::string::npos) << err;
  EXPECT_NE(err.find("needs F8_E4M3 [64, 5]"), std::string::npos) << err;

  err = load_error(replace(m + ".weight_scale_2", DType::f32, {}, nullptr));
  EXPECT_NE(err.find(m + ".weight_scale_2"), std::string::npos) << err;

  static const float negative = -0.5f;
  err = load_error(replace(m + ".weight_scale_2", DType::f32, {}, &negative));
  EXPECT_NE(err.find("finite and positive"), std::string::npos) << err;

  static const float two[2] = {1.0f, 1.0f};
  err = load_error(replace(m + ".input_scale", DType::f32, {2}, two));
  EXPECT_NE(err.find("F32 scalar"), std::string::npos) << err;

  static const uint8_t short_rows[64 * 9] = {};
  err = load_error(replace(kWeight, DType::u8, {64, 9}, short_rows));
  EXPECT_NE(err.find("needs U8 [64, 10]"), std::string::npos) << err;

  // The checkpoint and its quantisation config must agree on what is quantised.
  err = load_error([](std::vector<TensorToWrite>&) {}, [](json& q) { q = nullptr; });
  EXPECT_NE(err.find("hf_quant_config.json"), std::string::npos) << err;
  err = load_error([](std::vector<TensorToWrite>&) {},
                   [](json& q) { q["quantization"]["exclude_modules"].push_back("*.experts.*"); });
  EXPECT_NE(err.find("exclude_modules leaves module"), std::string::npos) << err;
  // An algorithm other than NVFP4 is named where its weights are read.
  err = load_error([](std::vector<TensorToWrite>&) {}, [](json& q) { q["quantization"]["quant_algo"] = "W4A8_AWQ"; });
  EXPECT_NE(err.find("W4A8_AWQ"), std::string::npos) << err;
}

}  // namespace
}  // namespace sy
