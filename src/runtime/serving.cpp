// ServingLoop: the queue between the threads that submit requests and the one thread that steps the
// engine, the token events of each step, and rank 0's broadcast of every step boundary to the other ranks.
#include "runtime/serving.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_set>

#include "base/check.h"
#include "base/log.h"
#include "parallel/communicator.h"

namespace sy {
namespace {

using Clock = std::chrono::steady_clock;

// What rank 0 decided at one step boundary. Every rank applies it to its engine before the step, so that
// every engine runs the same steps.
struct Boundary {
  std::vector<Request> requests;  // added in this order
  std::vector<int64_t> aborts;    // engine ids, each live on every rank
  bool exit = false;              // run() returns after applying the above
};

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put(static_cast<int64_t>(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T v;
    read(&v, sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = get<int64_t>();
    SY_CHECK(n >= 0 && static_cast<size_t>(n) <= (bytes_.size() - at_) / sizeof(T),
             "step boundary message: a list of {} elements overruns the {} bytes received", n, bytes_.size());
    std::vector<T> v(static_cast<size_t>(n));
    read(v.data(), v.size() * sizeof(T));
    return v;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  void read(void* dst, size_t n) {
    SY_CHECK(n <= bytes_.size() - at_, "step boundary message: {} bytes wanted at offset {} of {}", n, at_,
             bytes_.size());
    std::memcpy(dst, bytes_.data() + at_, n);
    at_ += n;
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

std::vector<uint8_t> serialise(const Boundary& b) {
  ByteWriter w;
  w.put(static_cast<int64_t>(b.requests.size()));
  for (const Request& r : b.requests) {
    w.put_vector(r.prompt);
    w.put(r.max_new_tokens);
    w.put(r.sampling.temperature);
    w.put(r.sampling.top_k);
    w.put(r.sampling.top_p);
    w.put(r.sampling.min_p);
    w.put(r.sampling.seed);
    w.put_vector(r.stop_tokens);
  }
  w.put_vector(b.aborts);
  w.put(static_cast<uint8_t>(b.exit));
  return w.take();
}

// Followers record no logprobs: only rank 0 has sinks.
Boundary deserialise(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  Boundary b;
  const auto n = r.get<int64_t>();
  SY_CHECK(n >= 0, "step boundary message: {} requests", n);
  for (int64_t i = 0; i < n; ++i) {
    Request q;
    q.prompt = r.get_vector<int32_t>();
    q.max_new_tokens = r.get<int64_t>();
    q.sampling.temperature = r.get<float>();
    q.sampling.top_k = r.get<int64_t>();
    q.sampling.top_p = r.get<float>();
    q.sampling.min_p = r.get<float>();
    q.sampling.seed = r.get<uint64_t>();
    q.stop_tokens = r.get_vector<int32_t>();
    b.requests.push_back(std::move(q));
  }
  b.aborts = r.get_vector<int64_t>();
  b.exit = r.get<uint8_t>() != 0;
  SY_CHECK(r.done(), "step boundary message: {} bytes left over", bytes.size());
  return b;
}

}  // namespace

struct ServingLoop::Impl {
  struct Submitted {
    int64_t id = 0;
    Request request;
    TokenSink sink;
  };
  // A request in the engine, seen from rank 0.
  struct Active {
    int64_t engine_id = 0;
    TokenSink sink;
    int64_t prompt_tokens = 0;
    size_t emitted = 0;                             // output tokens handed to the sink
    bool sink_failed = false;                       // the sink threw: it gets no more tokens, only the final event
    bool ended = false;                             // the final event was handed over (or tried)
    std::optional<Clock::time_point> scheduled_at;  // start of the step that first scheduled it
    bool scheduled_sent = false;                    // scheduled_at went out with an event
  };

  Impl(Engine& e, Communicator* w) : engine(e), world(w != nullptr && w->size() > 1 ? w : nullptr) {}
  bool leader() const { return world == nullptr || world->rank() == 0; }

  void run_leader();
  void run_follower();
  // Rank 0 sends `b`, the others receive it.
  void exchange(Boundary& b);
  // Calls the sink, catching what it throws: a failed sink has its request aborted at the next boundary.
  void deliver(int64_t id, Active& a, const TokenEvent& event);
  void end_request(int64_t id, TokenSink& sink, int64_t prompt_tokens, int64_t output_tokens);
  void emit_step_tokens();
  void publish_stats();
  void fail_all();

  Engine& engine;
  Communicator* world;           // null when the layout has one rank
  Clock::time_point step_start;  // of the step emit_step_tokens reports

  // Guarded by mu.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::vector<Submitted> submitted;  // not yet taken in
  std::vector<int64_t> abort_asked;  // serving ids
  int64_t next_id = 0;
  bool stopping = false;
  bool failed = false;
  Clock::time_point drain_deadline;
  ServingStats published;

  // Loop thread only.
  std::map<int64_t, Active> active;    // by serving id: requests in the engine (rank 0)
  std::vector<int64_t> sink_failures;  // serving ids to abort at the next boundary
  std::vector<int64_t> follower_live;  // engine ids added and not released (other ranks)
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  StepTotals decode_steps;
  StepTotals mixed_steps;
};

ServingLoop::ServingLoop(Engine& engine, Communicator* world) : impl_(std::make_unique<Impl>(engine, world)) {
  SY_CHECK(engine.held_requests() == 0,
           "the serving loop must own every request of its engine (so that every rank's engine ids agree), but "
           "the engine already holds {}",
           engine.held_requests());
  impl_->publish_stats();
}

ServingLoop::~ServingLoop() = default;

int64_t ServingLoop::submit(ServeRequest request, TokenSink sink) {
  Impl& m = *impl_;
  SY_CHECK(m.leader(), "requests are submitted on rank 0 only (this is rank {})", m.world->rank());
  SY_CHECK(static_cast<bool>(sink), "a request needs a sink for its tokens");
  Request r{.prompt = std::move(request.prompt),
            .max_new_tokens = request.max_new_tokens,
            .sampling = request.sampling,
            .stop_tokens = std::move(request.stop_tokens),
            .keep_logits = false,
            .logprobs = request.logprobs};
  m.engine.validate(r);
  int64_t id = 0;
  {
    std::lock_guard lock(m.mu);
    SY_CHECK(!m.failed, "the serving loop stopped after an error; no new requests are taken");
    SY_CHECK(!m.stopping, "the server is shutting down; no new requests are taken");
    id = m.next_id++;
    m.submitted.push_back({.id = id, .request = std::move(r), .sink = std::move(sink)});
  }
  m.wake.notify_one();
  return id;
}

void ServingLoop::abort(int64_t id) {
  Impl& m = *impl_;
  if (!m.leader()) return;
  {
    std::lock_guard lock(m.mu);
    if (id < 0 || id >= m.next_id) return;
    m.abort_asked.push_back(id);
  }
  m.wake.notify_one();
}

ServingStats ServingLoop::stats() const {
  std::lock_guard lock(impl_->mu);
  ServingStats s = impl_->published;
  s.waiting += static_cast<int64_t>(impl_->submitted.size());
  return s;
}

void ServingLoop::stop(double drain_seconds) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mu);
    if (!m.stopping) {
      m.stopping = true;
      m.drain_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(std::max(drain_seconds, 0.0)));
    }
  }
  m.wake.notify_all();
}

void ServingLoop::run() {
  Impl& m = *impl_;
  try {
    if (m.leader()) {
      m.run_leader();
    } else {
      m.run_follower();
    }
  } catch (const std::exception& e) {
    log_line(LogLevel::error,
             fmt::format("serving loop{}: {}", m.world ? fmt::format(" (rank {})", m.world->rank()) : "", e.what()));
    if (m.leader()) m.fail_all();
    throw;
  }
}

void ServingLoop::Impl::run_leader() {
  for (;;) {
    std::vector<Submitted> taken;
    std::vector<int64_t> asked;
    bool stop = false;
    bool drain_over = false;
    {
      std::unique_lock lock(mu);
      // Nothing else runs while idle: followers wait in their next exchange(), which only comes after this.
      wake.wait(lock, [&] {
        return !submitted.empty() || !abort_asked.empty() || stopping || !sink_failures.empty() ||
               !engine.scheduler().idle();
      });
      taken.swap(submitted);
      asked.swap(abort_asked);
      stop = stopping;
      drain_over = stopping && Clock::now() >= drain_deadline;
    }
    const Clock::time_point iteration_start = Clock::now();
    asked.insert(asked.end(), sink_failures.begin(), sink_failures.end());
    sink_failures.clear();
    const std::unordered_set<int64_t> abort_ids(asked.begin(), asked.end());

    // Requests aborted before they were taken in end here; the engine never sees them.
    Boundary b;
    std::vector<Submitted> adding;
    for (Submitted& s : taken) {
      if (drain_over || abort_ids.contains(s.id)) {
        end_request(s.id, s.sink, static_cast<int64_t>(s.request.prompt.size()), 0);
      } else {
        b.requests.push_back(s.request);
        adding.push_back(std::move(s));
      }
    }
    std::vector<int64_t> aborted;  // serving ids
    for (const auto& [id, a] : active) {
      if (drain_over || abort_ids.contains(id)) {
        b.aborts.push_back(a.engine_id);
        aborted.push_back(id);
      }
    }
    // Exit once stopping and nothing is left after this boundary (after the drain time, nothing is).
    b.exit = stop && b.requests.empty() && aborted.size() == active.size();
    exchange(b);

    for (Submitted& s : adding) {
      const auto prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
      try {
        const int64_t engine_id = engine.add(std::move(s.request));
        active.emplace(s.id, Active{.engine_id = engine_id, .sink = std::move(s.sink), .prompt_tokens = prompt_tokens});
        prompt_tokens_total += prompt_tokens;
      } catch (const Error& e) {
        // Validated at submit, so only a changed engine gets here; every rank refuses it alike.
        log_warn("request {} refused when taken in: {}", s.id, e.what());
        end_request(s.id, s.sink, prompt_tokens, 0);
      }
    }
    for (int64_t id : aborted) {
      Active& a = active.at(id);
      engine.abort(a.engine_id);
      engine.release(a.engine_id);
      end_request(id, a.sink, a.prompt_tokens, static_cast<int64_t>(a.emitted));
      active.erase(id);
    }
    if (b.exit) {
      publish_stats();
      return;
    }
    if (!engine.scheduler().idle()) {
      step_start = Clock::now();
      const int64_t tokens_before = engine.tokens_processed();
      const int64_t sampled_before = generation_tokens_total;
      SY_CHECK(engine.step(), "the scheduler could not run any of {} waiting requests; the KV cache is too small",
               engine.scheduler().waiting().size());
      emit_step_tokens();
      // A decode step forwards one token per sequence and samples each; any prefill token makes it mixed.
      const int64_t tokens = engine.tokens_processed() - tokens_before;
      StepTotals& kind = tokens == generation_tokens_total - sampled_before ? decode_steps : mixed_steps;
      ++kind.steps;
      kind.tokens += tokens;
      kind.seconds += std::chrono::duration<double>(Clock::now() - iteration_start).count();
    }
    publish_stats();
  }
}

void ServingLoop::Impl::run_follower() {
  for (;;) {
    Boundary b;
    exchange(b);
    for (Request& r : b.requests) {
      try {
        follower_live.push_back(engine.add(std::move(r)));
      } catch (const Error&) {
        // Rank 0 refused it too (same engine state); nothing was added.
      }
    }
    for (int64_t id : b.aborts) engine.abort(id);
    if (b.exit) return;
    if (!engine.scheduler().idle()) {
      SY_CHECK(engine.step(), "the scheduler could not run any of {} waiting requests; the KV cache is too small",
               engine.scheduler().waiting().size());
    }
    std::erase_if(follower_live, [&](int64_t id) {
      if (!engine.result(id).finished) return false;
      engine.release(id);
      return true;
    });
  }
}

void ServingLoop::Impl::exchange(Boundary& b) {
  if (world == nullptr) return;
  std::vector<uint8_t> bytes;
  if (leader()) bytes = serialise(b);
  auto n = static_cast<int64_t>(bytes.size());
  world->broadcast(&n, 1, DType::i64, 0);
  bytes.resize(static_cast<size_t>(n));
  world->broadcast(bytes.data(), n, DType::u8, 0);
  if (!leader()) b = deserialise(bytes);
}

void ServingLoop::Impl::deliver(int64_t id, Active& a, const TokenEvent& event) {
  if (event.finish != FinishReason::none) a.ended = true;
  std::string what;
  try {
    a.sink(event);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  log_warn("request {}: its token sink threw ({}); aborting the request", id, what);
  if (!a.sink_failed && event.finish == FinishReason::none) sink_failures.push_back(id);
  a.sink_failed = true;
}

void ServingLoop::Impl::end_request(int64_t id, TokenSink& sink, int64_t prompt_tokens, int64_t output_tokens) {
  Active a{.sink = std::move(sink), .prompt_tokens = prompt_tokens, .emitted = static_cast<size_t>(output_tokens)};
  deliver(
      id, a,
      {.request = id, .finish = FinishReason::abort, .prompt_tokens = prompt_tokens, .output_tokens = output_tokens});
}

void ServingLoop::Impl::emit_step_tokens() {
  for (auto it = active.begin(); it != active.end();) {
    const int64_t id = it->first;
    Active& a = it->second;
    const RequestResult& r = engine.result(a.engine_id);
    // Checked after every step, so the first step that scheduled it is the one just run.
    if (!a.scheduled_at && r.first_step >= 0) a.scheduled_at = step_start;
    while (a.emitted < r.output.size()) {
      const size_t i = a.emitted++;
      ++generation_tokens_total;
      if (a.sink_failed) continue;  // its abort comes at the next boundary
      TokenEvent ev{.request = id,
                    .has_token = true,
                    .token = r.output[i],
                    .prompt_tokens = a.prompt_tokens,
                    .output_tokens = static_cast<int64_t>(a.emitted),
                    .cached_tokens = r.cached_tokens};
      if (i < r.logprobs.size()) {
        ev.logprob = r.logprobs[i].logprob;
        ev.top_logprobs = r.logprobs[i].top;
      }
      if (r.finished && a.emitted == r.output.size()) ev.finish = r.finish_reason;
      if (a.scheduled_at && !a.scheduled_sent) {
        ev.scheduled_at = a.scheduled_at;
        a.scheduled_sent = true;
      }
      deliver(id, a, ev);
    }
    if (r.finished) {
      // A sink that failed before the last token still hears the end, once.
      if (!a.ended) {
        deliver(id, a,
                {.request = id,
                 .finish = r.finish_reason,
                 .error = r.error,
                 .prompt_tokens = a.prompt_tokens,
                 .output_tokens = static_cast<int64_t>(a.emitted),
                 .cached_tokens = r.cached_tokens});
      }
      engine.release(a.engine_id);
      it = active.erase(it);
    } else {
      ++it;
    }
  }
}

void ServingLoop::Impl::publish_stats() {
  const KvUsage kv = engine.kv_usage();
  const Scheduler& s = engine.scheduler();
  ServingStats st{.running = static_cast<int64_t>(s.running().size()),
                  .waiting = static_cast<int64_t>(s.waiting().size()),
                  .kv_usage = kv.total_blocks > 0 ? static_cast<double>(kv.used_blocks) / kv.total_blocks : 0.0,
                  .kv_capacity_tokens = kv.total_blocks * kv.block_size,
                  .preemptions = s.preemptions(),
                  .prefix_query_tokens = s.prefix_query_tokens(),
                  .prefix_hit_tokens = s.prefix_hit_tokens(),
                  .prompt_tokens_total = prompt_tokens_total,
                  .generation_tokens_total = generation_tokens_total,
                  .steps = engine.steps(),
                  .decode_steps = decode_steps,
                  .mixed_steps = mixed_steps};
  std::lock_guard lock(mu);
  published = st;
}

// After an error in a step: nothing more is taken, and every request still known gets its final event.
void ServingLoop::Impl::fail_all() {
  std::vector<Submitted> taken;
  {
    std::lock_guard lock(mu);
    failed = true;
    stopping = true;
    taken.swap(submitted);
    abort_asked.clear();
  }
  for (Submitted& s : taken) end_request(s.id, s.sink, static_cast<int64_t>(s.request.prompt.size()), 0);
  for (auto& [id, a] : active) end_request(id, a.sink, a.prompt_tokens, static_cast<int64_t>(a.emitted));
  active.clear();
}

}  // namespace sy
