// Collectives between the ranks of a group. Model code names collectives only through this interface;
// the single-rank implementation is the trivial group of one, where every collective is the identity or
// a copy. Implementations: single rank (here), MPI (mpi_communicator.h, with SY_WITH_MPI).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "parallel/comm_trace.h"
#include "parallel/mapping.h"

namespace sy {

// Every method is collective over the ranks of this communicator unless it says otherwise, and every
// rank passes the same counts, dtype and root. Buffers are host memory for the CPU implementations;
// counts are in elements of `dtype`. The public methods check their arguments (sy::Error with the
// values) and then call the implementation.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether buffers are device memory (NCCL) rather than host memory (single rank, MPI).
  virtual bool device_memory() const { return false; }
  // Blocks until every operation this rank issued here has completed (NCCL enqueues on its stream; the
  // host implementations complete each call before returning, so this is a no-op for them).
  virtual void wait() {}

  // In place: data[i] = sum over ranks of data[i].
  void all_reduce_sum(float* data, int64_t count);
  // recv[r·count + i] = send[i] of rank r. recv holds size()·count elements; send may not alias recv.
  void all_gather(const void* send, void* recv, int64_t count, DType dtype);
  // send holds size()·count floats; recv[i] = sum over ranks r of (send of rank r)[rank()·count + i].
  void reduce_scatter_sum(const float* send, float* recv, int64_t count);
  // Rank r's block for rank d is send[send_displs[d] ... + send_counts[d]); it lands on rank d at
  // recv[recv_displs[r] ... + recv_counts[r]). recv_counts[r] on rank d must equal send_counts[d] on
  // rank r. Each span has size() entries; displacements are element offsets, blocks may leave gaps.
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                    void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                    DType dtype);
  // Point to point, blocking; not collective. A send may wait until the matching recv is posted, so two
  // ranks must not both send to each other first.
  void send(const void* data, int64_t count, DType dtype, int dest, int tag = 0);
  void recv(void* data, int64_t count, DType dtype, int source, int tag = 0);
  // data of rank `root` is copied to every rank.
  void broadcast(void* data, int64_t count, DType dtype, int root);
  void barrier();

  // The communicator of `members` (ranks of this communicator, distinct; entry i becomes rank i of the
  // new one). Collective over the members only: each member calls it with the same list, and a rank
  // that creates several sub-communicators creates them in the same order as the other members.
  // Precondition: rank() is one of the members.
  std::unique_ptr<Communicator> split(std::span<const int> members);

 protected:
  virtual void all_reduce_sum_impl(float* data, int64_t count) = 0;
  virtual void all_gather_impl(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual void reduce_scatter_sum_impl(const float* send, float* recv, int64_t count) = 0;
  virtual void all_to_all_v_impl(const void* send, std::span<const int64_t> send_counts,
                                 std::span<const int64_t> send_displs, void* recv, std::span<const int64_t> recv_counts,
                                 std::span<const int64_t> recv_displs, DType dtype) = 0;
  virtual void send_impl(const void* data, int64_t count, DType dtype, int dest, int tag) = 0;
  virtual void recv_impl(void* data, int64_t count, DType dtype, int source, int tag) = 0;
  virtual void broadcast_impl(void* data, int64_t count, DType dtype, int root) = 0;
  virtual void barrier_impl() = 0;
  virtual std::unique_ptr<Communicator> split_impl(std::span<const int> members) = 0;

  // The group's name in comm_trace's records, equal on every member (the MPI communicator hashes its
  // members' world ranks and how many groups of those members came before); 0 for a group of one.
  uint64_t trace_key_ = 0;

 private:
  // Runs one call, numbered on this group, and records it while comm_trace is on.
  template <class Call>
  void traced(comm_trace::Op op, int64_t bytes, Call&& call);

  int64_t calls_ = 0;      // collectives made on this group
  int64_t p2p_calls_ = 0;  // sends and receives
};

std::unique_ptr<Communicator> make_single_rank_communicator();

// The communicator of `world`'s group along `axis` in `mapping` (Mapping::group, so its rank is the
// rank's coordinate on that axis). Collective over that group. Precondition: world.size() ==
// mapping.world_size() and world's ranks are the mapping's global ranks.
std::unique_ptr<Communicator> split_axis(Communicator& world, const Mapping& mapping, Axis axis);

}  // namespace sy
