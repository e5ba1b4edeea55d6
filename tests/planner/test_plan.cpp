// The plan: design.md's example layouts give the promised messages, Kimi K2 is refused on one H200 and
// accepted where it fits, every suggested alternative is itself valid, and the listing is ranked.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/perf.h"
#include "planner/report.h"
#include "planner_test_util.h"

namespace sy {
namespace {

using test::planner_config;
using test::rule_ids;
using test::target_for;

// "--tp 2 --dp 4 --ep 4" → the request it spells.
LayoutRequest parse_flags(const std::string& flags) {
  std::istringstream in(flags);
  LayoutRequest r;
  std::string flag;
  int value = 0;
  while (in >> flag >> value) {
    bool known = false;
    for (Axis a : kAxes) {
      if (flag == axis_flag(a)) {
        r.set(a, value);
        known = true;
      }
    }
    EXPECT_TRUE(known) << flag << " in " << flags;
  }
  return r;
}

void expect_valid_on_all_gpus(const PlanTarget& t, const std::vector<std::string>& alternatives) {
  EXPECT_FALSE(alternatives.empty());
  for (const auto& a : alternatives) {
    const LayoutCheck c = check_layout(t, parse_flags(a));
    EXPECT_TRUE(c.valid()) << a;
    EXPECT_EQ(c.sizes.world_size(), t.cluster.gpus) << a;
  }
}

class Qwen3On8H200 : public ::testing::Test {
 protected:
  PlanTarget t = target_for(planner_config("qwen3_30b_a3b"), "h200", 8);
};

// design.md: on 8 GPUs `--tp 4 --ep 2` uses 4 ranks and says so, naming `--tp 8 --ep 2`, `--tp 4 --pp 2` and
// `--tp 4 --dp 2` as ways to use all 8.
TEST_F(Qwen3On8H200, Tp4Ep2UsesFourRanksAndSaysSo) {
  const LayoutCheck c = check_layout_with_alternatives(t, {.tp = 4, .ep = 2});
  EXPECT_TRUE(c.valid());
  EXPECT_TRUE(c.uses_fewer_gpus);
  EXPECT_EQ(c.sizes, (ParallelSizes{.pp = 1, .tp = 4, .dp = 1, .ep = 2, .etp = 2, .edp = 1, .dense_tp = 4}));
  EXPECT_EQ(c.use_all_gpus,
            (std::vector<std::string>{"--tp 8 --ep 2", "--tp 4 --pp 2 --ep 2", "--tp 4 --dp 2 --ep 2"}));
  expect_valid_on_all_gpus(t, c.use_all_gpus);
  const auto notes = layout_notes(t, c);
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.back(),
            "uses 4 of the 8 GPUs (W = pp·dp·tp = 4); to use all 8: --tp 8 --ep 2, --tp 4 --pp 2 --ep 2 or --tp 4 "
            "--dp 2 --ep 2");
  const std::string text = format_layout(t, c);
  EXPECT_NE(text.find("etp 2 completes S = edp·ep·etp = 4"), std::string::npos) << text;
  EXPECT_NE(text.find("   3     0    3     0"), std::string::npos) << text;  // rank 3: node 0, GPU 3, NUMA 0
}

// design.md: `--tp 2 --ep 4` says that ep·etp·edp must equal dp·tp.
TEST_F(Qwen3On8H200, Tp2Ep4SaysTheStageProductRule) {
  const LayoutCheck c = check_layout_with_alternatives(t, {.tp = 2, .ep = 4});
  ASSERT_EQ(rule_ids(c), std::set<std::string>{"stage_product"});
  EXPECT_NE(c.issues[0].message.find("ep·etp·edp must equal dp·tp: ep 4 × edp 1 = 4 does not divide dp 1 × tp 2 = 2"),
            std::string::npos)
      << c.issues[0].message;
  expect_valid_on_all_gpus(t, c.issues[0].alternatives);
  // The nearest fixes keep the user's tp 2 and ep 4.
  EXPECT_EQ(c.issues[0].alternatives.front(), "--tp 2 --dp 4 --ep 4");
  const std::string text = format_issues(t, c);
  EXPECT_EQ(
      text.rfind("layout --tp 2 --ep 4 on 8 × NVIDIA H200 SXM 141GB (h200), 1 node is refused (1 rule broken):", 0), 0u)
      << text;
}

TEST_F(Qwen3On8H200, AlternativesToEveryInvalidLayoutAreValid) {
  int checked = 0;
  for (const LayoutRequest& r : std::vector<LayoutRequest>{{.tp = 3},
                                                           {.tp = 16},
                                                           {.pp = 4, .dp = 4},
                                                           {.tp = 8, .ep = 3},
                                                           {.tp = 4, .dense_tp = 3},
                                                           {.tp = 2, .ep = 2, .etp = 2},
                                                           {.pp = 2, .tp = 4, .pp_layers = {40, 40}}}) {
    const LayoutCheck c = check_layout_with_alternatives(t, r);
    ASSERT_FALSE(c.valid()) << r.flags();
    for (const auto& issue : c.issues) {
      expect_valid_on_all_gpus(t, issue.alternatives);
      ++checked;
    }
  }
  EXPECT_GE(checked, 7);
}

TEST_F(Qwen3On8H200, PlanListsEveryLayoutRanked) {
  const Plan plan = make_plan(t);
  EXPECT_EQ(plan.considered, 65);
  EXPECT_EQ(plan.layouts.size(), 65u);  // every factorisation of 8 is valid for this model
  for (size_t i = 0; i < plan.layouts.size(); ++i) {
    const PlanEntry& e = plan.layouts[i];
    EXPECT_EQ(e.check.sizes.world_size(), 8);
    EXPECT_TRUE(e.check.valid());
    EXPECT_GT(e.decode_one.tokens_per_second, 0);
    ASSERT_TRUE(e.predicted.has_value());
    EXPECT_GT(e.predicted->decode_one.tokens_per_second, 0);
    if (i > 0) {  // ranked by the predicted throughput at the requested batch
      EXPECT_LE(e.predicted->decode_batch.tokens_per_second,
                plan.layouts[i - 1].predicted->decode_batch.tokens_per_second);
    }
  }
  const auto j = nlohmann::json::parse(plan_json(t, plan));
  EXPECT_EQ(j.at("layouts").size(), 65u);
  EXPECT_EQ(j.at("machine").at("memory_bytes").get<int64_t>(), 141'000'000'000);
  EXPECT_TRUE(j.at("layouts")[0].at("memory").at("fits").get<bool>());
  const std::string text = format_plan(t, plan);
  EXPECT_NE(text.find("65 of 65 layouts pass the rules, 65 fit"), std::string::npos);
}

TEST(Plan, InvalidLayoutsAreSummarisedByRule) {
  const PlanTarget t = target_for(planner_config("mixtral_8x7b"), "h100", 16);
  const Plan plan = make_plan(t);
  EXPECT_GT(plan.invalid_layouts, 0);
  bool experts = false;
  for (const auto& r : plan.invalid) experts = experts || r.rule == "experts_divisible";
  EXPECT_TRUE(experts) << "ep 16 over 8 experts";
  int sum = 0;
  for (const auto& e : plan.layouts) sum += e.check.rules_pass();
  EXPECT_EQ(sum + plan.invalid_layouts, plan.considered);
}

// Kimi K2's published FP8 weights are 1.03 TB; a GPU holds them as stored but for kv_b_proj, widened to
// BF16 at load (PlanTarget::device_weights), which is what the memory rule counts.
TEST(Plan, KimiK2IsRefusedOnOneH200WithItsFigures) {
  const PlanTarget t = target_for(planner_config("kimi_k2"), "h200", 1);
  const LayoutCheck c = check_layout_with_alternatives(t, {.tp = 1});
  ASSERT_EQ(rule_ids(c), std::set<std::string>{"memory_fit"});
  const LayoutIssue& issue = c.issues[0];
  EXPECT_NE(issue.message.find("the fullest rank 0 holds stage 0 (layers 0-60): weights 1.03 TB as the GPU holds them"),
            std::string::npos)
      << issue.message;
  EXPECT_EQ(c.memory->stages[0].weight_bytes, t.weights.total().bytes - t.weights.nextn.bytes);  // as stored
  // kv_b_proj of 61 layers: 64 heads x 256 rows x 512, one byte more per value in BF16 (less its scales).
  const int64_t widened = int64_t{61} * 64 * 256 * 512;
  EXPECT_NEAR(static_cast<double>(c.memory->stages[0].device_weight_bytes - c.memory->stages[0].weight_bytes),
              static_cast<double>(widened), 0.01 * static_cast<double>(widened));
  // Nothing fits one GPU: the alternative names the smallest cluster that fits, and it does.
  ASSERT_EQ(issue.alternatives.size(), 1u);
  EXPECT_EQ(issue.alternatives[0].rfind("--gpus 8 ", 0), 0u) << issue.alternatives[0];
  const PlanTarget eight = target_for(planner_config("kimi_k2"), "h200", 8);
  EXPECT_TRUE(check_layout(eight, parse_flags(issue.alternatives[0].substr(9))).valid());

  const Plan plan = make_plan(t);
  ASSERT_EQ(plan.layouts.size(), 1u);
  EXPECT_FALSE(plan.layouts[0].check.valid());
  const std::string text = format_plan(t, plan);
  EXPECT_NE(text.find("nothing fits on 1 × NVIDIA H200 SXM 141GB"), std::string::npos) << text;
  EXPECT_NE(text.find("smallest fitting cluster: 8 × NVIDIA H200 SXM 141GB"), std::string::npos) << text;
}

TEST(Plan, KimiK2IsAcceptedWhereItFits) {
  // Eight H200s hold the 1.03 TB (tp 8 over ep 8), with room for KV.
  const PlanTarget eight = target_for(planner_config("kimi_k2"), "h200", 8);
  const LayoutCheck tp8 = check_layout(eight, {.tp = 8, .ep = 8});
  ASSERT_TRUE(tp8.valid()) << format_issues(eight, tp8);
  EXPECT_LT(tp8.memory->stages[0].weight_bytes, tp8.memory->stages[0].device_weight_bytes);
  EXPECT_LT(tp8.memory->stages[0].device_weight_bytes, 141'000'000'000);
  EXPECT_GT(tp8.memory->kv_tokens, 8192);
  // Two stages: half the layers per GPU, many times the room for KV.
  const PlanTarget sixteen = target_for(planner_config("kimi_k2"), "h200", 16);
  const LayoutCheck pp2 = check_layout(sixteen, {.pp = 2, .tp = 8, .ep = 8});
  ASSERT_TRUE(pp2.valid()) << format_issues(sixteen, pp2);
  EXPECT_EQ(pp2.stage_layers, (std::vector<int64_t>{31, 30}));
  EXPECT_GT(pp2.memory->kv_tokens, 4 * tp8.memory->kv_tokens);
  // Four times the GPUs (tp 8, dp 4 over ep 32): a quarter of the experts per GPU, and each replica's KV room
  // many times that of one eight-GPU replica.
  const PlanTarget thirty_two = target_for(planner_config("kimi_k2"), "h200", 32);
  const LayoutCheck dp4 = check_layout(thirty_two, {.tp = 8, .dp = 4, .ep = 32});
  ASSERT_TRUE(dp4.valid()) << format_issues(thirty_two, dp4);
  EXPECT_GT(dp4.memory->kv_tokens, 4 * tp8.memory->kv_tokens);
  // H100s have 80 GB: eight do not hold 1.03 TB of weights, sixteen do.
  EXPECT_EQ(rule_ids(check_layout(target_for(planner_config("kimi_k2"), "h100", 8), {.tp = 8, .ep = 8})),
            std::set<std::string>{"memory_fit"});
  EXPECT_TRUE(check_layout(target_for(planner_config("kimi_k2"), "h100", 16), {.tp = 8, .dp = 2, .ep = 16}).valid());
}

// Kimi K2 Thinking's routed experts are INT4 (about 594 GB as published) and GLM-5's linear weights NVFP4: a
// GPU holds them as stored (PlanTarget::device_weights equals the stored bytes but for the 16-byte INT4
// weight_shape tensors and NVFP4's kv_b_proj and indexer weights, which stay unquantised in these configs
// anyway), so eight H200s hold each; in BF16 neither would fit.
TEST(Plan, FourBitCheckpointsFitAsTheGpuHoldsThem) {
  for (const char* model : {"kimi_k2_thinking", "glm5_nvfp4"}) {
    const PlanTarget eight = target_for(planner_config(model), "h200", 8);
    const LayoutCheck tp8 = check_layout(eight, {.tp = 8, .ep = 8});
    ASSERT_TRUE(tp8.valid()) << model << ": " << format_issues(eight, tp8);
    const double stored = static_cast<double>(tp8.memory->stages[0].weight_bytes);
    const double held = static_cast<double>(tp8.memory->stages[0].device_weight_bytes);
    EXPECT_NEAR(held, stored, 0.01 * stored) << model;
    // Dequantised to BF16, the experts alone would be about 3.5x their 4-bit bytes: no longer 8 GPUs' worth.
    ModelDesc bf16 = eight.shape;
    bf16.quant = {};
    EXPECT_GT(static_cast<double>(weights_from_config(bf16).total().bytes), 8 * 141e9) << model;
  }
}

// rtx-pro-6000 has no NVLink: 4 GPUs a socket talk over PCIe, the two sockets through the CPUs (the preset's
// stated assumptions). A tp group of 8 pays the cross-socket rate, one of 4 the PCIe rate; on the H200's
// NVLink, sockets cost nothing.
TEST(Plan, PcieMachinesPayForCollectivesAcrossSockets) {
  const auto comm = [](const PlanTarget& t, const LayoutRequest& layout, double cross_socket_gbps) {
    PlanTarget u = t;
    u.cluster.machine.cross_socket_gbps = cross_socket_gbps;
    const LayoutCheck c = check_layout(u, layout);
    EXPECT_TRUE(c.valid()) << format_issues(u, c);
    return estimate_decode(u.shape, c.sizes, *c.memory, u.cluster, 64, 512, u.memory).comm_seconds;
  };
  const PlanTarget eight = target_for(planner_config("qwen3_30b_a3b"), "rtx-pro-6000", 8);
  const double cross = eight.cluster.machine.cross_socket_gbps, pcie = eight.cluster.machine.link_gbps;
  ASSERT_GT(cross, 0);
  ASSERT_LT(cross, pcie);
  // tp 8 spans both sockets: slower than if the sockets were joined at the PCIe rate, by between the ratio of
  // the fixed costs (20 / 12 µs) and that of the bandwidths.
  const double slow = comm(eight, {.tp = 8}, cross), joined = comm(eight, {.tp = 8}, pcie);
  EXPECT_GT(slow, 1.6 * joined);
  EXPECT_LT(slow, pcie / cross * joined);
  // tp 4 on 4 GPUs stays on one socket: the cross-socket rate does not enter.
  const PlanTarget four = target_for(planner_config("qwen3_30b_a3b"), "rtx-pro-6000", 4);
  EXPECT_EQ(comm(four, {.tp = 4}, cross), comm(four, {.tp = 4}, pcie));
  EXPECT_GT(comm(four, {.tp = 4}, cross), 0);
  // NVLink (cross_socket_gbps 0): a group of 8 costs what the link alone says, sockets or not.
  const PlanTarget h200 = target_for(planner_config("qwen3_30b_a3b"), "h200", 8);
  EXPECT_EQ(h200.cluster.machine.cross_socket_gbps, 0);
  EXPECT_LT(comm(h200, {.tp = 8}, 0), joined);
}

TEST(Plan, LayoutJsonHasEveryRankAndGroup) {
  const PlanTarget t = target_for(planner_config("qwen3_30b_a3b"), "h200", 16);
  const LayoutCheck c = check_layout(t, {.pp = 2, .tp = 4, .dp = 2, .ep = 4});
  ASSERT_TRUE(c.valid());
  const auto j = nlohmann::json::parse(layout_json(t, c));
  const auto& ranks = j.at("layout").at("ranks");
  ASSERT_EQ(ranks.size(), 16u);
  EXPECT_EQ(ranks[13].at("node").get<int>(), 1);
  EXPECT_EQ(ranks[13].at("numa").get<int>(), 1);
  EXPECT_EQ(ranks[13].at("groups").at("tp"), (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(ranks[13].at("groups").at("ep"), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(ranks[13].at("groups").at("pp"), (std::vector<int>{5, 13}));
  EXPECT_EQ(j.at("layout").at("memory").at("stages").size(), 2u);
}

TEST(Plan, InspectReport) {
  InspectReport r;
  r.shape = load_model_desc(planner_config("kimi_k2"));
  r.weights = weights_from_config(r.shape);
  r.weights_source = "config.json";
  const std::string text = format_inspect(r);
  EXPECT_NE(text.find("61: 1 dense (0), 60 MoE (1-60)"), std::string::npos) << text;
  EXPECT_NE(text.find("1.03 T total, 32.86 B active per token"), std::string::npos) << text;
  EXPECT_NE(text.find("70.3 kB in bf16, 35.1 kB with --kv-dtype fp8: 61 layers × (512 latent + 64 rope) × 2 (fp8: 1) "
                      "bytes"),
            std::string::npos)
      << text;
  const auto j = nlohmann::json::parse(inspect_json(r));
  EXPECT_EQ(j.at("kv_bytes_per_token_tp1_bf16").get<int64_t>(), 61 * 576 * 2);
  EXPECT_EQ(j.at("kv_bytes_per_token_tp1_fp8").get<int64_t>(), 61 * 576);
  EXPECT_EQ(j.at("by_part").at("experts").at("params").get<int64_t>(), int64_t{60} * 384 * 3 * 2048 * 7168);
}

}  // namespace
}  // namespace sy
