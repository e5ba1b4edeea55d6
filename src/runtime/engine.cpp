// Engine: scheduler → ForwardBatch → executor (model forward) → sampler.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/log.h"

namespace sy {

struct Engine::Entry {
  Request request;
  Sequence seq;
  Sampler sampler;
  RequestResult result;
  int64_t logit_rows_kept = 0;  // rows of result.logits already filled (survives preemption)
  Entry(Request r, int64_t id) : request(std::move(r)), sampler(request.sampling) {
    seq.id = id;
    seq.tokens = request.prompt;
  }
};

namespace {

std::vector<BlockManager> make_block_managers(const ModelInfo& info, const EngineConfig& config) {
  SY_CHECK(info.dp_size >= 1, "the model reports attention dp size {}; it must be at least 1", info.dp_size);
  return std::vector<BlockManager>(static_cast<size_t>(info.dp_size),
                                   BlockManager(config.kv_blocks, config.block_size, config.prefix_cache));
}

std::vector<BlockManager*> pointers_to(std::vector<BlockManager>& managers) {
  std::vector<BlockManager*> out;
  for (auto& m : managers) out.push_back(&m);
  return out;
}

}  // namespace

Engine::Engine(Model& model, Backend& backend, const EngineConfig& config)
    : Engine(std::make_unique<Executor>(model, backend), nullptr, backend, config) {}

Engine::Engine(StepRunner& runner, Backend& backend, const EngineConfig& config)
    : Engine(nullptr, &runner, backend, config) {}

Engine::Engine(std::unique_ptr<Executor> owned, StepRunner* runner, Backend& backend, const EngineConfig& config)
    : executor_(std::move(owned)),
      runner_(runner != nullptr ? *runner : *executor_),
      blocks_(make_block_managers(runner_.info(), config)),
      pool_(backend, runner_.info().kv, config.kv_blocks, config.block_size),
      scheduler_(pointers_to(blocks_), config.scheduler),
      backend_(backend),
      logits_(backend.alloc_host(
          static_cast<size_t>(std::max<int64_t>(config.scheduler.max_seqs, 1) * runner_.info().vocab_size) *
          sizeof(float))) {}

Engine::~Engine() = default;

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none:
      return "";
    case FinishReason::stop_token:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::abort:
      return "abort";
    case FinishReason::error:
      return "error";
  }
  return "";
}

Engine::Entry& Engine::entry(int64_t id) const {
  const auto it = entries_.find(id);
  SY_CHECK(it != entries_.end(), "no request with id {} (ids below {} were added; released ones are forgotten)", id,
           next_id_);
  return *it->second;
}

void Engine::validate(const Request& request) const {
  const int64_t vocab = runner_.info().vocab_size;
  SY_CHECK(!request.prompt.empty(), "the prompt is empty; give at least one token id");
  for (int32_t t : request.prompt) {
    SY_CHECK(t >= 0 && t < vocab, "prompt token id {} is outside the model's vocabulary [0, {})", t, vocab);
  }
  SY_CHECK(request.max_new_tokens >= 1, "max_tokens must be at least 1, got {}", request.max_new_tokens);
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  SY_CHECK(total <= runner_.info().max_position_embeddings,
           "prompt ({} tokens) plus max_tokens ({}) exceeds the model's max_position_embeddings {}",
           request.prompt.size(), request.max_new_tokens, runner_.info().max_position_embeddings);
  // A sequence that fits a dp rank's whole pool alone always makes progress (preemption frees the rest).
  const BlockManager& pool = blocks_[0];
  SY_CHECK(pool.blocks_for(total) <= pool.n_blocks(),
           "prompt ({} tokens) plus max_tokens ({}) needs {} tokens of KV cache but the cache{} holds {}; lower "
           "max_tokens or raise the KV cache size",
           request.prompt.size(), request.max_new_tokens, total, blocks_.size() > 1 ? " of a dp rank" : "",
           pool.n_blocks() * pool.block_size());
  SY_CHECK(request.logprobs >= -1 && request.logprobs <= kMaxLogprobs && request.logprobs <= vocab,
           "logprobs must be -1 (none) or between 0 and {}, got {}", std::min<int64_t>(kMaxLogprobs, vocab),
           request.logprobs);
  sy::validate(request.sampling);
}

int64_t Engine::add(Request request) {
  validate(request);
  const int64_t id = next_id_;
  auto e = std::make_unique<Entry>(std::move(request), id);
  e->seq.prefix_cache = !e->request.keep_logits;
  scheduler_.add(&e->seq);
  entries_.emplace(id, std::move(e));
  ++next_id_;
  return id;
}

bool Engine::abort(int64_t id) {
  Entry& e = entry(id);
  if (e.result.finished) return false;
  scheduler_.finish(&e.seq);
  e.result.finished = true;
  e.result.finish_reason = FinishReason::abort;
  return true;
}

void Engine::release(int64_t id) {
  const Entry& e = entry(id);
  SY_CHECK(e.result.finished, "request {} is still running; abort it or let it finish before releasing it", id);
  entries_.erase(id);
}

KvUsage Engine::kv_usage() const {
  KvUsage u{.block_size = blocks_[0].block_size()};
  for (const BlockManager& b : blocks_) {
    u.total_blocks += b.n_blocks();
    u.used_blocks += b.n_blocks() - b.free_blocks();
    u.cached_blocks += b.cached_blocks();
  }
  return u;
}

bool Engine::step() {
  const std::vector<ScheduledChunk> chunks = scheduler_.schedule();
  if (chunks.empty()) return false;
  const int64_t vocab = runner_.info().vocab_size;

  ForwardBatch b;
  b.n_seqs = static_cast<int64_t>(chunks.size());
  for (const auto& c : chunks) b.max_blocks = std::max(b.max_blocks, static_cast<int64_t>(c.seq->block_table.size()));
  b.block_tables.assign(static_cast<size_t>(b.n_seqs * b.max_blocks), 0);
  std::vector<Entry*> entries(chunks.size());
  for (size_t ci = 0; ci < chunks.size(); ++ci) entries[ci] = &entry(chunks[ci].seq->id);
  // Per chunk: the first logit row it owns and how many.
  std::vector<std::pair<size_t, int64_t>> chunk_rows;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ScheduledChunk& c = chunks[ci];
    const Entry& e = *entries[ci];
    // Block ids and slots are local to the pool of the sequence's dp rank.
    const BlockManager& blocks = blocks_[static_cast<size_t>(c.seq->dp)];
    b.seq_dp.push_back(c.seq->dp);
    std::copy(c.seq->block_table.begin(), c.seq->block_table.end(),
              b.block_tables.begin() + static_cast<int64_t>(ci) * b.max_blocks);
    const auto first_token = static_cast<int32_t>(b.tokens.size());
    for (int64_t p = c.start; p < c.start + c.len; ++p) {
      b.tokens.push_back(c.seq->tokens[static_cast<size_t>(p)]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.token_seq.push_back(static_cast<int32_t>(ci));
      b.slots.push_back(blocks.slot(c.seq->block_table, p));
    }
    // Rows wanted: every not-yet-kept position when keeping logits, else only the last if it samples.
    const size_t row0 = b.logit_rows.size();
    const int64_t from = e.request.keep_logits ? std::max(c.start, e.logit_rows_kept) : c.start + c.len - 1;
    if (e.request.keep_logits || c.samples_next()) {
      for (int64_t p = from; p < c.start + c.len; ++p)
        b.logit_rows.push_back(first_token + static_cast<int32_t>(p - c.start));
    }
    chunk_rows.emplace_back(row0, static_cast<int64_t>(b.logit_rows.size() - row0));
  }

  const size_t logit_bytes = b.logit_rows.size() * static_cast<size_t>(vocab) * sizeof(float);
  if (logit_bytes > logits_->size()) logits_ = backend_.alloc_host(logit_bytes);
  float* logits = logits_->as<float>();
  // Every sampling chunk samples its last row where the logits are, with its request's next draw; only the
  // rows kept or asked for log-probabilities come to the host.
  StepOutputs out{.logits = logits, .copy_rows = std::vector<uint8_t>(b.logit_rows.size(), 0)};
  std::vector<int64_t> sample_of(chunks.size(), -1);  // per chunk: its entry of out.sample
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const auto [row0, n_rows] = chunk_rows[ci];
    Entry& e = *entries[ci];
    if (e.request.keep_logits) std::fill_n(out.copy_rows.begin() + static_cast<int64_t>(row0), n_rows, 1);
    if (!chunks[ci].samples_next()) continue;
    const auto last = static_cast<int64_t>(row0) + n_rows - 1;
    sample_of[ci] = static_cast<int64_t>(out.sample.size());
    out.sample.push_back(e.sampler.next_row(last));
    if (e.request.logprobs >= 0) out.copy_rows[static_cast<size_t>(last)] = 1;
  }
  runner_.forward_and_sample(b, pool_.view(), out);
  ++steps_;
  tokens_processed_ += static_cast<int64_t>(b.tokens.size());
  sampling_ms_ += out.host_sampling_ms;

  // The token each chunk sampled (-1: none, or a NaN or infinite logit: the request ends with an error below).
  std::vector<int32_t> sampled(chunks.size(), -1);
  const auto sampled_row = [&](size_t ci) {
    return logits + out.sample[static_cast<size_t>(sample_of[ci])].row * vocab;
  };
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    if (sample_of[ci] >= 0) sampled[ci] = out.sampled[static_cast<size_t>(sample_of[ci])];
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t with_logprobs = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) with_logprobs += sampled[ci] >= 0 && entries[ci]->request.logprobs >= 0;
#pragma omp parallel for schedule(dynamic) if (with_logprobs > 1)
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    Entry& e = *entries[ci];
    if (sampled[ci] >= 0 && e.request.logprobs >= 0)
      e.result.logprobs.push_back(token_logprobs(sampled_row(ci), vocab, sampled[ci], e.request.logprobs));
  }
  sampling_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ScheduledChunk& c = chunks[ci];
    Entry& e = *entries[ci];
    if (e.result.first_step < 0) {
      e.result.first_step = steps_ - 1;
      e.result.cached_tokens = std::max<int64_t>(c.seq->cached_tokens, 0);
    }
    c.seq->computed = c.start + c.len;
    blocks_[static_cast<size_t>(c.seq->dp)].commit(c.seq->tokens, c.seq->computed, c.seq->block_table,
                                                   c.seq->block_hashes);
    const auto [row0, n_rows] = chunk_rows[ci];
    if (e.request.keep_logits && n_rows > 0) {
      const float* src = logits + row0 * static_cast<size_t>(vocab);
      e.result.logits.insert(e.result.logits.end(), src, src + n_rows * vocab);
      e.logit_rows_kept += n_rows;
    }
    if (!c.samples_next()) continue;
    const int32_t token = sampled[ci];
    if (token < 0) {
      e.result.error = nonfinite_message(sampled_row(ci), vocab);
      e.result.finished = true;
      e.result.finish_reason = FinishReason::error;
      scheduler_.finish(c.seq);
      log_warn("request {}: {}", c.seq->id, e.result.error);
      continue;
    }
    e.result.output.push_back(token);
    c.seq->tokens.push_back(token);
    const bool stop =
        std::find(e.request.stop_tokens.begin(), e.request.stop_tokens.end(), token) != e.request.stop_tokens.end();
    if (stop || static_cast<int64_t>(e.result.output.size()) >= e.request.max_new_tokens) {
      e.result.finished = true;
      e.result.finish_reason = stop ? FinishReason::stop_token : FinishReason::length;
      scheduler_.finish(c.seq);
    }
  }
  return true;
}

std::string Engine::nonfinite_message(const float* row, int64_t vocab) const {
  int64_t nan = 0, inf = 0, first = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isfinite(row[i])) continue;
    if (first < 0) first = i;
    ++(std::isnan(row[i]) ? nan : inf);
  }
  std::string where;
  if (!runner_.checks_finite()) {
    where = "; run with --check-finite to find the first layer whose output is not finite";
  } else if (const std::string first_bad = runner_.first_nonfinite(); !first_bad.empty()) {
    where = "; the first non-finite activation of the step was " + first_bad;
  } else {
    where = "; every block's output on this rank was finite (the LM head or another rank produced them)";
  }
  return fmt::format(
      "engine step {}: the next-token logits are not finite ({} NaN and {} infinite of {}, the first at token id {}), "
      "so no token was sampled and the request ended{}",
      steps_ - 1, nan, inf, vocab, first, where);
}

void Engine::run(const std::function<void()>& after_step) {
  while (!scheduler_.idle()) {
    SY_CHECK(step(),
             "the scheduler could not run any of {} waiting sequences; the KV cache ({} blocks of {} per dp rank, {} "
             "dp ranks) is too small for them",
             scheduler_.waiting().size(), blocks_[0].n_blocks(), blocks_[0].block_size(), blocks_.size());
    if (after_step) after_step();
  }
}

const RequestResult& Engine::result(int64_t id) const { return entry(id).result; }

void Engine::check_integrity() const {
  std::vector<std::vector<const std::vector<int32_t>*>> tables(blocks_.size());
  for (const auto& [id, e] : entries_) {
    const int32_t dp = e->seq.dp;
    SY_CHECK(dp >= 0 && dp < static_cast<int32_t>(blocks_.size()), "sequence {} is on dp rank {}, outside [0, {})",
             e->seq.id, dp, blocks_.size());
    tables[static_cast<size_t>(dp)].push_back(&e->seq.block_table);
  }
  for (size_t dp = 0; dp < blocks_.size(); ++dp) {
    try {
      blocks_[dp].check_integrity(tables[dp]);
    } catch (const Error& err) {
      SY_FAIL("dp rank {}: {}", dp, err.what());
    }
  }
}

}  // namespace sy
