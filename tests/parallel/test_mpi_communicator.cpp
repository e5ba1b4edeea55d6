// The mpi tier: the MPI communicator under `mpirun -np N`, every collective checked against values that
// follow from arithmetic on the ranks, and sub-groups checked against the Mapping's groups of every
// layout of N ranks. Every rank runs every test in the same order (collectives stay matched); only rank
// 0 prints the full report, the other ranks print their failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "common/mpi_test_main.h"
#include "parallel/comm_trace.h"
#include "parallel/mpi_communicator.h"

namespace sy {
namespace {

Communicator* g_world = nullptr;

int64_t triangle(int64_t n) { return n * (n + 1) / 2; }  // 1 + 2 + ... + n

TEST(MpiCommunicator, AllReduceSumIsTheClosedFormSum) {
  Communicator& comm = *g_world;
  const int w = comm.size();
  for (int64_t count : {0, 1, 7, 1000}) {
    std::vector<float> data(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) data[i] = float((comm.rank() + 1) * (i % 13 + 1));
    comm.all_reduce_sum(data.data(), count);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[i], float((i % 13 + 1) * triangle(w))) << "count " << count << " element " << i;
    }
  }
}

TEST(MpiCommunicator, AllGatherPlacesEachRanksBlockAtItsRank) {
  Communicator& comm = *g_world;
  const int w = comm.size();
  for (int64_t count : {1, 5, 333}) {
    std::vector<float> send(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) send[i] = float(comm.rank() * 1000 + i);
    std::vector<float> recv(static_cast<size_t>(count * w), -1.f);
    comm.all_gather(send.data(), recv.data(), count, DType::f32);
    for (int r = 0; r < w; ++r) {
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(recv[r * count + i], float(r * 1000 + i));
    }
  }
  // Movement is byte-exact for types MPI cannot add: bf16 bit patterns and 64-bit ids.
  const uint16_t bits[2] = {uint16_t(0x7fc1 + comm.rank()), uint16_t(0x8000 | comm.rank())};
  std::vector<uint16_t> all_bits(static_cast<size_t>(2 * w));
  comm.all_gather(bits, all_bits.data(), 2, DType::bf16);
  const int64_t id = (int64_t(1) << 40) + comm.rank();
  std::vector<int64_t> ids(static_cast<size_t>(w));
  comm.all_gather(&id, ids.data(), 1, DType::i64);
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(all_bits[2 * r], uint16_t(0x7fc1 + r));
    EXPECT_EQ(all_bits[2 * r + 1], uint16_t(0x8000 | r));
    EXPECT_EQ(ids[r], (int64_t(1) << 40) + r);
  }
}

TEST(MpiCommunicator, ReduceScatterSumGivesEachRankItsSummedBlock) {
  Communicator& comm = *g_world;
  const int w = comm.size();
  for (int64_t count : {1, 6, 257}) {
    std::vector<float> send(static_cast<size_t>(count * w));
    for (int64_t j = 0; j < count * w; ++j) send[j] = float((comm.rank() + 1) * (j + 1));
    std::vector<float> recv(static_cast<size_t>(count), -1.f);
    comm.reduce_scatter_sum(send.data(), recv.data(), count);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[i], float((comm.rank() * count + i + 1) * triangle(w))) << "count " << count;
    }
  }
}

// Rank s sends (3s + 5d) % 4 rows of `width` to rank d (zero for some pairs), element k of the block
// being s·10000 + d·100 + k. Send blocks lie in reverse rank order with one element of gap; receive
// blocks in rank order with two untouched elements between them.
template <typename T>
void check_all_to_all_v(Communicator& comm, DType dtype, int64_t width) {
  const int w = comm.size(), me = comm.rank();
  auto rows = [](int s, int d) { return int64_t((3 * s + 5 * d) % 4); };
  std::vector<int64_t> send_counts(w), send_displs(w), recv_counts(w), recv_displs(w);
  int64_t offset = 0;
  for (int d = w - 1; d >= 0; --d) {
    send_counts[d] = rows(me, d) * width;
    send_displs[d] = offset;
    offset += send_counts[d] + 1;
  }
  std::vector<T> send(size_t(offset), T(-7));
  for (int d = 0; d < w; ++d) {
    for (int64_t k = 0; k < send_counts[d]; ++k) send[send_displs[d] + k] = T(me * 10000 + d * 100 + k);
  }
  offset = 0;
  for (int s = 0; s < w; ++s) {
    recv_counts[s] = rows(s, me) * width;
    recv_displs[s] = offset + 2;
    offset += recv_counts[s] + 2;
  }
  std::vector<T> recv(size_t(offset), T(-1));
  comm.all_to_all_v(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs, dtype);
  std::vector<T> expected(size_t(offset), T(-1));
  for (int s = 0; s < w; ++s) {
    for (int64_t k = 0; k < recv_counts[s]; ++k) expected[recv_displs[s] + k] = T(s * 10000 + me * 100 + k);
  }
  EXPECT_EQ(recv, expected) << "rank " << me << " width " << width;
}

TEST(MpiCommunicator, AllToAllVDeliversExactlyTheExpectedRows) {
  check_all_to_all_v<float>(*g_world, DType::f32, 1);
  check_all_to_all_v<float>(*g_world, DType::f32, 24);
  check_all_to_all_v<int32_t>(*g_world, DType::i32, 3);
}

TEST(MpiCommunicator, SendRecvAroundTheRing) {
  Communicator& comm = *g_world;
  const int w = comm.size(), me = comm.rank();
  const int next = (me + 1) % w, prev = (me + w - 1) % w;
  std::vector<float> out(5), in(5, -1.f);
  for (int i = 0; i < 5; ++i) out[i] = float(me * 10 + i);
  // Rank 0 starts the ring; every other rank receives first, so no two ranks wait on each other's send.
  if (me == 0) {
    comm.send(out.data(), 5, DType::f32, next, 3);
    comm.recv(in.data(), 5, DType::f32, prev, 3);
  } else {
    comm.recv(in.data(), 5, DType::f32, prev, 3);
    comm.send(out.data(), 5, DType::f32, next, 3);
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(in[i], float(prev * 10 + i));
}

// The collective trace names a group by its members' world ranks: every member records the same key (non-zero)
// and the same number for the same call, which is what bench/comm_trace.py matches on; a group of other members
// gets another key.
TEST(MpiCommunicator, TracedCallsCarryTheSameGroupKeyAndNumberOnEveryRank) {
  Communicator& comm = *g_world;
  std::vector<int> first_two = {0, 1};
  std::unique_ptr<Communicator> pair;
  if (comm.rank() < 2) pair = comm.split(first_two);
  comm_trace::take();
  comm_trace::enable(true);
  float x = 1.f;
  comm.all_reduce_sum(&x, 1);
  if (pair) pair->all_reduce_sum(&x, 1);
  comm_trace::enable(false);
  const std::vector<comm_trace::Event> events = comm_trace::take();
  ASSERT_EQ(events.size(), pair ? 2u : 1u);
  const comm_trace::Event& e = events[0];
  EXPECT_NE(e.group, 0u);
  EXPECT_EQ(e.size, comm.size());
  // Every rank's (key, number) of the world call, gathered as 32-bit words: all equal.
  const int32_t mine[3] = {static_cast<int32_t>(e.group & 0xffffffffu), static_cast<int32_t>(e.group >> 32),
                           static_cast<int32_t>(e.seq)};
  std::vector<int32_t> all(3 * static_cast<size_t>(comm.size()));
  comm.all_gather(mine, all.data(), 3, DType::i32);
  for (int r = 0; r < comm.size(); ++r) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(all[3 * r + i], mine[i]) << "rank " << r << " word " << i;
  }
  if (pair) {
    EXPECT_NE(events[1].group, e.group);
    EXPECT_EQ(events[1].size, 2);
  }
}

TEST(MpiCommunicator, RecvOfFewerElementsThanExpectedIsAnError) {
  Communicator& comm = *g_world;
  const float three[3] = {1.f, 2.f, 3.f};
  float four[4] = {};
  if (comm.rank() == 0) comm.send(three, 3, DType::f32, 1, 9);
  if (comm.rank() == 1) {
    try {
      comm.recv(four, 4, DType::f32, 0, 9);
      ADD_FAILURE() << "a short message was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected 4 elements from rank 0 (tag 9) but got 3"), std::string::npos)
          << e.what();
    }
  }
  comm.barrier();
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  Communicator& comm = *g_world;
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int32_t> data(9, -1);
    if (comm.rank() == root) {
      for (int i = 0; i < 9; ++i) data[i] = root * 100 + i * i;
    }
    comm.broadcast(data.data(), 9, DType::i32, root);
    for (int i = 0; i < 9; ++i) ASSERT_EQ(data[i], root * 100 + i * i) << "root " << root;
  }
}

TEST(MpiCommunicator, ArgumentsAreCheckedBeforeMpi) {
  Communicator& comm = *g_world;
  float x = 0.f;
  EXPECT_THROW(comm.send(&x, 1, DType::f32, comm.size()), Error);
  EXPECT_THROW(comm.broadcast(&x, 1, DType::f32, -1), Error);
  const std::vector<int64_t> short_counts(size_t(comm.size() - 1), 0);
  EXPECT_THROW(comm.all_to_all_v(&x, short_counts, short_counts, &x, short_counts, short_counts, DType::f32), Error);
  comm.barrier();
}

TEST(MpiCommunicator, FailedStatusNamesTheCallRankAndCode) {
  try {
    check_mpi_status(MPI_ERR_TRUNCATE, "MPI_Recv", 3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI_Recv failed on rank 3"), std::string::npos) << what;
    EXPECT_NE(what.find("error code " + std::to_string(MPI_ERR_TRUNCATE)), std::string::npos) << what;
  }
  EXPECT_NO_THROW(check_mpi_status(MPI_SUCCESS, "MPI_Barrier", 0));
}

// Every layout of the world: each axis' communicator has the group's size, ranks it by its coordinate
// on the axis, and its collectives reach exactly the Mapping's members.
TEST(MpiCommunicator, AxisGroupsMatchTheMapping) {
  Communicator& world = *g_world;
  const int w = world.size();
  int layouts = 0;
  for (const auto& [pp, S] : factor_pairs(w)) {
    for (const auto& [dp, tp] : factor_pairs(S)) {
      for (const auto& [edp, ep, etp] : factor_triples(S)) {
        const int dense_tp = tp;  // dense_tp's own groups are covered when tp takes every value
        const Mapping mapping(
            ParallelSizes{.pp = pp, .tp = tp, .dp = dp, .ep = ep, .etp = etp, .edp = edp, .dense_tp = dense_tp});
        const RankCoords me = mapping.coords(world.rank());
        for (Axis axis : kAxes) {
          const std::vector<int> members = mapping.group(axis, world.rank());
          auto group = split_axis(world, mapping, axis);
          ASSERT_EQ(group->size(), int(members.size())) << describe_sizes(mapping.sizes()) << " " << axis_name(axis);
          EXPECT_EQ(group->rank(), me.get(axis));
          float sum = float(world.rank());
          group->all_reduce_sum(&sum, 1);
          float expected = 0.f;
          for (int m : members) expected += float(m);
          EXPECT_EQ(sum, expected) << describe_sizes(mapping.sizes()) << " " << axis_name(axis);
          std::vector<int32_t> gathered(members.size());
          const int32_t mine = world.rank();
          group->all_gather(&mine, gathered.data(), 1, DType::i32);
          EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), members);
        }
        ++layouts;
      }
    }
  }
  EXPECT_GT(layouts, 0);
}

}  // namespace
}  // namespace sy

int main(int argc, char** argv) {
  return sy::test::run_mpi_tests(argc, argv, "test_parallel_mpi", [](sy::Communicator* w) { sy::g_world = w; });
}
