// The planner's weight figures against the loader: for every fixture and every layout of 1 to 8 ranks
// that the planner accepts, each rank's dry run of the loader binds exactly the checkpoint bytes the
// planner says that rank holds, from the safetensors headers and from config.json alike. The two read
// the same model description (src/arch/), so this is where a drift between them would show.
#include <gtest/gtest.h>

#include "arch/model_desc.h"
#include "base/check.h"
#include "base/log.h"
#include "common/fixture.h"
#include "model/bind.h"
#include "planner/planner_test_util.h"

namespace sy {
namespace {

// What the loader binds on rank `rank` of layout `z` with `stage_layers` decoder layers per stage.
int64_t bound_bytes(const ModelDesc& desc, const Checkpoint& ckpt, Backend& backend, const ParallelSizes& z,
                    const std::vector<int64_t>& stage_layers, int rank) {
  ParallelGroups groups;
  groups.mapping = Mapping(z);
  groups.coords = groups.mapping.coords(rank);
  for (int64_t n : stage_layers) groups.pp_layers.push_back(static_cast<int>(n));
  WeightStore store{.checks_only = true};
  WeightLoader loader(&ckpt, 0, backend, store, &groups);
  build_model(desc, {.dir = ckpt.dir()}, loader, store, backend);
  return static_cast<int64_t>(store.checkpoint_bytes);
}

TEST(PlannedBytes, EveryRankBindsWhatThePlannerSays) {
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  set_log_level(LogLevel::warn);  // thousands of dry runs, each saying which tensors it left to other ranks
  const std::vector<std::string> names = test::fixture_names();
  ASSERT_GE(names.size(), 10u) << "fixtures missing under " << test::fixtures_dir();
  int64_t layouts = 0, refused_by_loader = 0;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = test::model_dir(name);
    const ModelDesc desc = load_model_desc(dir);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const WeightTable from_config = weights_from_config(desc);
    for (int world : {1, 2, 3, 4, 6, 8}) {
      const PlanTarget t = test::target_for(dir, "h200", world, false);
      ASSERT_TRUE(t.weights_from_checkpoint);
      for (const ParallelSizes& z : enumerate_layouts(world, true)) {
        const LayoutCheck c = check_layout(
            t, {.pp = z.pp, .tp = z.tp, .dp = z.dp, .ep = z.ep, .etp = z.etp, .edp = z.edp, .dense_tp = z.dense_tp});
        if (!c.valid()) continue;
        const LayoutMemory headers = estimate_memory(desc, t.weights, z, c.stage_layers, int64_t{1} << 40, t.memory);
        const LayoutMemory config = estimate_memory(desc, from_config, z, c.stage_layers, int64_t{1} << 40, t.memory);
        const Mapping m(z);
        for (int r = 0; r < world; ++r) {
          const size_t stage = static_cast<size_t>(m.coords(r).pp_rank);
          int64_t bound = 0;
          try {
            bound = bound_bytes(desc, ckpt, *backend, z, c.stage_layers, r);
          } catch (const Error& e) {
            // A layout the planner accepts but execution does not support is refused before any weight
            // is bound (make_shard_plan); it must say why.
            EXPECT_NE(std::string(e.what()).find("--"), std::string::npos) << e.what();
            ++refused_by_loader;
            break;
          }
          ASSERT_EQ(bound, headers.stages[stage].weight_bytes) << layout_flags(z) << " rank " << r;
          ASSERT_EQ(bound, config.stages[stage].weight_bytes) << layout_flags(z) << " rank " << r << " (config)";
        }
        ++layouts;
      }
    }
  }
  set_log_level(LogLevel::info);
  std::printf("%lld layouts over %zu fixtures, %lld refused by the loader\n", static_cast<long long>(layouts),
              names.size(), static_cast<long long>(refused_by_loader));
  EXPECT_GT(layouts - refused_by_loader, 500);
}

}  // namespace
}  // namespace sy
