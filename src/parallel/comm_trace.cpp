// The collective trace's recorder (comm_trace.h).
#include "parallel/comm_trace.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

namespace sy::comm_trace {

namespace {
std::atomic<bool> g_on{false};
std::atomic<int64_t> g_step{0};
std::mutex g_mutex;
std::vector<Event> g_events;
}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce:
      return "all_reduce";
    case Op::all_gather:
      return "all_gather";
    case Op::reduce_scatter:
      return "reduce_scatter";
    case Op::all_to_all_v:
      return "all_to_all_v";
    case Op::send:
      return "send";
    case Op::recv:
      return "recv";
    case Op::broadcast:
      return "broadcast";
    case Op::barrier:
      return "barrier";
  }
  return "unknown";
}

void enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }

void record(Event e) {
  e.step = g_step.load(std::memory_order_relaxed);
  const std::lock_guard lock(g_mutex);
  g_events.push_back(e);
}

std::vector<Event> take() {
  const std::lock_guard lock(g_mutex);
  std::vector<Event> out;
  out.swap(g_events);
  return out;
}

std::string to_json(const std::vector<Event>& events, int world_rank, const std::vector<double>& step_ms) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Event& e : events) {
    rows.push_back({e.group, e.seq, op_name(e.op), e.size, e.bytes, e.enter_ns, e.exit_ns, e.step});
  }
  return nlohmann::json{
      {"world_rank", world_rank}, {"steps", step_ms.size()}, {"step_ms", step_ms}, {"events", std::move(rows)}}
      .dump();
}

}  // namespace sy::comm_trace
