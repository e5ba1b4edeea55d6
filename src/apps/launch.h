// How this process takes part in a run: alone, or as one rank of an mpirun launch (then it owns MPI's
// lifetime and the world communicator); the re-run of a one-machine command under mpirun when its layout
// needs more ranks; and the way out when a rank fails, which must end every rank of the launch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/communicator.h"

namespace sy {

inline constexpr std::string_view kNoMpiBuild = "this build has no MPI (configure with -DSY_WITH_MPI=ON)";

class Launch {
 public:
  // Keeps the command line, to run the same command under mpirun.
  Launch(int argc, char** argv);
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // Whether an MPI launcher started this process: Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH,
  // Intel MPI and Slurm's PMI set PMI_SIZE. MPI is not started by asking.
  bool under_mpirun() const;

  // Starts MPI and returns the world of the launch; this process is then rank world().rank() of it, and
  // ranks other than 0 log warnings only. In a build without MPI: the world of one rank under `mpirun
  // -np 1`, sy::Error under more. Precondition: under_mpirun().
  Communicator& join_world();
  bool joined() const { return world_ != nullptr; }

  // Replaces this process by `mpirun -np ranks <this command>` (mpirun's exit code becomes the
  // command's): --oversubscribe only when ranks exceed the cores, Open MPI's consent to run as root when
  // root, unaggregated Open MPI messages, OMP_NUM_THREADS split over the ranks unless set. Returns only by
  // throwing sy::Error (no MPI in this build, no mpirun, exec failed).
  [[noreturn]] void rerun_under_mpirun(int ranks) const;

  // Checks that every rank of the joined world makes alike before any weight is read (layout, flags). When
  // they fail on any rank, the lowest failed rank prints its message (rank 0: "switchyard: error: ...",
  // another: "switchyard: rank R of W failed: ..."), every rank waits for that, and false is returned so
  // that every rank exits with code 2; nobody is left waiting. Collective over the world.
  bool check_on_every_rank(const std::function<void()>& checks);

  // The last word of a failed command: with a joined world of several ranks, prints "switchyard: rank R of
  // W failed: <what>" and ends every rank of the launch (MPI_Abort with the exit code); otherwise prints
  // "switchyard: error: <what>" and returns the exit code (2, or 1 when `internal`).
  int fail(std::string_view what, bool internal);

 private:
  struct Mpi;  // MPI's lifetime in this process (empty in builds without MPI)

  std::vector<std::string> args_;  // argv[1..]
  std::string pinned_;             // what SY_CPU_PIN=1 did to this rank's CPUs (cpu_pin.h), logged by rank 0
  std::unique_ptr<Mpi> mpi_;
  std::unique_ptr<Communicator> world_;  // destroyed before mpi_
};

}  // namespace sy
