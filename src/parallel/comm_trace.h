// A record of every collective and point-to-point call this process makes while tracing is on: which group
// (a key equal on every member), the call's number on that group, its bytes, and when it entered and left.
// The k-th call on a group is the same collective on every member, so matching the members' records says how
// long each rank waited for the last one to arrive and how long the transfer took after that
// (bench/comm_trace.py; `bench latency --comm-trace`). Off, a call costs one relaxed load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sy::comm_trace {

enum class Op : uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all_v, send, recv, broadcast, barrier };

const char* op_name(Op op);

struct Event {
  uint64_t group = 0;  // the group's key (its members' world ranks and creation order, hashed); 0: a group of one
  int64_t seq = 0;     // the call's number on its group from its creation (collectives; sends and receives apart)
  Op op = Op::barrier;
  int size = 1;          // the group's ranks
  int64_t bytes = 0;     // this rank's bytes sent (the data of an all-reduce, broadcast or receive)
  int64_t enter_ns = 0;  // steady clock (CLOCK_MONOTONIC: one clock for every process of a host)
  int64_t exit_ns = 0;
  int64_t step = 0;  // the caller's step number when the call was made (set_step)
};

void enable(bool on);
bool enabled();
int64_t now_ns();
// The step number recorded with the following calls (a benchmark's step).
void set_step(int64_t step);
void record(Event e);
// The events recorded since the last take, in call order; clears them.
std::vector<Event> take();
// The events as JSON text: {"world_rank", "steps", "step_ms" (each step's time, as its caller measured it),
// "events": [[group, seq, op, size, bytes, enter_ns, exit_ns, step]...]}.
std::string to_json(const std::vector<Event>& events, int world_rank, const std::vector<double>& step_ms);

}  // namespace sy::comm_trace
