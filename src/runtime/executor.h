// The executor: one rank's side of a step, from the host batch the engine schedules to the logits it
// samples. It uploads the batch's index arrays, cuts the batch into pipeline micro-batches and each into
// the sequences of this rank's dp rank, moves the hidden state across stage boundaries, captures and
// replays single-rank steps per shape, and assembles the logits of every dp rank and stage. The model
// (model/model.h) is the pure forward it calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/model.h"

namespace sy {

// Host-side description of one step. Token i belongs to sequence token_seq[i], sits at positions[i]
// and writes its K/V to slots[i]; block_tables holds each sequence's block ids ([n_seqs, max_blocks]).
struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> token_seq;
  std::vector<int32_t> slots;
  std::vector<int32_t> block_tables;
  int64_t n_seqs = 0;
  int64_t max_blocks = 0;
  std::vector<int32_t> logit_rows;  // token indices whose next-token logits are returned, in this order
  // Attention data parallelism: the dp rank that holds each sequence's KV cache and runs its attention
  // ([n_seqs]; empty: every sequence on dp rank 0). Block ids in block_tables and slots are that dp rank's.
  std::vector<int32_t> seq_dp;
};

// What a step leaves for the engine besides computing the logits: rows copied to the host and the tokens the
// runner sampled where the logits are (on a GPU only the token ids cross to the host).
struct StepOutputs {
  // Host [logit_rows.size(), vocab]: row r is written when copy_rows is empty or copy_rows[r] is 1, and for
  // every sampled row that came back kSampleNotFinite (so that the engine can say what was wrong with it).
  float* logits = nullptr;
  std::vector<uint8_t> copy_rows;
  std::vector<SampleRow> sample;  // the rows to sample (SampleRow::row indexes logit_rows), with their draws
  std::vector<int32_t> sampled;   // out: one per sample entry, the token or kSampleNotFinite
  double host_sampling_ms = 0.0;  // out: host time spent sampling in this step
};

// What the engine steps: a host batch in, logits out. The executor over a loaded model, or a test's
// stand-in for one.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual const ModelInfo& info() const = 0;
  // Collective over every rank of the layout: each rank passes the same batch and receives the same
  // logits. Writes logits [batch.logit_rows.size(), vocab] to host memory `logits`.
  virtual void forward(const ForwardBatch& batch, const KvCacheView& kv, float* logits) = 0;
  // The step with its sampling, as collective as forward. The default runs forward (every row to the
  // host) and samples there.
  virtual void forward_and_sample(const ForwardBatch& batch, const KvCacheView& kv, StepOutputs& out);
  // As Model::checks_finite and Model::first_nonfinite.
  virtual bool checks_finite() const { return false; }
  virtual std::string first_nonfinite() const { return ""; }
};

class Executor final : public StepRunner {
 public:
  Executor(Model& model, Backend& backend);
  ~Executor() override;
  const ModelInfo& info() const override { return model_.info(); }
  void forward(const ForwardBatch& batch, const KvCacheView& kv, float* logits) override;
  // On one rank the rows are sampled by the backend where the logits are (Backend::sample_tokens) and only
  // the rows asked for are copied to the host; over several ranks, as the default.
  void forward_and_sample(const ForwardBatch& batch, const KvCacheView& kv, StepOutputs& out) override;
  bool checks_finite() const override { return model_.checks_finite(); }
  std::string first_nonfinite() const override { return model_.first_nonfinite(); }
  // Steps replayed from a capture, and captures made, since the start (for tests and logs).
  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }

 private:
  // What a captured step bakes in: sizes and the KV pool it addresses.
  struct StepShape {
    int64_t tokens, n_seqs, width, rows;
    const void* kv;
    bool operator<(const StepShape& o) const;
  };
  void check_batch(const ForwardBatch& b, const KvCacheView& kv) const;
  StepInput upload(const ForwardBatch& b, const KvCacheView& kv);
  StepLogits compute_local(const ForwardBatch& b, const KvCacheView& kv);
  void forward_parallel(const ForwardBatch& b, const KvCacheView& kv, float* logits);
  void run_stage(const ForwardBatch& lb, const KvCacheView& kv, float* dest, const int32_t* dest_rows);
  const float* run_captured(const StepShape& shape, const std::function<const float*()>& compute);

  Model& model_;
  Backend& backend_;
  const ShardPlan& plan_;
  ModelComm comm_;
  std::unique_ptr<DeviceBuffer> indices_dev_;  // a step's index arrays on the device
  std::vector<int32_t> indices_;               // their host staging
  std::vector<int32_t> padded_tables_;
  std::vector<int32_t> vocab_rows_;     // token ids as rows of this rank's vocabulary share
  std::vector<float> stage_logits_;     // under dp: this rank's logit rows, kept between steps (no refill)
  std::vector<float> gathered_logits_;  // the last stage's logits of every dp rank
  struct Capture {
    int64_t id = 0;
    const float* logits = nullptr;  // where the step leaves its logits
  };
  std::map<StepShape, Capture> captured_;
  std::set<StepShape> seen_;
  bool captures_stale_ = false;  // the index buffer moved
  uint64_t backend_generation_ = 0;
  uint64_t scratch_generation_ = 0;
  int64_t replays_ = 0;
  int64_t captures_ = 0;
};

}  // namespace sy
