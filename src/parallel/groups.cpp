// Splitting the world into the groups of a layout.
#include "parallel/groups.h"

#include "base/check.h"

namespace sy {

std::unique_ptr<ParallelGroups> make_parallel_groups(Communicator& world, const Mapping& mapping,
                                                     std::vector<int> pp_layers) {
  SY_CHECK(world.size() == mapping.world_size(),
           "the launch has {} ranks but the layout {} needs {}; start it "
           "with mpirun -np {}",
           world.size(), describe_sizes(mapping.sizes()), mapping.world_size(), mapping.world_size());
  auto g = std::make_unique<ParallelGroups>();
  g->mapping = mapping;
  g->coords = mapping.coords(world.rank());
  g->pp_layers = std::move(pp_layers);
  g->world = &world;
  g->tp = split_axis(world, mapping, Axis::tp);
  g->dp = split_axis(world, mapping, Axis::dp);
  g->pp = split_axis(world, mapping, Axis::pp);
  const int S = mapping.stage_size(), first = g->coords.pp_rank * S;
  std::vector<int> stage(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) stage[static_cast<size_t>(s)] = first + s;
  g->stage = world.split(stage);
  g->dense = split_axis(world, mapping, Axis::dense_tp);
  return g;
}

std::unique_ptr<ParallelGroups> make_single_rank_groups(Communicator& world) {
  SY_CHECK(world.size() == 1, "make_single_rank_groups needs a world of one rank, got {}", world.size());
  return make_parallel_groups(world, Mapping(ParallelSizes{}));
}

}  // namespace sy
