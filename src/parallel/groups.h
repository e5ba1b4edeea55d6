// The communicators one rank needs to run its part of a layout: the attention view's tp and dp groups,
// the pipeline (pp) group, the whole stage (every MoE exchange goes over it) and the dense_tp group, all
// split from the world of the launch in one fixed order so that every rank creates them alike.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mapping.h"

namespace sy {

struct ParallelGroups {
  Mapping mapping{ParallelSizes{}};
  RankCoords coords;
  std::vector<int> pp_layers;           // explicit decoder layers per stage; empty: even split
  Communicator* world = nullptr;        // not owned; outlives the groups
  std::unique_ptr<Communicator> tp;     // attention heads; rank = tp_rank
  std::unique_ptr<Communicator> dp;     // attention data-parallel replicas of one tp position; rank = dp_rank
  std::unique_ptr<Communicator> pp;     // the same stage position on every stage; rank = pp_rank
  std::unique_ptr<Communicator> stage;  // the S ranks of this rank's stage; rank = stage_rank
  std::unique_ptr<Communicator> dense;  // dense_tp group; rank = dense_tp_rank

  bool single() const { return mapping.world_size() == 1; }
};

// Collective over `world`. Precondition: world.size() == mapping.world_size().
std::unique_ptr<ParallelGroups> make_parallel_groups(Communicator& world, const Mapping& mapping,
                                                     std::vector<int> pp_layers = {});

// The groups of a single-rank run (every group is the trivial group of one).
std::unique_ptr<ParallelGroups> make_single_rank_groups(Communicator& world);

}  // namespace sy
