// Uniform routing for benchmarks: each token's top_k experts drawn uniformly at random without replacement,
// from a hash of its router logits. A model with random weights routes far from uniformly (a prompt's hidden
// states grow alike through random attention, and its tokens then pick alike); the planner predicts uniform
// routing, and `bench latency --routing uniform` measures it. The choice is deterministic in the logits' bits:
// the same token routes the same on every rank that computes its logits, and the host and the CUDA kernel
// (kernels/cuda/routing.cu) choose the same experts from the same logits. Plain C++, usable in device code.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define SY_ROUTE_HD __host__ __device__
#else
#define SY_ROUTE_HD
#endif

namespace sy {

struct UniformRouteArgs {
  const float* logits = nullptr;  // [tokens, n_experts] router logits (only hashed)
  int32_t* expert_ids = nullptr;  // [tokens, top_k] overwritten: distinct experts, uniform at random
  int64_t tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;  // 1 <= top_k <= n_experts
};

// splitmix64's finaliser: a bijection of 64-bit words whose output bits each depend on every input bit.
SY_ROUTE_HD inline uint64_t route_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

SY_ROUTE_HD inline uint32_t route_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}

// One logit's part of its token's hash: the hash is the XOR of every expert's part (an order-free sum, so that a
// GPU warp can split it over its lanes), mixed once more.
SY_ROUTE_HD inline uint64_t route_term(float logit, int64_t e) {
  return route_mix(route_float_bits(logit) ^ (static_cast<uint64_t>(e) << 32) ^ 0x243F6A8885A308D3ull);
}

// The picks from a token's hash h: ids[0..top_k), each a draw uniform over the experts not yet chosen (rejection:
// a draw equal to an earlier choice is drawn again). A draw maps the hash's high 32 bits onto [0, n_experts) by a
// multiply and a shift (a 64-bit modulo is a long serial division on a GPU lane); its bias is below n / 2^32.
SY_ROUTE_HD inline void route_picks(uint64_t h, int64_t n_experts, int64_t top_k, int32_t* ids) {
  for (int64_t j = 0; j < top_k; ++j) {
    int32_t e = 0;
    bool taken = true;
    while (taken) {
      h = route_mix(h + 0x9E3779B97F4A7C15ull);
      e = static_cast<int32_t>(((h >> 32) * static_cast<uint64_t>(n_experts)) >> 32);
      taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
    }
    ids[j] = e;
  }
}

// One token: its top_k experts from the hash of logits[0..n_experts).
SY_ROUTE_HD inline void uniform_route_row(const float* logits, int64_t n_experts, int64_t top_k, int32_t* ids) {
  uint64_t h = 0;
  for (int64_t e = 0; e < n_experts; ++e) h ^= route_term(logits[e], e);
  route_picks(route_mix(h), n_experts, top_k, ids);
}

// Every token's row in place: the ids of a top-k routing replaced (softmax_topk / grouped_topk with .uniform).
SY_ROUTE_HD inline void uniform_route_rows(const float* logits, int32_t* ids, int64_t tokens, int64_t n_experts,
                                           int64_t top_k) {
  for (int64_t t = 0; t < tokens; ++t) uniform_route_row(logits + t * n_experts, n_experts, top_k, ids + t * top_k);
}

namespace ref {
// Every token's row (kernels/reference/routing_ops.cpp); the oracle of the CUDA kernel.
void uniform_route(const UniformRouteArgs& a);
}  // namespace ref

}  // namespace sy
