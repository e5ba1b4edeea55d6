// BlockManager: allocation, release, slots and integrity.
#include <gtest/gtest.h>

#include "base/check.h"
#include "runtime/kv_cache.h"

namespace sy {
namespace {

TEST(BlockManager, GrowAllocatesCeilTokensOverBlockSize) {
  BlockManager m(10, 4);
  std::vector<int32_t> t;
  m.grow(t, 1);
  EXPECT_EQ(t.size(), 1u);
  m.grow(t, 4);
  EXPECT_EQ(t.size(), 1u);
  m.grow(t, 5);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(m.free_blocks(), 8);
  m.check_integrity({&t});
}

TEST(BlockManager, SlotFollowsTheTable) {
  BlockManager m(10, 4);
  std::vector<int32_t> a, b;
  m.grow(a, 4);
  m.grow(b, 4);
  m.grow(a, 8);  // a = {0, 2}, b = {1}
  ASSERT_EQ(a, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(m.slot(a, 0), 0);
  EXPECT_EQ(m.slot(a, 5), 2 * 4 + 1);
  EXPECT_EQ(m.slot(b, 3), 1 * 4 + 3);
  EXPECT_THROW(m.slot(b, 4), Error);
}

TEST(BlockManager, ReleaseReturnsBlocksAndRefusesOverflow) {
  BlockManager m(3, 2);
  std::vector<int32_t> a, b;
  m.grow(a, 6);
  EXPECT_FALSE(m.can_grow(b, 1));
  EXPECT_THROW(m.grow(b, 1), Error);
  m.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(m.free_blocks(), 3);
  m.release(a);  // no-op
  EXPECT_TRUE(m.can_grow(b, 6));
  m.check_integrity({&a, &b});
}

TEST(BlockManager, IntegrityCatchesADoubleOwner) {
  BlockManager m(4, 2);
  std::vector<int32_t> a;
  m.grow(a, 2);
  std::vector<int32_t> forged = a;
  EXPECT_THROW(m.check_integrity({&a, &forged}), Error);
  EXPECT_THROW(m.check_integrity({}), Error);  // a's block is owned by nobody
}

}  // namespace
}  // namespace sy
