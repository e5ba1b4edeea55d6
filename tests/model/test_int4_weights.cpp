// INT4 checkpoints in compressed-tensors' pack-quantized form (Kimi K2 Thinking / K2.5 / K2.6), on the
// fixture tests/fixtures/deepseek_v3_kimi_int4 (routed experts in INT4 groups of 4, Kimi's ignore list; made
// by compressed-tensors, tools/fixtures/make_int4_fixture.py). Its logits against transformers are the
// conformance suite's; here: every weight and every rank's slice of it reads what the format's definition
// (written out below, not the loader's) gives; the loader's and the planner's bytes equal the tensors'
// bytes; missing, mis-shaped and mistyped pieces, and a checkpoint its config does not describe, are
// refused with the tensor named.
#include <gtest/gtest.h>
#include <unistd.h>

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
const std::string kWeight = "model.layers.2.mlp.experts.3.down_proj.weight";  // [64, 20]: 5 groups, 3 words

fs::path fixture() { return test::fixtures_dir() / "deepseek_v3_kimi_int4"; }

std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

// The format's definition (../shared/quant-formats.md, B): element k of a row is nibble k % 8 of word k / 8
// (least significant first), its value the nibble minus 8, times the scale of group k / group_size.
std::vector<float> decode(const Checkpoint& ck, const std::string& weight, int64_t rows, int64_t cols) {
  const TensorInfo* packed = ck.find(module_of(weight) + ".weight_packed");
  const TensorInfo* scale = ck.find(module_of(weight) + ".weight_scale");
  std::vector<float> scales(static_cast<size_t>(scale->shape.numel()));
  convert_to_f32(scale->data, scale->dtype, scales.data(), scales.size());
  const int64_t words = packed->shape[1], groups = scale->shape[1];
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      uint32_t w = 0;
      std::memcpy(&w, packed->data + (r * words + k / 8) * 4, 4);
      const int nibble = static_cast<int>((w >> (4 * (k % 8))) & 15);
      out[static_cast<size_t>(r * cols + k)] =
          static_cast<float>(nibble - 8) * scales[static_cast<size_t>(r * groups + k / kGroup)];
    }
  }
  return out;
}

class Int4Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("sy_int4_" + std::to_string(getpid()));
    fs::create_directories(root_);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // Loads a copy of the fixture whose tensors `edit` changed and whose config `edit_config` changed; the
  // error, or "" when it loads.
  static std::string load_error(
      const test::EditTensors& edit, const test::EditJson& edit_config = [](json&) {}) {
    return test::load_edited_copy(root_ / "edited", fixture(), edit, edit_config);
  }

  static inline fs::path root_;
};

TEST_F(Int4Checkpoint, WeightsAndSlicesReadWhatTheFormatDefines) {
  const Checkpoint ck = Checkpoint::open(fixture());
  const ModelDesc desc = load_model_desc(fixture());
  ASSERT_TRUE(desc.quant.int4_group);
  ASSERT_EQ(desc.quant.group_size, kGroup);
  const std::vector<float> want = decode(ck, kWeight, 64, 20);
  // The whole weight, a run of rows, and a run of columns on a group and word boundary.
  test::expect_slices_read(
      ck, desc.quant, kWeight, 64, 20, want,
      {Slice{}, Slice{.dim = 0, .start = 8, .count = 40}, Slice{.dim = 1, .start = 8, .count = 12}});
  // A column cut inside a group is refused, saying which multiple a layout must keep.
  const std::string err = test::column_cut_error(ck, desc.quant, kWeight, 64, 20, 10, 10);
  EXPECT_NE(err.find("multiple of 8"), std::string::npos) << err;
}

TEST_F(Int4Checkpoint, LoaderAndPlannerCountTheTensorsBytes) {
  const Checkpoint ck = Checkpoint::open(fixture());
  int64_t file_bytes = 0, shape_bytes = 0, packed = 0;
  for (const TensorInfo* t : ck.tensors()) {
    file_bytes += static_cast<int64_t>(t->nbytes);
    if (t->name.ends_with(".weight_shape")) shape_bytes += static_cast<int64_t>(t->nbytes);
    if (t->name.ends_with(".weight_packed")) ++packed;
  }
  ASSERT_EQ(packed, 48);                // 2 MoE layers x 8 experts x gate, up, down
  EXPECT_EQ(shape_bytes, packed * 16);  // the metadata the loader checks and does not keep
  const int64_t kept = file_bytes - shape_bytes;
  const ModelDesc desc = load_model_desc(fixture());
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  WeightStore store{.checks_only = true};
  WeightLoader loader(&ck, 0, *backend, store);
  build_model(desc, {.dir = ck.dir()}, loader, store, *backend);
  EXPECT_EQ(static_cast<int64_t>(store.checkpoint_bytes), kept);
  EXPECT_EQ(weights_from_config(desc).total().bytes, kept);
  EXPECT_EQ(weights_from_checkpoint(desc, ck).total().bytes, kept);
  EXPECT_TRUE(weights_from_checkpoint(desc, ck).unrecognised.empty());
}

TEST_F(Int4Checkpoint, BadPiecesAreNamed) {
  const std::string m = module_of(kWeight);
  const auto replace = test::replace_tensor;
  std::string err = load_error(replace(m + ".weight_scale", DType::bf16, {}, nullptr));
  EXPECT_NE(err.find(m + ".weight_scale"), std::string::npos) << err;
  EXPECT_NE(err.find("[64, 5]"), std::string::npos) << err;

  static const uint16_t scales[64 * 4] = {};
  err = load_error(replace(m + ".weight_scale", DType::bf16, {64, 4}, scales));
  EXPECT_NE(err.find("[64, 4]"), std::string::npos) << err;
  EXPECT_NE(err.find("needs [64, 5]"), std::string::npos) << err;

  static const int32_t int_scales[64 * 5] = {};
  err = load_error(replace(m + ".weight_scale", DType::i32, {64, 5}, int_scales));
  EXPECT_NE(err.find("dtype I32"), std::string::npos) << err;

  static const int64_t wrong_shape[2] = {64, 24};
  err = load_error(replace(m + ".weight_shape", DType::i64, {2}, wrong_shape));
  EXPECT_NE(err.find("says [64, 24]"), std::string::npos) << err;

  err = load_error(replace(m + ".weight_shape", DType::i64, {}, nullptr));
  EXPECT_NE(err.find(m + ".weight_shape"), std::string::npos) << err;

  static const float float_words[64 * 3] = {};
  err = load_error(replace(m + ".weight_packed", DType::f32, {64, 3}, float_words));
  EXPECT_NE(err.find("needs I32 [64, 3]"), std::string::npos) << err;

  // The checkpoint and its config must agree on what is quantised.
  err = load_error([](std::vector<TensorToWrite>&) {}, [](json& c) { c.erase("quantization_config"); });
  EXPECT_NE(err.find("weight_packed"), std::string::npos) << err;
  EXPECT_NE(err.find("quantization_config"), std::string::npos) << err;
  err = load_error([](std::vector<TensorToWrite>&) {},
                   [](json& c) { c["quantization_config"]["ignore"].push_back("re:.*experts.*"); });
  EXPECT_NE(err.find("leave module"), std::string::npos) << err;
}

}  // namespace
}  // namespace sy
