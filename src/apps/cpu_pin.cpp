// SY_CPU_PIN=1: each local rank's CPUs (cpu_pin.h).
#include "apps/cpu_pin.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <tuple>

namespace sy {

std::vector<std::vector<int>> split_cores(std::vector<CpuCore> cpus, int ranks) {
  std::sort(cpus.begin(), cpus.end(), [](const CpuCore& a, const CpuCore& b) {
    return std::tie(a.package, a.core, a.cpu) < std::tie(b.package, b.core, b.cpu);
  });
  std::vector<std::vector<int>> cores;  // each core's CPUs
  for (size_t i = 0; i < cpus.size(); ++i) {
    if (i == 0 || cpus[i].package != cpus[i - 1].package || cpus[i].core != cpus[i - 1].core) cores.emplace_back();
    cores.back().push_back(cpus[i].cpu);
  }
  if (ranks <= 0 || static_cast<int>(cores.size()) < ranks) return {};
  const size_t per = cores.size() / static_cast<size_t>(ranks);
  std::vector<std::vector<int>> out(static_cast<size_t>(ranks));
  for (size_t r = 0; r < out.size(); ++r) {
    for (size_t c = r * per; c < (r + 1) * per; ++c) out[r].insert(out[r].end(), cores[c].begin(), cores[c].end());
    std::sort(out[r].begin(), out[r].end());
  }
  return out;
}

std::string cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s.push_back(',');
    s.append(j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return s;
}

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' ? static_cast<int>(n) : fallback;
}

bool read_int(const std::string& path, int* v) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *v);
}

}  // namespace

std::vector<CpuCore> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<CpuCore> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    CpuCore c{.cpu = cpu};
    // Without topology files every CPU is a core of its own (package -1 is no real package).
    if (!read_int(dir + "physical_package_id", &c.package) || !read_int(dir + "core_id", &c.core)) {
      c.package = -1;
      c.core = cpu;
    }
    cpus.push_back(c);
  }
  return cpus;
}

std::string pin_local_rank() {
  const char* pin = std::getenv("SY_CPU_PIN");
  if (pin == nullptr || std::string_view(pin) != "1") return {};
  const int rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1), ranks = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
  if (rank < 0 || ranks <= 0 || rank >= ranks) {
    return "SY_CPU_PIN=1: not pinned, no Open MPI local rank and size (OMPI_COMM_WORLD_LOCAL_RANK, _LOCAL_SIZE)";
  }
  const std::vector<CpuCore> cpus = affinity_cpus();
  if (cpus.empty()) return fmt::format("SY_CPU_PIN=1: not pinned, sched_getaffinity: {}", std::strerror(errno));
  const std::vector<std::vector<int>> slices = split_cores(cpus, ranks);
  if (slices.empty()) {
    return fmt::format("SY_CPU_PIN=1: not pinned, {} local ranks on {} CPUs ({}): fewer cores than ranks", ranks,
                       cpus.size(), cpu_list([&] {
                         std::vector<int> ids;
                         for (const auto& c : cpus) ids.push_back(c.cpu);
                         return ids;
                       }()));
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (const int cpu : slices[static_cast<size_t>(rank)]) CPU_SET(cpu, &mine);
  if (sched_setaffinity(0, sizeof(mine), &mine) != 0) {
    return fmt::format("SY_CPU_PIN=1: not pinned, sched_setaffinity: {}", std::strerror(errno));
  }
  std::string all;
  for (const auto& s : slices) {
    if (!all.empty()) all.append(" | ");
    all.append(cpu_list(s));
  }
  return fmt::format("SY_CPU_PIN=1: local rank {} of {} on CPUs {} (the local ranks: {})", rank, ranks,
                     cpu_list(slices[static_cast<size_t>(rank)]), all);
}

}  // namespace sy
