// Device and communicators per rank.
#include "parallel/rank_groups.h"

#include <cstdlib>

#ifdef SY_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace sy {

int local_rank(int world_rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return world_rank;
}

RankGroups make_rank_groups(Communicator& world, const Mapping& mapping, const std::vector<int>& pp_layers,
                            const std::string& device) {
  RankGroups r;
  r.device = device;
  r.transport = "MPI (host memory)";
  const bool gpu = device.rfind("cuda", 0) == 0;
  if (!gpu || world.size() == 1) {
    r.groups = make_parallel_groups(world, mapping, pp_layers);
    return r;
  }
  int gpu_index = 0;
  if (device == "cuda") {
    gpu_index = local_rank(world.rank());
    r.device = "cuda:" + std::to_string(gpu_index);
  } else {
    gpu_index = std::atoi(device.c_str() + 5);
  }
#ifdef SY_WITH_NCCL
  r.device_world = make_nccl_communicator(world, {.cuda_device = gpu_index});
  r.groups = make_parallel_groups(*r.device_world, mapping, pp_layers);
  r.transport = "NCCL";
#else
  (void)gpu_index;
  r.groups = make_parallel_groups(world, mapping, pp_layers);
#endif
  return r;
}

}  // namespace sy
