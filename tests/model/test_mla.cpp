// The DeepSeek-V3-derived families beyond conformance: the MLA KV layout (latent + rope key, never per-head
// K/V; the indexer keys with DSA), multi-token-prediction layers skipped only when the config declares them,
// GLM-5's shared indexer layers carrying no indexer tensors, read costs, and config errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "common/fixture.h"
#include "model/model.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

// A copy of a fixture whose config.json can be edited.
class FixtureCopy : public ::testing::Test {
 protected:
  void copy(const std::string& fixture) {
    dir_ = fs::temp_directory_path() /
           ("sy_mla_" + fixture + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(test::fixtures_dir() / fixture, dir_);
    std::ifstream in(dir_ / "config.json");
    config_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string load_error() {
    std::ofstream(dir_ / "config.json") << config_.dump(2);
    try {
      load_model({.dir = dir_}, *backend_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  nlohmann::json config_;
  std::unique_ptr<Backend> backend_ = make_cpu_backend();
};

TEST(MlaModel, KvCacheHoldsTheLatentAndRopeKeyOnly) {
  auto backend = make_cpu_backend();
  const auto v3 = load_model({.dir = test::fixtures_dir() / "deepseek_v3_base"}, *backend);
  const KvGeometry& g = v3->info().kv;
  EXPECT_EQ(g.kv_heads, 1);
  EXPECT_EQ(g.head_dim, 32 + 8);  // kv_lora_rank + qk_rope_head_dim
  EXPECT_EQ(g.v_head_dim, 0);
  EXPECT_EQ(g.index_head_dim, 0);
  EXPECT_EQ(v3->info().cost.kv_bytes_per_token, 3 * 40 * 4);  // 3 layers, fp32 on the CPU

  const auto v32 = load_model({.dir = test::fixtures_dir() / "deepseek_v32_base"}, *backend);
  EXPECT_EQ(v32->info().kv.head_dim, 32 + 8);
  EXPECT_EQ(v32->info().kv.index_head_dim, 16);
  EXPECT_EQ(v32->info().cost.kv_bytes_per_token, 3 * (40 + 16) * 4);

  // GLM-5: layer 2 shares layer 1's selection, so it reads no indexer keys of its own.
  const auto glm5 = load_model({.dir = test::fixtures_dir() / "glm_moe_dsa_base"}, *backend);
  EXPECT_EQ(glm5->info().cost.kv_bytes_per_token, (4 * 40 + 3 * 16) * 4);
}

TEST(MlaModel, ReadCostCountsSharedExpertsAndDenseLayers) {
  auto backend = make_cpu_backend();
  const auto m = load_model({.dir = test::fixtures_dir() / "deepseek_v3_base"}, *backend);
  const ReadCost& c = m->info().cost;
  ASSERT_EQ(c.moe_layers.size(), 2u);  // layer 0 is dense (first_k_dense_replace 1)
  EXPECT_EQ(c.moe_layers[0].n_experts, 16);
  EXPECT_EQ(c.moe_layers[0].expert_bytes, 3.0 * 64 * 24 * 4);
  // The whole model minus the routed experts and the embedding is read every step.
  const double experts = 2 * 16 * 3.0 * 64 * 24 * 4;
  EXPECT_NEAR(c.always_bytes, static_cast<double>(m->info().weight_bytes) - experts - 384 * 64 * 4, 1.0);
}

TEST_F(FixtureCopy, MtpLayerIsSkippedOnlyWhenDeclared) {
  copy("deepseek_v3_base");
  EXPECT_EQ(load_error(), "");
  config_["num_nextn_predict_layers"] = 0;
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.3."), std::string::npos) << err;
  EXPECT_NE(err.find("does not use"), std::string::npos) << err;
}

TEST_F(FixtureCopy, SharedIndexerLayersHaveNoIndexerTensors) {
  copy("glm_moe_dsa_base");
  EXPECT_EQ(load_error(), "");
  config_["indexer_types"] = {"full", "full", "full", "full"};
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.2.self_attn.indexer."), std::string::npos) << err;
  config_["indexer_types"] = {"shared", "full", "shared", "full"};
  EXPECT_NE(load_error().find("layer 0 must run its own indexer"), std::string::npos);
}

TEST_F(FixtureCopy, ConfigErrorsNameTheKey) {
  copy("deepseek_v3_base");
  config_["scoring_func"] = "softmax";
  EXPECT_NE(load_error().find("scoring_func 'softmax'"), std::string::npos);
  config_.erase("scoring_func");
  config_["topk_group"] = 5;
  EXPECT_NE(load_error().find("topk_group 5"), std::string::npos);
  config_["topk_group"] = 2;
  config_["q_lora_rank"] = nullptr;  // a plain q_proj is then expected
  EXPECT_NE(load_error().find("self_attn.q_proj.weight"), std::string::npos);
}

TEST(MlaModel, RandomWeightsForEveryNewFamily) {
  auto backend = make_cpu_backend();
  for (const char* name :
       {"deepseek_v3_base", "deepseek_v3_kimi", "glm4_moe_base", "deepseek_v32_base", "glm_moe_dsa_base"}) {
    const auto m = load_model({.dir = test::model_dir(name), .random_weights = true, .seed = 5}, *backend);
    EXPECT_GT(m->info().weight_bytes, 0u) << name;
  }
}

}  // namespace
}  // namespace sy
