// BlockManager: allocation, release, slots and integrity. KV pool sizing for a server: blocks from the
// memory left, the max_running_requests cap, the refusal when one max_model_len sequence does not fit.
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

// Qwen3-30B-A3B on one GPU: 48 layers, 4 KV heads of 128, bf16: 48 · 2 · 4 · 128 · 2 = 98,304 bytes a token.
const KvGeometry kQwen30b{.n_layers = 48, .kv_heads = 4, .head_dim = 128, .v_head_dim = 128};

TEST(KvSizing, BlocksFromTheMemoryLeft) {
  EXPECT_EQ(kv_bytes_per_token(kQwen30b, DType::bf16, DType::bf16), 98304u);
  EXPECT_EQ(kv_bytes_per_token(kQwen30b, DType::f8_e4m3, DType::bf16), 49152u);  // --kv-dtype fp8
  // MLA with the sparse indexer: the latent rows take the KV dtype, the indexer's keys keep theirs.
  const KvGeometry dsa{.n_layers = 2, .kv_heads = 1, .head_dim = 576, .v_head_dim = 0, .index_head_dim = 128};
  EXPECT_EQ(kv_bytes_per_token(dsa, DType::f8_e4m3, DType::bf16), 2u * (576 + 128 * 2));
  // 10 GiB free, 0.9 of it: 9.0 GiB / (16 · 98,304 bytes) = 6,144 blocks.
  const KvSizing s = size_kv_pool({.geometry = kQwen30b,
                                   .kv_dtype = DType::bf16,
                                   .block_size = 16,
                                   .free_bytes = size_t(10) << 30,
                                   .kv_memory_fraction = 0.9,
                                   .max_model_len = 4096});
  EXPECT_EQ(s.bytes_per_block, 16u * 98304u);
  EXPECT_EQ(s.blocks, 6144);
  EXPECT_EQ(s.capacity_tokens, 6144 * 16);
  EXPECT_EQ(s.bytes, size_t(6144) * 16 * 98304);
  EXPECT_FALSE(s.capped);
  // Two running requests of 4096 tokens use at most 512 blocks.
  const KvSizing capped = size_kv_pool({.geometry = kQwen30b,
                                        .kv_dtype = DType::bf16,
                                        .block_size = 16,
                                        .free_bytes = size_t(10) << 30,
                                        .kv_memory_fraction = 0.9,
                                        .max_model_len = 4096,
                                        .max_running_requests = 2});
  EXPECT_EQ(capped.blocks, 512);
  EXPECT_TRUE(capped.capped);
}

TEST(KvSizing, RefusesWhenOneSequenceDoesNotFitAndSaysWhatToChange) {
  // 1 GiB · 0.5 holds 5,461 tokens (341 blocks of 16); max_model_len 32,768 needs 2,048 blocks.
  try {
    size_kv_pool({.geometry = kQwen30b,
                  .kv_dtype = DType::bf16,
                  .block_size = 16,
                  .free_bytes = size_t(1) << 30,
                  .kv_memory_fraction = 0.5,
                  .max_model_len = 32768});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("max_model_len 32768"), std::string::npos) << what;
    EXPECT_NE(what.find("2048 blocks"), std::string::npos) << what;
    EXPECT_NE(what.find("341 blocks (5456 tokens)"), std::string::npos) << what;
    EXPECT_NE(what.find("--max-model-len to at most 5456"), std::string::npos) << what;
    EXPECT_NE(what.find("--kv-memory-fraction"), std::string::npos) << what;
  }
  EXPECT_THROW(size_kv_pool({.geometry = kQwen30b, .free_bytes = 0, .max_model_len = 16}), Error);
  EXPECT_THROW(
      size_kv_pool(
          {.geometry = kQwen30b, .free_bytes = size_t(1) << 30, .kv_memory_fraction = 0.0, .max_model_len = 16}),
      Error);
  EXPECT_THROW(size_kv_pool({.geometry = kQwen30b, .free_bytes = size_t(1) << 30, .max_model_len = 0}), Error);
}

TEST(KvSizing, MatchesThePoolItSizes) {
  auto backend = make_cpu_backend();
  const KvGeometry mla{.n_layers = 3, .kv_heads = 1, .head_dim = 72, .v_head_dim = 0, .index_head_dim = 16};
  for (const KvGeometry& g : {kQwen30b, mla}) {
    const KvSizing s = size_kv_pool({.geometry = g,
                                     .kv_dtype = backend->kv_storage_dtype(),
                                     .index_dtype = backend->weight_dtype(),
                                     .block_size = 4,
                                     .free_bytes = size_t(8) << 20,
                                     .kv_memory_fraction = 0.25,
                                     .max_model_len = 8});
    KvPool pool(*backend, g, s.blocks, 4);
    EXPECT_EQ(pool.bytes(), s.bytes);
    EXPECT_LE(s.bytes, size_t(2) << 20);
  }
}

TEST(KvSizing, HostMemoryInfoIsPlausible) {
  const MemoryInfo m = make_cpu_backend()->memory_info();
  EXPECT_GT(m.total_bytes, size_t(0));
  EXPECT_GT(m.free_bytes, size_t(0));
  EXPECT_LE(m.free_bytes, m.total_bytes);
}

}  // namespace
}  // namespace sy
