// The launch of a command's ranks: mpirun detection, the re-run under mpirun, checks every rank agrees on,
// and the way out of a failed rank (MPI_Abort, so that no rank waits forever for it).
#include "apps/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "apps/cpu_pin.h"
#include "base/check.h"
#include "base/log.h"
#ifdef SY_WITH_MPI
#include "parallel/mpi_communicator.h"
#endif

namespace sy {

#ifdef SY_WITH_MPI
struct Launch::Mpi {
  MpiSession session{nullptr, nullptr};
};
#else
struct Launch::Mpi {};
#endif

namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Cores this process may run on, counted as Open MPI counts its slots: physical cores (not hardware
// threads) inside the affinity mask.
int usable_cores() {
  const std::vector<CpuCore> cpus = affinity_cpus();
  if (cpus.empty()) return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  std::set<std::pair<int, int>> cores;
  for (const CpuCore& c : cpus) cores.emplace(c.package, c.core);
  return static_cast<int>(cores.size());
}

bool executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// mpirun from PATH (a module system or the user picks the MPI), else the mpiexec found next to the MPI
// this binary was built with.
std::string find_mpirun() {
  if (const char* path = std::getenv("PATH")) {
    const std::string dirs = path;
    size_t pos = 0;
    while (pos <= dirs.size()) {
      const size_t colon = std::min(dirs.find(':', pos), dirs.size());
      const std::string dir = dirs.substr(pos, colon - pos);
      if (!dir.empty() && executable(dir + "/mpirun")) return dir + "/mpirun";
      pos = colon + 1;
    }
  }
#ifdef SY_MPIEXEC
  if (executable(SY_MPIEXEC)) return SY_MPIEXEC;
#endif
  return {};
}

std::string this_executable() {
  std::string path(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  SY_CHECK(n > 0, "cannot find this program's own path (/proc/self/exe: {}) to start its ranks under mpirun",
           std::strerror(errno));
  path.resize(static_cast<size_t>(n));
  return path;
}

void print_failure(int rank, int size, std::string_view what) {
  std::fprintf(stderr, "switchyard: rank %d of %d failed: %.*s\n", rank, size, static_cast<int>(what.size()),
               what.data());
  std::fflush(stderr);
}

}  // namespace

// A rank of a launch takes its CPUs (SY_CPU_PIN=1) before any thread starts, so that its threads inherit them.
Launch::Launch(int argc, char** argv)
    : args_(argv + std::min(argc, 1), argv + argc), pinned_(under_mpirun() ? pin_local_rank() : std::string()) {}

Launch::~Launch() = default;

bool Launch::under_mpirun() const { return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_SIZE"); }

Communicator& Launch::join_world() {
  if (world_) return *world_;
#ifdef SY_WITH_MPI
  mpi_ = std::make_unique<Mpi>();
  world_ = mpi_->session.world();
  if (world_->rank() != 0) set_log_level(LogLevel::warn);
  if (!pinned_.empty()) log_info("{}", pinned_);
  return *world_;
#else
  const char* size = env_set("OMPI_COMM_WORLD_SIZE") ? std::getenv("OMPI_COMM_WORLD_SIZE") : std::getenv("PMI_SIZE");
  SY_CHECK(size == nullptr || std::string_view(size) == "1",
           "{}, but it was started as one of {} ranks by mpirun; run it without mpirun for one rank", kNoMpiBuild,
           size);
  world_ = make_single_rank_communicator();
  return *world_;
#endif
}

void Launch::rerun_under_mpirun(int ranks) const {
#ifndef SY_WITH_MPI
  SY_FAIL("the layout needs {} ranks, but {}", ranks, kNoMpiBuild);
#endif
  const std::string mpirun = find_mpirun();
  SY_CHECK(!mpirun.empty(),
           "the layout needs {} ranks, which switchyard starts with mpirun, but there is no mpirun "
           "on PATH{}; install Open MPI (Debian: apt install openmpi-bin) or start the ranks yourself with "
           "mpirun -np {}",
           ranks,
#ifdef SY_MPIEXEC
           " nor at " SY_MPIEXEC,
#else
           "",
#endif
           ranks);
  const int cores = usable_cores();
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(ranks)};
  if (ranks > cores) argv.emplace_back("--oversubscribe");
  // Each rank runs an OpenMP pool of cores / ranks threads (below); Open MPI's default binding (to one core for
  // two ranks, to a socket above) would crowd a pool onto one core, so the pools are left to the OS to place.
  if (!env_set("OMPI_MCA_hwloc_base_binding_policy")) {
    argv.emplace_back("--bind-to");
    argv.emplace_back("none");
  }
  argv.push_back(this_executable());
  argv.insert(argv.end(), args_.begin(), args_.end());

  // Values the user set win (setenv without overwrite).
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  // mpirun's own messages (MPI_ABORT, a killed rank) reach the user whole: Open MPI 4.1's aggregation of
  // repeated messages garbles the MPI_ABORT one ("Data unpack would read past end of buffer").
  setenv("OMPI_MCA_orte_base_help_aggregate", "0", 0);
  // Each rank's OpenMP pool gets its share of the cores instead of all of them.
  const std::string threads = std::to_string(std::max(1, cores / ranks));
  const bool threads_set = env_set("OMP_NUM_THREADS");
  if (!threads_set) setenv("OMP_NUM_THREADS", threads.c_str(), 1);

  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  log_info("starting {} ranks on {} core{}{}: {}", ranks, cores, cores == 1 ? "" : "s",
           threads_set ? "" : ", OMP_NUM_THREADS=" + threads, line);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  execv(mpirun.c_str(), cargv.data());
  SY_FAIL("cannot start {}: {}", mpirun, std::strerror(errno));
}

bool Launch::check_on_every_rank(const std::function<void()>& checks) {
  SY_CHECK(joined(), "check_on_every_rank needs the world of the launch (join_world first)");
  std::string error;
  try {
    checks();
  } catch (const Error& e) {
    error = e.what();
    if (error.empty()) error = "error";
  }
  Communicator& world = *world_;
  const int32_t failed = error.empty() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  world.all_gather(&failed, all.data(), 1, DType::i32);
  int first = -1;
  for (int r = 0; r < world.size() && first < 0; ++r) {
    if (all[static_cast<size_t>(r)] != 0) first = r;
  }
  if (first < 0) return true;
  if (world.rank() == first) {
    if (first == 0) {
      std::fprintf(stderr, "switchyard: error: %s\n", error.c_str());
      std::fflush(stderr);
    } else {
      print_failure(first, world.size(), error);
    }
  }
  // Nobody leaves before the message is out: mpirun ends the launch at the first non-zero exit.
  world.barrier();
  return false;
}

int Launch::fail(std::string_view what, bool internal) {
  const int code = internal ? 1 : 2;
#ifdef SY_WITH_MPI
  if (world_ && world_->size() > 1) {
    print_failure(world_->rank(), world_->size(), (internal ? "internal error: " : "") + std::string(what));
    mpi_->session.abort(code);
  }
#endif
  std::fprintf(stderr, "switchyard: %s%.*s\n", internal ? "internal error: " : "error: ", static_cast<int>(what.size()),
               what.data());
  return code;
}

}  // namespace sy
