// SY_CPU_PIN=1's split of the CPUs over a launch's local ranks (cpu_pin.h): whole cores, in package and core
// order, cores / ranks a rank; none when the cores are fewer than the ranks; and the CPU lists it logs.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>

#include "apps/cpu_pin.h"

namespace sy {
namespace {

using Slices = std::vector<std::vector<int>>;

std::vector<CpuCore> one_cpu_a_core(int n) {
  std::vector<CpuCore> cpus;
  for (int i = 0; i < n; ++i) cpus.push_back({.cpu = i, .package = 0, .core = i});
  return cpus;
}

TEST(CpuPin, EightRanksOnSixteenCoresTakeTwoEach) {
  Slices want;
  for (int r = 0; r < 8; ++r) want.push_back({2 * r, 2 * r + 1});
  EXPECT_EQ(split_cores(one_cpu_a_core(16), 8), want);
}

TEST(CpuPin, HardwareThreadsOfACoreStayTogether) {
  // CPUs 0-7 are cores 0-7, CPUs 8-15 their second hardware threads (as Linux numbers them on x86).
  std::vector<CpuCore> cpus;
  for (int i = 0; i < 16; ++i) cpus.push_back({.cpu = i, .package = 0, .core = i % 8});
  EXPECT_EQ(split_cores(cpus, 4), (Slices{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
}

TEST(CpuPin, PackagesInOrderWhateverTheCpuNumbers) {
  // Package 1's cores carry the low CPU numbers: a rank still gets cores of one package first.
  const std::vector<CpuCore> cpus = {{.cpu = 0, .package = 1, .core = 0},
                                     {.cpu = 1, .package = 1, .core = 1},
                                     {.cpu = 2, .package = 0, .core = 0},
                                     {.cpu = 3, .package = 0, .core = 1}};
  EXPECT_EQ(split_cores(cpus, 2), (Slices{{2, 3}, {0, 1}}));
}

TEST(CpuPin, TheRemainderGoesToNoRank) {
  const Slices s = split_cores(one_cpu_a_core(16), 3);
  EXPECT_EQ(s, (Slices{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}, {10, 11, 12, 13, 14}}));
}

TEST(CpuPin, FewerCoresThanRanksPinNothing) {
  EXPECT_TRUE(split_cores(one_cpu_a_core(2), 4).empty());
  EXPECT_TRUE(split_cores(one_cpu_a_core(4), 0).empty());
}

TEST(CpuPin, CpuListJoinsRuns) {
  EXPECT_EQ(cpu_list({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list({5}), "5");
  EXPECT_EQ(cpu_list({}), "");
}

TEST(CpuPin, OnlyWhenAskedAndUnderOpenMpi) {
  unsetenv("SY_CPU_PIN");
  EXPECT_EQ(pin_local_rank(), "");
  setenv("SY_CPU_PIN", "1", 1);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_NE(pin_local_rank().find("not pinned, no Open MPI local rank"), std::string::npos);
  // One local rank takes every core of the mask, so the mask is unchanged.
  cpu_set_t before;
  CPU_ZERO(&before);
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  EXPECT_NE(pin_local_rank().find("local rank 0 of 1 on CPUs"), std::string::npos);
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  unsetenv("SY_CPU_PIN");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace
}  // namespace sy
