// Decode estimate: per stage, bytes read over bandwidth plus collective time, then the pipeline period.
#include "planner/perf.h"

#include <algorithm>
#include <cmath>

namespace sy {

namespace {

constexpr double kIntraNodeLatency = 8e-6;
constexpr double kInterNodeLatency = 20e-6;
// PCIe-linked GPUs (Machine::cross_socket_gbps > 0), the rtx-pro-6000 preset's assumptions: within a socket,
// across sockets.
constexpr double kPcieLatency = 12e-6;
constexpr double kCrossSocketLatency = 20e-6;

// Whether a group of `span` consecutive ranks (groups start at multiples of span) has GPUs on two sockets.
bool crosses_sockets(const Cluster& c, int span) {
  const int per_node = c.gpus_per_node_used();
  for (int first = 0; first + span <= per_node; first += span) {
    const int socket = c.place(first).numa;
    for (int r = first + 1; r < first + span; ++r) {
      if (c.place(r).numa != socket) return true;
    }
  }
  return false;
}

size_t idx(Part p) { return static_cast<size_t>(p); }

}  // namespace

Link link_for_group(const Cluster& c, int group_span) {
  if (group_span > c.gpus_per_node_used()) return {c.machine.network_gbps * 1e9, kInterNodeLatency};
  if (c.machine.cross_socket_gbps <= 0) return {c.machine.link_gbps * 1e9 / 2, kIntraNodeLatency};
  if (crosses_sockets(c, group_span)) return {c.machine.cross_socket_gbps * 1e9 / 2, kCrossSocketLatency};
  return {c.machine.link_gbps * 1e9 / 2, kPcieLatency};
}

double all_reduce_seconds(int n, double bytes, const Link& l) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / l.bytes_per_second + l.latency;
}

double all_to_all_seconds(int n, double bytes, const Link& l) {
  if (n <= 1) return 0;
  return static_cast<double>(n - 1) / n * bytes / l.bytes_per_second + l.latency;
}

DecodeEstimate estimate_decode(const ModelDesc& s, const ParallelSizes& sz, const LayoutMemory& mem,
                               const Cluster& cluster, int64_t batch, int64_t context, const MemoryOptions& o) {
  DecodeEstimate out;
  out.batch = batch;
  const int64_t micro = std::max<int64_t>(1, std::min<int64_t>(sz.pp, batch));
  const double tokens = std::ceil(static_cast<double>(batch) / static_cast<double>(micro));  // per micro-batch
  const double tokens_dp = std::ceil(tokens / sz.dp);                                        // per dp replica
  const double a = static_cast<double>(o.act_dtype_bytes);
  const double h = static_cast<double>(s.hidden);
  const double bw = cluster.machine.hbm_tbps * 1e12;
  const MoeDesc& m = s.moe;
  // Fraction of a rank's experts that the micro-batch touches; each edp replica sees 1/edp of the tokens.
  double touched = 0;
  if (m.n_experts > 0) {
    const double per_replica = tokens / sz.edp;
    touched = 1.0 - std::pow(1.0 - static_cast<double>(m.top_k) / static_cast<double>(m.n_experts), per_replica);
  }
  const int S = sz.stage_size();
  const Link tp_link = link_for_group(cluster, sz.tp);
  const Link etp_link = link_for_group(cluster, sz.etp);
  const Link dense_link = link_for_group(cluster, sz.dense_tp);
  const Link ep_link = link_for_group(cluster, sz.ep * sz.etp);
  const Link pp_link = link_for_group(cluster, S + 1);  // a stage boundary: across nodes once a stage fills one

  double worst_stage = 0;
  for (const StageMemory& st : mem.stages) {
    double bytes = 0;
    for (int i = 0; i < kPartCount; ++i) {
      const Part p = static_cast<Part>(i);
      if (p == Part::embedding || p == Part::nextn) continue;  // a decode step reads only the batch's rows
      // What the device reads: the weights as it holds them (dequantised at load in this build).
      const double b = static_cast<double>(st.device_weights[idx(p)]);
      bytes += p == Part::experts ? b * touched : b;
    }
    bytes += tokens_dp * static_cast<double>(context) * static_cast<double>(st.kv_bytes_per_token);
    const double memory_s = bytes / bw;

    double comm_s = 0;
    for (int64_t l = st.first_layer; l < st.first_layer + st.n_layers; ++l) {
      comm_s += all_reduce_seconds(sz.tp, tokens_dp * h * a, tp_link);
      if (s.layer_ffn[static_cast<size_t>(l)] == FfnKind::moe) {
        const double routed = tokens_dp * static_cast<double>(m.top_k) * h * a;
        comm_s += 2 * all_to_all_seconds(sz.ep, routed, ep_link);
        const double received = tokens * static_cast<double>(m.top_k) / (sz.ep * sz.edp) * h * a;
        comm_s += all_reduce_seconds(sz.etp, received, etp_link);
        if (m.shared_inter > 0) comm_s += all_reduce_seconds(sz.dense_tp, tokens_dp * h * a, dense_link);
      } else {
        comm_s += all_reduce_seconds(sz.dense_tp, tokens_dp * h * a, dense_link);
      }
    }
    if (sz.pp > 1) comm_s += tokens_dp * h * a / pp_link.bytes_per_second + pp_link.latency;
    if (memory_s + comm_s > worst_stage) {
      worst_stage = memory_s + comm_s;
      out.memory_seconds = memory_s;
      out.comm_seconds = comm_s;
    }
  }
  out.step_seconds = static_cast<double>(std::max<int64_t>(micro, sz.pp)) * worst_stage;
  out.tokens_per_second = out.step_seconds > 0 ? static_cast<double>(batch) / out.step_seconds : 0;
  return out;
}

}  // namespace sy
