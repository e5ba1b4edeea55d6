// Memory figures against the fixtures' safetensors headers: the config-only table equals the headers'
// table and inspect's total equals the files' tensor bytes (tests/model/test_planned_bytes.cpp checks each
// rank's figure against what the loader binds).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "arch/model_desc.h"
#include "planner/weights.h"
#include "planner_test_util.h"

namespace sy {
namespace {

void expect_same(const Amount& a, const Amount& b, const std::string& what) {
  EXPECT_EQ(a.bytes, b.bytes) << what << " bytes";
  EXPECT_EQ(a.params, b.params) << what << " params";
  EXPECT_EQ(a.quantised_params, b.quantised_params) << what << " quantised params";
}

TEST(Weights, FixturesArePresent) {
  if (test::checkpoint_fixtures().empty()) GTEST_SKIP() << "tests/fixtures not generated yet";
  EXPECT_EQ(test::checkpoint_fixtures().size(), 17u);
}

TEST(Weights, ConfigTableEqualsHeaderTable) {
  for (const auto& dir : test::checkpoint_fixtures()) {
    SCOPED_TRACE(dir.filename().string());
    const ModelDesc shape = load_model_desc(dir);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const WeightTable from_config = weights_from_config(shape);
    const WeightTable from_headers = weights_from_checkpoint(shape, ckpt);
    EXPECT_TRUE(from_headers.unrecognised.empty()) << from_headers.unrecognised.front();
    ASSERT_EQ(from_config.layers.size(), from_headers.layers.size());
    for (size_t i = 0; i < from_config.layers.size(); ++i) {
      const LayerWeights& a = from_config.layers[i];
      const LayerWeights& b = from_headers.layers[i];
      const std::string l = "layer " + std::to_string(i) + " ";
      expect_same(a.attn_by_heads, b.attn_by_heads, l + "attention by heads");
      expect_same(a.attn_by_kv_heads, b.attn_by_kv_heads, l + "attention by kv heads");
      expect_same(a.attn_replicated, b.attn_replicated, l + "attention replicated");
      expect_same(a.norms, b.norms, l + "norms");
      expect_same(a.router, b.router, l + "router");
      expect_same(a.experts, b.experts, l + "experts");
      expect_same(a.shared_experts, b.shared_experts, l + "shared experts");
      expect_same(a.dense_mlp, b.dense_mlp, l + "dense");
      expect_same(a.other, b.other, l + "other");
    }
    expect_same(from_config.embedding, from_headers.embedding, "embedding");
    expect_same(from_config.lm_head, from_headers.lm_head, "lm_head");
    expect_same(from_config.final_norm, from_headers.final_norm, "final norm");
    expect_same(from_config.nextn, from_headers.nextn, "MTP layers");
    EXPECT_EQ(from_config.tied, from_headers.tied);
    // inspect's total is exactly the tensor bytes in the files, less INT4's weight_shape metadata (16 bytes
    // per quantised weight, checked by the loader and not kept).
    int64_t metadata = 0;
    for (const TensorInfo* t : ckpt.tensors()) {
      if (t->name.ends_with(".weight_shape")) metadata += static_cast<int64_t>(t->nbytes);
    }
    EXPECT_EQ(from_headers.total().bytes, static_cast<int64_t>(ckpt.total_bytes()) - metadata);
    EXPECT_EQ(from_config.total().bytes, static_cast<int64_t>(ckpt.total_bytes()) - metadata);
  }
}

TEST(Weights, OneRankHoldsWhatInspectReports) {
  for (const auto& dir : test::checkpoint_fixtures()) {
    const PlanTarget t = test::target_for(dir, "h200", 1, true);
    const LayoutCheck c = check_layout(t, {});
    ASSERT_TRUE(c.valid());
    EXPECT_EQ(c.memory->stages[0].weight_bytes, t.weights.total().bytes - t.weights.nextn.bytes) << dir.filename();
  }
}

// Kimi K2 Thinking from its config alone: the routed experts in INT4 as the format stores them (per weight
// [out, in]: out · in / 8 int32 words and out · in / 32 bf16 group scales), everything its ignore list names
// in BF16, so the attention and shared and dense MLPs weigh what Kimi K2's BF16 parts would.
TEST(Weights, KimiK2ThinkingExpertsInInt4) {
  const ModelDesc thinking = load_model_desc(test::planner_config("kimi_k2_thinking"));
  ASSERT_TRUE(thinking.quant.int4_group);
  const auto parts = weights_from_config(thinking).by_part();
  const auto of = [&](Part p) { return parts[static_cast<size_t>(p)]; };
  const int64_t h = 7168, inter = 2048;
  const int64_t matrix = inter * h / 8 * 4 + inter * h / 32 * 2;  // gate, up and down all hold 2048 x 7168 values
  EXPECT_EQ(of(Part::experts).bytes, int64_t{60} * 384 * 3 * matrix);
  EXPECT_EQ(of(Part::experts).params, int64_t{60} * 384 * 3 * inter * h);
  // Stored as: every routed-expert parameter INT4, nothing on the ignore list (inspect's "stored as" column).
  EXPECT_EQ(of(Part::experts).quantised_params, of(Part::experts).params);
  for (Part p : {Part::attention, Part::shared_experts, Part::dense_mlp, Part::lm_head}) {
    EXPECT_EQ(of(p).quantised_params, 0) << part_name(p);
  }
  ModelDesc bf16 = thinking;
  bf16.quant = {};
  const auto dense = weights_from_config(bf16).by_part();
  for (Part p : {Part::attention, Part::shared_experts, Part::dense_mlp, Part::lm_head, Part::router}) {
    EXPECT_EQ(of(p).bytes, dense[static_cast<size_t>(p)].bytes) << part_name(p);
  }
  // About 594 GB in all (experts 571 GB): the "about 600 GB with INT4 experts" of the issue, not Kimi K2's 2 TB.
  const double total_gb = static_cast<double>(weights_from_config(thinking).total().bytes) / 1e9;
  EXPECT_GT(total_gb, 585);
  EXPECT_LT(total_gb, 600);
}

TEST(Weights, KvBytesPerToken) {
  const PlanTarget qwen = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 8, true);
  for (int tp : {1, 2, 4, 8}) {
    const LayoutCheck c = check_layout(qwen, {.tp = tp, .dp = 8 / tp});
    ASSERT_TRUE(c.valid()) << tp;
    const int64_t local_kv = (4 + tp - 1) / tp;
    EXPECT_EQ(c.memory->stages[0].kv_bytes_per_token, int64_t{48} * 2 * local_kv * 128 * 2);
  }
  const PlanTarget kimi = test::target_for(test::planner_config("kimi_k2"), "h200", 16, true);
  const LayoutCheck k = check_layout(kimi, {.pp = 2, .tp = 8, .ep = 8});
  ASSERT_TRUE(k.valid());
  EXPECT_EQ(k.memory->stages[0].kv_bytes_per_token, 31 * (512 + 64) * 2);
  EXPECT_EQ(k.memory->stages[1].kv_bytes_per_token, 30 * (512 + 64) * 2);
  EXPECT_EQ(k.memory->stages[0].kv_tokens, k.memory->stages[0].free_bytes / k.memory->stages[0].kv_bytes_per_token);
}

TEST(Weights, PartsSplitOverTheirAxes) {
  const PlanTarget t = test::target_for(test::planner_config("kimi_k2"), "h200", 16, false);
  const auto parts = t.weights.by_part();
  const auto of = [&](Part p) { return parts[static_cast<size_t>(p)].bytes; };
  const ShardOptions shard;
  // One stage of 16 ranks: experts over ep 16, everything tensor-parallel over 8, embedding and head by rows.
  const ParallelSizes z{.tp = 8, .dp = 2, .ep = 16, .etp = 1, .edp = 1, .dense_tp = 8};
  const auto b = rank_weight_bytes(t.weights, t.shape, z, 0, 61, true, true, shard);
  EXPECT_EQ(b[static_cast<size_t>(Part::experts)], of(Part::experts) / 16);
  EXPECT_EQ(b[static_cast<size_t>(Part::embedding)], of(Part::embedding) / 8);
  EXPECT_EQ(b[static_cast<size_t>(Part::lm_head)], of(Part::lm_head) / 8);
  EXPECT_EQ(b[static_cast<size_t>(Part::router)], of(Part::router));
  EXPECT_EQ(b[static_cast<size_t>(Part::norms)], of(Part::norms));
  // Redundant experts add whole experts to each rank: 384 + 16 slots is 25 per rank instead of 24.
  const auto r = rank_weight_bytes(t.weights, t.shape, z, 0, 61, true, true, {.redundant_experts = 16});
  EXPECT_EQ(r[static_cast<size_t>(Part::experts)], of(Part::experts) / 384 * 25);
  // Without vocabulary parallelism the embedding is whole on the first stage.
  const auto whole = rank_weight_bytes(t.weights, t.shape, z, 0, 61, true, true, {.vocab_parallel = false});
  EXPECT_EQ(whole[static_cast<size_t>(Part::embedding)], of(Part::embedding));
  // A middle stage holds neither the embedding nor the head.
  const auto middle = rank_weight_bytes(t.weights, t.shape, z, 20, 20, false, false, shard);
  EXPECT_EQ(middle[static_cast<size_t>(Part::embedding)] + middle[static_cast<size_t>(Part::lm_head)], 0);
}

}  // namespace
}  // namespace sy

namespace sy {
namespace {

// The published quantised configs (FP8 Kimi K2, DeepSeek-V3.2 and Qwen3-30B-A3B-FP8, INT4 Kimi K2
// Thinking, NVFP4 GLM-5) against tests/planner/configs/published_sizes.json: the bytes of every tensor of
// transformers' model of the config, each linear weight sized as its format stores it
// (tools/fixtures/published_sizes.py, run with transformers 5.24). Parameters are equal; bytes within 1% (the
// issue's bound), and within 0.1% here: transformers holds the MoE routers in fp32 where the checkpoints and
// the planner hold them in the model dtype, and INT4's weight_shape metadata is not kept.
TEST(Weights, PublishedQuantisedConfigsAsTransformersSizesThem) {
  const nlohmann::json ref =
      nlohmann::json::parse(std::ifstream(test::planner_configs_dir() / "published_sizes.json")).at("configs");
  ASSERT_EQ(ref.size(), 5u);
  for (const auto& [name, want] : ref.items()) {
    SCOPED_TRACE(name);
    const ModelDesc desc = load_model_desc(test::planner_config(name));
    const WeightTable table = weights_from_config(desc);
    Amount total = table.total();  // less the MTP layers, which transformers does not build
    total.bytes -= table.nextn.bytes;
    total.params -= table.nextn.params;
    EXPECT_EQ(total.params, want.at("params").get<int64_t>());
    const auto bytes = static_cast<double>(want.at("bytes").get<int64_t>());
    const double rel = (static_cast<double>(total.bytes) - bytes) / bytes;
    EXPECT_LT(std::abs(rel), 0.001) << total.bytes << " vs " << want.at("bytes");
    // Part by part, the routers aside: experts, attention, shared experts, dense MLPs, embedding, head.
    const auto parts = table.by_part();
    const auto of = [&](Part p) { return parts[static_cast<size_t>(p)].bytes; };
    const nlohmann::json& by = want.at("by_part");
    // INT4's X.weight_shape (I64 [2], 16 bytes per quantised matrix, all of them experts here) is not kept.
    const int64_t shapes = want.at("format") == "int4" ? 16 * want.at("quantised_matrices").get<int64_t>() : 0;
    EXPECT_EQ(of(Part::experts), by.at("experts").get<int64_t>() - shapes);
    EXPECT_EQ(of(Part::embedding), by.at("embedding").get<int64_t>());
    EXPECT_EQ(of(Part::lm_head), by.at("lm_head").get<int64_t>());
    EXPECT_EQ(of(Part::shared_experts), by.value("shared_experts", int64_t{0}));
    EXPECT_EQ(of(Part::dense_mlp), by.value("dense_mlp", int64_t{0}));
    EXPECT_EQ(of(Part::attention) + of(Part::norms), by.at("attention").get<int64_t>() + by.at("norms").get<int64_t>());
  }
}

}  // namespace
}  // namespace sy
