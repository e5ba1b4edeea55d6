// Executor on one rank over a recording model: what reaches the model's forward is the host batch, on the
// device, with the block tables padded and the tokens mapped to vocabulary rows; the logits it returns
// (on the device or assembled on the host) come back in the batch's row order; malformed batches are
// refused before the model sees them.
#include <gtest/gtest.h>

#include <string>

#include "base/check.h"
#include "runtime/executor.h"

namespace sy {
namespace {

// A model of no layers whose logit row for token t is (t, t + 0.5, t + 1, ...): it records what each forward
// received, read back from the device through the backend.
class RecordingModel : public Model {
 public:
  RecordingModel(Backend& backend, Share vocab, bool host_logits)
      : backend_(backend), vocab_(vocab), host_logits_(host_logits) {
    info_.architecture = "Recording";
    info_.vocab_size = kVocab;
    info_.hidden_size = 1;
    info_.max_position_embeddings = 64;
  }
  static constexpr int64_t kVocab = 7;

  const ModelInfo& info() const override { return info_; }
  const ShardPlan& plan() const override { return plan_; }
  Share vocab_share() const override { return vocab_; }
  std::vector<StageTensor> stage_boundary(int64_t) override { return {}; }
  bool capturable(int64_t) const override { return true; }
  uint64_t scratch_generation() const override { return 0; }

  StepLogits forward(const StepInput& in, const KvCacheView&) override {
    const int64_t T = in.step.tokens, R = in.n_logit_rows;
    const auto read = [&](const int32_t* dev, int64_t n) {
      std::vector<int32_t> h(static_cast<size_t>(n));
      if (n > 0) backend_.copy_to_host(h.data(), dev, h.size() * sizeof(int32_t));
      return h;
    };
    Seen s;
    s.positions = read(in.step.positions, T);
    s.token_seq = read(in.step.token_seq, T);
    s.slots = read(in.step.slots, T);
    s.block_tables = read(in.step.block_tables, in.step.n_seqs * in.step.max_blocks);
    s.vocab_rows = read(in.vocab_rows, T);
    s.logit_rows = read(in.logit_rows, R);
    s.tokens.assign(in.tokens.begin(), in.tokens.end());
    s.max_blocks = in.step.max_blocks;
    s.block_size = in.step.block_size;
    seen.push_back(s);
    logits_.assign(static_cast<size_t>(R * kVocab), 0.0f);
    for (int64_t j = 0; j < R; ++j) {
      const int32_t t = in.tokens[static_cast<size_t>(s.logit_rows[static_cast<size_t>(j)])];
      for (int64_t v = 0; v < kVocab; ++v)
        logits_[static_cast<size_t>(j * kVocab + v)] = static_cast<float>(t) + 0.5f * static_cast<float>(v);
    }
    if (host_logits_) return {.host = logits_.data()};
    device_ = backend_.alloc(std::max<size_t>(logits_.size(), 1) * sizeof(float));
    backend_.copy_to_device(device_->data(), logits_.data(), logits_.size() * sizeof(float));
    return {.device = device_->as<float>()};
  }

  struct Seen {
    std::vector<int32_t> positions, token_seq, slots, block_tables, vocab_rows, logit_rows, tokens;
    int64_t max_blocks = 0, block_size = 0;
  };
  std::vector<Seen> seen;

 private:
  Backend& backend_;
  ModelInfo info_;
  ShardPlan plan_;
  Share vocab_;
  bool host_logits_;
  std::vector<float> logits_;
  std::unique_ptr<DeviceBuffer> device_;
};

// Two sequences: one prefilling 3 tokens over 3 blocks, one decoding a token over 1 block.
ForwardBatch two_sequences() {
  ForwardBatch b;
  b.tokens = {4, 1, 6, 2};
  b.positions = {0, 1, 2, 9};
  b.token_seq = {0, 0, 0, 1};
  b.slots = {20, 21, 22, 9};
  b.n_seqs = 2;
  b.max_blocks = 3;
  b.block_tables = {5, 6, 7, 2, 0, 0};
  b.logit_rows = {3, 2};
  return b;
}

TEST(Executor, TheModelSeesTheBatchOnTheDevice) {
  auto backend = make_cpu_backend();
  RecordingModel model(*backend, {.start = 0, .count = RecordingModel::kVocab}, false);
  Executor executor(model, *backend);
  const ForwardBatch b = two_sequences();
  std::vector<float> logits(2 * RecordingModel::kVocab);
  executor.forward(b, KvCacheView{.block_size = 4}, logits.data());
  ASSERT_EQ(model.seen.size(), 1u);
  const RecordingModel::Seen& s = model.seen[0];
  EXPECT_EQ(s.positions, b.positions);
  EXPECT_EQ(s.token_seq, b.token_seq);
  EXPECT_EQ(s.slots, b.slots);
  EXPECT_EQ(s.tokens, b.tokens);
  EXPECT_EQ(s.vocab_rows, b.tokens);  // the whole vocabulary on this rank
  EXPECT_EQ(s.logit_rows, b.logit_rows);
  EXPECT_EQ(s.block_size, 4);
  // Width 3 padded to the next power of two, with zeros.
  EXPECT_EQ(s.max_blocks, 4);
  EXPECT_EQ(s.block_tables, (std::vector<int32_t>{5, 6, 7, 0, 2, 0, 0, 0}));
  // Row 0 is token index 3 (id 2), row 1 token index 2 (id 6).
  for (int64_t v = 0; v < RecordingModel::kVocab; ++v) {
    EXPECT_EQ(logits[static_cast<size_t>(v)], 2.0f + 0.5f * static_cast<float>(v));
    EXPECT_EQ(logits[static_cast<size_t>(RecordingModel::kVocab + v)], 6.0f + 0.5f * static_cast<float>(v));
  }
}

TEST(Executor, HostLogitsAndVocabularySharesArePassedOn) {
  auto backend = make_cpu_backend();
  // This rank holds ids [2, 5): the others map to the row past its share (3).
  RecordingModel model(*backend, {.start = 2, .count = 3}, true);
  Executor executor(model, *backend);
  ForwardBatch b = two_sequences();
  b.logit_rows = {0};
  std::vector<float> logits(RecordingModel::kVocab);
  executor.forward(b, KvCacheView{.block_size = 4}, logits.data());
  ASSERT_EQ(model.seen.size(), 1u);
  EXPECT_EQ(model.seen[0].vocab_rows, (std::vector<int32_t>{2, 3, 3, 0}));
  for (int64_t v = 0; v < RecordingModel::kVocab; ++v)
    EXPECT_EQ(logits[static_cast<size_t>(v)], 4.0f + 0.5f * static_cast<float>(v));
}

// forward_and_sample: the rows are sampled where the logits are, and only the rows asked for reach the host.
// Row j's logits are t + 0.5 v, so softmax at temperature 1 gives v the weight e^(v / 2): a draw of 0 lands
// on token 0, and top-k 2 keeps tokens 6 and 5 (6 first).
TEST(Executor, SamplesWhereTheLogitsAreAndCopiesOnlyTheRowsAskedFor) {
  auto backend = make_cpu_backend();
  RecordingModel model(*backend, {.start = 0, .count = RecordingModel::kVocab}, false);
  Executor executor(model, *backend);
  const ForwardBatch b = two_sequences();
  const int64_t V = RecordingModel::kVocab;
  std::vector<float> logits(2 * V, -1.0f);
  StepOutputs out{.logits = logits.data(),
                  .copy_rows = {1, 0},
                  .sample = {{.row = 1, .temperature = 0.0f},
                             {.row = 0, .temperature = 1.0f, .u = 0.0},
                             {.row = 1, .temperature = 1.0f, .top_k = 2, .u = 0.0}}};
  executor.forward_and_sample(b, KvCacheView{.block_size = 4}, out);
  EXPECT_EQ(out.sampled, (std::vector<int32_t>{6, 0, 6}));
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_EQ(logits[static_cast<size_t>(v)], 2.0f + 0.5f * static_cast<float>(v));  // row 0: asked for
    EXPECT_EQ(logits[static_cast<size_t>(V + v)], -1.0f);                            // row 1: stayed on the device
  }
  out.sample = {{.row = 2}};
  try {
    executor.forward_and_sample(b, KvCacheView{.block_size = 4}, out);
    ADD_FAILURE() << "a sampled row past the step's logit rows was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sampled row 2 is outside the step's 2 logit rows"), std::string::npos)
        << e.what();
  }
}

TEST(Executor, MalformedBatchesNeverReachTheModel) {
  auto backend = make_cpu_backend();
  RecordingModel model(*backend, {.start = 0, .count = RecordingModel::kVocab}, false);
  Executor executor(model, *backend);
  std::vector<float> logits(4 * RecordingModel::kVocab);
  const auto refused = [&](const ForwardBatch& b, const KvCacheView& kv, const std::string& expected) {
    try {
      executor.forward(b, kv, logits.data());
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  const KvCacheView kv{.block_size = 4};
  ForwardBatch b = two_sequences();
  b.tokens[1] = 7;
  refused(b, kv, "token id 7 is outside the vocabulary [0, 7)");
  b = two_sequences();
  b.positions.pop_back();
  refused(b, kv, "batch arrays disagree: 4 tokens, 3 positions");
  b = two_sequences();
  b.logit_rows = {4};
  refused(b, kv, "logit row 4 is outside the batch's 4 tokens");
  b = two_sequences();
  b.block_tables.pop_back();
  refused(b, kv, "block table holds 5 entries, expected 2 sequences x 3 blocks");
  b = two_sequences();
  b.token_seq[3] = 2;
  refused(b, kv, "token of sequence 2 in a batch of 2");
  b = two_sequences();
  b.seq_dp = {0, 1};
  refused(b, kv, "sequence on dp rank 1, the layout has dp 1");
  KvCacheView one_layer = kv;
  one_layer.k.push_back(nullptr);
  refused(two_sequences(), one_layer, "KV cache has 1 layers, model has 0");
  refused(ForwardBatch{}, kv, "a forward pass needs at least one token");
  EXPECT_TRUE(model.seen.empty());
}

}  // namespace
}  // namespace sy
