// Layout validation: every factorisation of 1..16 ranks against every model gets exactly the rules an
// independent oracle expects, and each rule has its own test with its values in the message.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "planner_test_util.h"

namespace sy {
namespace {

using test::find_issue;
using test::planner_config;
using test::rule_ids;
using test::target_for;

// Nodes of at most 8 GPUs that share `world` evenly: the fewest such nodes.
int nodes_for(int world) {
  for (int n = 1;; ++n) {
    if (world % n == 0 && world / n <= 8) return n;
  }
}

// Any aligned block of `g` ranks that crosses a node boundary (tp, etp and dense_tp groups are such blocks).
bool blocks_straddle(int g, int world, int per_node) {
  for (int start = 0; start < world; start += g) {
    if (start / per_node != (start + g - 1) / per_node) return true;
  }
  return false;
}

// The rules a fully explicit layout breaks, from the model's numbers alone.
std::set<std::string> expected_rules(const ModelDesc& s, const ParallelSizes& z, int world, int per_node) {
  std::set<std::string> out;
  const int S = z.dp * z.tp;
  const bool stage_ok = z.edp * z.ep * z.etp == S;
  const bool dense_ok = S % z.dense_tp == 0;
  if (!stage_ok) out.insert("stage_product");
  if (!dense_ok) out.insert("dense_tp_divides");
  if (s.moe.n_experts % z.ep != 0) out.insert("experts_divisible");
  if (s.attn.n_heads % z.tp != 0) out.insert("heads_divisible");
  if (s.attn.kind == AttentionKind::gqa && s.attn.kv_heads % z.tp != 0 && z.tp % s.attn.kv_heads != 0) {
    out.insert("kv_heads_divisible");
  }
  const auto inter_rule = [&](const char* rule, int64_t inter, int size) {
    if (inter % size != 0) {
      out.insert(rule);
    } else if (s.quant.block_fp8 && (inter / size) % s.quant.block_rows != 0) {
      out.insert("quant_block");
    }
  };
  // Block-scaled fp8 under attention TP: each rank's heads of every projection hold whole scale blocks.
  if (s.quant.block_fp8 && z.tp > 1 && s.attn.n_heads % z.tp == 0) {
    const AttentionDesc& a = s.attn;
    const int64_t h = a.n_heads / z.tp, br = s.quant.block_rows, bc = s.quant.block_cols;
    bool cut = (h * a.head_dim) % br != 0 || (h * a.v_head_dim) % bc != 0;
    if (a.kind == AttentionKind::mla) {
      cut = cut || (h * (a.qk_nope_head_dim + a.v_head_dim)) % br != 0;
    } else if (a.kv_heads % z.tp == 0) {
      cut = cut || (a.kv_heads / z.tp * a.head_dim) % br != 0;
    }
    if (cut) out.insert("quant_block");
  }
  // INT4 and NVFP4 groups: every quantised weight whose input columns a size splits keeps whole groups (and,
  // for INT4, whole words of eight).
  if (s.quant.int4_group || s.quant.nvfp4) {
    const int64_t align = s.quant.nvfp4 ? s.quant.group_size : std::lcm(s.quant.group_size, int64_t{8});
    const auto first = [&](FfnKind k) {
      for (size_t i = 0; i < s.layer_ffn.size(); ++i) {
        if (s.layer_ffn[i] == k) return "model.layers." + std::to_string(i) + ".";
      }
      return std::string();
    };
    const auto splits = [&](int size, int64_t dim, const std::string& weight) {
      return size > 1 && dim % size == 0 && (dim / size) % align != 0 && s.quant.quantises(weight);
    };
    const std::string moe = first(FfnKind::moe), dense = first(FfnKind::dense);
    bool cut = s.attn.n_heads % z.tp == 0 &&
               splits(z.tp, s.attn.n_heads * s.attn.v_head_dim, "model.layers.0.self_attn.o_proj.weight");
    if (!moe.empty()) {
      cut = cut || splits(z.etp, s.moe.inter, moe + s.names.moe_block + "experts.0." + s.names.expert_down) ||
            (s.moe.shared_inter > 0 &&
             splits(z.dense_tp, s.moe.shared_inter, moe + s.names.moe_block + "shared_experts.down_proj.weight"));
    }
    if (!dense.empty()) cut = cut || splits(z.dense_tp, s.dense_inter, dense + "mlp.down_proj.weight");
    if (cut) out.insert("quant_group");
  }
  if (s.moe_layer_count() > 0) inter_rule("expert_inter_divisible", s.moe.inter, z.etp);
  if (s.dense_layer_count() > 0) inter_rule("dense_inter_divisible", s.dense_inter, z.dense_tp);
  if (s.moe_layer_count() > 0 && s.moe.shared_inter > 0)
    inter_rule("shared_inter_divisible", s.moe.shared_inter, z.dense_tp);
  if (s.vocab % z.dense_tp != 0) out.insert("vocab_divisible");
  if (z.pp > s.n_layers) out.insert("pp_range");
  if (stage_ok && dense_ok &&
      (blocks_straddle(z.tp, world, per_node) || blocks_straddle(z.etp, world, per_node) ||
       blocks_straddle(z.dense_tp, world, per_node))) {
    out.insert("group_spans_nodes");
  }
  return out;
}

TEST(Rules, EveryFactorisationOfOneToSixteenRanksAgainstEveryModel) {
  int checked = 0, invalid = 0;
  for (const auto& dir : test::all_model_dirs()) {
    for (int world = 1; world <= 16; ++world) {
      const int nodes = nodes_for(world);
      PlanTarget t = test::target_for(dir, "h100", 8, false);
      t.cluster = make_cluster(t.cluster.machine, world, nodes);
      // Expert sizes of every product up to 16, consistent with the stage or not; dense_tp 1..8 and 16.
      std::vector<std::array<int, 3>> moe;
      for (int n = 1; n <= 16; ++n) {
        for (const auto& f : factor_triples(n)) moe.push_back(f);
      }
      for (const auto& [pp, S] : factor_pairs(world)) {
        for (const auto& [dp, tp] : factor_pairs(S)) {
          for (const auto& [edp, ep, etp] : moe) {
            for (int dense_tp : {1, 2, 3, 4, 5, 6, 8, 16}) {
              const ParallelSizes z{
                  .pp = pp, .tp = tp, .dp = dp, .ep = ep, .etp = etp, .edp = edp, .dense_tp = dense_tp};
              const LayoutCheck c = check_layout(
                  t, {.pp = pp, .tp = tp, .dp = dp, .ep = ep, .etp = etp, .edp = edp, .dense_tp = dense_tp});
              const auto want = expected_rules(t.shape, z, world, world / nodes);
              ASSERT_EQ(rule_ids(c), want)
                  << dir.filename() << " on " << world << " ranks: " << layout_flags(z) << " --etp " << etp;
              ASSERT_EQ(c.sizes, z);  // explicit sizes are never changed
              if (c.valid()) {
                int64_t layers = 0;
                for (int64_t n : c.stage_layers) layers += n;
                ASSERT_EQ(layers, t.shape.n_layers);
              } else {
                ++invalid;
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
  EXPECT_GT(invalid, checked / 2);
}

class RuleTest : public ::testing::Test {
 protected:
  // Qwen3-30B-A3B: 32 heads, 4 KV heads, 128 experts of intermediate 768, vocab 151936, 48 layers.
  LayoutCheck qwen(const LayoutRequest& r, int gpus = 8) {
    return check_layout(target_for(planner_config("qwen3_30b_a3b"), "h200", gpus, false), r);
  }
  // Kimi K2: 384 experts, intermediate 2048 in fp8 blocks of 128, dense 18432, shared 2048, vocab 163840.
  LayoutCheck kimi(const LayoutRequest& r, int gpus, bool memory = false) {
    return check_layout(target_for(planner_config("kimi_k2"), "h200", gpus, memory), r);
  }
  static std::string message(const LayoutCheck& c, const std::string& rule) {
    const LayoutIssue* i = find_issue(c, rule);
    return i != nullptr ? i->message : "(rule " + rule + " not reported)";
  }
};

TEST_F(RuleTest, SizesArePositive) {
  const auto c = qwen({.tp = 0, .ep = -2});
  EXPECT_EQ(rule_ids(c), std::set<std::string>{"size_positive"});
  EXPECT_EQ(c.issues.size(), 2u);  // one per size
  EXPECT_NE(message(c, "size_positive").find("--tp 0 must be at least 1"), std::string::npos);
}

TEST_F(RuleTest, WorldSize) {
  EXPECT_NE(message(qwen({.tp = 16}), "world_size").find("needs W = pp·dp·tp = 1 × 1 × 16 = 16 ranks but only 8"),
            std::string::npos);
  EXPECT_NE(message(qwen({.pp = 3}), "world_size").find("pp 3 × dp 1 = 3 does not divide 8"), std::string::npos);
}

TEST_F(RuleTest, DerivedZero) {
  EXPECT_NE(message(qwen({.pp = 4, .dp = 4}), "derived_zero").find("tp would be 0"), std::string::npos);
}

TEST_F(RuleTest, StageProduct) {
  EXPECT_NE(message(qwen({.tp = 2, .ep = 4}), "stage_product").find("ep·etp·edp must equal dp·tp"), std::string::npos);
  EXPECT_NE(
      message(qwen({.tp = 8, .ep = 2, .etp = 2}), "stage_product").find("ep 2 × etp 2 × edp 1 = 4 but dp 1 × tp 8"),
      std::string::npos);
}

TEST_F(RuleTest, DenseTpDividesTheStage) {
  EXPECT_NE(message(qwen({.tp = 8, .dense_tp = 3}), "dense_tp_divides").find("--dense-tp 3 must divide"),
            std::string::npos);
}

TEST_F(RuleTest, ExpertsDivisibleByEp) {
  EXPECT_TRUE(kimi({.tp = 8, .dp = 2, .ep = 16}, 16).rules_pass());  // 384 experts over 16 is 24 each
  EXPECT_NE(
      message(kimi({.tp = 8, .dp = 5, .ep = 5, .etp = 8}, 40), "experts_divisible").find("ep 5 must divide the 384"),
      std::string::npos);
  const auto c =
      check_layout(target_for(planner_config("mixtral_8x7b"), "h200", 8, false), {.tp = 4, .dp = 2, .ep = 8});
  EXPECT_TRUE(c.valid());
  // Redundant experts count: 8 + 4 slots no longer split over 8 ranks, but 8 + 8 do.
  PlanTarget t = target_for(planner_config("mixtral_8x7b"), "h200", 8, false);
  t.memory.shard.redundant_experts = 4;
  EXPECT_NE(message(check_layout(t, {.tp = 4, .dp = 2, .ep = 8}), "experts_divisible")
                .find("12 expert slots (8 routed + 4 redundant)"),
            std::string::npos);
  t.memory.shard.redundant_experts = 8;
  EXPECT_TRUE(check_layout(t, {.tp = 4, .dp = 2, .ep = 8}).valid());
  EXPECT_NE(message(qwen({.tp = 1, .dp = 3, .ep = 3}, 3), "experts_divisible").find("ep 3 must divide the 128"),
            std::string::npos);
}

TEST_F(RuleTest, HeadsAndKvHeads) {
  EXPECT_NE(message(qwen({.tp = 3, .dp = 2}, 6), "heads_divisible").find("tp 3 must divide the 32 attention heads"),
            std::string::npos);
  // tp 8 > 4 KV heads: each KV head is replicated on 2 ranks, which is allowed.
  EXPECT_TRUE(qwen({.tp = 8}).valid());
  // GLM-4.5: 96 heads, 8 KV heads; tp 6 divides 96 but neither divides the other with 8.
  PlanTarget glm = target_for(planner_config("glm4_5"), "h200", 6, false);
  const auto g = check_layout(glm, {.tp = 6});
  EXPECT_EQ(rule_ids(g).count("kv_heads_divisible"), 1u);
  EXPECT_EQ(rule_ids(g).count("heads_divisible"), 0u);
  EXPECT_NE(message(g, "kv_heads_divisible").find("tp 6 and the 8 KV heads"), std::string::npos);
}

TEST_F(RuleTest, Int4GroupsAreKeptWhole) {
  // Kimi K2 Thinking: routed experts INT4 in groups of 32; etp 128 leaves 2048 / 128 = 16 input columns of
  // each expert's down_proj per rank, half a group. Attention and the dense layer stay BF16 (its ignore list),
  // so tp and dense_tp cut nothing quantised.
  const PlanTarget t = target_for(planner_config("kimi_k2_thinking"), "h200", 128, false);
  const auto q = check_layout(t, {.tp = 8, .dp = 16, .ep = 1, .etp = 128});
  EXPECT_NE(message(q, "quant_group")
                .find("etp 128 leaves 16 input columns of model.layers.1.mlp.experts.0.down_proj.weight per rank, not "
                      "a multiple of 32 (INT4 groups of 32 in words of 8)"),
            std::string::npos)
      << message(q, "quant_group");
  EXPECT_EQ(rule_ids(check_layout(t, {.tp = 8, .dp = 16, .ep = 1, .etp = 64})).count("quant_group"), 0u);
  EXPECT_EQ(rule_ids(check_layout(t, {.tp = 64, .dp = 2, .ep = 128, .dense_tp = 128})).count("quant_group"), 0u);
}

TEST_F(RuleTest, IntermediateSizes) {
  // Mixtral's expert intermediate 14336 = 2^11·7 has no factor 3.
  const auto mix =
      check_layout(target_for(planner_config("mixtral_8x7b"), "h200", 6, false), {.tp = 1, .dp = 6, .etp = 6});
  EXPECT_NE(message(mix, "expert_inter_divisible").find("etp 6 must divide the expert intermediate size 14336"),
            std::string::npos);
}

TEST_F(RuleTest, SharedAndDenseIntermediateAndQuantBlock) {
  // Kimi: dense 18432 and shared 2048 over dense_tp 3: 2048 % 3 != 0; 18432/3 = 6144 = 48 blocks of 128.
  const auto c = kimi({.tp = 4, .dp = 3, .ep = 12, .dense_tp = 3}, 12);
  EXPECT_NE(
      message(c, "shared_inter_divisible").find("dense_tp 3 must divide the shared-expert intermediate size 2048"),
      std::string::npos);
  EXPECT_EQ(rule_ids(c).count("dense_inter_divisible"), 0u);
  // etp 32 leaves 2048/32 = 64 rows: not a whole 128-row fp8 block.
  const auto q = kimi({.tp = 8, .dp = 4, .ep = 1, .etp = 32}, 32);
  EXPECT_NE(
      message(q, "quant_block").find("2048 / 32 = 64 expert rows per rank, not a multiple of the fp8 scale block 128"),
      std::string::npos);
  // tp 64 leaves Kimi's 64 heads one each: 192 q rows, 1.5 blocks of 128.
  const auto h = kimi({.tp = 64, .dp = 1, .ep = 64}, 64);
  EXPECT_NE(message(h, "quant_block")
                .find("tp 64 leaves 1 attention heads per rank, 192 q_b_proj / q_proj rows per rank, not a multiple "
                      "of the fp8 scale block 128"),
            std::string::npos)
      << message(h, "quant_block");
  // tp 32: two heads, 384 q rows, 3 blocks (dense_tp 8 keeps the dense and shared slices whole too).
  EXPECT_EQ(rule_ids(kimi({.tp = 32, .dp = 2, .ep = 64, .dense_tp = 8}, 64)).count("quant_block"), 0u);
  // GLM-4.5 dense intermediate 12288 over dense_tp 5 (and vocab 151552 too).
  PlanTarget glm = target_for(planner_config("glm4_5"), "h200", 10, false);
  glm.cluster = make_cluster(glm.cluster.machine, 10, 2);
  const auto g = check_layout(glm, {.tp = 2, .dp = 5, .ep = 10, .dense_tp = 5});
  EXPECT_NE(message(g, "dense_inter_divisible").find("dense_tp 5 must divide the dense MLP intermediate size 12288"),
            std::string::npos);
}

TEST_F(RuleTest, VocabDivisible) {
  const auto c = qwen({.tp = 2, .dp = 3, .dense_tp = 3}, 6);
  EXPECT_NE(message(c, "vocab_divisible").find("dense_tp 3 must divide the vocabulary of 151936"), std::string::npos);
  PlanTarget t = target_for(planner_config("qwen3_30b_a3b"), "h200", 6, false);
  t.memory.shard.vocab_parallel = false;
  EXPECT_EQ(rule_ids(check_layout(t, {.tp = 2, .dp = 3, .dense_tp = 3})).count("vocab_divisible"), 0u);
}

TEST_F(RuleTest, PipelineStages) {
  const auto mix = check_layout(target_for(planner_config("mixtral_8x7b"), "h200", 64, false), {.pp = 64, .tp = 1});
  EXPECT_NE(message(mix, "pp_range").find("pp 64 exceeds the 32 decoder layers"), std::string::npos);
  EXPECT_NE(message(qwen({.pp = 2, .tp = 4, .pp_layers = {20, 20}}), "pp_layers")
                .find("sums to 40 layers but the model has 48"),
            std::string::npos);
  EXPECT_NE(message(qwen({.pp = 2, .tp = 4, .pp_layers = {48, 0}}), "pp_layers").find("stage 1 has 0 layers"),
            std::string::npos);
  EXPECT_NE(message(qwen({.pp = 4, .tp = 2, .pp_layers = {24, 24}}), "pp_layers").find("names 2 stages but --pp is 4"),
            std::string::npos);
  const auto ok = qwen({.tp = 4, .pp_layers = {20, 28}});
  EXPECT_TRUE(ok.valid());
  EXPECT_EQ(ok.stage_layers, (std::vector<int64_t>{20, 28}));
}

TEST_F(RuleTest, GroupsStayInsideANode) {
  const auto c = qwen({.tp = 16}, 16);
  EXPECT_NE(message(c, "group_spans_nodes").find("tp group {0-15} spans nodes 0 and 1"), std::string::npos);
  // etp completes dp·tp = 16 here, and an expert-TP group of 16 straddles the nodes too.
  EXPECT_NE(message(qwen({.tp = 8, .dp = 2}, 16), "group_spans_nodes").find("etp group {0-15}"), std::string::npos);
  EXPECT_TRUE(qwen({.tp = 8, .dp = 2, .ep = 2}, 16).valid());
}

TEST_F(RuleTest, EveryRuleIsReportedAtOnce) {
  const auto c = qwen({.pp = 3, .tp = 3, .ep = 3, .dense_tp = 5, .pp_layers = {10, 10}}, 8);
  EXPECT_EQ(rule_ids(c), (std::set<std::string>{"world_size", "pp_layers", "dense_tp_divides", "experts_divisible",
                                                "heads_divisible", "kv_heads_divisible", "vocab_divisible"}));
}

TEST_F(RuleTest, MemoryFit) {
  const auto refused = kimi({.tp = 1}, 1, true);
  EXPECT_EQ(rule_ids(refused), std::set<std::string>{"memory_fit"});
  const std::string m = message(refused, "memory_fit");
  EXPECT_NE(m.find("does not fit in 141.0 GB per NVIDIA H200 SXM 141GB"), std::string::npos) << m;
  // The FP8 checkpoint's 1.03 TB as the GPU holds it: FP8 blocks as stored (kv_b_proj widened to BF16).
  EXPECT_NE(m.find("weights 1.03 TB as the GPU holds them (experts 1.01 TB"), std::string::npos) << m;
  EXPECT_NE(m.find("over before any KV cache"), std::string::npos) << m;
  ASSERT_TRUE(refused.memory.has_value());
  EXPECT_FALSE(refused.memory->fits);
}

}  // namespace
}  // namespace sy
