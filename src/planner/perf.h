// A floor-style decode estimate for a layout: bytes each rank reads over its memory bandwidth plus the
// collectives it waits on, per design.md "Performance: how it is measured". It ranks layouts; it is not a
// measurement.
#pragma once

#include <cstdint>
#include <vector>

#include "arch/model_desc.h"
#include "parallel/machine.h"
#include "parallel/mapping.h"
#include "planner/memory.h"

namespace sy {

struct DecodeEstimate {
  int64_t batch = 0;        // sequences decoding together (over all dp replicas)
  double step_seconds = 0;  // time until every sequence has its next token
  double tokens_per_second = 0;
  double memory_seconds = 0;  // slowest stage, per micro-batch: weight, touched-expert and KV reads
  double comm_seconds = 0;    // slowest stage, per micro-batch: all-reduce, all-to-all, pipeline sends
};

// Assumptions: no overlap of memory reads and communication; ring all-reduce; balanced routing, so B
// tokens touch E·(1 − (1 − k/E)^B) experts; the batch is split into min(pp, batch) micro-batches that
// keep the pipeline busy; each collective costs a fixed latency (8 µs on the node's GPU link, 20 µs
// across nodes) plus its bytes over half the link's two-way bandwidth (or the network bandwidth). On PCIe
// machines (Machine::cross_socket_gbps > 0) a group within one socket pays 12 µs and the PCIe link, one
// spanning sockets 20 µs and half of cross_socket_gbps (the rtx-pro-6000 preset states these assumptions).
// A group's link: its bandwidth per direction and the fixed latency of one collective, as assumed above.
struct Link {
  double bytes_per_second = 0;
  double latency = 0;
};
Link link_for_group(const Cluster& c, int group_span);
double all_reduce_seconds(int n, double bytes, const Link& l);  // ring, `bytes` per rank
double all_to_all_seconds(int n, double bytes, const Link& l);  // `bytes` sent per rank

DecodeEstimate estimate_decode(const ModelDesc& shape, const ParallelSizes& sizes, const LayoutMemory& memory,
                               const Cluster& cluster, int64_t batch, int64_t context, const MemoryOptions& options);

}  // namespace sy
