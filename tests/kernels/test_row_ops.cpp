// Row gather and weighted scatter-add: CPU against the scalar reference on awkward shapes, and the
// defining identities (gather is indexing; scatter-add of a gather with weights 1 counts multiplicity).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/ops.h"

namespace sy {
namespace {

TEST(RowOps, CpuMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int64_t dim : {1, 7, 129}) {
    for (int64_t n : {1, 13, 40}) {
      const int64_t rows_in = 11;
      std::vector<float> src(static_cast<size_t>(rows_in * dim)), w(static_cast<size_t>(n));
      std::vector<float> small(static_cast<size_t>(n * dim));
      std::vector<int32_t> idx(static_cast<size_t>(n));
      for (auto& x : src) x = normal(rng);
      for (auto& x : small) x = normal(rng);
      for (auto& x : w) x = normal(rng);
      for (auto& i : idx) i = static_cast<int32_t>(rng() % rows_in);  // repeats on purpose
      std::vector<float> g_cpu(small.size()), g_ref(small.size());
      cpu::gather_rows(src.data(), idx.data(), g_cpu.data(), n, dim);
      ref::gather_rows(src.data(), idx.data(), g_ref.data(), n, dim);
      EXPECT_EQ(g_cpu, g_ref);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(g_ref[i * dim + j], src[idx[i] * dim + j]);
      }
      std::vector<float> s_cpu = src, s_ref = src;
      cpu::scatter_add_rows(s_cpu.data(), idx.data(), w.data(), small.data(), n, dim);
      ref::scatter_add_rows(s_ref.data(), idx.data(), w.data(), small.data(), n, dim);
      for (size_t i = 0; i < s_cpu.size(); ++i) EXPECT_NEAR(s_cpu[i], s_ref[i], 1e-5f * (1 + std::abs(s_ref[i])));
    }
  }
}

TEST(RowOps, ScatterOfOnesCountsMultiplicity) {
  const int64_t dim = 3;
  const std::vector<int32_t> idx = {2, 0, 2, 2};
  const std::vector<float> ones(idx.size() * dim, 1.0f);
  for (auto scatter : {&cpu::scatter_add_rows, &ref::scatter_add_rows}) {
    std::vector<float> dst(4 * dim, 0.0f);
    scatter(dst.data(), idx.data(), nullptr, ones.data(), 4, dim);
    EXPECT_EQ(dst, (std::vector<float>{1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0}));
  }
}

}  // namespace
}  // namespace sy
