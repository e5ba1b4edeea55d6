// The routed experts of a quantised expert array on a GPU backend against the cpu-bf16 oracle on the same
// experts dequantised on the host (test_cuda_fp8.cpp, test_cuda_q4.cpp).
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/backend_data.h"

namespace sy::test {

struct MoeShape {
  int64_t tokens, top_k, n_experts, hidden, inter;
};

// Routes every token to top_k distinct experts (top_k <= 8) with random weights and random x, runs the oracle
// on the dense experts (gate_up [n_experts, 2 * inter, hidden], down [n_experts, hidden, inter]) and `gpu` on
// `gate_up` / `down` as it holds them; expects the results within `tol` (rel_err) and a captured replay to
// reproduce the GPU's result bit for bit.
inline void expect_moe_experts_match(Backend& oracle, Backend& gpu, const MoeShape& s,
                                     const std::vector<float>& gate_up_dense, const std::vector<float>& down_dense,
                                     const Matrix& gate_up, const Matrix& down, std::mt19937& rng, double tol,
                                     const std::string& what) {
  const int64_t T = s.tokens, K = s.top_k, H = s.hidden;
  const std::vector<float> x = randn(size_t(T * H), rng);
  std::vector<int32_t> ids(size_t(T * K));
  std::vector<float> w(size_t(T * K));
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      ids[size_t(t * K + k)] = int32_t((t * 5 + k * 3 + t / 3) % s.n_experts);  // distinct within a token
      w[size_t(t * K + k)] = weight(rng);
    }
  }
  Dev od(oracle), gd(gpu);
  float* yo = od.out(size_t(T * H));
  oracle.moe_experts({.x = od.f32(x),
                      .expert_ids = od.i32(ids),
                      .weights = od.f32(w),
                      .gate_up = od.weight(gate_up_dense),
                      .down = od.weight(down_dense),
                      .out = yo,
                      .tokens = T,
                      .hidden = H,
                      .inter = s.inter,
                      .n_experts = s.n_experts,
                      .top_k = K});
  float* yg = gd.out(size_t(T * H));
  const MoeExpertsArgs call{.x = gd.f32(x),
                            .expert_ids = gd.i32(ids),
                            .weights = gd.f32(w),
                            .gate_up = gate_up.w,
                            .down = down.w,
                            .gate_up_q = gate_up.q,
                            .down_q = down.q,
                            .out = yg,
                            .tokens = T,
                            .hidden = H,
                            .inter = s.inter,
                            .n_experts = s.n_experts,
                            .top_k = K};
  EXPECT_TRUE(gpu.moe_experts_async(call)) << what;
  gpu.moe_experts(call);
  const std::vector<float> first = gd.host(yg, size_t(T * H));
  EXPECT_LE(rel_err(first, od.host(yo, size_t(T * H))), tol) << what;
  const std::vector<float> poison(size_t(T * H), std::numeric_limits<float>::quiet_NaN());
  const int64_t graph = gpu.capture([&] { gpu.moe_experts(call); });
  gpu.copy_to_device(yg, poison.data(), poison.size() * sizeof(float));
  gpu.replay(graph);
  EXPECT_EQ(gd.host(yg, size_t(T * H)), first) << what << ": captured";
  gpu.drop_captures();
}

}  // namespace sy::test
