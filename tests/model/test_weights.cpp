// Strict weight binding: a checkpoint that lacks, adds or mis-shapes a tensor, or names an unknown
// architecture, is refused with a message naming the tensor; random weights need only config.json.
#include <gtest/gtest.h>

#include <fstream>

#include "base/check.h"
#include "common/fixture.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

class StrictBinding : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = test::fixtures_dir() / "qwen3_moe_base";
    ASSERT_TRUE(fs::exists(source_)) << "fixture qwen3_moe_base missing: run tools/fixtures/make_fixtures.py";
    dir_ =
        fs::temp_directory_path() / ("sy_weights_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(source_ / "config.json", dir_ / "config.json");
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Rewrites the fixture's tensors into dir_/model.safetensors after `edit` changes the list.
  template <typename Edit>
  void write_edited(Edit edit) {
    const Checkpoint ck = Checkpoint::open(source_);
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo* t : ck.tensors()) tensors.push_back({t->name, t->dtype, t->shape, t->data});
    std::vector<std::vector<std::byte>> keep;
    edit(tensors, keep);
    write_safetensors(dir_ / "model.safetensors", tensors);
  }

  std::string load_error() {
    try {
      load_model({.dir = dir_}, *backend_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path source_, dir_;
  std::unique_ptr<Backend> backend_;
};

using Tensors = std::vector<TensorToWrite>;
using Keep = std::vector<std::vector<std::byte>>;

TEST_F(StrictBinding, UnchangedCopyLoads) {
  write_edited([](Tensors&, Keep&) {});
  EXPECT_EQ(load_error(), "");
}

TEST_F(StrictBinding, MissingTensorIsNamed) {
  write_edited([](Tensors& t, Keep&) {
    std::erase_if(t, [](const TensorToWrite& w) { return w.name == "model.layers.1.mlp.experts.3.up_proj.weight"; });
  });
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.1.mlp.experts.3.up_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("no tensor"), std::string::npos) << err;
}

TEST_F(StrictBinding, ExtraTensorIsNamed) {
  static const float extra[4] = {1, 2, 3, 4};
  write_edited([](Tensors& t, Keep&) { t.push_back({"model.layers.0.mlp.surprise", DType::f32, {4}, extra}); });
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.0.mlp.surprise"), std::string::npos) << err;
}

TEST_F(StrictBinding, MisShapedTensorIsNamedWithBothShapes) {
  write_edited([](Tensors& t, Keep&) {
    for (auto& w : t) {
      if (w.name == "model.layers.0.self_attn.k_proj.weight") w.shape = {w.shape[1], w.shape[0]};
    }
  });
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("but the config implies"), std::string::npos) << err;
}

TEST_F(StrictBinding, IntegerWeightIsRefused) {
  write_edited([](Tensors& t, Keep& keep) {
    for (auto& w : t) {
      if (w.name == "model.norm.weight") {
        keep.emplace_back(static_cast<size_t>(w.shape.numel()) * 4);
        w.dtype = DType::i32;
        w.data = keep.back().data();
      }
    }
  });
  const std::string err = load_error();
  EXPECT_NE(err.find("model.norm.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("I32"), std::string::npos) << err;
}

TEST_F(StrictBinding, UnknownArchitectureIsNamed) {
  write_edited([](Tensors&, Keep&) {});
  std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8})";
  const std::string err = load_error();
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;
  EXPECT_NE(err.find("Qwen3MoeForCausalLM"), std::string::npos) << err;
}

TEST_F(StrictBinding, MissingConfigIsNamed) {
  fs::remove(dir_ / "config.json");
  const std::string err = load_error();
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
}

TEST_F(StrictBinding, LayersFlagSkipsTheRestOnPurpose) {
  write_edited([](Tensors&, Keep&) {});
  const auto model = load_model({.dir = dir_, .max_layers = 1}, *backend_);
  EXPECT_EQ(model->info().n_layers, 1);
}

TEST_F(StrictBinding, RandomWeightsNeedOnlyConfig) {
  const auto a = load_model({.dir = dir_, .random_weights = true, .seed = 7}, *backend_);
  EXPECT_GT(a->info().weight_bytes, 0u);
  EXPECT_EQ(a->info().architecture, "Qwen3MoeForCausalLM");
}

}  // namespace
}  // namespace sy
