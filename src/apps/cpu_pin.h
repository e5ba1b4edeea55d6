// CPU ranks on CPUs of their own (SY_CPU_PIN=1, for the A/B of bench/results/straggler-h200.sh): each local rank
// of an Open MPI launch keeps its threads to a slice of the cores the launch may use, so that no two ranks' OpenMP
// threads share a CPU. Off by default: the ranks' pools are left to the OS to place (launch.cpp, --bind-to none).
#pragma once

#include <string>
#include <vector>

namespace sy {

// One CPU as the kernel numbers it, and the core it belongs to (its package and core id).
struct CpuCore {
  int cpu = 0;
  int package = 0;
  int core = 0;
};

// The CPUs in this process's affinity mask with their cores (/sys/devices/system/cpu/cpuN/topology; a CPU without
// those files is a core of its own); empty when the mask cannot be read.
std::vector<CpuCore> affinity_cpus();

// The CPUs of each of `ranks` local ranks: whole cores (a core's hardware threads together), in package and core
// order, cores / ranks of them a rank, the remainder to none. Empty when there are fewer cores than ranks.
std::vector<std::vector<int>> split_cores(std::vector<CpuCore> cpus, int ranks);

// "0-3,8-11": CPU ids, ascending runs joined.
std::string cpu_list(std::vector<int> cpus);

// With SY_CPU_PIN=1 under Open MPI (OMPI_COMM_WORLD_LOCAL_RANK and _LOCAL_SIZE set): restricts the calling
// thread, and so the threads it starts later (OpenMP's pool, MPI's), to this local rank's slice of the CPUs in
// its affinity mask. Call before any thread starts. Returns what was done, for the log ("" when not asked).
std::string pin_local_rank();

}  // namespace sy
