// Scheduler: token budget, chunked prefill, decode-first ordering, admission limits and preemption; under
// attention data parallelism, placement over dp ranks and one KV pool per dp rank.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "base/check.h"
#include "runtime/scheduler.h"

namespace sy {
namespace {

Sequence make_seq(int64_t id, int64_t len) {
  Sequence s;
  s.id = id;
  s.tokens.assign(static_cast<size_t>(len), 1);
  return s;
}

// Marks the chunks as computed and appends a sampled token where a chunk reached the end.
void complete(const std::vector<ScheduledChunk>& chunks) {
  for (const auto& c : chunks) {
    const bool sample = c.samples_next();
    c.seq->computed = c.start + c.len;
    if (sample) c.seq->tokens.push_back(2);
  }
}

TEST(Scheduler, ChunksALongPromptWithinTheBudget) {
  BlockManager blocks(16, 4);
  Scheduler s(blocks, {.max_batch_tokens = 5, .max_seqs = 8});
  Sequence a = make_seq(0, 12);
  s.add(&a);
  std::vector<int64_t> lens;
  while (a.tokens.size() == 12) {
    auto chunks = s.schedule();
    ASSERT_EQ(chunks.size(), 1u);
    lens.push_back(chunks[0].len);
    complete(chunks);
  }
  EXPECT_EQ(lens, (std::vector<int64_t>{5, 5, 2}));
  EXPECT_EQ(a.computed, 12);
}

TEST(Scheduler, DecodeTokensGoFirstThenPrefill) {
  BlockManager blocks(16, 4);
  Scheduler s(blocks, {.max_batch_tokens = 6, .max_seqs = 8});
  Sequence a = make_seq(0, 3), b = make_seq(1, 20);
  s.add(&a);
  complete(s.schedule());  // a prefilled, has sampled one token
  s.add(&b);
  const auto chunks = s.schedule();
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].seq, &a);
  EXPECT_EQ(chunks[0].len, 1);
  EXPECT_TRUE(chunks[0].samples_next());
  EXPECT_EQ(chunks[1].seq, &b);
  EXPECT_EQ(chunks[1].len, 5);
  EXPECT_FALSE(chunks[1].samples_next());
}

TEST(Scheduler, RespectsMaxSeqs) {
  BlockManager blocks(16, 4);
  Scheduler s(blocks, {.max_batch_tokens = 100, .max_seqs = 2});
  Sequence a = make_seq(0, 2), b = make_seq(1, 2), c = make_seq(2, 2);
  s.add(&a);
  s.add(&b);
  s.add(&c);
  EXPECT_EQ(s.schedule().size(), 2u);
  EXPECT_EQ(s.waiting().size(), 1u);
}

TEST(Scheduler, WaitsForBlocksThenPreemptsTheNewestWhenDecodeCannotGrow) {
  BlockManager blocks(3, 2);  // 6 token slots
  Scheduler s(blocks, {.max_batch_tokens = 100, .max_seqs = 8});
  Sequence a = make_seq(0, 2), b = make_seq(1, 3);
  s.add(&a);
  s.add(&b);
  auto chunks = s.schedule();  // a: 1 block, b: 2 blocks
  ASSERT_EQ(chunks.size(), 2u);
  complete(chunks);  // a has 3 tokens (needs 2 blocks), b has 4
  chunks = s.schedule();
  // a needs a new block and none is free: b (newest) is preempted and its blocks freed.
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].seq, &a);
  EXPECT_EQ(s.preemptions(), 1);
  EXPECT_EQ(b.computed, 0);
  EXPECT_TRUE(b.block_table.empty());
  EXPECT_EQ(s.waiting().front(), &b);
  blocks.check_integrity({&a.block_table, &b.block_table});
  s.finish(&a);
  complete(chunks);
  chunks = s.schedule();  // b recomputes its whole sequence
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].seq, &b);
  EXPECT_EQ(chunks[0].start, 0);
  EXPECT_EQ(chunks[0].len, 4);
}

TEST(Scheduler, RefusesASequenceLargerThanTheWholeCache) {
  BlockManager blocks(2, 2);
  Scheduler s(blocks, {});
  Sequence a = make_seq(0, 4);
  EXPECT_THROW(s.add(&a), Error);
}

TEST(SchedulerDp, PlacesEachSequenceOnTheDpRankWithFewestLiveSequences) {
  BlockManager m0(16, 4), m1(16, 4), m2(16, 4);
  Scheduler s({&m0, &m1, &m2}, {});
  ASSERT_EQ(s.dp_size(), 3);
  std::vector<Sequence> seqs;
  for (int64_t i = 0; i < 11; ++i) seqs.push_back(make_seq(i, 2));
  for (size_t i = 0; i < 7; ++i) s.add(&seqs[i]);
  std::vector<int32_t> dp;
  for (size_t i = 0; i < 7; ++i) dp.push_back(seqs[i].dp);
  EXPECT_EQ(dp, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0}));
  // Finishing (here while still waiting) frees a place: dp rank 1 drops to 0 live sequences.
  s.finish(&seqs[1]);
  s.finish(&seqs[4]);
  s.finish(&seqs[4]);  // a second finish changes nothing
  EXPECT_EQ(s.live(0), 3);
  EXPECT_EQ(s.live(1), 0);
  EXPECT_EQ(s.live(2), 2);
  dp.clear();
  for (size_t i = 7; i < 11; ++i) {
    s.add(&seqs[i]);
    dp.push_back(seqs[i].dp);
  }
  // Live counts go (3,0,2) → (3,1,2) → (3,2,2) → tie between 1 and 2, lowest wins → (3,3,3).
  EXPECT_EQ(dp, (std::vector<int32_t>{1, 1, 1, 2}));
}

TEST(SchedulerDp, PreemptsTheNewestSequenceOfTheSameDpRank) {
  BlockManager m0(3, 2), m1(3, 2);  // 6 token slots per dp rank
  Scheduler s({&m0, &m1}, {.max_batch_tokens = 100, .max_seqs = 8});
  Sequence a = make_seq(0, 2), b = make_seq(1, 3), c = make_seq(2, 3), d = make_seq(3, 1);
  for (Sequence* q : {&a, &b, &c, &d}) s.add(q);
  ASSERT_EQ((std::vector<int32_t>{a.dp, b.dp, c.dp, d.dp}), (std::vector<int32_t>{0, 1, 0, 1}));
  auto chunks = s.schedule();  // dp 0: a 1 block + c 2 blocks; dp 1: b 2 blocks + d 1 block: both full
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(m0.free_blocks(), 0);
  EXPECT_EQ(m1.free_blocks(), 0);
  complete(chunks);  // a needs a second block; b, c and d still fit in theirs
  const std::vector<int32_t> b_table = b.block_table, d_table = d.block_table;
  chunks = s.schedule();
  // a's growth evicts c, the newest of dp rank 0, not d, the newest overall (on dp rank 1).
  EXPECT_EQ(s.preemptions(), 1);
  EXPECT_EQ(c.computed, 0);
  EXPECT_TRUE(c.block_table.empty());
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(s.waiting().front(), &c);
  std::vector<Sequence*> scheduled;
  for (const auto& ch : chunks) scheduled.push_back(ch.seq);
  EXPECT_EQ(scheduled, (std::vector<Sequence*>{&a, &b, &d}));
  EXPECT_EQ(b.block_table, b_table);
  EXPECT_EQ(d.block_table, d_table);
  m0.check_integrity({&a.block_table, &c.block_table});
  m1.check_integrity({&b.block_table, &d.block_table});
}

TEST(SchedulerDp, AFullPoolDoesNotHoldBackAdmissionOnAnotherDpRank) {
  BlockManager m0(3, 2), m1(3, 2);
  Scheduler s({&m0, &m1}, {.max_batch_tokens = 100, .max_seqs = 8});
  Sequence x = make_seq(0, 4), y = make_seq(1, 1), z = make_seq(2, 4), w = make_seq(3, 2);
  s.add(&x);  // dp 0
  s.add(&y);  // dp 1
  complete(s.schedule());
  s.add(&z);  // dp 0, which x's decode fills up
  s.add(&w);  // dp 1, queued behind z
  ASSERT_EQ(z.dp, 0);
  ASSERT_EQ(w.dp, 1);
  const auto chunks = s.schedule();
  std::vector<Sequence*> scheduled;
  for (const auto& ch : chunks) scheduled.push_back(ch.seq);
  EXPECT_EQ(scheduled, (std::vector<Sequence*>{&x, &y, &w}));
  EXPECT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(s.waiting().front(), &z);
  EXPECT_EQ(s.preemptions(), 0);
}

// Random adds, steps and cancellations: after every step each dp rank's pool is partitioned exactly
// between its free list and the tables of that rank's sequences, placement follows the live counts,
// sequences never change dp rank, and the step limits hold.
TEST(SchedulerDp, KvAccountingStaysExactOverRandomRounds) {
  for (int dp_size : {1, 2, 3}) {
    SCOPED_TRACE("dp " + std::to_string(dp_size));
    std::vector<BlockManager> managers(static_cast<size_t>(dp_size), BlockManager(8, 4));
    std::vector<BlockManager*> pointers;
    for (auto& m : managers) pointers.push_back(&m);
    const SchedulerConfig config{.max_batch_tokens = 12, .max_seqs = 5};
    Scheduler s(pointers, config);
    std::mt19937 rng(1234u + static_cast<unsigned>(dp_size));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::map<int64_t, size_t> target_len;  // by id: finish once the sequence has this many tokens
    std::map<int64_t, int32_t> placed;     // by id: dp rank at add
    int64_t finished = 0;

    for (int round = 0; round < 400; ++round) {
      if (round < 300 && uniform(0, 2) == 0) {
        std::vector<int64_t> live(static_cast<size_t>(dp_size), 0);
        for (const auto& q : seqs) {
          if (!q->finished) ++live[static_cast<size_t>(q->dp)];
        }
        const auto least = static_cast<int32_t>(std::min_element(live.begin(), live.end()) - live.begin());
        const int prompt = uniform(1, 14);
        seqs.push_back(std::make_unique<Sequence>(make_seq(static_cast<int64_t>(seqs.size()), prompt)));
        s.add(seqs.back().get());
        EXPECT_EQ(seqs.back()->dp, least);
        placed[seqs.back()->id] = seqs.back()->dp;
        target_len[seqs.back()->id] = static_cast<size_t>(prompt) + static_cast<size_t>(uniform(1, 16));
      }
      const auto chunks = s.schedule();
      int64_t tokens = 0;
      for (const auto& c : chunks) {
        tokens += c.len;
        EXPECT_GE(static_cast<int64_t>(c.seq->block_table.size()) * 4, c.start + c.len);
      }
      EXPECT_LE(tokens, config.max_batch_tokens);
      EXPECT_LE(static_cast<int64_t>(chunks.size()), config.max_seqs);
      complete(chunks);
      for (const auto& c : chunks) {
        if (c.seq->tokens.size() >= target_len[c.seq->id]) s.finish(c.seq);
      }
      // Cancel a random live sequence now and then, waiting or running.
      if (uniform(0, 9) == 0 && !seqs.empty()) {
        Sequence* q = seqs[static_cast<size_t>(uniform(0, static_cast<int>(seqs.size()) - 1))].get();
        s.finish(q);
      }
      std::vector<std::vector<const std::vector<int32_t>*>> tables(static_cast<size_t>(dp_size));
      std::vector<int64_t> live(static_cast<size_t>(dp_size), 0);
      finished = 0;
      for (const auto& q : seqs) {
        ASSERT_EQ(q->dp, placed[q->id]) << "sequence " << q->id << " changed dp rank";
        tables[static_cast<size_t>(q->dp)].push_back(&q->block_table);
        if (q->finished) {
          EXPECT_TRUE(q->block_table.empty());
          ++finished;
        } else {
          ++live[static_cast<size_t>(q->dp)];
        }
      }
      for (int32_t d = 0; d < dp_size; ++d) {
        managers[static_cast<size_t>(d)].check_integrity(tables[static_cast<size_t>(d)]);
        EXPECT_EQ(s.live(d), live[static_cast<size_t>(d)]);
      }
    }
    // The rounds exercised what they are meant to.
    EXPECT_GT(s.preemptions(), 0);
    EXPECT_GT(finished, 20);
  }
}

}  // namespace
}  // namespace sy

namespace sy {
namespace {

// Prefix-aware placement under attention DP: a sequence goes to the dp rank whose cache holds its longest
// prefix, unless that rank has more than kPrefixLoadSlack live sequences over the least loaded; with
// prefix_placement off, or with nothing cached, to the least loaded.
TEST(Scheduler, DpPlacementFollowsTheCachedPrefixWithinTheLoadSlack) {
  std::vector<int32_t> prefix;
  for (int32_t t = 0; t < 12; ++t) prefix.push_back(100 + t);
  for (bool prefix_placement : {true, false}) {
    SCOPED_TRACE(prefix_placement ? "prefix placement" : "least loaded");
    BlockManager m0(32, 4, true), m1(32, 4, true);
    // Rank 1 caches the prefix's 3 blocks (computed by a sequence that has finished since).
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;
    m1.grow(table, 12);
    m1.commit(prefix, 12, table, hashes);
    m1.release(table);
    ASSERT_EQ(m1.cached_blocks(), 3);
    Scheduler s({&m0, &m1}, {.max_batch_tokens = 64, .max_seqs = 64, .prefix_placement = prefix_placement});
    std::vector<std::unique_ptr<Sequence>> seqs;
    const auto add = [&](std::vector<int32_t> tokens) {
      seqs.push_back(std::make_unique<Sequence>());
      seqs.back()->id = static_cast<int64_t>(seqs.size());
      seqs.back()->tokens = std::move(tokens);
      s.add(seqs.back().get());
      return seqs.back()->dp;
    };
    std::vector<int32_t> with_prefix = prefix;
    with_prefix.push_back(7);
    // A sequence without the prefix goes to rank 0; those with it to rank 1 until rank 1 is ahead by more
    // than the slack.
    EXPECT_EQ(add({1, 2, 3}), 0);
    EXPECT_EQ(add(with_prefix), 1);  // the least loaded rank too
    EXPECT_EQ(add(with_prefix), prefix_placement ? 1 : 0);
    for (int i = 0; i < Scheduler::kPrefixLoadSlack && prefix_placement; ++i) EXPECT_EQ(add(with_prefix), 1);
    if (prefix_placement) {
      ASSERT_EQ(s.live(1) - s.live(0), Scheduler::kPrefixLoadSlack + 1);
      EXPECT_EQ(add(with_prefix), 0);  // past the slack: the least loaded rank
    }
    const int32_t least = s.live(0) <= s.live(1) ? 0 : 1;
    EXPECT_EQ(add({9, 9, 9, 9, 9}), least);  // nothing cached: the least loaded
  }
}

}  // namespace
}  // namespace sy
