// The device and the communicators of one rank of a multi-rank launch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/groups.h"

namespace sy {

struct RankGroups {
  std::string device;                          // the backend this rank runs: "cuda" becomes "cuda:<local rank>"
  std::unique_ptr<Communicator> device_world;  // the NCCL world the groups were split from, when used
  std::unique_ptr<ParallelGroups> groups;
  std::string transport;  // "MPI (host memory)" or "NCCL": for the layout printout
};

// Collective over `world` (the MPI world of the launch). With a GPU device and several ranks, each rank
// takes the GPU of its local rank on its node (one process per GPU) and, in a build with NCCL, the groups
// are NCCL communicators bootstrapped over `world`; otherwise they are split from `world` itself and
// device buffers go through host memory.
RankGroups make_rank_groups(Communicator& world, const Mapping& mapping, const std::vector<int>& pp_layers,
                            const std::string& device);

// The rank's index among the ranks of its node, from the launcher's environment (Open MPI, MPICH/PMI,
// Slurm); the world rank when none says.
int local_rank(int world_rank);

}  // namespace sy
