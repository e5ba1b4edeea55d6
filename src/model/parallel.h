// This rank's share of a model under a parallel layout (which heads, experts, intermediate columns,
// vocabulary rows and layers it holds) and the collectives the blocks run over backend memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "parallel/groups.h"

namespace sy {

// Elements [start, start + count) of a dimension split across `size` ranks.
struct Share {
  int64_t start = 0;
  int64_t count = 0;
};
// An even split; sy::Error naming `what` when size does not divide total (layout validation refuses
// such layouts first, so this is a model-definition check).
Share even_share(int64_t total, int rank, int size, const char* what);
// ceil(total / size) per rank, the last ranks holding fewer (possibly none): the vocabulary.
Share ceil_share(int64_t total, int rank, int size);

// Where this rank sits in the layout, in the terms the model uses. With groups == nullptr: one rank.
struct ShardPlan {
  const ParallelGroups* groups = nullptr;
  int tp_rank = 0, tp = 1;        // attention heads
  int dense_rank = 0, dense = 1;  // dense MLPs, shared experts, embedding and LM head (vocabulary)
  int ep_rank = 0, ep = 1;        // experts
  int etp_rank = 0, etp = 1;      // each expert's intermediate dimension
  int edp_rank = 0, edp = 1;
  int dp_rank = 0, dp = 1;  // attention data parallelism
  int pp_rank = 0, pp = 1;
  int64_t first_layer = 0;  // this stage's decoder layers [first_layer, first_layer + n_layers)
  int64_t n_layers = 0;

  bool single() const { return groups == nullptr || groups->single(); }
  // Whether a dense_tp group spans several attention dp replicas (dense_tp does not divide tp): its
  // members then hold different tokens, which dense layers gather first (SGLang's dense TP over
  // data-parallel attention). Otherwise the group sits inside one tp group and shares its tokens.
  bool dense_spans_dp() const { return tp % dense != 0; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
  // The stage rank of the MoE coordinates (edp, ep, etp) inside this rank's stage.
  int moe_stage_rank(int edp_r, int ep_r, int etp_r) const { return etp_r + etp * (ep_r + ep * edp_r); }
};

// The plan for `n_layers` built decoder layers (after --layers). Refuses what the layout rules allow
// but execution does not support, with the reason and what to use instead.
ShardPlan make_shard_plan(const ParallelGroups* groups, int64_t n_layers);

// Collectives over backend memory: a host-memory communicator (MPI) with device memory goes through
// host staging; the CPU backend's memory is host memory and goes straight through; a device-memory
// communicator (NCCL) runs after the backend's queued work and is waited for (Communicator::wait), so
// its results are ready for the ops issued next. Every call is a
// phase of its own (Phase::communication) and restores no phase: the caller marks the next one.
class ModelComm {
 public:
  explicit ModelComm(Backend& backend) : backend_(backend) {}
  void all_reduce(Communicator& c, float* x, int64_t n);
  // recv[i] = Σ over ranks r of (send of rank r)[rank()·count + i]; send holds size()·count floats.
  void reduce_scatter(Communicator& c, const float* send, float* recv, int64_t count);
  // Every rank's `mine`, in rank order (host values).
  std::vector<int64_t> gather_counts(Communicator& c, int64_t mine);
  // recv[r·count + i] = send[i] of rank r (floats).
  void all_gather(Communicator& c, const float* send, float* recv, int64_t count);
  // As Communicator::all_to_all_v, in floats or int32s (dtype), over backend memory.
  void all_to_all_v(Communicator& c, const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype);
  // Host int64 counts, one per rank: recv[r] = what rank r put in send[rank()].
  std::vector<int64_t> exchange_counts(Communicator& c, const std::vector<int64_t>& send);
  // Host-memory collectives (the assembled logits), through device memory for a device communicator.
  void all_gather_host(Communicator& c, const float* send, float* recv, int64_t count);
  void broadcast_host(Communicator& c, float* data, int64_t count, int root);
  void send(Communicator& c, const void* x, int64_t n, DType dtype, int dest);
  void recv(Communicator& c, void* x, int64_t n, DType dtype, int source);

 private:
  bool direct(const Communicator& c) const;
  void* stage(size_t i, size_t bytes);
  float* device_stage(size_t floats);
  Backend& backend_;
  std::vector<std::vector<char>> host_;
  std::unique_ptr<DeviceBuffer> counts_;
  std::unique_ptr<DeviceBuffer> device_stage_;
};

}  // namespace sy
