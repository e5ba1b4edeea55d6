// Machine presets with their published figures, JSON machine files, and rank placement.
#include "parallel/machine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

// A machine file's GPUs per node and NUMA sockets: far above any machine built (8 to 72 GPUs per node).
constexpr double kMaxGpusPerNode = 1024;

std::string for_message(const nlohmann::json& v) {
  return cut_for_message(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::vector<Machine> build_presets() {
  std::vector<Machine> m;
  // NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): 80 GB HBM3, 3.35 TB/s, BF16 1,979 and FP8 3,958
  // TFLOPS "with sparsity" (dense: half), NVLink 900 GB/s, PCIe Gen5 128 GB/s. DGX H100 user guide: 8
  // GPUs, 2 Xeon 8480C sockets, GPUs 0-3 on socket 0 and 4-7 on socket 1, one 400 Gb/s ConnectX-7 per GPU.
  m.push_back({.name = "h100",
               .gpu = "NVIDIA H100 SXM5 80GB",
               .memory_gb = 80,
               .hbm_tbps = 3.35,
               .bf16_tflops = 989.5,
               .fp8_tflops = 1979,
               .fp4_tflops = 0,
               .link = "NVLink 4",
               .link_gbps = 900,
               .pcie = "PCIe 5.0 x16",
               .pcie_gbps = 128,
               .network_gbps = 50,
               .gpus_per_node = 8,
               .numa_sockets = 2,
               .gpu_socket = {0, 0, 0, 0, 1, 1, 1, 1},
               .source = "NVIDIA H100 datasheet (SXM5), DGX H100 user guide"});
  // NVIDIA H200 Tensor Core GPU datasheet (SXM column): 141 GB HBM3e, 4.8 TB/s, BF16 1,979 and FP8 3,958
  // TFLOPS with sparsity, NVLink 900 GB/s, PCIe Gen5 128 GB/s. HGX H200: 8 GPUs on two sockets as DGX H100.
  m.push_back({.name = "h200",
               .gpu = "NVIDIA H200 SXM 141GB",
               .memory_gb = 141,
               .hbm_tbps = 4.8,
               .bf16_tflops = 989.5,
               .fp8_tflops = 1979,
               .fp4_tflops = 0,
               .link = "NVLink 4",
               .link_gbps = 900,
               .pcie = "PCIe 5.0 x16",
               .pcie_gbps = 128,
               .network_gbps = 50,
               .gpus_per_node = 8,
               .numa_sockets = 2,
               .gpu_socket = {0, 0, 0, 0, 1, 1, 1, 1},
               .source = "NVIDIA H200 datasheet (SXM), HGX H200 platform"});
  // NVIDIA HGX B200 datasheet (per GPU of 8): 180 GB HBM3e (1,440 GB per board), 8 TB/s, dense BF16 2.25,
  // FP8 4.5, FP4 9 PFLOPS (the sheet gives sparse rates, twice these); NVLink 5 1.8 TB/s; PCIe Gen5.
  // DGX B200: 2 Xeon 8570 sockets, GPUs 0-3 on socket 0, 4-7 on socket 1, 400 Gb/s ConnectX-7 per GPU.
  m.push_back({.name = "b200",
               .gpu = "NVIDIA B200 180GB (HGX)",
               .memory_gb = 180,
               .hbm_tbps = 8.0,
               .bf16_tflops = 2250,
               .fp8_tflops = 4500,
               .fp4_tflops = 9000,
               .link = "NVLink 5",
               .link_gbps = 1800,
               .pcie = "PCIe 5.0 x16",
               .pcie_gbps = 128,
               .network_gbps = 50,
               .gpus_per_node = 8,
               .numa_sockets = 2,
               .gpu_socket = {0, 0, 0, 0, 1, 1, 1, 1},
               .source = "NVIDIA HGX B200 datasheet, DGX B200 user guide"});
  // NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 96 GB GDDR7 ECC, 1,597 GB/s, FP4 4 PFLOPS with
  // sparsity (dense FP4 2,015 / FP8 1,008 / BF16 504 TFLOPS per the RTX Blackwell GPU architecture
  // whitepaper's GB202 professional rates), no NVLink: GPUs talk over PCIe Gen5 x16 (128 GB/s both ways).
  // RTX PRO Server reference design: 8 GPUs on two sockets, 4 per socket.
  // Collectives (planner/perf.cpp), assumed, not measured: the 4 GPUs of a socket exchange peer to peer
  // through its PCIe switches at the x16 link's rate (64 GB/s a way); GPUs of different sockets have no peer
  // path and go through the CPUs (host-memory staging over the socket interconnect), taken as 25 GB/s a way
  // (cross_socket_gbps 50); a PCIe collective's fixed cost is 12 µs within a socket, 20 µs across.
  m.push_back({.name = "rtx-pro-6000",
               .gpu = "NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB",
               .memory_gb = 96,
               .hbm_tbps = 1.597,
               .bf16_tflops = 504,
               .fp8_tflops = 1008,
               .fp4_tflops = 2015,
               .link = "PCIe 5.0 x16",
               .link_gbps = 128,
               .pcie = "PCIe 5.0 x16",
               .pcie_gbps = 128,
               .network_gbps = 50,
               .cross_socket_gbps = 50,
               .gpus_per_node = 8,
               .numa_sockets = 2,
               .gpu_socket = {0, 0, 0, 0, 1, 1, 1, 1},
               .source = "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet, RTX Blackwell whitepaper"});
  // NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 80 GB HBM2e, 2,039 GB/s, BF16 312 TFLOPS dense, no
  // FP8/FP4 tensor cores, NVLink 3 600 GB/s, PCIe Gen4 64 GB/s. DGX A100: 2 EPYC 7742 sockets, GPUs 0-3 on
  // socket 0 and 4-7 on socket 1, 200 Gb/s HDR InfiniBand per GPU.
  m.push_back({.name = "a100",
               .gpu = "NVIDIA A100 SXM4 80GB",
               .memory_gb = 80,
               .hbm_tbps = 2.039,
               .bf16_tflops = 312,
               .fp8_tflops = 0,
               .fp4_tflops = 0,
               .link = "NVLink 3",
               .link_gbps = 600,
               .pcie = "PCIe 4.0 x16",
               .pcie_gbps = 64,
               .network_gbps = 25,
               .gpus_per_node = 8,
               .numa_sockets = 2,
               .gpu_socket = {0, 0, 0, 0, 1, 1, 1, 1},
               .source = "NVIDIA A100 datasheet (80GB SXM), DGX A100 user guide"});
  return m;
}

struct Alias {
  const char* alias;
  const char* preset;
};
constexpr Alias kAliases[] = {
    {"h100-sxm", "h100"},  {"h100-sxm5", "h100"},          {"h200-sxm", "h200"},
    {"hgx-b200", "b200"},  {"rtxpro6000", "rtx-pro-6000"}, {"rtx-pro-6000-blackwell", "rtx-pro-6000"},
    {"a100-80gb", "a100"}, {"a100-sxm", "a100"},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string preset_names() {
  std::string out;
  for (const auto& m : machine_presets()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

void check_machine(const Machine& m, const std::string& src) {
  SY_CHECK(m.memory_gb > 0 && m.hbm_tbps > 0 && m.bf16_tflops > 0,
           "{}: memory_gb, hbm_tbps and bf16_tflops must be positive (got {}, {}, {})", src, m.memory_gb, m.hbm_tbps,
           m.bf16_tflops);
  SY_CHECK(m.gpus_per_node >= 1, "{}: gpus_per_node must be at least 1, got {}", src, m.gpus_per_node);
  SY_CHECK(m.link_gbps > 0 && m.network_gbps > 0, "{}: link_gbps and network_gbps must be positive (got {}, {})", src,
           m.link_gbps, m.network_gbps);
  SY_CHECK(m.numa_sockets >= 1, "{}: numa_sockets must be at least 1, got {}", src, m.numa_sockets);
  SY_CHECK(m.cross_socket_gbps >= 0, "{}: cross_socket_gbps must not be negative, got {}", src, m.cross_socket_gbps);
  SY_CHECK(static_cast<int>(m.gpu_socket.size()) == m.gpus_per_node,
           "{}: gpu_socket lists {} GPUs but gpus_per_node is {}: give the socket of every GPU", src,
           m.gpu_socket.size(), m.gpus_per_node);
  for (int s : m.gpu_socket) {
    SY_CHECK(s >= 0 && s < m.numa_sockets, "{}: gpu_socket entry {} is outside 0..{}", src, s, m.numa_sockets - 1);
  }
}

}  // namespace

const std::vector<Machine>& machine_presets() {
  static const std::vector<Machine> presets = build_presets();
  return presets;
}

Machine find_machine(const std::string& name_or_file) {
  std::string key = lower(name_or_file);
  for (const auto& a : kAliases) {
    if (key == a.alias) key = a.preset;
  }
  for (const auto& m : machine_presets()) {
    if (m.name == key) return m;
  }
  std::error_code ec;
  if (std::filesystem::exists(name_or_file, ec)) return load_machine_file(name_or_file);
  SY_FAIL("--machine '{}' is neither a preset ({}) nor a readable JSON machine file", cut_for_message(name_or_file),
          preset_names());
}

Machine load_machine_file(const std::filesystem::path& path) {
  return parse_machine_json(read_regular_file(path, kMaxJsonFileBytes, "machine file"), path.string());
}

Machine parse_machine_json(const std::string& text, const std::string& src) {
  check_json_depth(text, src);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SY_FAIL("{} is not valid JSON: {}", src, cut_for_message(e.what(), 200));
  }
  SY_CHECK(j.is_object(), "{} must hold a JSON object describing one machine", src);
  Machine m;
  bool has_base = false;
  if (auto it = j.find("base"); it != j.end()) {
    SY_CHECK(it->is_string(), "{}: 'base' must name a preset ({})", src, preset_names());
    const std::string base = it->get<std::string>();
    bool found = false;
    for (const auto& p : machine_presets()) {
      if (p.name == lower(base)) {
        m = p;
        found = true;
      }
    }
    SY_CHECK(found, "{}: base '{}' is not a preset; presets: {}", src, cut_for_message(base), preset_names());
    m.source = src + " (based on " + m.name + ")";
    has_base = true;
  } else {
    m.source = src;
  }
  const auto number = [&](const char* key, double* out, bool required) {
    auto it = j.find(key);
    if (it == j.end()) {
      SY_CHECK(!required, "{}: required key '{}' is missing", src, key);
      return;
    }
    SY_CHECK(it->is_number(), "{}: '{}' must be a number, got {}", src, key, for_message(*it));
    *out = it->get<double>();
    SY_CHECK(std::isfinite(*out) && *out >= 0 && *out <= 1e9, "{}: '{}' is {}, outside the range [0, 1e9]", src, key,
             *out);
  };
  const auto text_field = [&](const char* key, std::string* out, bool required) {
    auto it = j.find(key);
    if (it == j.end()) {
      SY_CHECK(!required, "{}: required key '{}' is missing", src, key);
      return;
    }
    SY_CHECK(it->is_string(), "{}: '{}' must be a string, got {}", src, key, for_message(*it));
    *out = it->get<std::string>();
  };
  const bool req = !has_base;
  text_field("name", &m.name, req);
  text_field("gpu", &m.gpu, req);
  number("memory_gb", &m.memory_gb, req);
  number("hbm_tbps", &m.hbm_tbps, req);
  number("bf16_tflops", &m.bf16_tflops, req);
  number("fp8_tflops", &m.fp8_tflops, false);
  number("fp4_tflops", &m.fp4_tflops, false);
  text_field("link", &m.link, req);
  number("link_gbps", &m.link_gbps, req);
  text_field("pcie", &m.pcie, false);
  number("pcie_gbps", &m.pcie_gbps, false);
  number("network_gbps", &m.network_gbps, req);
  number("cross_socket_gbps", &m.cross_socket_gbps, false);
  double gpus_per_node = m.gpus_per_node, sockets = m.numa_sockets;
  number("gpus_per_node", &gpus_per_node, req);
  number("numa_sockets", &sockets, false);
  SY_CHECK(gpus_per_node >= 1 && gpus_per_node <= kMaxGpusPerNode, "{}: gpus_per_node is {}, outside [1, {}]", src,
           gpus_per_node, kMaxGpusPerNode);
  SY_CHECK(sockets >= 1 && sockets <= kMaxGpusPerNode, "{}: numa_sockets is {}, outside [1, {}]", src, sockets,
           kMaxGpusPerNode);
  m.gpus_per_node = static_cast<int>(gpus_per_node);
  m.numa_sockets = static_cast<int>(sockets);
  if (auto it = j.find("gpu_socket"); it != j.end()) {
    SY_CHECK(it->is_array() && it->size() <= kMaxGpusPerNode,
             "{}: 'gpu_socket' must list the socket of each local GPU, got {}", src, for_message(*it));
    m.gpu_socket.clear();
    for (const auto& v : *it) {
      SY_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxGpusPerNode,
               "{}: 'gpu_socket' entries must be integers in [0, {}), got {}", src, kMaxGpusPerNode, for_message(v));
      m.gpu_socket.push_back(v.get<int>());
    }
  } else if (static_cast<int>(m.gpu_socket.size()) != m.gpus_per_node) {
    // One socket unless told otherwise: every GPU on socket 0.
    SY_CHECK(m.numa_sockets == 1, "{}: numa_sockets is {} but 'gpu_socket' is missing: give the socket of each GPU",
             src, m.numa_sockets);
    m.gpu_socket.assign(static_cast<size_t>(std::max(m.gpus_per_node, 0)), 0);
  }
  if (auto it = j.find("source"); it != j.end() && it->is_string()) m.source = it->get<std::string>();
  static const char* known[] = {
      "base",         "name",          "gpu",          "memory_gb",  "hbm_tbps", "bf16_tflops",
      "fp8_tflops",   "fp4_tflops",    "link",         "link_gbps",  "pcie",     "pcie_gbps",
      "network_gbps", "gpus_per_node", "numa_sockets", "gpu_socket", "source",   "cross_socket_gbps"};
  for (const auto& [key, value] : j.items()) {
    const bool ok = std::any_of(std::begin(known), std::end(known), [&](const char* k) { return key == k; });
    SY_CHECK(ok,
             "{}: unknown key '{}'; machine files take: name, gpu, memory_gb, hbm_tbps, bf16_tflops, "
             "fp8_tflops, fp4_tflops, link, link_gbps, pcie, pcie_gbps, network_gbps, cross_socket_gbps, "
             "gpus_per_node, numa_sockets, gpu_socket, source, base",
             src, cut_for_message(key));
  }
  check_machine(m, src);
  return m;
}

Placement Cluster::place(int rank) const {
  const int per_node = gpus_per_node_used();
  Placement p;
  p.node = rank / per_node;
  p.local_gpu = rank % per_node;
  p.numa = machine.gpu_socket[static_cast<size_t>(p.local_gpu)];
  return p;
}

std::string Cluster::describe() const {
  if (machine.memory_gb <= 0) return fmt::format("{} rank{} on this host", gpus, gpus == 1 ? "" : "s");
  return fmt::format("{} × {} ({}), {} node{}", gpus, machine.gpu, machine.name, nodes, nodes == 1 ? "" : "s");
}

Cluster make_cluster(const Machine& machine, std::optional<int> gpus, std::optional<int> nodes) {
  SY_CHECK(!gpus || *gpus >= 1, "--gpus must be at least 1, got {}", gpus.value_or(0));
  SY_CHECK(!nodes || *nodes >= 1, "--nodes must be at least 1, got {}", nodes.value_or(0));
  const int gpn = machine.gpus_per_node;
  Cluster c{.machine = machine};
  c.nodes = nodes.value_or(gpus ? (*gpus + gpn - 1) / gpn : 1);
  c.gpus = gpus.value_or(c.nodes * gpn);
  SY_CHECK(c.gpus <= c.nodes * gpn, "--gpus {} exceeds {} node(s) of {} GPUs ({}); raise --nodes", c.gpus, c.nodes, gpn,
           machine.name);
  SY_CHECK(c.gpus % c.nodes == 0,
           "--gpus {} does not spread evenly over --nodes {}: every node runs the same number "
           "of ranks",
           c.gpus, c.nodes);
  return c;
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i + 1 ? fmt::format("{}-{}", ranks[i], ranks[j])
                     : (j == i + 1 ? fmt::format("{},{}", ranks[i], ranks[j]) : std::to_string(ranks[i]));
    i = j + 1;
  }
  return out;
}

std::vector<LayoutIssue> check_node_spans(const Mapping& mapping, const Cluster& cluster) {
  std::vector<LayoutIssue> issues;
  if (mapping.world_size() > cluster.gpus) return issues;  // world_size already reports it
  for (Axis axis : {Axis::tp, Axis::etp, Axis::dense_tp}) {
    for (const auto& g : mapping.groups(axis)) {
      const int first_node = cluster.place(g.front()).node;
      const auto other = std::find_if(g.begin(), g.end(), [&](int r) { return cluster.place(r).node != first_node; });
      if (other == g.end()) continue;
      issues.push_back({.rule = "group_spans_nodes",
                        .message = fmt::format(
                            "{} group {{{}}} spans nodes {} and {} ({} {}, {} GPUs per node): a {} group "
                            "exchanges activations in every layer and must stay on one node's {}",
                            axis_name(axis), format_ranks(g), first_node, cluster.place(*other).node, axis_name(axis),
                            g.size(), cluster.gpus_per_node_used(), axis_name(axis), cluster.machine.link),
                        .axes = {axis}});
      break;
    }
  }
  return issues;
}

}  // namespace sy
