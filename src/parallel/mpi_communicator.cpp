// The MPI communicator: each collective is the matching MPI call on host memory, with checked status.
#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "base/check.h"

namespace sy {

void check_mpi_status(int status, std::string_view call, int rank) {
  if (status == MPI_SUCCESS) [[likely]] {
    return;
  }
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  SY_FAIL("{} failed on rank {}: {} (error code {})", call, rank, std::string_view(text, size_t(length)), status);
}

namespace {

int world_rank_or_unknown() {
  int initialized = 0, rank = -1;
  if (MPI_Initialized(&initialized) == MPI_SUCCESS && initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Byte-exact movement types: collectives that only move data do not need MPI to know the arithmetic.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
      return MPI_INT16_T;
    case DType::f8_e4m3:
    case DType::f8_e5m2:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
  }
  SY_FAIL("no MPI type for dtype {}", int(t));
}

// MPI 3 counts and displacements are int.
int to_mpi_int(int64_t value, const char* call, const char* what) {
  SY_CHECK(value <= INT_MAX, "{}: {} {} exceeds MPI's int limit {}; split the transfer", call, what, value, INT_MAX);
  return int(value);
}

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (freed at destruction).
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    if (size_ > 1) trace_key_ = members_key();
  }
  ~MpiCommunicator() override {
    int finalized = 1;
    // A destructor cannot report a failed free; the communicator is unusable either way.
    // After MPI_Finalize no MPI call is allowed; MPI has released the communicator itself then.
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void all_reduce_sum_impl(float* data, int64_t count) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_int(count, "all_reduce_sum", "count"), MPI_FLOAT, MPI_SUM, comm_),
          "MPI_Allreduce");
  }
  void all_gather_impl(const void* send, void* recv, int64_t count, DType dtype) override {
    const int n = to_mpi_int(count, "all_gather", "count");
    to_mpi_int(count * size_, "all_gather", "gathered count");
    check(MPI_Allgather(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_), "MPI_Allgather");
  }
  void reduce_scatter_sum_impl(const float* send, float* recv, int64_t count) override {
    const int n = to_mpi_int(count, "reduce_scatter_sum", "count");
    to_mpi_int(count * size_, "reduce_scatter_sum", "input count");
    check(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Reduce_scatter_block");
  }
  void all_to_all_v_impl(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                         void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                         DType dtype) override {
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    for (int r = 0; r < size_; ++r) {
      // The block ends are checked too, so that no element lies past an int offset.
      to_mpi_int(send_displs[r] + send_counts[r], "all_to_all_v", "send block end");
      to_mpi_int(recv_displs[r] + recv_counts[r], "all_to_all_v", "recv block end");
      sc[r] = int(send_counts[r]);
      sd[r] = int(send_displs[r]);
      rc[r] = int(recv_counts[r]);
      rd[r] = int(recv_displs[r]);
    }
    check(
        MPI_Alltoallv(send, sc.data(), sd.data(), mpi_type(dtype), recv, rc.data(), rd.data(), mpi_type(dtype), comm_),
        "MPI_Alltoallv");
  }
  void send_impl(const void* data, int64_t count, DType dtype, int dest, int tag) override {
    check(MPI_Send(data, to_mpi_int(count, "send", "count"), mpi_type(dtype), dest, tag, comm_), "MPI_Send");
  }
  void recv_impl(void* data, int64_t count, DType dtype, int source, int tag) override {
    MPI_Status status;
    check(MPI_Recv(data, to_mpi_int(count, "recv", "count"), mpi_type(dtype), source, tag, comm_, &status), "MPI_Recv");
    int received = 0;
    check(MPI_Get_count(&status, mpi_type(dtype), &received), "MPI_Get_count");
    SY_CHECK(received == count, "recv: rank {} expected {} elements from rank {} (tag {}) but got {}", rank_, count,
             source, tag, received);
  }
  void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
    check(MPI_Bcast(data, to_mpi_int(count, "broadcast", "count"), mpi_type(dtype), root, comm_), "MPI_Bcast");
  }
  void barrier_impl() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  std::unique_ptr<Communicator> split_impl(std::span<const int> members) override {
    MPI_Group parent = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &parent), "MPI_Comm_group");
    const std::vector<int> ranks(members.begin(), members.end());
    const int included = MPI_Group_incl(parent, int(ranks.size()), ranks.data(), &group);
    check(MPI_Group_free(&parent), "MPI_Group_free");
    check(included, "MPI_Group_incl");
    // The tag tells apart creations that share ranks; members agree on it because they pass the same list.
    uint64_t hash = 1469598103934665603ull;
    for (int r : ranks) hash = (hash ^ uint64_t(r)) * 1099511628211ull;
    MPI_Comm comm = MPI_COMM_NULL;
    const int created = MPI_Comm_create_group(comm_, group, int(hash % 32768), &comm);
    check(MPI_Group_free(&group), "MPI_Group_free");
    check(created, "MPI_Comm_create_group");
    return std::make_unique<MpiCommunicator>(comm);
  }

 private:
  // A hash of the members' world ranks in this group's rank order and of how many groups of the same members
  // this process made before (the world and a tp group of every rank share members): the same on every member,
  // since members create their groups in the same order (Communicator::split).
  uint64_t members_key() const {
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &mine), "MPI_Comm_group");
    check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    std::vector<int> ranks(static_cast<size_t>(size_)), world_ranks(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
    const int translated = MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    check(translated, "MPI_Group_translate_ranks");
    uint64_t key = 1469598103934665603ull;
    for (int r : world_ranks) key = (key ^ uint64_t(r + 1)) * 1099511628211ull;
    static std::mutex mutex;
    static std::map<uint64_t, uint64_t> made;  // groups made so far, by members
    const std::lock_guard lock(mutex);
    return (key ^ (made[key]++ + 1) * 0x9E3779B97F4A7C15ull) * 1099511628211ull;
  }

  // Errors name the world rank: the one mpirun prints and a user can find.
  static void check(int status, std::string_view call) { check_mpi_status(status, call, world_rank_or_unknown()); }

  MPI_Comm comm_;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  check_mpi_status(MPI_Initialized(&initialized), "MPI_Initialized", -1);
  if (initialized) return;
  // Only the calling thread talks to MPI; OpenMP threads inside kernels never do.
  int provided = 0;
  check_mpi_status(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", -1);
  owns_ = true;
  SY_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI_Init_thread: this MPI provides thread level {}, below FUNNELED ({})",
           provided, MPI_THREAD_FUNNELED);
  check_mpi_status(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                   world_rank_or_unknown());
}

MpiSession::~MpiSession() {
  // A destructor cannot report a failed finalize, and the process is ending either way.
  if (owns_) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world() const {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", world_rank_or_unknown());
  return std::make_unique<MpiCommunicator>(comm);
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace sy
