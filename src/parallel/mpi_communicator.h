// The MPI communicator (built with SY_WITH_MPI): the world of an mpirun launch and its sub-groups. Every
// MPI call's status is checked; the communicators return errors (MPI_ERRORS_RETURN) and each becomes an
// sy::Error naming the call, the rank and MPI's own message.
#pragma once

#include <memory>
#include <string_view>

#include "parallel/communicator.h"

namespace sy {

// Owns MPI's lifetime in a process: initialises MPI (if nobody has) and finalises it at destruction when
// it was the one to initialise it. Communicators made from it must be destroyed before it.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // A communicator over every rank of the launch (a duplicate of MPI_COMM_WORLD), rank = world rank.
  std::unique_ptr<Communicator> world() const;
  // Ends every rank of the launch with `code` (MPI_Abort): the way out when one rank fails, so that no
  // other rank waits forever in a collective.
  [[noreturn]] void abort(int code) const;

 private:
  bool owns_ = false;
};

// Throws sy::Error "MPI_<call> failed on rank <rank>: <MPI's message> (error code <status>)" unless
// status is MPI_SUCCESS.
void check_mpi_status(int status, std::string_view call, int rank);

}  // namespace sy
