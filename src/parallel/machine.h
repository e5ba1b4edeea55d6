// Machine descriptions (one GPU model in nodes of N GPUs): built-in presets with published figures, user
// files in JSON, and the physical placement of a rank (node, local GPU, NUMA socket).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "parallel/mapping.h"

namespace sy {

struct Machine {
  std::string name;        // preset key or the file's "name"
  std::string gpu;         // marketing name, e.g. "NVIDIA H200 SXM 141GB"
  double memory_gb = 0;    // device memory per GPU, 10^9 bytes
  double hbm_tbps = 0;     // device memory bandwidth, 10^12 bytes/s
  double bf16_tflops = 0;  // dense (no sparsity) matrix rates; 0 = not supported
  double fp8_tflops = 0;
  double fp4_tflops = 0;
  std::string link;         // intra-node GPU link, e.g. "NVLink 4" or "PCIe 5.0 x16"
  double link_gbps = 0;     // per GPU, both directions together, 10^9 bytes/s (as datasheets state it)
  std::string pcie;         // host link
  double pcie_gbps = 0;     // both directions together
  double network_gbps = 0;  // inter-node bandwidth per GPU, one direction, 10^9 bytes/s
  // GPUs whose link is PCIe and that sit on different sockets talk through the CPUs: their bandwidth per GPU,
  // both directions together, 10^9 bytes/s. 0: the GPUs' own link (NVLink) reaches every GPU of the node
  // alike, sockets do not matter.
  double cross_socket_gbps = 0;
  int gpus_per_node = 0;
  int numa_sockets = 1;
  std::vector<int> gpu_socket;  // [gpus_per_node]: CPU socket (NUMA node) each local GPU hangs off
  std::string source;           // where the figures come from

  int64_t memory_bytes() const { return static_cast<int64_t>(memory_gb * 1e9); }
};

// Built-in presets: h100, h200, b200, rtx-pro-6000, a100 (also accepted: their long names, e.g. h200-sxm).
const std::vector<Machine>& machine_presets();
// A preset name, or a path to a JSON machine file. Errors name the file and key, or list the presets.
Machine find_machine(const std::string& name_or_file);
// A JSON machine file: {"name", "gpu", "memory_gb", "hbm_tbps", "bf16_tflops", "link", "link_gbps",
// "gpus_per_node", ...}, or {"base": "h100", ...overrides}. Unknown keys are errors (typos never pass).
Machine load_machine_file(const std::filesystem::path& path);
Machine parse_machine_json(const std::string& text, const std::string& source_name);

struct Placement {
  int node = 0;
  int local_gpu = 0;
  int numa = 0;
};

// The GPUs at hand: `gpus` in total over `nodes` nodes of one machine type, gpus/nodes used per node.
// Ranks are placed in order: rank r is on node r / (gpus/nodes).
struct Cluster {
  Machine machine;
  int nodes = 1;
  int gpus = 1;

  int gpus_per_node_used() const { return gpus / nodes; }
  Placement place(int rank) const;
  std::string describe() const;  // "8 × NVIDIA H200 SXM 141GB (h200), 1 node"
};

// Unset gpus: every GPU of the nodes; unset nodes: as few nodes as hold the GPUs. sy::Error when the
// GPUs do not spread evenly over the nodes or exceed them.
Cluster make_cluster(const Machine& machine, std::optional<int> gpus, std::optional<int> nodes);

// Rule group_spans_nodes: a tp, etp or dense_tp group exchanges activations in every layer, so it must
// stay inside one node's GPU link. One issue per axis that breaks it, naming the first such group.
std::vector<LayoutIssue> check_node_spans(const Mapping& mapping, const Cluster& cluster);

// "0-3", "0,2,4,6", "0-3,8-11": a rank list, runs of consecutive ranks folded.
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace sy
