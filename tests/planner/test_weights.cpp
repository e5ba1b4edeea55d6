// Memory figures against the fixtures' safetensors headers: the config-only table equals the headers'
// table, inspect's total equals the files' tensor bytes, and every rank's weight figure equals the sum of
// the slices that rank would load, sliced here tensor by tensor.
#include <gtest/gtest.h>

#include <cctype>

#include "planner_test_util.h"

namespace sy {
namespace {

void expect_same(const Amount& a, const Amount& b, const std::string& what) {
  EXPECT_EQ(a.bytes, b.bytes) << what << " bytes";
  EXPECT_EQ(a.params, b.params) << what << " params";
}

TEST(Weights, FixturesArePresent) {
  if (test::checkpoint_fixtures().empty()) GTEST_SKIP() << "tests/fixtures not generated yet";
  EXPECT_EQ(test::checkpoint_fixtures().size(), 4u);
}

TEST(Weights, ConfigTableEqualsHeaderTable) {
  for (const auto& dir : test::checkpoint_fixtures()) {
    SCOPED_TRACE(dir.filename().string());
    const ModelShape shape = load_model_shape(dir);
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
      expect_same(a.dense_mlp, b.dense_mlp, l + "dense");
      expect_same(a.other, b.other, l + "other");
    }
    expect_same(from_config.embedding, from_headers.embedding, "embedding");
    expect_same(from_config.lm_head, from_headers.lm_head, "lm_head");
    expect_same(from_config.final_norm, from_headers.final_norm, "final norm");
    EXPECT_EQ(from_config.tied, from_headers.tied);
    // inspect's total is exactly the tensor bytes in the files.
    EXPECT_EQ(from_headers.total().bytes, static_cast<int64_t>(ckpt.total_bytes()));
    EXPECT_EQ(from_config.total().bytes, static_cast<int64_t>(ckpt.total_bytes()));
  }
}

// The bytes one rank loads, slice by slice, from tensor names and shapes alone.
int64_t loaded_bytes(const Checkpoint& ckpt, const ModelShape& s, const Mapping& m, int rank,
                     const std::vector<int64_t>& stage_layers) {
  const ParallelSizes& z = m.sizes();
  const RankCoords c = m.coords(rank);
  int64_t first = 0;
  for (int p = 0; p < c.pp_rank; ++p) first += stage_layers[static_cast<size_t>(p)];
  const int64_t last = first + stage_layers[static_cast<size_t>(c.pp_rank)];
  const bool first_stage = c.pp_rank == 0;
  const bool last_stage = c.pp_rank == z.pp - 1;
  const int64_t experts_per_rank = s.moe.n_experts / z.ep;
  const int64_t kv = s.attn.kv_heads;
  const int64_t kv_per_rank = z.tp <= kv ? kv / z.tp : 1;  // tp > kv: one replicated head per rank
  int64_t total = 0;
  for (const TensorInfo* t : ckpt.tensors()) {
    const std::string& n = t->name;
    const auto bytes = static_cast<int64_t>(t->nbytes);
    if (n == "model.embed_tokens.weight") {
      if (first_stage) total += bytes / z.dense_tp;
      if (last_stage && !first_stage && s.tie_embeddings) total += bytes / z.dense_tp;
      continue;
    }
    if (n == "lm_head.weight") {
      if (last_stage) total += bytes / z.dense_tp;
      continue;
    }
    if (n == "model.norm.weight") {
      if (last_stage) total += bytes;
      continue;
    }
    const std::string prefix = "model.layers.";
    if (n.rfind(prefix, 0) != 0) {
      ADD_FAILURE() << "the test does not know where " << n << " goes";
      continue;
    }
    const size_t dot = n.find('.', prefix.size());
    const int64_t layer = std::stoll(n.substr(prefix.size(), dot - prefix.size()));
    if (layer < first || layer >= last) continue;
    const std::string rest = n.substr(dot + 1);
    const size_t experts_at = rest.find("experts.");
    if (rest.find("norm") != std::string::npos || rest == "mlp.gate.weight" || rest == "block_sparse_moe.gate.weight" ||
        rest == "self_attn.o_proj.bias") {
      total += bytes;
    } else if (rest.starts_with("self_attn.q_proj.") || rest == "self_attn.o_proj.weight") {
      total += bytes / z.tp;
    } else if (rest.starts_with("self_attn.k_proj.") || rest.starts_with("self_attn.v_proj.")) {
      total += bytes / kv * kv_per_rank;
    } else if (experts_at != std::string::npos) {
      const int64_t expert = std::stoll(rest.substr(experts_at + 8));
      if (expert / experts_per_rank == c.ep_rank) total += bytes / z.etp;
    } else if (rest.starts_with("mlp.")) {
      total += bytes / z.dense_tp;
    } else {
      ADD_FAILURE() << "the test does not know how to slice " << n;
    }
  }
  return total;
}

TEST(Weights, EveryRankLoadsWhatThePlannerSays) {
  int layouts = 0;
  for (const auto& dir : test::checkpoint_fixtures()) {
    SCOPED_TRACE(dir.filename().string());
    const Checkpoint ckpt = Checkpoint::open(dir);
    for (int world : {1, 2, 3, 4, 6, 8}) {
      // Memory figures from the config alone, as --random-weights would see them.
      PlanTarget t = test::target_for(dir, "h200", world, false);
      t.weights = weights_from_config(t.shape);
      for (const ParallelSizes& z : enumerate_layouts(world, true)) {
        const LayoutCheck c = check_layout(
            t, {.pp = z.pp, .tp = z.tp, .dp = z.dp, .ep = z.ep, .etp = z.etp, .edp = z.edp, .dense_tp = z.dense_tp});
        if (!c.valid()) continue;
        ++layouts;
        const LayoutMemory mem = estimate_memory(t.shape, t.weights, z, c.stage_layers, int64_t{1} << 40, t.memory);
        const Mapping m(z);
        for (int r = 0; r < world; ++r) {
          const int64_t want = mem.stages[static_cast<size_t>(m.coords(r).pp_rank)].weight_bytes;
          ASSERT_EQ(loaded_bytes(ckpt, t.shape, m, r, c.stage_layers), want) << layout_flags(z) << " rank " << r;
        }
      }
    }
  }
  if (test::checkpoint_fixtures().empty()) GTEST_SKIP() << "tests/fixtures not generated yet";
  EXPECT_GT(layouts, 100);
}

TEST(Weights, OneRankHoldsWhatInspectReports) {
  for (const auto& dir : test::checkpoint_fixtures()) {
    const PlanTarget t = test::target_for(dir, "h200", 1, true);
    const LayoutCheck c = check_layout(t, {});
    ASSERT_TRUE(c.valid());
    EXPECT_EQ(c.memory->stages[0].weight_bytes, t.weights.total().bytes - t.weights.nextn.bytes) << dir.filename();
  }
}

TEST(Weights, KvBytesPerToken) {
  const PlanTarget qwen = test::target_for(test::planner_config("qwen3_30b_a3b"), "h200", 8, true);
  for (int tp : {1, 2, 4, 8}) {
    const LayoutCheck c = check_layout(qwen, {.tp = tp, .dp = 8 / tp});
    ASSERT_TRUE(c.valid()) << tp;
    const int64_t local_kv = (4 + tp - 1) / tp;
    EXPECT_EQ(c.memory->stages[0].kv_bytes_per_token, 48 * 2 * local_kv * 128 * 2);
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
