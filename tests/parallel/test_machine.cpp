// Machine presets, JSON machine files, clusters of nodes, rank placement and the node-span rule.
#include <gtest/gtest.h>

#include "base/check.h"
#include "parallel/machine.h"

namespace sy {
namespace {

TEST(Machine, PresetsCarryEveryFigure) {
  for (const char* name : {"h100", "h200", "b200", "rtx-pro-6000", "a100"}) {
    const Machine m = find_machine(name);
    EXPECT_EQ(m.name, name);
    EXPECT_GT(m.memory_gb, 0);
    EXPECT_GT(m.hbm_tbps, 0);
    EXPECT_GT(m.bf16_tflops, 0);
    EXPECT_GT(m.link_gbps, 0);
    EXPECT_GT(m.pcie_gbps, 0);
    EXPECT_GT(m.network_gbps, 0);
    EXPECT_EQ(m.gpus_per_node, 8);
    EXPECT_EQ(m.numa_sockets, 2);
    EXPECT_EQ(m.gpu_socket, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
    EXPECT_FALSE(m.source.empty());
  }
  const Machine h200 = find_machine("H200-SXM");
  EXPECT_EQ(h200.memory_gb, 141);
  EXPECT_EQ(h200.hbm_tbps, 4.8);
  EXPECT_EQ(h200.link, "NVLink 4");
  EXPECT_EQ(find_machine("a100").fp8_tflops, 0);  // no fp8 tensor cores
  EXPECT_GT(find_machine("b200").fp4_tflops, find_machine("b200").fp8_tflops);
  EXPECT_EQ(find_machine("rtx-pro-6000").link, "PCIe 5.0 x16");
}

TEST(Machine, UnknownNameListsPresets) {
  try {
    find_machine("h300");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h100, h200, b200, rtx-pro-6000, a100"), std::string::npos) << e.what();
  }
}

TEST(Machine, JsonFiles) {
  const Machine m = parse_machine_json(R"({"name": "l40s", "gpu": "NVIDIA L40S", "memory_gb": 48, "hbm_tbps": 0.864,
      "bf16_tflops": 362, "fp8_tflops": 733, "link": "PCIe 4.0 x16", "link_gbps": 64, "network_gbps": 25,
      "gpus_per_node": 4, "numa_sockets": 2, "gpu_socket": [0, 0, 1, 1]})",
                                       "l40s.json");
  EXPECT_EQ(m.gpus_per_node, 4);
  EXPECT_EQ(m.memory_bytes(), 48'000'000'000);
  EXPECT_EQ(m.gpu_socket, (std::vector<int>{0, 0, 1, 1}));

  const Machine based = parse_machine_json(R"({"base": "h100", "name": "h100-4", "gpus_per_node": 4,
      "gpu_socket": [0, 0, 1, 1]})",
                                           "h100-4.json");
  EXPECT_EQ(based.memory_gb, 80);
  EXPECT_EQ(based.gpus_per_node, 4);

  const auto error_of = [](const std::string& text) {
    try {
      parse_machine_json(text, "m.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(R"({"base": "h100", "memry_gb": 3})").find("unknown key 'memry_gb'"), std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x"})").find("required key 'gpu'"), std::string::npos);
  EXPECT_NE(error_of(R"({"base": "h100", "gpus_per_node": 4})").find("'gpu_socket' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"base": "h100", "gpu_socket": [0, 1]})").find("gpu_socket lists 2 GPUs"), std::string::npos);
  EXPECT_NE(error_of(R"({"base": "h100", "memory_gb": "lots"})").find("'memory_gb' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
}

TEST(Cluster, NodesAndPlacement) {
  const Machine h200 = find_machine("h200");
  Cluster c = make_cluster(h200, std::nullopt, std::nullopt);
  EXPECT_EQ(c.gpus, 8);
  EXPECT_EQ(c.nodes, 1);
  c = make_cluster(h200, 16, std::nullopt);
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.place(13).node, 1);
  EXPECT_EQ(c.place(13).local_gpu, 5);
  EXPECT_EQ(c.place(13).numa, 1);
  EXPECT_EQ(c.place(2).numa, 0);
  c = make_cluster(h200, 12, 2);  // six GPUs used on each node
  EXPECT_EQ(c.place(6).node, 1);
  EXPECT_EQ(c.place(6).local_gpu, 0);
  EXPECT_EQ(make_cluster(h200, std::nullopt, 3).gpus, 24);
  EXPECT_THROW(make_cluster(h200, 17, 2), Error);
  EXPECT_THROW(make_cluster(h200, 9, 1), Error);
  EXPECT_THROW(make_cluster(h200, 0, std::nullopt), Error);
}

TEST(Cluster, TensorGroupsStayOnOneNode) {
  const Cluster two_nodes = make_cluster(find_machine("h100"), 16, std::nullopt);
  EXPECT_TRUE(check_node_spans(Mapping({.tp = 8, .dp = 2, .ep = 16, .dense_tp = 8}), two_nodes).empty());
  const auto tp16 = check_node_spans(Mapping({.tp = 16, .etp = 16, .dense_tp = 16}), two_nodes);
  ASSERT_EQ(tp16.size(), 3u);  // tp, etp and dense_tp groups all straddle
  EXPECT_EQ(tp16[0].rule, "group_spans_nodes");
  EXPECT_NE(tp16[0].message.find("tp group {0-15} spans nodes 0 and 1"), std::string::npos) << tp16[0].message;
  const auto etp = check_node_spans(Mapping({.tp = 8, .dp = 2, .etp = 16, .dense_tp = 8}), two_nodes);
  ASSERT_EQ(etp.size(), 1u);
  EXPECT_EQ(etp[0].axes, std::vector<Axis>{Axis::etp});
  // Six GPUs per node: groups of 4 starting at rank 4 straddle the boundary at 6.
  const Cluster six = make_cluster(find_machine("h100"), 12, 2);
  const auto fours = check_node_spans(Mapping({.tp = 4, .dp = 3, .ep = 3, .etp = 4, .dense_tp = 4}), six);
  ASSERT_EQ(fours.size(), 3u);
  EXPECT_NE(fours[0].message.find("tp group {4-7} spans nodes 0 and 1"), std::string::npos) << fours[0].message;
  EXPECT_TRUE(check_node_spans(Mapping({.tp = 2, .dp = 6, .ep = 12, .dense_tp = 2}), six).empty());
}

TEST(Cluster, RankLists) {
  EXPECT_EQ(format_ranks({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(format_ranks({0, 2, 4}), "0,2,4");
  EXPECT_EQ(format_ranks({0, 1, 4, 5, 6}), "0,1,4-6");
  EXPECT_EQ(format_ranks({7}), "7");
}

}  // namespace
}  // namespace sy
