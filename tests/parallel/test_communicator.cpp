// The single-rank communicator: every collective is the identity or an exact copy, every peer other than
// rank 0 is refused, and split gives a group of one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "parallel/comm_trace.h"
#include "parallel/communicator.h"

namespace sy {
namespace {

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(SingleRankCommunicator, ReductionsAreTheIdentity) {
  auto comm = make_single_rank_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> data = iota_floats(7, -3.5f);
  const std::vector<float> before = data;
  comm->all_reduce_sum(data.data(), int64_t(data.size()));
  EXPECT_EQ(data, before);

  std::vector<float> out(7, 0.f);
  comm->reduce_scatter_sum(data.data(), out.data(), 7);
  EXPECT_EQ(out, before);
  comm->all_reduce_sum(nullptr, 0);
}

TEST(SingleRankCommunicator, MovementIsAnExactCopy) {
  auto comm = make_single_rank_communicator();
  const std::vector<int32_t> ids = {5, -1, 7, 1 << 30};
  std::vector<int32_t> gathered(4, 0);
  comm->all_gather(ids.data(), gathered.data(), 4, DType::i32);
  EXPECT_EQ(gathered, ids);

  // One block of 3 taken from offset 2 and placed at offset 1; the other elements stay untouched.
  const std::vector<float> send = iota_floats(6, 10.f);
  std::vector<float> recv(5, -1.f);
  const int64_t count[] = {3}, send_displ[] = {2}, recv_displ[] = {1};
  comm->all_to_all_v(send.data(), count, send_displ, recv.data(), count, recv_displ, DType::f32);
  EXPECT_EQ(recv, (std::vector<float>{-1.f, 12.f, 13.f, 14.f, -1.f}));

  std::vector<uint16_t> bf16 = {0x3f80, 0x4000};
  comm->broadcast(bf16.data(), 2, DType::bf16, 0);
  EXPECT_EQ(bf16, (std::vector<uint16_t>{0x3f80, 0x4000}));
  comm->barrier();
}

TEST(SingleRankCommunicator, RefusesPeersAndBadCounts) {
  auto comm = make_single_rank_communicator();
  float x = 1.f;
  EXPECT_THROW(comm->send(&x, 1, DType::f32, 0), Error);  // to itself: would block forever
  EXPECT_THROW(comm->send(&x, 1, DType::f32, 1), Error);
  EXPECT_THROW(comm->recv(&x, 1, DType::f32, -1), Error);
  EXPECT_THROW(comm->broadcast(&x, 1, DType::f32, 1), Error);
  EXPECT_THROW(comm->all_reduce_sum(&x, -1), Error);
  const int64_t one[] = {1}, two[] = {2}, zero[] = {0}, pair[] = {1, 1};
  EXPECT_THROW(comm->all_to_all_v(&x, one, zero, &x, two, zero, DType::f32), Error);   // 1 sent, 2 expected
  EXPECT_THROW(comm->all_to_all_v(&x, pair, pair, &x, one, zero, DType::f32), Error);  // two ranks' counts
}

TEST(SingleRankCommunicator, SplitGivesAGroupOfOne) {
  auto comm = make_single_rank_communicator();
  const int self[] = {0};
  auto sub = comm->split(self);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->size(), 1);
  const int outside[] = {1}, twice[] = {0, 0};
  EXPECT_THROW(comm->split(outside), Error);
  EXPECT_THROW(comm->split(twice), Error);
  EXPECT_THROW(comm->split(std::span<const int>()), Error);

  const Mapping single(ParallelSizes{});
  for (Axis a : kAxes) EXPECT_EQ(split_axis(*comm, single, a)->size(), 1);
  const Mapping tp2(ParallelSizes{.tp = 2, .etp = 2, .dense_tp = 2});
  EXPECT_THROW(split_axis(*comm, tp2, Axis::tp), Error);
}

// The collective trace: off, nothing is recorded but every call still takes its number on the group (so that
// the numbers agree across ranks whenever tracing starts); on, each call is one event with its bytes, its number
// and enter <= exit; take() empties the record.
TEST(CommTrace, RecordsCallsWithTheirNumberOnTheGroup) {
  auto comm = make_single_rank_communicator();
  comm_trace::take();
  std::vector<float> data = iota_floats(5, 1.f);
  comm->all_reduce_sum(data.data(), 5);  // call 0, not traced
  EXPECT_TRUE(comm_trace::take().empty());
  comm_trace::enable(true);
  comm_trace::set_step(7);
  comm->all_reduce_sum(data.data(), 5);  // call 1
  std::vector<float> gathered(5);
  comm->all_gather(data.data(), gathered.data(), 5, DType::f32);  // call 2
  comm->barrier();                                                // call 3
  comm_trace::enable(false);
  comm->barrier();  // call 4, not traced
  const std::vector<comm_trace::Event> events = comm_trace::take();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].op, comm_trace::Op::all_reduce);
  EXPECT_EQ(events[0].seq, 1);
  EXPECT_EQ(events[0].bytes, 20);
  EXPECT_EQ(events[1].op, comm_trace::Op::all_gather);
  EXPECT_EQ(events[1].seq, 2);
  EXPECT_EQ(events[2].op, comm_trace::Op::barrier);
  EXPECT_EQ(events[2].seq, 3);
  for (const auto& e : events) {
    EXPECT_EQ(e.group, 0u);  // a group of one has no key
    EXPECT_EQ(e.size, 1);
    EXPECT_EQ(e.step, 7);
    EXPECT_LE(e.enter_ns, e.exit_ns);
  }
  EXPECT_TRUE(comm_trace::take().empty());
  const nlohmann::json j = nlohmann::json::parse(comm_trace::to_json(events, 3, {1.5, 2.5}));
  EXPECT_EQ(j["world_rank"], 3);
  EXPECT_EQ(j["steps"], 2);
  ASSERT_EQ(j["events"].size(), 3u);
  EXPECT_EQ(j["events"][1][2], "all_gather");
  EXPECT_EQ(j["events"][1][1], 2);
}

}  // namespace
}  // namespace sy
