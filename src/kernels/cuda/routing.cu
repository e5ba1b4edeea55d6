// Routing: softmax top-k (Qwen3-MoE, Mixtral) and sigmoid group-limited top-k (DeepSeek-V3 noaux_tc).
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/uniform_route.h"

namespace sy::cuda {

namespace {

constexpr int kMaxGroups = 64;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The warp's best (value, id) pair in (value descending, id ascending) order, on every lane.
__device__ __forceinline__ void warp_argmax(float& best, int& best_e) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
    if (ob > best || (ob == best && oe < best_e)) {
      best = ob;
      best_e = oe;
    }
  }
}

// A selection score as the picks below compare it: NaN ranks lowest and infinities are clamped, so that the
// (value, id) order is total and every pick finds an entry (an id in range whatever the input). A token with
// a NaN logit gets NaN weights, so that the NaN reaches the logits, where the engine ends the request.
__device__ __forceinline__ float ordered(float x) { return isnan(x) ? -FLT_MAX : fminf(fmaxf(x, -FLT_MAX), FLT_MAX); }

// One thread per token. Selections are repeated passes that take the best entry strictly after the
// previous pick in (value descending, id ascending) order, as the CPU kernel's stable ordering does.
__global__ void grouped_topk_kernel(GroupedTopkArgs a) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= a.tokens) return;
  const float* logits = a.logits + t * a.n_experts;
  const int64_t per_group = a.n_experts / a.n_group;
  const auto choice = [&](int64_t e) { return ordered(sigmoid(logits[e]) + (a.score_bias ? a.score_bias[e] : 0.0f)); };
  float group_score[kMaxGroups];
  for (int64_t g = 0; g < a.n_group; ++g) {
    float best = -FLT_MAX, second = -FLT_MAX;
    for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      const float c = choice(e);
      if (c > best) {
        second = best;
        best = c;
      } else if (c > second) {
        second = c;
      }
    }
    group_score[g] = ordered(per_group > 1 ? best + second : best);
  }
  uint64_t kept = 0;
  float prev = FLT_MAX;
  int64_t prev_id = -1;
  for (int64_t i = 0; i < a.topk_group; ++i) {
    int64_t best = -1;
    for (int64_t g = 0; g < a.n_group; ++g) {
      const float v = group_score[g];
      const bool after_prev = v < prev || (v == prev && g > prev_id);
      if (after_prev && (best < 0 || v > group_score[best])) best = g;
    }
    kept |= uint64_t{1} << best;
    prev = group_score[best];
    prev_id = best;
  }
  prev = FLT_MAX;
  prev_id = -1;
  float sum = 0.0f;
  for (int64_t k = 0; k < a.top_k; ++k) {
    int64_t best = -1;
    float best_v = -FLT_MAX;
    for (int64_t e = 0; e < a.n_experts; ++e) {
      if (!((kept >> (e / per_group)) & 1u)) continue;
      const float v = choice(e);
      const bool after_prev = v < prev || (v == prev && e > prev_id);
      if (after_prev && (best < 0 || v > best_v)) {
        best = e;
        best_v = v;
      }
    }
    a.expert_ids[t * a.top_k + k] = static_cast<int32_t>(best);
    const float w = sigmoid(logits[best]);  // best >= 0: ordered() makes every kept expert a candidate
    a.weights[t * a.top_k + k] = w;
    sum += w;
    prev = best_v;
    prev_id = best;
  }
  bool nan_row = false;
  for (int64_t e = 0; e < a.n_experts; ++e) nan_row = nan_row || isnan(logits[e]);
  const float denominator = a.renormalize ? sum + 1e-20f : 1.0f;
  for (int64_t k = 0; k < a.top_k; ++k) {
    a.weights[t * a.top_k + k] =
        nan_row ? __int_as_float(0x7fc00000) : a.weights[t * a.top_k + k] / denominator * a.scaling;
  }
}

// One warp per token (up to 32 · kMaxExpertsPerLane experts), the same choices and weights as the one-thread
// kernel above: each lane computes the choice scores of experts lane, lane + 32, ... once; a group's score is a
// warp reduction of its two best; the groups and then the experts are taken by repeated warp argmaxes in
// (value descending, id ascending) order, each winner removed from the next round.
// Uniform routing (the args' .uniform): each lane XORs its experts' route_term, the warp combines them, and lane 0
// replaces the token's ids with route_picks' draw (kernels/uniform_route.h), after the top-k wrote them.
constexpr int kMaxUniformTopk = 64;
__device__ __forceinline__ void uniform_override(uint64_t h, int lane, int64_t n_experts, int64_t top_k, int32_t* ids) {
  for (int o = 16; o > 0; o >>= 1) h ^= __shfl_xor_sync(0xffffffffu, h, o);
  if (lane != 0) return;
  int32_t picks[kMaxUniformTopk];
  route_picks(route_mix(h), n_experts, top_k, picks);
  for (int64_t j = 0; j < top_k; ++j) ids[j] = picks[j];
}

constexpr int kTopkWarps = 4;
constexpr int kWarpExperts = 16;  // per lane: up to 512 experts

__global__ void __launch_bounds__(kTopkWarps * 32) grouped_topk_warp_kernel(GroupedTopkArgs a) {
  __shared__ float group_score[kTopkWarps][kMaxGroups];
  pdl_launch_dependents();
  pdl_wait();
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = blockIdx.x * int64_t(kTopkWarps) + warp;
  if (t >= a.tokens) return;
  const float* logits = a.logits + t * a.n_experts;
  const int n = static_cast<int>(a.n_experts), per_group = static_cast<int>(a.n_experts / a.n_group);
  float c[kWarpExperts];
  bool nan_seen = false;
  uint64_t h = 0;  // with a.uniform: this lane's part of the token's hash
#pragma unroll
  for (int i = 0; i < kWarpExperts; ++i) {
    const int e = lane + 32 * i;
    c[i] = -INFINITY;  // no expert: below every score
    if (e < n) {
      const float x = logits[e];
      nan_seen = nan_seen || isnan(x);
      c[i] = ordered(sigmoid(x) + (a.score_bias ? a.score_bias[e] : 0.0f));
      if (a.uniform) h ^= route_term(x, e);
    }
  }
  const bool nan_row = __any_sync(0xffffffffu, nan_seen);
  for (int g = 0; g < a.n_group; ++g) {  // the two best of each group, as the sequential scan finds them
    float best = -FLT_MAX, second = -FLT_MAX;
#pragma unroll
    for (int i = 0; i < kWarpExperts; ++i) {
      const int e = lane + 32 * i;
      if (e < n && e / per_group == g) {
        second = fmaxf(second, fminf(best, c[i]));
        best = fmaxf(best, c[i]);
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o), os = __shfl_xor_sync(0xffffffffu, second, o);
      second = fmaxf(fmaxf(second, os), fminf(best, ob));
      best = fmaxf(best, ob);
    }
    if (lane == 0) group_score[warp][g] = ordered(per_group > 1 ? best + second : best);
  }
  __syncwarp();
  uint64_t kept = 0;  // the same on every lane
  for (int64_t i = 0; i < a.topk_group; ++i) {
    int best = -1;
    for (int g = 0; g < a.n_group; ++g) {
      const bool taken = (kept >> g) & 1u;
      if (!taken && (best < 0 || group_score[warp][g] > group_score[warp][best])) best = g;
    }
    kept |= uint64_t{1} << best;
  }
#pragma unroll
  for (int i = 0; i < kWarpExperts; ++i) {
    const int e = lane + 32 * i;
    if (e < n && !((kept >> (e / per_group)) & 1u)) c[i] = -INFINITY;
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < a.top_k; ++k) {
    float best = -INFINITY;
    int best_e = INT_MAX;
#pragma unroll
    for (int i = 0; i < kWarpExperts; ++i) {
      const int e = lane + 32 * i;
      if (e < n && (c[i] > best || (c[i] == best && e < best_e))) {
        best = c[i];
        best_e = e;
      }
    }
    warp_argmax(best, best_e);
#pragma unroll
    for (int i = 0; i < kWarpExperts; ++i) {
      if (lane + 32 * i == best_e) c[i] = -INFINITY;  // taken: below every score not taken
    }
    if (lane == 0) {
      const float w = sigmoid(logits[best_e]);
      a.expert_ids[t * a.top_k + k] = best_e;
      a.weights[t * a.top_k + k] = w;
      sum += w;
    }
  }
  if (a.uniform) uniform_override(h, lane, a.n_experts, a.top_k, a.expert_ids + t * a.top_k);
  if (lane != 0) return;
  const float denominator = a.renormalize ? sum + 1e-20f : 1.0f;
  for (int64_t k = 0; k < a.top_k; ++k) {
    a.weights[t * a.top_k + k] =
        nan_row ? __int_as_float(0x7fc00000) : a.weights[t * a.top_k + k] / denominator * a.scaling;
  }
}

// One warp per token: softmax over the experts (lanes stride over them), then top_k rounds of a warp
// argmax (highest first, lower id on ties, as the CPU kernel does), each winner removed from the next
// round. A NaN logit ranks lowest (as -FLT_MAX) so that every id written is a real expert whatever the
// input, and makes every weight of its token NaN, as the CPU kernel's softmax does: the NaN reaches the
// logits, where the engine ends the request, instead of a wild index or a silently finite routing.
constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

__global__ void softmax_topk_kernel(const float* logits, int32_t* ids, float* weights, int64_t tokens,
                                    int64_t n_experts, int64_t top_k, bool renormalize, bool uniform) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const float* row = logits + t * n_experts;
  float v[kMaxExpertsPerLane];
  float m = -FLT_MAX;
  bool nan_seen = false;
  uint64_t h = 0;  // with uniform: this lane's part of the token's hash
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    const float x = e < n_experts ? row[e] : -FLT_MAX;
    if (uniform && e < n_experts) h ^= route_term(x, e);
    nan_seen = nan_seen || isnan(x);
    v[i] = isnan(x) ? -FLT_MAX : x;
    m = fmaxf(m, v[i]);
  }
  const bool nan_row = __any_sync(0xffffffffu, nan_seen);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    if (lane + 32 * i < n_experts) sum += expf(v[i] - m);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  float chosen_sum = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    float best = -INFINITY;  // below every value left, so that some expert always wins
    int best_e = INT_MAX;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < n_experts && (v[i] > best || (v[i] == best && e < best_e))) {
        best = v[i];
        best_e = e;
      }
    }
    warp_argmax(best, best_e);
    const float pr = nan_row ? __int_as_float(0x7fc00000) : expf(best - m) / sum;
    if (lane == 0) {
      ids[t * top_k + k] = best_e;
      weights[t * top_k + k] = pr;
    }
    chosen_sum += pr;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      if (lane + 32 * i == best_e) v[i] = -INFINITY;  // taken: below every value not taken
    }
  }
  if (renormalize && lane == 0) {
    for (int64_t k = 0; k < top_k; ++k) weights[t * top_k + k] /= chosen_sum;
  }
  if (uniform) uniform_override(h, lane, n_experts, top_k, ids + t * top_k);
}

__global__ void mark_experts_kernel(const int32_t* ids, int64_t n, uint8_t* flags, int64_t n_experts) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int32_t e = ids[i];
  if (e >= 0 && e < n_experts) flags[e] = 1;
}

constexpr int kUniformWarps = 4;

// One warp per token: the lanes hash a share of its logits each (the same order-free sum as uniform_route_row),
// then lane 0 draws the picks and writes them (one thread a token, the hash's serial chain over 128 logits cost
// 12 µs a layer at batch 1). Only the one-thread grouped kernel (above 512 experts) is followed by it; the other
// routers draw in their own kernels. Launched as a programmatic dependent, so that the experts' GEMVs after it can
// load their weights while it runs.
__global__ void __launch_bounds__(kUniformWarps * 32) uniform_route_kernel(UniformRouteArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x * int64_t(kUniformWarps) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (t >= a.tokens) return;
  const float* row = a.logits + t * a.n_experts;
  uint64_t h = 0;
  for (int64_t e = lane; e < a.n_experts; e += 32) h ^= route_term(row[e], e);
  for (int o = 16; o > 0; o >>= 1) h ^= __shfl_xor_sync(0xffffffffu, h, o);
  if (lane != 0) return;
  int32_t ids[kMaxUniformTopk];
  route_picks(route_mix(h), a.n_experts, a.top_k, ids);
  for (int64_t j = 0; j < a.top_k; ++j) a.expert_ids[t * a.top_k + j] = ids[j];
}

}  // namespace

void uniform_route(const UniformRouteArgs& a, cudaStream_t s) {
  if (a.tokens == 0) return;
  check_supported(a.top_k >= 1 && a.top_k <= kMaxUniformTopk && a.top_k <= a.n_experts,
                  "uniform_route: needs 1 <= top_k <= min(64, n_experts)");
  launch_pdl(uniform_route_kernel, dim3(static_cast<unsigned>((a.tokens + kUniformWarps - 1) / kUniformWarps)),
             dim3(kUniformWarps * 32), 0, s, "uniform_route", a);
}

void mark_experts(const int32_t* ids, int64_t n, uint8_t* flags, int64_t n_experts, cudaStream_t s) {
  if (n == 0) return;
  mark_experts_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(ids, n, flags, n_experts);
  check_launch("mark_experts");
}

void grouped_topk(const GroupedTopkArgs& a, cudaStream_t s) {
  if (a.tokens == 0) return;
  check_supported(a.n_group >= 1 && a.n_group <= kMaxGroups && a.n_experts % a.n_group == 0 && a.topk_group >= 1 &&
                      a.topk_group <= a.n_group && a.top_k >= 1 && a.top_k <= a.topk_group * (a.n_experts / a.n_group),
                  "grouped_topk: needs 1 <= n_group <= 64 dividing n_experts, 1 <= topk_group <= n_group and "
                  "1 <= top_k <= topk_group * experts per group");
  check_supported(!a.uniform || a.top_k <= kMaxUniformTopk, "grouped_topk: uniform routing needs top_k <= 64");
  if (a.n_experts <= 32 * kWarpExperts) {
    return launch_pdl(grouped_topk_warp_kernel, dim3(static_cast<unsigned>((a.tokens + kTopkWarps - 1) / kTopkWarps)),
                      dim3(kTopkWarps * 32), 0, s, "grouped_topk", a);
  }
  grouped_topk_kernel<<<static_cast<unsigned>((a.tokens + 127) / 128), 128, 0, s>>>(a);
  check_launch("grouped_topk");
  if (a.uniform) {
    uniform_route({.logits = a.logits,
                   .expert_ids = a.expert_ids,
                   .tokens = a.tokens,
                   .n_experts = a.n_experts,
                   .top_k = a.top_k},
                  s);
  }
}

void softmax_topk(const SoftmaxTopkArgs& a, cudaStream_t s) {
  if (a.tokens == 0) return;
  check_supported(a.n_experts <= 32 * kMaxExpertsPerLane, "softmax_topk handles at most 512 experts");
  check_supported(!a.uniform || a.top_k <= kMaxUniformTopk, "softmax_topk: uniform routing needs top_k <= 64");
  launch_pdl(softmax_topk_kernel, dim3(static_cast<unsigned>((a.tokens + 3) / 4)), dim3(128), 0, s, "softmax_topk",
             a.logits, a.expert_ids, a.weights, a.tokens, a.n_experts, a.top_k, a.renormalize, a.uniform);
}

}  // namespace sy::cuda
