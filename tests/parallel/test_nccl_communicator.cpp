// The cuda and nccl tiers of the NCCL communicator. Run alone, it bootstraps over the single-rank
// communicator on one GPU; under `mpirun -np N` (one rank per GPU), over MPI. Every collective is checked
// on device buffers against values that follow from arithmetic on the ranks (with one rank they reduce to
// the identity and copies), then sub-groups, streams, CUDA graph capture and failures. Every rank runs
// every test in the same order (collectives stay matched); only rank 0 prints the full report. A launch
// with more ranks per node than GPUs exits with 77 (skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "common/mpi_test_main.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/rank_groups.h"

namespace sy {
namespace {

NcclCommunicator* g_nccl = nullptr;

void check_cuda(cudaError_t status, const char* call) {
  SY_CHECK(status == cudaSuccess, "{} failed: {} ({})", call, cudaGetErrorString(status), cudaGetErrorName(status));
}

int64_t triangle(int64_t n) { return n * (n + 1) / 2; }  // 1 + 2 + ... + n

// Device memory of n elements; copies go through a stream so that they are ordered with the
// communicator's work on it.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ > 0) check_cuda(cudaMalloc(reinterpret_cast<void**>(&data_), n_ * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(const std::vector<T>& host, cudaStream_t stream) : DeviceBuffer(host.size()) { upload(host, stream); }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  void upload(const std::vector<T>& host, cudaStream_t stream) {
    SY_CHECK(host.size() == n_, "upload of {} elements into {}", host.size(), n_);
    if (n_ == 0) return;
    check_cuda(cudaMemcpyAsync(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  std::vector<T> download(cudaStream_t stream) const {
    std::vector<T> host(n_);
    if (n_ == 0) return host;
    check_cuda(cudaMemcpyAsync(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return host;
  }

 private:
  size_t n_ = 0;
  T* data_ = nullptr;
};

// "" when equal, else the first differing element and how many differ.
template <typename T>
std::string mismatch(const std::vector<T>& got, const std::vector<T>& expected) {
  if (got.size() != expected.size()) return fmt::format("{} elements, expected {}", got.size(), expected.size());
  size_t first = got.size(), differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;
    if (differ++ == 0) first = i;
  }
  if (differ == 0) return "";
  return fmt::format("element {}: got {}, expected {} ({} of {} elements differ)", first, +got[first], +expected[first],
                     differ, got.size());
}

void expect_error_containing(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

NcclCommunicator& as_nccl(Communicator& c) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&c);
  SY_CHECK(nccl != nullptr, "split of an NCCL communicator did not return an NCCL communicator");
  return *nccl;
}

// A non-blocking stream of the test's own, made the communicator's stream for the scope.
class CallerStream {
 public:
  explicit CallerStream(NcclCommunicator& comm) : comm_(comm) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    comm_.set_stream(stream_);
  }
  ~CallerStream() {
    comm_.set_stream(comm_.own_stream());
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  NcclCommunicator& comm_;
  cudaStream_t stream_ = nullptr;
};

TEST(NcclCommunicator, AllReduceSumIsTheClosedFormSum) {
  NcclCommunicator& comm = *g_nccl;
  const int w = comm.size();
  for (int64_t count : {0, 1, 7, 1000, 1 << 20}) {
    std::vector<float> host(static_cast<size_t>(count)), expected(host.size());
    for (int64_t i = 0; i < count; ++i) {
      host[i] = float((comm.rank() + 1) * (i % 13 + 1));
      expected[i] = float((i % 13 + 1) * triangle(w));
    }
    DeviceBuffer<float> data(host, comm.stream());
    comm.all_reduce_sum(data.get(), count);
    comm.synchronize();
    EXPECT_EQ(mismatch(data.download(comm.stream()), expected), "") << "count " << count;
  }
}

// Every rank contributes `count` elements made by value(rank, i); the gather is byte-exact.
template <typename T, typename Value>
void check_all_gather(NcclCommunicator& comm, DType dtype, int64_t count, Value value) {
  const int w = comm.size();
  std::vector<T> mine(static_cast<size_t>(count)), expected(static_cast<size_t>(count * w));
  for (int64_t i = 0; i < count; ++i) mine[i] = value(comm.rank(), i);
  for (int r = 0; r < w; ++r) {
    for (int64_t i = 0; i < count; ++i) expected[r * count + i] = value(r, i);
  }
  DeviceBuffer<T> send(mine, comm.stream());
  DeviceBuffer<T> recv(std::vector<T>(expected.size(), T(0)), comm.stream());
  comm.all_gather(send.get(), recv.get(), count, dtype);
  comm.synchronize();
  EXPECT_EQ(mismatch(recv.download(comm.stream()), expected), "") << dtype_name(dtype) << " count " << count;
}

TEST(NcclCommunicator, AllGatherPlacesEachRanksBlockAtItsRank) {
  NcclCommunicator& comm = *g_nccl;
  for (int64_t count : {1, 5, 333, 1 << 18}) {
    check_all_gather<float>(comm, DType::f32, count, [](int r, int64_t i) { return float(r * 1000 + i); });
  }
  // Movement is byte-exact, also for NaN payloads and negative zeros, and for types NCCL moves as bytes.
  check_all_gather<uint16_t>(comm, DType::bf16, 3, [](int r, int64_t i) {
    return uint16_t(i == 0 ? 0x7fc1 + r : i == 1 ? 0x8000 | r : 0x3f80 + r);
  });
  check_all_gather<uint16_t>(comm, DType::f16, 2,
                             [](int r, int64_t i) { return uint16_t(i == 0 ? 0x7e01 + r : 0x8000); });
  check_all_gather<int64_t>(comm, DType::i64, 2, [](int r, int64_t i) { return (int64_t(1) << 40) + r - i; });
  check_all_gather<int32_t>(comm, DType::i32, 4, [](int r, int64_t i) { return int32_t(-r * 100 - i); });
  check_all_gather<uint8_t>(comm, DType::u8, 7, [](int r, int64_t i) { return uint8_t(200 + r * 7 + i); });
  check_all_gather<int16_t>(comm, DType::i16, 3, [](int r, int64_t i) { return int16_t(-30000 + r * 3 + i); });
  check_all_gather<uint8_t>(comm, DType::f8_e4m3, 2,
                            [](int r, int64_t i) { return uint8_t(i == 0 ? 0x7f : 0x38 + r); });
}

TEST(NcclCommunicator, ReduceScatterSumGivesEachRankItsSummedBlock) {
  NcclCommunicator& comm = *g_nccl;
  const int w = comm.size();
  for (int64_t count : {0, 1, 6, 257, 4099}) {
    std::vector<float> host(static_cast<size_t>(count * w)), expected(static_cast<size_t>(count));
    for (int64_t j = 0; j < count * w; ++j) host[j] = float((comm.rank() + 1) * (j + 1));
    for (int64_t i = 0; i < count; ++i) expected[i] = float((comm.rank() * count + i + 1) * triangle(w));
    DeviceBuffer<float> send(host, comm.stream());
    DeviceBuffer<float> recv(std::vector<float>(expected.size(), -1.f), comm.stream());
    comm.reduce_scatter_sum(send.get(), recv.get(), count);
    comm.synchronize();
    EXPECT_EQ(mismatch(recv.download(comm.stream()), expected), "") << "count " << count;
  }
}

// Rank s sends (3s + 5d + 1) % 4 rows of `width` to rank d (zero for some pairs, never for a rank to
// itself when alone), element k of the block being s·10000 + d·100 + k + salt. Send blocks lie in
// reverse rank order with one element of gap; receive blocks in rank order with two untouched elements
// between them.
struct AllToAllCase {
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  int64_t send_size = 0, recv_size = 0;
};

AllToAllCase all_to_all_case(int w, int me, int64_t width) {
  auto rows = [](int s, int d) { return int64_t((3 * s + 5 * d + 1) % 4); };
  AllToAllCase c;
  c.send_counts.resize(w), c.send_displs.resize(w), c.recv_counts.resize(w), c.recv_displs.resize(w);
  for (int d = w - 1; d >= 0; --d) {
    c.send_counts[d] = rows(me, d) * width;
    c.send_displs[d] = c.send_size;
    c.send_size += c.send_counts[d] + 1;
  }
  for (int s = 0; s < w; ++s) {
    c.recv_counts[s] = rows(s, me) * width;
    c.recv_displs[s] = c.recv_size + 2;
    c.recv_size += c.recv_counts[s] + 2;
  }
  return c;
}

template <typename T>
std::vector<T> all_to_all_send(const AllToAllCase& c, int me, int salt) {
  std::vector<T> send(static_cast<size_t>(c.send_size), T(-7));
  for (size_t d = 0; d < c.send_counts.size(); ++d) {
    for (int64_t k = 0; k < c.send_counts[d]; ++k) send[c.send_displs[d] + k] = T(me * 10000 + int(d) * 100 + k + salt);
  }
  return send;
}

template <typename T>
std::vector<T> all_to_all_expected(const AllToAllCase& c, int me, int salt) {
  std::vector<T> expected(static_cast<size_t>(c.recv_size), T(-1));
  for (size_t s = 0; s < c.recv_counts.size(); ++s) {
    for (int64_t k = 0; k < c.recv_counts[s]; ++k) {
      expected[c.recv_displs[s] + k] = T(int(s) * 10000 + me * 100 + k + salt);
    }
  }
  return expected;
}

template <typename T>
void check_all_to_all_v(NcclCommunicator& comm, DType dtype, int64_t width) {
  const int me = comm.rank();
  const AllToAllCase c = all_to_all_case(comm.size(), me, width);
  DeviceBuffer<T> send(all_to_all_send<T>(c, me, 0), comm.stream());
  DeviceBuffer<T> recv(std::vector<T>(static_cast<size_t>(c.recv_size), T(-1)), comm.stream());
  comm.all_to_all_v(send.get(), c.send_counts, c.send_displs, recv.get(), c.recv_counts, c.recv_displs, dtype);
  comm.synchronize();
  EXPECT_EQ(mismatch(recv.download(comm.stream()), all_to_all_expected<T>(c, me, 0)), "")
      << "rank " << me << " " << dtype_name(dtype) << " width " << width;
}

TEST(NcclCommunicator, AllToAllVDeliversExactlyTheExpectedRows) {
  NcclCommunicator& comm = *g_nccl;
  check_all_to_all_v<float>(comm, DType::f32, 1);
  check_all_to_all_v<float>(comm, DType::f32, 24);
  check_all_to_all_v<float>(comm, DType::f32, 4096);
  check_all_to_all_v<int32_t>(comm, DType::i32, 3);
  check_all_to_all_v<uint16_t>(comm, DType::bf16, 5);
  check_all_to_all_v<int64_t>(comm, DType::i64, 2);
  check_all_to_all_v<uint8_t>(comm, DType::u8, 7);
  check_all_to_all_v<int16_t>(comm, DType::i16, 6);
}

TEST(NcclCommunicator, SendRecvAroundTheRing) {
  NcclCommunicator& comm = *g_nccl;
  const int w = comm.size(), me = comm.rank();
  if (w == 1) GTEST_SKIP() << "a ring needs two ranks";
  const int next = (me + 1) % w, prev = (me + w - 1) % w;
  for (int64_t count : {5, 1 << 20}) {
    std::vector<float> out(static_cast<size_t>(count)), expected(out.size());
    for (int64_t i = 0; i < count; ++i) {
      out[i] = float(me * 10 + i % 1000);
      expected[i] = float(prev * 10 + i % 1000);
    }
    DeviceBuffer<float> send(out, comm.stream());
    DeviceBuffer<float> recv(std::vector<float>(out.size(), -1.f), comm.stream());
    // Rank 0 starts the ring; every other rank receives first, so no two ranks wait on each other's send.
    if (me == 0) {
      comm.send(send.get(), count, DType::f32, next, 3);
      comm.recv(recv.get(), count, DType::f32, prev, 3);
    } else {
      comm.recv(recv.get(), count, DType::f32, prev, 3);
      comm.send(send.get(), count, DType::f32, next, 3);
    }
    comm.synchronize();
    EXPECT_EQ(mismatch(recv.download(comm.stream()), expected), "") << "count " << count;
  }
}

TEST(NcclCommunicator, BroadcastFromEveryRoot) {
  NcclCommunicator& comm = *g_nccl;
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int32_t> host(9, -1), expected(9);
    for (int i = 0; i < 9; ++i) expected[i] = root * 100 + i * i;
    if (comm.rank() == root) host = expected;
    DeviceBuffer<int32_t> data(host, comm.stream());
    comm.broadcast(data.get(), 9, DType::i32, root);
    comm.synchronize();
    EXPECT_EQ(mismatch(data.download(comm.stream()), expected), "") << "root " << root;
  }
  const int root = comm.size() - 1;
  const int64_t count = 1 << 20;
  std::vector<float> host(static_cast<size_t>(count), -1.f), expected(host.size());
  for (int64_t i = 0; i < count; ++i) expected[i] = float(i % 4097 - root);
  if (comm.rank() == root) host = expected;
  DeviceBuffer<float> data(host, comm.stream());
  comm.broadcast(data.get(), count, DType::f32, root);
  comm.synchronize();
  EXPECT_EQ(mismatch(data.download(comm.stream()), expected), "") << "root " << root << " count " << count;
}

void CUDART_CB mark_after_a_while(void* flag) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  static_cast<std::atomic<bool>*>(flag)->store(true);
}

TEST(NcclCommunicator, BarrierWaitsForTheStream) {
  NcclCommunicator& comm = *g_nccl;
  std::atomic<bool> reached{false};
  check_cuda(cudaLaunchHostFunc(comm.stream(), mark_after_a_while, &reached), "cudaLaunchHostFunc");
  comm.barrier();
  EXPECT_TRUE(reached.load()) << "barrier returned before the work issued on its stream ran";
  comm.barrier();
}

TEST(NcclCommunicator, ArgumentsAreCheckedBeforeNccl) {
  NcclCommunicator& comm = *g_nccl;
  EXPECT_TRUE(comm.device_memory());
  DeviceBuffer<float> x(std::vector<float>{0.f}, comm.stream());
  EXPECT_THROW(comm.send(x.get(), 1, DType::f32, comm.size()), Error);
  EXPECT_THROW(comm.send(x.get(), 1, DType::f32, comm.rank()), Error);
  EXPECT_THROW(comm.broadcast(x.get(), 1, DType::f32, -1), Error);
  EXPECT_THROW(comm.all_reduce_sum(x.get(), -1), Error);
  const std::vector<int64_t> short_counts(static_cast<size_t>(comm.size() - 1), 0);
  EXPECT_THROW(comm.all_to_all_v(x.get(), short_counts, short_counts, x.get(), short_counts, short_counts, DType::f32),
               Error);
  std::vector<int64_t> counts(static_cast<size_t>(comm.size()), 0), self_mismatch = counts;
  self_mismatch[static_cast<size_t>(comm.rank())] = 1;
  expect_error_containing(
      [&] { comm.all_to_all_v(x.get(), self_mismatch, counts, x.get(), counts, counts, DType::f32); },
      "sends 1 elements to itself but expects 0");
  // Host memory is refused before NCCL could fault on it.
  std::vector<float> host(4, 1.f);
  expect_error_containing([&] { comm.all_reduce_sum(host.data(), 4); }, "is pageable host memory");
  expect_error_containing([&] { comm.all_gather(x.get(), host.data(), 1, DType::f32); }, "receive buffer");
  expect_error_containing([&] { comm.all_reduce_sum(nullptr, 4); }, "is null");
  comm.barrier();
}

TEST(NcclCommunicator, FailedStatusNamesTheCallRankAndCode) {
  try {
    check_nccl_status(ncclInvalidUsage, "ncclAllReduce", 3, "rank 1 of 2 in this communicator");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ncclAllReduce failed on rank 3: "), std::string::npos) << what;
    EXPECT_NE(what.find(ncclGetErrorString(ncclInvalidUsage)), std::string::npos) << what;
    EXPECT_NE(what.find("(NCCL error " + std::to_string(int(ncclInvalidUsage)) + "); rank 1 of 2"), std::string::npos)
        << what;
  }
  EXPECT_NO_THROW(check_nccl_status(ncclSuccess, "ncclAllReduce", 0));
}

// The world ranks of a group, gathered over it, and their sum reduced over it.
void expect_group(Communicator& group, const std::vector<int>& members, int world_rank, const std::string& what) {
  NcclCommunicator& comm = as_nccl(group);
  ASSERT_EQ(comm.size(), int(members.size())) << what;
  EXPECT_EQ(members[static_cast<size_t>(comm.rank())], world_rank) << what;
  DeviceBuffer<int32_t> mine(std::vector<int32_t>{world_rank}, comm.stream());
  DeviceBuffer<int32_t> all(members.size());
  comm.all_gather(mine.get(), all.get(), 1, DType::i32);
  DeviceBuffer<float> sum(std::vector<float>{float(world_rank)}, comm.stream());
  comm.all_reduce_sum(sum.get(), 1);
  comm.synchronize();
  const std::vector<int32_t> gathered = all.download(comm.stream());
  EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), members) << what;
  float expected = 0.f;
  for (int m : members) expected += float(m);
  EXPECT_EQ(sum.download(comm.stream())[0], expected) << what;
}

TEST(NcclCommunicator, SplitGroupsReachExactlyTheirMembers) {
  NcclCommunicator& world = *g_nccl;
  const int w = world.size(), me = world.rank();
  std::vector<int> reversed(static_cast<size_t>(w)), parity, self{me};
  for (int r = 0; r < w; ++r) reversed[static_cast<size_t>(r)] = w - 1 - r;
  for (int r = me % 2; r < w; r += 2) parity.push_back(r);

  auto rev = world.split(reversed);
  expect_group(*rev, reversed, me, "reversed world");
  EXPECT_EQ(as_nccl(*rev).stream(), world.stream()) << "a child issues on its parent's stream";
  EXPECT_EQ(as_nccl(*rev).own_stream(), world.own_stream());
  auto half = world.split(parity);
  expect_group(*half, parity, me, "ranks of one parity");
  auto alone = world.split(self);
  expect_group(*alone, self, me, "this rank alone");

  // A split of a split: its bootstrap is the child's own host sub-communicator.
  const int rev_rank = rev->rank();
  std::vector<int> rev_members, rev_world;
  for (int r = rev_rank % 2; r < w; r += 2) {
    rev_members.push_back(r);
    rev_world.push_back(reversed[static_cast<size_t>(r)]);
  }
  auto nested = rev->split(rev_members);
  expect_group(*nested, rev_world, me, "ranks of one parity of the reversed world");
}

// The groups of a few layouts of the world (every axis), as split_axis makes them for the engine.
TEST(NcclCommunicator, AxisGroupsMatchTheMapping) {
  NcclCommunicator& world = *g_nccl;
  const int w = world.size();
  std::vector<ParallelSizes> layouts = {ParallelSizes{.tp = w, .ep = w, .dense_tp = w}};
  if (w % 2 == 0) {
    layouts.push_back(ParallelSizes{.pp = 2, .tp = w / 2, .ep = w / 2, .dense_tp = w / 2});
    layouts.push_back(ParallelSizes{.tp = w / 2, .dp = 2, .ep = w / 2, .etp = 2, .dense_tp = w / 2});
  }
  for (const ParallelSizes& sizes : layouts) {
    const Mapping mapping(sizes);
    for (Axis axis : kAxes) {
      auto group = split_axis(world, mapping, axis);
      expect_group(*group, mapping.group(axis, world.rank()), world.rank(),
                   describe_sizes(sizes) + " " + std::string(axis_name(axis)));
    }
  }
}

TEST(NcclCommunicator, CallersStreamOrdersTheCollectiveAfterItsWork) {
  NcclCommunicator& comm = *g_nccl;
  const int w = comm.size();
  const int64_t count = 4096;
  std::vector<float> host(static_cast<size_t>(count)), expected(host.size()), out(host.size());
  for (int64_t i = 0; i < count; ++i) {
    host[i] = float(comm.rank() + i % 7);
    expected[i] = float(w * (i % 7) + triangle(w - 1));
  }
  DeviceBuffer<float> data(count);
  {
    CallerStream caller(comm);
    EXPECT_EQ(comm.stream(), caller.get());
    // No host wait between the copy, the collective and the copy back: the stream orders them.
    check_cuda(cudaMemcpyAsync(data.get(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice, caller.get()),
               "cudaMemcpyAsync");
    comm.all_reduce_sum(data.get(), count);
    check_cuda(cudaMemcpyAsync(out.data(), data.get(), count * sizeof(float), cudaMemcpyDeviceToHost, caller.get()),
               "cudaMemcpyAsync");
    comm.synchronize();
  }
  EXPECT_EQ(comm.stream(), comm.own_stream());
  EXPECT_EQ(mismatch(out, expected), "");
}

TEST(NcclCommunicator, CapturedCollectivesReplayWithNewInputs) {
  NcclCommunicator& comm = *g_nccl;
  const int w = comm.size(), me = comm.rank();
  const int64_t count = 1000;
  const AllToAllCase a2a = all_to_all_case(w, me, 16);
  DeviceBuffer<float> input(count), data(count), gathered(count * w);
  DeviceBuffer<float> a2a_send(static_cast<size_t>(a2a.send_size));
  DeviceBuffer<float> a2a_recv(std::vector<float>(static_cast<size_t>(a2a.recv_size), -1.f), comm.stream());
  CallerStream caller(comm);

  auto prepare = [&](int round) {
    std::vector<float> host(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) host[i] = float((me + 1) * (i % 13 + 1) + round);
    input.upload(host, caller.get());
    a2a_send.upload(all_to_all_send<float>(a2a, me, round), caller.get());
  };
  auto issue = [&] {
    check_cuda(cudaMemcpyAsync(data.get(), input.get(), count * sizeof(float), cudaMemcpyDeviceToDevice, caller.get()),
               "cudaMemcpyAsync");
    comm.all_reduce_sum(data.get(), count);
    comm.all_gather(data.get(), gathered.get(), count, DType::f32);
    comm.all_to_all_v(a2a_send.get(), a2a.send_counts, a2a.send_displs, a2a_recv.get(), a2a.recv_counts,
                      a2a.recv_displs, DType::f32);
  };
  auto expect_round = [&](int round) {
    std::vector<float> reduced(static_cast<size_t>(count)), all;
    for (int64_t i = 0; i < count; ++i) reduced[i] = float((i % 13 + 1) * triangle(w) + int64_t(round) * w);
    for (int r = 0; r < w; ++r) all.insert(all.end(), reduced.begin(), reduced.end());
    EXPECT_EQ(mismatch(data.download(caller.get()), reduced), "") << "round " << round;
    EXPECT_EQ(mismatch(gathered.download(caller.get()), all), "") << "round " << round;
    EXPECT_EQ(mismatch(a2a_recv.download(caller.get()), all_to_all_expected<float>(a2a, me, round)), "")
        << "round " << round;
  };

  // Uncaptured first: that connects the all-to-all's peers, which global capture mode cannot do.
  prepare(0);
  issue();
  comm.synchronize();
  expect_round(0);

  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(caller.get(), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    issue();
  } catch (...) {
    cudaStreamEndCapture(caller.get(), &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  check_cuda(cudaStreamEndCapture(caller.get(), &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int round = 1; round <= 3; ++round) {
    prepare(round);
    check_cuda(cudaGraphLaunch(exec, caller.get()), "cudaGraphLaunch");
    comm.synchronize();
    expect_round(round);
  }
  // Graphs that captured NCCL work go before the communicator.
  check_cuda(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
}

TEST(NcclCommunicator, HostWaitsAreRefusedDuringCapture) {
  NcclCommunicator& comm = *g_nccl;
  CallerStream caller(comm);
  check_cuda(cudaStreamBeginCapture(caller.get(), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  expect_error_containing([&] { comm.barrier(); }, "barrier on rank");
  expect_error_containing([&] { comm.synchronize(); }, "being captured into a CUDA graph");
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(caller.get(), &graph), "cudaStreamEndCapture");
  if (graph != nullptr) check_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
  comm.barrier();
}

void CUDART_CB hold_the_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); }

// A communicator of this rank alone, so that its failure concerns no other rank.
TEST(NcclCommunicator, WaitTimeoutAbortsTheCommunicator) {
  auto self = make_single_rank_communicator();
  auto lonely = make_nccl_communicator(
      *self, NcclOptions{.cuda_device = g_nccl->cuda_device(), .wait_timeout = std::chrono::milliseconds(100)});
  check_cuda(cudaLaunchHostFunc(lonely->stream(), hold_the_stream, nullptr), "cudaLaunchHostFunc");
  expect_error_containing([&] { lonely->synchronize(); }, "longer than the 100 ms limit");
  DeviceBuffer<float> x(std::vector<float>{1.f}, g_nccl->stream());
  expect_error_containing([&] { lonely->all_reduce_sum(x.get(), 1); }, "aborted after an earlier failure");
  expect_error_containing([&] { lonely->barrier(); }, "longer than the 100 ms limit");
  check_cuda(cudaStreamSynchronize(lonely->own_stream()), "cudaStreamSynchronize");
}

const char* first_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return value;
  }
  return nullptr;
}

bool launched_by_mpirun() { return first_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) != nullptr; }

int env_int(std::initializer_list<const char*> names, int fallback) {
  const char* value = first_env(names);
  return value != nullptr ? std::atoi(value) : fallback;
}

constexpr int kSkipped = 77;

// Runs the tests over `bootstrap`; returns the exit code every rank agrees on.
int run_tests(Communicator& bootstrap) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const int local_rank = sy::local_rank(bootstrap.rank());
  const int local_size = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, bootstrap.size());
  if (local_size > devices) {
    if (bootstrap.rank() == 0) {
      fmt::print(stderr,
                 "test_nccl_communicator: {} rank(s) per node but {} GPU(s) visible; one GPU per rank is "
                 "needed: skipped\n",
                 local_size, devices);
    }
    return kSkipped;
  }
  std::unique_ptr<NcclCommunicator> nccl = make_nccl_communicator(bootstrap, NcclOptions{.cuda_device = local_rank});
  g_nccl = nccl.get();
  if (bootstrap.rank() == 0) {
    int version = 0;
    ncclGetVersion(&version);
    fmt::print("test_nccl_communicator: {} rank(s), NCCL {}\n", bootstrap.size(), version);
  } else {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new test::RankFailurePrinter(bootstrap.rank()));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  g_nccl = nullptr;
  nccl.reset();  // collective: every rank destroys it here
  // Every rank exits with the same verdict, so a failure seen on one rank fails the whole run.
  float failures = float(failed);
  bootstrap.all_reduce_sum(&failures, 1);
  if (bootstrap.rank() == 0 && !failed && failures > 0.f) {
    fmt::print(stderr, "test_nccl_communicator: {} other rank(s) failed; see their [rank N] lines\n", failures);
  }
  return failures > 0.f ? 1 : 0;
}

}  // namespace
}  // namespace sy

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::optional<sy::MpiSession> mpi;
  try {
    if (sy::launched_by_mpirun()) {
      mpi.emplace(&argc, &argv);
      std::unique_ptr<sy::Communicator> world = mpi->world();
      return sy::run_tests(*world);
    }
    std::unique_ptr<sy::Communicator> single = sy::make_single_rank_communicator();
    return sy::run_tests(*single);
  } catch (const std::exception& e) {
    fmt::print(stderr, "test_nccl_communicator: {}\n", e.what());
    // The other ranks may wait in a collective for this one: end them all.
    if (mpi) mpi->abort(1);
    return 1;
  }
}
