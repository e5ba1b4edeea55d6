// The executor: host batch → device step → logits, on one rank of the layout.
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <tuple>

#include "base/check.h"

namespace sy {

bool Executor::StepShape::operator<(const StepShape& o) const {
  return std::tie(tokens, n_seqs, width, rows, kv) < std::tie(o.tokens, o.n_seqs, o.width, o.rows, o.kv);
}

Executor::Executor(Model& model, Backend& backend)
    : model_(model), backend_(backend), plan_(model.plan()), comm_(backend) {}

Executor::~Executor() = default;

void Executor::check_batch(const ForwardBatch& b, const KvCacheView& kv) const {
  const auto T = static_cast<int64_t>(b.tokens.size());
  const ModelInfo& info = model_.info();
  const int64_t V = info.vocab_size;
  SY_CHECK(T > 0, "a forward pass needs at least one token");
  SY_CHECK(b.positions.size() == b.tokens.size() && b.token_seq.size() == b.tokens.size() &&
               b.slots.size() == b.tokens.size(),
           "batch arrays disagree: {} tokens, {} positions, {} sequence ids, {} slots", T, b.positions.size(),
           b.token_seq.size(), b.slots.size());
  SY_CHECK(static_cast<int64_t>(b.block_tables.size()) == b.n_seqs * b.max_blocks,
           "block table holds {} entries, expected {} sequences x {} blocks", b.block_tables.size(), b.n_seqs,
           b.max_blocks);
  SY_CHECK(static_cast<int64_t>(kv.k.size()) == info.n_layers, "KV cache has {} layers, model has {}", kv.k.size(),
           info.n_layers);
  SY_CHECK(b.seq_dp.empty() || static_cast<int64_t>(b.seq_dp.size()) == b.n_seqs,
           "seq_dp holds {} entries for {} sequences", b.seq_dp.size(), b.n_seqs);
  for (int32_t d : b.seq_dp)
    SY_CHECK(d >= 0 && d < plan_.dp, "sequence on dp rank {}, the layout has dp {}", d, plan_.dp);
  for (int32_t t : b.tokens) SY_CHECK(t >= 0 && t < V, "token id {} is outside the vocabulary [0, {})", t, V);
  for (int32_t s : b.token_seq) SY_CHECK(s >= 0 && s < b.n_seqs, "token of sequence {} in a batch of {}", s, b.n_seqs);
  for (int32_t r : b.logit_rows) SY_CHECK(r >= 0 && r < T, "logit row {} is outside the batch's {} tokens", r, T);
}

// Every row to the host, nothing sampled: forward_and_sample with no rows to sample copies them all.
void Executor::forward(const ForwardBatch& b, const KvCacheView& kv, float* logits) {
  StepOutputs out{.logits = logits};
  forward_and_sample(b, kv, out);
}

// Sends every index array of `b` to the device in one copy (on a GPU each copy is a round trip), with the
// block tables padded to a power-of-two width so that decode steps of a growing context keep the same shape
// (and captured step) for many tokens, and token ids mapped to this rank's vocabulary rows.
StepInput Executor::upload(const ForwardBatch& b, const KvCacheView& kv) {
  int64_t width = 1;
  while (width < b.max_blocks) width *= 2;
  padded_tables_.assign(static_cast<size_t>(b.n_seqs * width), 0);
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    std::copy_n(b.block_tables.begin() + s * b.max_blocks, b.max_blocks, padded_tables_.begin() + s * width);
  }
  const Share vs = model_.vocab_share();
  vocab_rows_.resize(b.tokens.size());
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    const int64_t t = b.tokens[i];
    vocab_rows_[i] = static_cast<int32_t>(t >= vs.start && t < vs.start + vs.count ? t - vs.start : vs.count);
  }
  const std::vector<int32_t>* arrays[] = {&b.positions,    &b.token_seq, &b.slots,
                                          &padded_tables_, &vocab_rows_, &b.logit_rows};
  indices_.clear();
  size_t offsets[std::size(arrays)];
  for (size_t i = 0; i < std::size(arrays); ++i) {
    offsets[i] = indices_.size();
    indices_.insert(indices_.end(), arrays[i]->begin(), arrays[i]->end());
    indices_.resize((indices_.size() + 3) / 4 * 4);  // 16-byte aligned segments
  }
  const size_t bytes = (indices_.size() + 4) * sizeof(int32_t);
  if (indices_dev_ == nullptr || indices_dev_->size() < bytes) {
    // Grown to twice what is asked, so that a growing batch reallocates (and drops its captures) rarely.
    indices_dev_ = backend_.alloc(2 * bytes);
    captures_stale_ = true;
  }
  auto* dev = indices_dev_->as<int32_t>();
  backend_.copy_to_device(dev, indices_.data(), indices_.size() * sizeof(int32_t));
  StepInput in;
  in.step = StepContext{.backend = &backend_,
                        .tokens = static_cast<int64_t>(b.tokens.size()),
                        .positions = dev + offsets[0],
                        .token_seq = dev + offsets[1],
                        .slots = dev + offsets[2],
                        .block_tables = dev + offsets[3],
                        .n_seqs = b.n_seqs,
                        .max_blocks = width,
                        .block_size = kv.block_size};
  in.vocab_rows = dev + offsets[4];
  in.tokens = b.tokens;
  in.logit_rows = dev + offsets[5];
  in.n_logit_rows = static_cast<int64_t>(b.logit_rows.size());
  return in;
}

namespace {

// Samples out.sample on the host from `logits` [logit_rows, vocab] (in parallel over rows).
void sample_on_host(const float* logits, int64_t vocab, StepOutputs& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = static_cast<int64_t>(out.sample.size());
  out.sampled.assign(out.sample.size(), kSampleNotFinite);
  // Each row has its own draw, so the result does not depend on the threads. Threads only pay off over
  // several rows of a large vocabulary; a lone row stays on this thread.
#pragma omp parallel for schedule(dynamic) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    const SampleRow& r = out.sample[static_cast<size_t>(i)];
    out.sampled[static_cast<size_t>(i)] = cpu::sample_row(logits + r.row * vocab, vocab, r);
  }
  out.host_sampling_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void StepRunner::forward_and_sample(const ForwardBatch& batch, const KvCacheView& kv, StepOutputs& out) {
  forward(batch, kv, out.logits);
  sample_on_host(out.logits, info().vocab_size, out);
}

void Executor::forward_and_sample(const ForwardBatch& b, const KvCacheView& kv, StepOutputs& out) {
  check_batch(b, kv);
  const int64_t V = model_.info().vocab_size;
  const auto R = static_cast<int64_t>(b.logit_rows.size());
  for (const SampleRow& r : out.sample)
    SY_CHECK(r.row >= 0 && r.row < R, "sampled row {} is outside the step's {} logit rows", r.row, R);
  SY_CHECK(out.copy_rows.empty() || static_cast<int64_t>(out.copy_rows.size()) == R,
           "copy_rows flags {} rows of a step with {} logit rows", out.copy_rows.size(), R);
  if (!plan_.single()) {
    forward_parallel(b, kv, out.logits);
    sample_on_host(out.logits, V, out);
    return;
  }
  const StepLogits l = compute_local(b, kv);
  if (R == 0) return;
  if (l.device == nullptr) {
    SY_CHECK(l.host != nullptr, "the model's last stage returned no logits for {} rows", R);
    std::copy_n(l.host, R * V, out.logits);
    sample_on_host(out.logits, V, out);
    return;
  }
  out.sampled.assign(out.sample.size(), kSampleNotFinite);
  if (!out.sample.empty()) {
    backend_.mark(Phase::sampling);
    backend_.sample_tokens(l.device, V, out.sample.data(), static_cast<int64_t>(out.sample.size()), out.sampled.data());
  }
  // The rows the engine reads: those asked for and those refused as not finite; copied in contiguous runs.
  std::vector<uint8_t> want = out.copy_rows.empty() ? std::vector<uint8_t>(static_cast<size_t>(R), 1) : out.copy_rows;
  for (size_t i = 0; i < out.sample.size(); ++i) {
    if (out.sampled[i] == kSampleNotFinite) want[static_cast<size_t>(out.sample[i].row)] = 1;
  }
  backend_.mark(Phase::other);
  for (int64_t r = 0; r < R;) {
    if (want[static_cast<size_t>(r)] == 0) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < R && want[static_cast<size_t>(end)] != 0) ++end;
    backend_.copy_to_host(out.logits + r * V, l.device + r * V, static_cast<size_t>((end - r) * V) * sizeof(float));
    r = end;
  }
}

// One rank: the whole step on the device, captured as a graph where the backend and the model can.
StepLogits Executor::compute_local(const ForwardBatch& b, const KvCacheView& kv) {
  const auto T = static_cast<int64_t>(b.tokens.size());
  const auto R = static_cast<int64_t>(b.logit_rows.size());
  const StepInput in = upload(b, kv);
  if (!backend_.can_capture() || !model_.capturable(T)) return model_.forward(in, kv);
  const StepShape shape{T, b.n_seqs, in.step.max_blocks, R, kv.k.empty() ? nullptr : kv.k[0]};
  StepLogits out;
  out.device = run_captured(shape, [&] { return model_.forward(in, kv).device; });
  return out;
}

// First time a shape is seen: run eagerly (which also sizes every scratch buffer). Second time: capture,
// then replay from then on, until a reallocation makes the captures stale.
const float* Executor::run_captured(const StepShape& shape, const std::function<const float*()>& compute) {
  if (captures_stale_ || backend_.generation() != backend_generation_ ||
      model_.scratch_generation() != scratch_generation_) {
    backend_.drop_captures();
    captured_.clear();
    seen_.clear();
    captures_stale_ = false;
    backend_generation_ = backend_.generation();
    scratch_generation_ = model_.scratch_generation();
  }
  if (auto it = captured_.find(shape); it != captured_.end()) {
    backend_.replay(it->second.id);
    ++replays_;
    return it->second.logits;
  }
  if (!seen_.insert(shape).second) {
    const float* out = nullptr;
    const int64_t id = backend_.capture([&] { out = compute(); });
    captured_[shape] = Capture{.id = id, .logits = out};
    ++captures_;
    backend_.replay(id);
    ++replays_;
    return out;
  }
  const float* out = compute();
  backend_generation_ = backend_.generation();
  scratch_generation_ = model_.scratch_generation();
  return out;
}

// Several ranks. The sequences are cut into micro-batches (one per pipeline stage, so that stage p works on
// micro-batch m while stage p + 1 works on m - 1); within each, this rank runs the tokens of its dp rank's
// sequences through its stage. The last stage's logits are gathered across dp and sent to every stage, so
// every rank returns the same logits.
void Executor::forward_parallel(const ForwardBatch& b, const KvCacheView& kv, float* logits) {
  const int64_t V = model_.info().vocab_size;
  const auto R = static_cast<int64_t>(b.logit_rows.size());
  std::vector<std::vector<int32_t>> seq_tokens(static_cast<size_t>(b.n_seqs));
  for (size_t i = 0; i < b.tokens.size(); ++i)
    seq_tokens[static_cast<size_t>(b.token_seq[i])].push_back(static_cast<int32_t>(i));
  std::vector<int32_t> row_of_token(b.tokens.size(), -1);
  for (int64_t j = 0; j < R; ++j) {
    const auto token = static_cast<size_t>(b.logit_rows[static_cast<size_t>(j)]);
    SY_CHECK(row_of_token[token] < 0, "logit row {} is asked for twice", token);
    row_of_token[token] = static_cast<int32_t>(j);
  }
  const auto dp_of = [&](int64_t s) { return b.seq_dp.empty() ? 0 : b.seq_dp[static_cast<size_t>(s)]; };

  // Micro-batches: contiguous runs of sequences with about equal token counts.
  const int64_t M = plan_.pp > 1 ? std::min<int64_t>(plan_.pp, b.n_seqs) : 1;
  std::vector<int64_t> bounds{0};
  const auto T = static_cast<int64_t>(b.tokens.size());
  int64_t acc = 0;
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    acc += static_cast<int64_t>(seq_tokens[static_cast<size_t>(s)].size());
    const auto m = static_cast<int64_t>(bounds.size());
    if (m < M && acc * M >= T * m && b.n_seqs - (s + 1) >= M - m) bounds.push_back(s + 1);
  }
  while (static_cast<int64_t>(bounds.size()) <= M) bounds.push_back(b.n_seqs);
  bounds.back() = b.n_seqs;

  // The global logit rows each dp rank produces, in its order of production. Without dp the last stage writes
  // each micro-batch's rows straight into `logits`; under dp into stage_logits_, gathered across dp after.
  std::vector<std::vector<int32_t>> rows_of_dp(static_cast<size_t>(plan_.dp));
  for (int64_t m = 0; m < M; ++m) {
    for (int d = 0; d < plan_.dp; ++d) {
      ForwardBatch lb;
      std::vector<int32_t>& rows = rows_of_dp[static_cast<size_t>(d)];
      const size_t first_row = rows.size();
      for (int64_t s = bounds[static_cast<size_t>(m)]; s < bounds[static_cast<size_t>(m) + 1]; ++s) {
        if (dp_of(s) != d) continue;
        for (int32_t i : seq_tokens[static_cast<size_t>(s)]) {
          const auto iu = static_cast<size_t>(i);
          if (row_of_token[iu] >= 0) {
            rows.push_back(row_of_token[iu]);
            lb.logit_rows.push_back(static_cast<int32_t>(lb.tokens.size()));
          }
          lb.tokens.push_back(b.tokens[iu]);
          lb.positions.push_back(b.positions[iu]);
          lb.slots.push_back(b.slots[iu]);
          lb.token_seq.push_back(static_cast<int32_t>(lb.n_seqs));
        }
        lb.block_tables.insert(lb.block_tables.end(), b.block_tables.begin() + s * b.max_blocks,
                               b.block_tables.begin() + (s + 1) * b.max_blocks);
        ++lb.n_seqs;
      }
      lb.max_blocks = b.max_blocks;
      if (d != plan_.dp_rank) continue;
      if (plan_.dp == 1) {
        run_stage(lb, kv, logits, rows.data() + first_row);
        continue;
      }
      if (plan_.last_stage() && stage_logits_.size() < rows.size() * static_cast<size_t>(V))
        stage_logits_.resize(rows.size() * static_cast<size_t>(V));
      run_stage(lb, kv, stage_logits_.data() + first_row * static_cast<size_t>(V), nullptr);
    }
  }

  // Under dp, assemble [R, V] on the last stage from every dp rank's rows; then send it to every stage.
  if (plan_.last_stage() && plan_.dp > 1) {
    size_t most = 0;
    for (const auto& r : rows_of_dp) most = std::max(most, r.size());
    const auto row = static_cast<size_t>(V);
    if (stage_logits_.size() < most * row) stage_logits_.resize(most * row);
    gathered_logits_.resize(most * row * static_cast<size_t>(plan_.dp));
    comm_.all_gather_host(*plan_.groups->dp, stage_logits_.data(), gathered_logits_.data(),
                          static_cast<int64_t>(most * row));
    for (size_t d = 0; d < rows_of_dp.size(); ++d) {
      for (size_t i = 0; i < rows_of_dp[d].size(); ++i) {
        std::copy_n(gathered_logits_.data() + (d * most + i) * row, row,
                    logits + static_cast<size_t>(rows_of_dp[d][i]) * row);
      }
    }
  }
  if (plan_.pp > 1 && R > 0) comm_.broadcast_host(*plan_.groups->pp, logits, R * V, plan_.pp - 1);
}

// This rank's stage over one micro-batch of its dp rank (possibly of no tokens), its input received from the
// previous stage and its output sent to the next. On the last stage, logit row i of the micro-batch goes to row
// dest_rows[i] of dest [*, V] (row i without dest_rows), copied in runs of consecutive rows.
void Executor::run_stage(const ForwardBatch& lb, const KvCacheView& kv, float* dest, const int32_t* dest_rows) {
  const auto T = static_cast<int64_t>(lb.tokens.size());
  const auto R = static_cast<int64_t>(lb.logit_rows.size());
  const int64_t V = model_.info().vocab_size;
  const StepInput in = upload(lb, kv);
  Communicator& pp = *plan_.groups->pp;
  if (!plan_.first_stage() && T > 0) {
    for (const StageTensor& t : model_.stage_boundary(T)) {
      comm_.recv(pp, t.data, t.count, t.dtype, plan_.pp_rank - 1);
    }
  }
  const StepLogits out = model_.forward(in, kv);
  if (!plan_.last_stage()) {
    if (T > 0) {
      for (const StageTensor& t : model_.stage_boundary(T)) {
        comm_.send(pp, t.data, t.count, t.dtype, plan_.pp_rank + 1);
      }
    }
    return;
  }
  if (R == 0) return;
  SY_CHECK(out.device != nullptr || out.host != nullptr, "the model's last stage returned no logits for {} rows", R);
  if (out.device != nullptr) backend_.mark(Phase::other);
  for (int64_t i = 0; i < R;) {
    int64_t end = dest_rows == nullptr ? R : i + 1;
    while (end < R && dest_rows[end] == dest_rows[end - 1] + 1) ++end;
    float* to = dest + (dest_rows == nullptr ? i : static_cast<int64_t>(dest_rows[i])) * V;
    const size_t n = static_cast<size_t>((end - i) * V);
    if (out.device != nullptr) {
      backend_.copy_to_host(to, out.device + i * V, n * sizeof(float));
    } else {
      std::copy_n(out.host + i * V, n, to);
    }
    i = end;
  }
}

}  // namespace sy
