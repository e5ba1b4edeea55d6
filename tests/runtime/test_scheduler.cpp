// Scheduler: token budget, chunked prefill, decode-first ordering, admission limits and preemption.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sy
