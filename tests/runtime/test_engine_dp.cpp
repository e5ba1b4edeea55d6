// Engine under attention data parallelism: requests spread over dp ranks, one KV pool per dp rank with
// local block ids, preemption inside a dp rank, exact KV accounting over random rounds; and on the
// conformance fixtures, outputs unchanged with dp 1 and with dp ranks simulated on one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "base/check.h"
#include "common/fixture.h"
#include "runtime/engine.h"
#include "runtime/executor.h"

namespace sy {
namespace {

// Next token of a sequence: a hash of all its tokens, in order.
int32_t echo_next(const std::vector<int32_t>& tokens, int64_t vocab) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

// A model that stands for every dp rank at once: it keeps one simulated KV pool per dp rank, and its
// next token is echo_next over the tokens it reads back from the pool of the sequence's dp rank
// through the block table. An output is therefore right only if every block a sequence reads held
// that sequence's tokens, whatever else the step ran (blocks shared through the prefix cache included).
// It throws on any malformed batch, and when a step writes a block that another sequence's table holds.
class KvEchoModel : public StepRunner {
 public:
  KvEchoModel(int dp_size, int64_t kv_blocks, int64_t block_size) : kv_blocks_(kv_blocks), block_size_(block_size) {
    info_.architecture = "KvEcho";
    info_.vocab_size = 61;
    info_.hidden_size = 1;
    info_.max_position_embeddings = 4096;
    info_.dp_size = dp_size;  // kv.n_layers 0: the engine's device pool holds nothing
    pools_.assign(static_cast<size_t>(dp_size), std::vector<Cell>(static_cast<size_t>(kv_blocks * block_size)));
  }
  const ModelInfo& info() const override { return info_; }

  void forward(const ForwardBatch& b, const KvCacheView& kv, float* logits) override {
    SY_CHECK(kv.n_blocks == kv_blocks_ && kv.block_size == block_size_,
             "the engine's pool is {} blocks of {}, expected {} of {} (one dp rank's)", kv.n_blocks, kv.block_size,
             kv_blocks_, block_size_);
    SY_CHECK(static_cast<int64_t>(b.seq_dp.size()) == b.n_seqs, "seq_dp has {} entries for {} sequences",
             b.seq_dp.size(), b.n_seqs);
    for (int32_t d : b.seq_dp) SY_CHECK(d >= 0 && d < info_.dp_size, "seq_dp {} outside [0, {})", d, info_.dp_size);
    batches_.push_back(b);
    // Blocks a sequence touches in this step: those up to its highest position.
    std::vector<int64_t> used_blocks(static_cast<size_t>(b.n_seqs), 0);
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      auto& u = used_blocks[static_cast<size_t>(b.token_seq[i])];
      u = std::max(u, b.positions[i] / block_size_ + 1);
    }
    // Per dp rank: the sequences whose tables hold each block.
    std::vector<std::map<int32_t, std::set<int32_t>>> holders(pools_.size());
    for (int64_t s = 0; s < b.n_seqs; ++s) {
      for (int64_t j = 0; j < used_blocks[static_cast<size_t>(s)]; ++j) {
        const int32_t block = b.block_tables[static_cast<size_t>(s * b.max_blocks + j)];
        SY_CHECK(block >= 0 && block < kv_blocks_, "block id {} outside a dp rank's pool of {}", block, kv_blocks_);
        holders[static_cast<size_t>(b.seq_dp[static_cast<size_t>(s)])][block].insert(static_cast<int32_t>(s));
      }
    }
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      const int32_t s = b.token_seq[i];
      const int32_t block = slot_of(b, s, b.positions[i]) / static_cast<int32_t>(block_size_);
      SY_CHECK(holders[static_cast<size_t>(b.seq_dp[static_cast<size_t>(s)])][block].size() == 1,
               "position {} of sequence {} writes block {} of dp rank {}, which another sequence's table holds",
               b.positions[i], s, block, b.seq_dp[static_cast<size_t>(s)]);
    }
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      const int32_t s = b.token_seq[i];
      const int32_t slot = slot_of(b, s, b.positions[i]);
      SY_CHECK(b.slots[i] == slot, "token {} writes slot {}, its block table says {}", i, b.slots[i], slot);
      pools_[static_cast<size_t>(b.seq_dp[static_cast<size_t>(s)])][static_cast<size_t>(slot)] = {
          .position = b.positions[i], .token = b.tokens[i]};
    }
    const int64_t vocab = info_.vocab_size;
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      const auto i = static_cast<size_t>(b.logit_rows[r]);
      const int32_t s = b.token_seq[i];
      const auto& pool = pools_[static_cast<size_t>(b.seq_dp[static_cast<size_t>(s)])];
      std::vector<int32_t> context;
      for (int32_t p = 0; p <= b.positions[i]; ++p) {
        const Cell& c = pool[static_cast<size_t>(slot_of(b, s, p))];
        SY_CHECK(c.position == p, "position {} reads a slot written for position {}", p, c.position);
        context.push_back(c.token);
      }
      std::fill(logits + r * vocab, logits + (r + 1) * vocab, 0.0f);
      logits[r * vocab + echo_next(context, vocab)] = 1.0f;
    }
  }

  const std::vector<ForwardBatch>& batches() const { return batches_; }

 private:
  struct Cell {
    int32_t position = -1;
    int32_t token = -1;
  };
  int32_t slot_of(const ForwardBatch& b, int32_t s, int32_t pos) const {
    const int32_t block = b.block_tables[static_cast<size_t>(s * b.max_blocks + pos / block_size_)];
    return static_cast<int32_t>(block * block_size_ + pos % block_size_);
  }
  ModelInfo info_;
  int64_t kv_blocks_;
  int64_t block_size_;
  std::vector<std::vector<Cell>> pools_;  // per dp rank: [kv_blocks * block_size]
  std::vector<ForwardBatch> batches_;
};

// What the engine must generate for `r` on KvEchoModel.
std::vector<int32_t> echo_output(const Request& r, int64_t vocab) {
  std::vector<int32_t> tokens = r.prompt, out;
  while (static_cast<int64_t>(out.size()) < r.max_new_tokens) {
    out.push_back(echo_next(tokens, vocab));
    tokens.push_back(out.back());
    if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), out.back()) != r.stop_tokens.end()) break;
  }
  return out;
}

std::vector<int32_t> prompt_of(int64_t len, int32_t first) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((first + 7 * i) % 61));
  return p;
}

// The dp rank of every live sequence, by id.
std::map<int64_t, int32_t> live_dp(const Scheduler& s) {
  std::map<int64_t, int32_t> out;
  for (const Sequence* q : s.running()) out[q->id] = q->dp;
  for (const Sequence* q : s.waiting()) out[q->id] = q->dp;
  return out;
}

class EngineDp : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = make_cpu_backend();
};

TEST_F(EngineDp, SpreadsRequestsOverDpRanksWithLocalBlockIds) {
  KvEchoModel model(3, 16, 4);
  Engine engine(model, *backend_, {.block_size = 4, .kv_blocks = 16});
  std::vector<Request> requests;
  for (int i = 0; i < 7; ++i) requests.push_back({.prompt = prompt_of(3 + i, i), .max_new_tokens = 5});
  std::vector<int64_t> ids;
  for (const auto& r : requests) ids.push_back(engine.add(r));
  ASSERT_TRUE(engine.step());
  const ForwardBatch& first = model.batches().front();
  EXPECT_EQ(first.seq_dp, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0}));
  // Block ids are per pool: the first sequence of each dp rank starts at block 0 of its own pool.
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(first.block_tables[static_cast<size_t>(s * first.max_blocks)], 0);
  engine.run();
  engine.check_integrity();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(engine.result(ids[i]).output, echo_output(requests[i], 61));
}

TEST_F(EngineDp, PreemptionStaysInsideTheDpRankThatRanOutOfBlocks) {
  // dp rank 0 gets two long sequences (22 tokens = 6 blocks each) in a pool of 6 blocks; dp rank 1 two
  // that fit together exactly (11 tokens = 3 blocks each) and are the newest while dp rank 0 runs out.
  KvEchoModel model(2, 6, 4);
  Engine engine(model, *backend_, {.block_size = 4, .kv_blocks = 6});
  const std::vector<Request> requests = {{.prompt = prompt_of(10, 1), .max_new_tokens = 12},
                                         {.prompt = prompt_of(1, 2), .max_new_tokens = 10},
                                         {.prompt = prompt_of(10, 3), .max_new_tokens = 12},
                                         {.prompt = prompt_of(1, 4), .max_new_tokens = 10}};
  for (const auto& r : requests) engine.add(r);
  while (!engine.scheduler().idle()) {
    ASSERT_TRUE(engine.step());
    engine.check_integrity();
  }
  // The prompts start with distinct tokens: a second prefill from position 0 of the same first token
  // is a recomputation after preemption.
  std::map<int32_t, int> prefills;  // by first token
  std::set<int32_t> preempted_on;
  for (const ForwardBatch& b : model.batches()) {
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      if (b.positions[i] != 0) continue;
      const int32_t dp = b.seq_dp[static_cast<size_t>(b.token_seq[i])];
      EXPECT_EQ(dp, (b.tokens[i] - 1) % 2)
          << "request " << b.tokens[i] - 1 << " is not on the dp rank it was placed on";
      if (++prefills[b.tokens[i]] > 1) preempted_on.insert(dp);
    }
  }
  EXPECT_GT(engine.scheduler().preemptions(), 0);
  EXPECT_EQ(preempted_on, (std::set<int32_t>{0}));
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(engine.result(static_cast<int64_t>(i)).output, echo_output(requests[i], 61));
  }
}

// Random arrivals (with stop tokens) between steps: after every step every dp rank's pool is
// partitioned exactly, placement follows the live counts, no sequence changes dp rank, and every
// output is what its own tokens give.
// Seeded rounds of adds, steps and aborts on KvEchoModel, the block accounting checked after every step and
// every output checked at the end. With `shared`, prompts start with one of four prefixes of 2 to 9 blocks
// (or are fresh), so that the prefix cache shares blocks between live and finished sequences.
struct RandomRounds {
  int64_t preemptions = 0;
  int64_t hit_tokens = 0;
  int64_t aborted = 0;
};
RandomRounds random_rounds(Backend& backend, int dp_size, bool prefix_cache, bool shared, unsigned seed) {
  const int64_t blocks = shared ? 16 : 10;  // with shared prefixes: room for some cached blocks, and eviction
  KvEchoModel model(dp_size, blocks, 4);
  Engine engine(model, backend,
                {.block_size = 4,
                 .kv_blocks = blocks,
                 .prefix_cache = prefix_cache,
                 .scheduler = {.max_batch_tokens = 16, .max_seqs = 6}});
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int k = 0; k < 4; ++k) prefixes.push_back(prompt_of(int64_t{4} * uniform(2, 9), uniform(0, 60)));
  std::vector<Request> requests;
  std::map<int64_t, int32_t> placed;
  std::set<int64_t> aborted;
  RandomRounds out;
  for (int round = 0; round < 300 || !engine.scheduler().idle(); ++round) {
    if (round < 300 && uniform(0, 1) == 0) {
      std::vector<int64_t> live(static_cast<size_t>(dp_size), 0);
      for (const auto& [id, dp] : live_dp(engine.scheduler())) ++live[static_cast<size_t>(dp)];
      Request r{.prompt = prompt_of(uniform(1, 16), uniform(0, 60)), .max_new_tokens = uniform(1, 16)};
      if (shared && uniform(0, 3) != 0) {
        std::vector<int32_t> p = prefixes[static_cast<size_t>(uniform(0, 3))];
        p.resize(std::min<size_t>(p.size(), static_cast<size_t>(blocks * 4 - r.max_new_tokens) - r.prompt.size()));
        r.prompt.insert(r.prompt.begin(), p.begin(), p.end());
      }
      if (uniform(0, 3) == 0) r.stop_tokens = {uniform(0, 60)};
      requests.push_back(r);
      const int64_t id = engine.add(r);
      EXPECT_EQ(id + 1, static_cast<int64_t>(requests.size()));
      placed[id] = engine.scheduler().waiting().back()->dp;
      const int64_t least = *std::min_element(live.begin(), live.end());
      if (prefix_cache) {  // the longest cached prefix, within the load slack
        EXPECT_LE(live[static_cast<size_t>(placed[id])], least + Scheduler::kPrefixLoadSlack);
      } else {
        EXPECT_EQ(placed[id], std::min_element(live.begin(), live.end()) - live.begin());
      }
    }
    if (round < 300 && uniform(0, 9) == 0 && !live_dp(engine.scheduler()).empty()) {
      const auto live = live_dp(engine.scheduler());
      auto it = live.begin();
      std::advance(it, uniform(0, static_cast<int>(live.size()) - 1));
      if (engine.abort(it->first)) aborted.insert(it->first);
      engine.check_integrity();
    }
    if (engine.scheduler().idle()) continue;
    EXPECT_TRUE(engine.step());
    engine.check_integrity();
    for (const auto& [id, dp] : live_dp(engine.scheduler())) EXPECT_EQ(dp, placed[id]) << "request " << id;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestResult& r = engine.result(static_cast<int64_t>(i));
    EXPECT_TRUE(r.finished);
    if (aborted.count(static_cast<int64_t>(i)) != 0) continue;
    EXPECT_EQ(r.output, echo_output(requests[i], 61)) << "request " << i;
    EXPECT_EQ(r.cached_tokens % 4, 0);
    EXPECT_LT(r.cached_tokens, static_cast<int64_t>(requests[i].prompt.size()));
  }
  out.preemptions = engine.scheduler().preemptions();
  out.hit_tokens = engine.scheduler().prefix_hit_tokens();
  out.aborted = static_cast<int64_t>(aborted.size());
  return out;
}

TEST_F(EngineDp, KvAccountingStaysExactOverRandomRounds) {
  for (int dp_size : {1, 2, 3}) {
    SCOPED_TRACE("dp " + std::to_string(dp_size));
    const RandomRounds r = random_rounds(*backend_, dp_size, false, false, 99u + static_cast<unsigned>(dp_size));
    EXPECT_GT(r.preemptions, 0);
    EXPECT_EQ(r.hit_tokens, 0);
  }
}

// The same with the prefix cache on and prompts sharing prefixes: blocks are shared between sequences,
// released into the cache, matched again and evicted, under preemption and aborts, over many seeds.
TEST_F(EngineDp, PrefixCacheKeepsAccountingAndOutputsOverRandomRounds) {
  int64_t hits = 0, preemptions = 0, aborted = 0;
  for (int dp_size : {1, 2, 3}) {
    for (unsigned seed = 0; seed < 20; ++seed) {
      SCOPED_TRACE("dp " + std::to_string(dp_size) + " seed " + std::to_string(seed));
      const RandomRounds r =
          random_rounds(*backend_, dp_size, true, true, 1000u * static_cast<unsigned>(dp_size) + seed);
      hits += r.hit_tokens;
      preemptions += r.preemptions;
      aborted += r.aborted;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(hits, 1000);  // the cache was used, not just on
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(aborted, 0);
}

// A single-rank model run as attention-DP: one pool holds every dp rank's blocks side by side (block
// b of dp rank d at d * kv_blocks + b), so the forward pass sees exactly what dp ranks would.
class SimulatedDpModel : public StepRunner {
 public:
  SimulatedDpModel(StepRunner& inner, Backend& backend, int dp_size, int64_t kv_blocks, int64_t block_size)
      : inner_(inner),
        info_(inner.info()),
        kv_blocks_(kv_blocks),
        pool_(backend, inner.info().kv, dp_size * kv_blocks, block_size) {
    info_.dp_size = dp_size;
  }
  const ModelInfo& info() const override { return info_; }

  void forward(const ForwardBatch& b, const KvCacheView& kv, float* logits) override {
    SY_CHECK(kv.n_blocks == kv_blocks_, "the engine's pool has {} blocks, one dp rank's is {}", kv.n_blocks,
             kv_blocks_);
    SY_CHECK(static_cast<int64_t>(b.seq_dp.size()) == b.n_seqs, "seq_dp has {} entries for {} sequences",
             b.seq_dp.size(), b.n_seqs);
    seq_dp_seen_.insert(b.seq_dp.begin(), b.seq_dp.end());
    ForwardBatch global = b;
    global.seq_dp.clear();
    for (size_t j = 0; j < global.block_tables.size(); ++j) {
      global.block_tables[j] += static_cast<int32_t>(b.seq_dp[j / static_cast<size_t>(b.max_blocks)] * kv_blocks_);
    }
    for (size_t i = 0; i < global.slots.size(); ++i) {
      global.slots[i] +=
          static_cast<int32_t>(b.seq_dp[static_cast<size_t>(b.token_seq[i])] * kv_blocks_ * kv.block_size);
    }
    inner_.forward(global, pool_.view(), logits);
  }

  const std::set<int32_t>& seq_dp_seen() const { return seq_dp_seen_; }

 private:
  StepRunner& inner_;
  ModelInfo info_;
  int64_t kv_blocks_;
  KvPool pool_;
  std::set<int32_t> seq_dp_seen_;
};

class EngineDpFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = test::load_fixture(GetParam());
    backend_ = make_cpu_backend();
    model_ = load_model({.dir = fixture_.dir}, *backend_);
    ASSERT_EQ(model_->info().dp_size, 1);
    executor_ = std::make_unique<Executor>(*model_, *backend_);
  }

  // Every prompt twice (the greedy one generating its continuation, the others `other_tokens` tokens, which
  // have no reference and are not checked), batched with mixed prefill and decode; checks each against the
  // reference logits and tokens.
  void run_and_check(StepRunner& model, int64_t kv_blocks, int64_t other_tokens = 1) {
    Engine engine(model, *backend_,
                  {.block_size = 4, .kv_blocks = kv_blocks, .scheduler = {.max_batch_tokens = 8, .max_seqs = 16}});
    std::vector<size_t> prompt_of_id;
    for (int copy = 0; copy < 2; ++copy) {
      for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
        const bool greedy = static_cast<int>(i) == fixture_.greedy_prompt;
        engine.add({.prompt = fixture_.prompts[i],
                    .max_new_tokens = greedy ? static_cast<int64_t>(fixture_.greedy_tokens.size()) : other_tokens,
                    .keep_logits = true});
        prompt_of_id.push_back(i);
      }
    }
    engine.run();
    engine.check_integrity();
    const int64_t vocab = model.info().vocab_size;
    for (size_t id = 0; id < prompt_of_id.size(); ++id) {
      const size_t i = prompt_of_id[id];
      const RequestResult& r = engine.result(static_cast<int64_t>(id));
      const auto len = static_cast<int64_t>(fixture_.prompts[i].size());
      ASSERT_GE(static_cast<int64_t>(r.logits.size()), len * vocab) << "request " << id;
      EXPECT_LE(test::max_relative_row_error(r.logits.data(), fixture_.prompt_logits[i].data.data(), len, vocab),
                test::kLogitTolerance)
          << "request " << id;
      if (static_cast<int>(i) == fixture_.greedy_prompt) {
        EXPECT_EQ(r.output, fixture_.greedy_tokens) << "request " << id;
      }
    }
    preemptions_ = engine.scheduler().preemptions();
  }

  test::Fixture fixture_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Executor> executor_;  // over model_
  int64_t preemptions_ = 0;
};

TEST_P(EngineDpFixture, DpOneOutputsUnchanged) {
  run_and_check(*executor_, 64);
  SimulatedDpModel recorded(*executor_, *backend_, 1, 64, 4);
  run_and_check(recorded, 64);
  EXPECT_EQ(recorded.seq_dp_seen(), (std::set<int32_t>{0}));
}

TEST_P(EngineDpFixture, SimulatedDpRanksKeepOutputs) {
  for (int dp_size : {2, 3}) {
    SCOPED_TRACE("dp " + std::to_string(dp_size));
    SimulatedDpModel dp_model(*executor_, *backend_, dp_size, 64, 4);
    run_and_check(dp_model, 64);
    std::set<int32_t> all;
    for (int32_t d = 0; d < dp_size; ++d) all.insert(d);
    EXPECT_EQ(dp_model.seq_dp_seen(), all);
    // Each dp rank's pool holds just the longest sequence (the other prompts now generate as many tokens as
    // the greedy one, so that they stay resident while it grows): the sequences sharing a pool get preempted.
    const auto steps = static_cast<int64_t>(fixture_.greedy_tokens.size());
    int64_t longest = 0;
    for (const auto& p : fixture_.prompts) longest = std::max(longest, static_cast<int64_t>(p.size()) + steps);
    const int64_t blocks = (longest + 3) / 4;
    SimulatedDpModel tight(*executor_, *backend_, dp_size, blocks, 4);
    run_and_check(tight, blocks, steps);
    EXPECT_GT(preemptions_, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineDpFixture, ::testing::ValuesIn(test::fixture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sy
