// Argument checks shared by every communicator, the single-rank communicator and axis groups.
#include "parallel/communicator.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace sy {

namespace {

void check_count(int64_t count, const char* call) {
  SY_CHECK(count >= 0, "{}: element count {} is negative", call, count);
}

void check_peer(int peer, int size, const char* call, const char* what) {
  SY_CHECK(peer >= 0 && peer < size, "{}: {} {} is outside the communicator's ranks 0..{}", call, what, peer, size - 1);
}

void check_blocks(std::span<const int64_t> counts, std::span<const int64_t> displs, int size, const char* call,
                  const char* side) {
  SY_CHECK(counts.size() == size_t(size) && displs.size() == size_t(size),
           "{}: {} {} counts and {} displacements for a communicator of {} ranks (need one per rank)", call, side,
           counts.size(), displs.size(), size);
  for (int r = 0; r < size; ++r) {
    SY_CHECK(counts[r] >= 0 && displs[r] >= 0, "{}: {} count {} or displacement {} for rank {} is negative", call, side,
             counts[r], displs[r], r);
  }
}

int64_t bytes_of(int64_t count, DType dtype) { return count * static_cast<int64_t>(dtype_size(dtype)); }

}  // namespace

template <class Call>
void Communicator::traced(comm_trace::Op op, int64_t bytes, Call&& call) {
  // Collectives are numbered apart from point-to-point calls, which differ between ranks (a stage sends, the
  // next receives): the k-th collective is the same call on every member.
  const bool p2p = op == comm_trace::Op::send || op == comm_trace::Op::recv;
  const int64_t seq = p2p ? p2p_calls_++ : calls_++;
  if (!comm_trace::enabled()) return call();
  comm_trace::Event e{.group = trace_key_, .seq = seq, .op = op, .size = size(), .bytes = bytes};
  e.enter_ns = comm_trace::now_ns();
  call();
  e.exit_ns = comm_trace::now_ns();
  comm_trace::record(e);
}

void Communicator::all_reduce_sum(float* data, int64_t count) {
  check_count(count, "all_reduce_sum");
  traced(comm_trace::Op::all_reduce, bytes_of(count, DType::f32), [&] { all_reduce_sum_impl(data, count); });
}

void Communicator::all_gather(const void* send, void* recv, int64_t count, DType dtype) {
  check_count(count, "all_gather");
  traced(comm_trace::Op::all_gather, bytes_of(count, dtype), [&] { all_gather_impl(send, recv, count, dtype); });
}

void Communicator::reduce_scatter_sum(const float* send, float* recv, int64_t count) {
  check_count(count, "reduce_scatter_sum");
  traced(comm_trace::Op::reduce_scatter, bytes_of(count * size(), DType::f32),
         [&] { reduce_scatter_sum_impl(send, recv, count); });
}

void Communicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts,
                                std::span<const int64_t> send_displs, void* recv, std::span<const int64_t> recv_counts,
                                std::span<const int64_t> recv_displs, DType dtype) {
  check_blocks(send_counts, send_displs, size(), "all_to_all_v", "send");
  check_blocks(recv_counts, recv_displs, size(), "all_to_all_v", "recv");
  int64_t sent = 0;
  for (int64_t c : send_counts) sent += c;
  traced(comm_trace::Op::all_to_all_v, bytes_of(sent, dtype),
         [&] { all_to_all_v_impl(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype); });
}

void Communicator::send(const void* data, int64_t count, DType dtype, int dest, int tag) {
  check_count(count, "send");
  check_peer(dest, size(), "send", "destination");
  SY_CHECK(dest != rank(), "send: rank {} sends to itself, which would block forever", dest);
  SY_CHECK(tag >= 0, "send: tag {} is negative", tag);
  traced(comm_trace::Op::send, bytes_of(count, dtype), [&] { send_impl(data, count, dtype, dest, tag); });
}

void Communicator::recv(void* data, int64_t count, DType dtype, int source, int tag) {
  check_count(count, "recv");
  check_peer(source, size(), "recv", "source");
  SY_CHECK(source != rank(), "recv: rank {} receives from itself, which would block forever", source);
  SY_CHECK(tag >= 0, "recv: tag {} is negative", tag);
  traced(comm_trace::Op::recv, bytes_of(count, dtype), [&] { recv_impl(data, count, dtype, source, tag); });
}

void Communicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  check_count(count, "broadcast");
  check_peer(root, size(), "broadcast", "root");
  traced(comm_trace::Op::broadcast, bytes_of(count, dtype), [&] { broadcast_impl(data, count, dtype, root); });
}

void Communicator::barrier() {
  traced(comm_trace::Op::barrier, 0, [&] { barrier_impl(); });
}

std::unique_ptr<Communicator> Communicator::split(std::span<const int> members) {
  SY_CHECK(!members.empty(), "split: the member list is empty");
  std::vector<int> sorted(members.begin(), members.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    check_peer(sorted[i], size(), "split", "member");
    SY_CHECK(i == 0 || sorted[i] != sorted[i - 1], "split: member {} is listed twice", sorted[i]);
  }
  SY_CHECK(std::binary_search(sorted.begin(), sorted.end(), rank()),
           "split: rank {} calls split for a group of {} members it is not one of", rank(), members.size());
  return split_impl(members);
}

namespace {

// The group of one: collectives are the identity (in place) or a copy, and there is no peer to send to.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  void all_reduce_sum_impl(float*, int64_t) override {}
  void all_gather_impl(const void* send, void* recv, int64_t count, DType dtype) override {
    if (count > 0) std::memcpy(recv, send, size_t(count) * dtype_size(dtype));
  }
  void reduce_scatter_sum_impl(const float* send, float* recv, int64_t count) override {
    if (count > 0) std::memcpy(recv, send, size_t(count) * sizeof(float));
  }
  void all_to_all_v_impl(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                         void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                         DType dtype) override {
    SY_CHECK(send_counts[0] == recv_counts[0], "all_to_all_v: rank 0 sends {} elements to itself but expects {}",
             send_counts[0], recv_counts[0]);
    if (send_counts[0] == 0) return;
    const size_t bytes = dtype_size(dtype);
    std::memmove(static_cast<char*>(recv) + size_t(recv_displs[0]) * bytes,
                 static_cast<const char*>(send) + size_t(send_displs[0]) * bytes, size_t(send_counts[0]) * bytes);
  }
  // Unreachable: the checks refuse every peer of a group of one (only rank 0 exists, and it is the caller).
  void send_impl(const void*, int64_t, DType, int, int) override {}
  void recv_impl(void*, int64_t, DType, int, int) override {}
  void broadcast_impl(void*, int64_t, DType, int) override {}
  void barrier_impl() override {}
  std::unique_ptr<Communicator> split_impl(std::span<const int>) override {
    return std::make_unique<SingleRankCommunicator>();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRankCommunicator>(); }

std::unique_ptr<Communicator> split_axis(Communicator& world, const Mapping& mapping, Axis axis) {
  SY_CHECK(world.size() == mapping.world_size(), "split_axis: the communicator has {} ranks but the layout {} needs {}",
           world.size(), describe_sizes(mapping.sizes()), mapping.world_size());
  const std::vector<int> members = mapping.group(axis, world.rank());
  return world.split(members);
}

}  // namespace sy
