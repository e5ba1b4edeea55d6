// Next-token sampling on the device (Backend::sample_tokens): a block of 1024 threads per logit row, so that
// only token ids cross to the host. The arithmetic follows cpu::sample_row (kernels/cpu/sampling.cpp), its
// oracle: scaled logits z = logit / temperature (correctly rounded, as on the host), weights exp(z - max) in
// double, candidates ordered by z with the lower id first on ties, the draw u · sum against running sums.
// Greedy: one pass (the first maximum). Temperature alone (with min-p): a block-wide scan of the weights
// over contiguous slices, and the slice holding the draw walks its own weights. Top-k (k <= 1024) or top-p:
// the k (or, for top-p alone, 1024) best by radix select on z's bits, sorted in shared memory, then the
// host's sequential walk over them by one thread (the same order of sums as the host's). A row this cannot
// sample exactly (top-k above 1024, or a nucleus wider than the 1024 best) comes back kSampleOnHost.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCandidates = 1024;  // must equal kThreads: one candidate per thread in the sort

// An order-preserving key of a finite float (a larger float has a larger key); -0 is keyed as +0, as the
// host's comparisons see them equal.
__device__ __forceinline__ uint32_t order_key(float z) {
  const uint32_t b = __float_as_uint(z == 0.0f ? 0.0f : z);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// Whether candidate (za, ia) comes before (zb, ib): higher first, lower id on ties (the host's order).
__device__ __forceinline__ bool before(float za, int32_t ia, float zb, int32_t ib) {
  return za > zb || (za == zb && ia < ib);
}

struct SampleShared {
  float cand_z[kMaxCandidates];
  int32_t cand_id[kMaxCandidates];
  double scan[kThreads];  // per-thread inclusive sums; then the candidates' weights
  uint32_t hist[256];
  float warp_z[kWarps];
  int32_t warp_i[kWarps];
  double warp_d[kWarps];
  unsigned long long warp_u[kWarps];
  int32_t digit, remaining, result;
};

__device__ double block_sum(double v, SampleShared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) sh.warp_d[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total += sh.warp_d[w];
  __syncthreads();
  return total;
}

// Exclusive prefix sum of v over the block in thread order (integers: exact in any order).
__device__ unsigned long long block_exclusive_scan(unsigned long long v, SampleShared& sh) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  unsigned long long incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  if (lane == 31) sh.warp_u[warp] = incl;
  __syncthreads();
  unsigned long long before_warp = 0;
  for (int w = 0; w < warp; ++w) before_warp += sh.warp_u[w];
  __syncthreads();
  return before_warp + incl - v;
}

// Inclusive prefix sums of v over the block in thread order, left in sh.scan (doubles: thread t's exclusive
// sum is read as sh.scan[t - 1], so that neighbouring slices share one bound exactly).
__device__ void block_inclusive_scan(double v, SampleShared& sh) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  double incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  if (lane == 31) sh.warp_d[warp] = incl;
  __syncthreads();
  double before_warp = 0.0;
  for (int w = 0; w < warp; ++w) before_warp += sh.warp_d[w];
  sh.scan[threadIdx.x] = before_warp + incl;
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ logits, int vocab, const SampleRow* __restrict__ rows,
                       int32_t* __restrict__ tokens) {
  __shared__ SampleShared sh;
  const SampleRow p = rows[blockIdx.x];
  const float* x = logits + p.row * static_cast<int64_t>(vocab);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;

  // Every logit finite, and the first maximum.
  bool finite = true;
  float best = -INFINITY;
  int32_t best_i = INT_MAX;
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = x[i];
    finite = finite && isfinite(v);
    if (best_i == INT_MAX || v > best) best = v, best_i = i;
  }
  if (__syncthreads_and(finite ? 1 : 0) == 0) {
    if (tid == 0) tokens[blockIdx.x] = kSampleNotFinite;
    return;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (before(v, i, best, best_i)) best = v, best_i = i;
  }
  if (lane == 0) sh.warp_z[warp] = best, sh.warp_i[warp] = best_i;
  __syncthreads();
  best = sh.warp_z[0], best_i = sh.warp_i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (before(sh.warp_z[w], sh.warp_i[w], best, best_i)) best = sh.warp_z[w], best_i = sh.warp_i[w];
  }
  if (p.temperature == 0.0f) {
    if (tid == 0) tokens[blockIdx.x] = best_i;
    return;
  }
  const float t = p.temperature;
  const float z_max = __fdiv_rn(best, t);  // division by t > 0 keeps the order: the largest z
  const int slice = (vocab + kThreads - 1) / kThreads;
  const int lo = min(vocab, tid * slice), hi = min(vocab, lo + slice);

  if (p.top_k == 0 && p.top_p >= 1.0f) {
    // Every token a candidate (min-p's threshold against the top token's weight, 1): the draw lands in the
    // slice whose running-sum interval holds u · sum.
    const double threshold = static_cast<double>(p.min_p);
    double s = 0.0;
    for (int i = lo; i < hi; ++i) {
      const double w = exp(static_cast<double>(__fdiv_rn(x[i], t) - z_max));
      s += w >= threshold ? w : 0.0;
    }
    if (tid == 0) sh.result = INT_MAX;
    block_inclusive_scan(s, sh);
    const double target = p.u * sh.scan[kThreads - 1];
    const double start = tid == 0 ? 0.0 : sh.scan[tid - 1];
    if (s > 0.0 && start <= target && target < sh.scan[tid]) {
      double acc = start;
      int pick = -1, last = -1;
      for (int i = lo; i < hi && pick < 0; ++i) {
        const double w = exp(static_cast<double>(__fdiv_rn(x[i], t) - z_max));
        if (w < threshold) continue;
        acc += w;
        last = i;
        if (target < acc) pick = i;
      }
      atomicMin(&sh.result, pick >= 0 ? pick : last);
    }
    __syncthreads();
    if (tid == 0) tokens[blockIdx.x] = sh.result == INT_MAX ? vocab - 1 : sh.result;
    return;
  }

  const int64_t k_wanted = p.top_k > 0 ? (p.top_k < vocab ? p.top_k : vocab) : min(kMaxCandidates, vocab);
  if (k_wanted > kMaxCandidates) {
    if (tid == 0) tokens[blockIdx.x] = kSampleOnHost;
    return;
  }
  const int k = static_cast<int>(k_wanted);

  // The k-th largest key, a byte at a time from the top; `remaining` of its ties are candidates.
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int j = tid; j < 256; j += kThreads) sh.hist[j] = 0;
    __syncthreads();
    for (int i = tid; i < vocab; i += kThreads) {
      const uint32_t key = order_key(__fdiv_rn(x[i], t));
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + static_cast<int>(sh.hist[d]) >= remaining) break;
        above += static_cast<int>(sh.hist[d]);
      }
      sh.digit = d;
      sh.remaining = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    mask |= 255u << shift;
    remaining = sh.remaining;
  }

  // The candidates: every key above the k-th, then its ties by id, written in id order (contiguous slices).
  unsigned long long counts = 0;  // above << 32 | ties
  for (int i = lo; i < hi; ++i) {
    const uint32_t key = order_key(__fdiv_rn(x[i], t));
    counts += key > prefix ? (1ull << 32) : (key == prefix ? 1ull : 0ull);
  }
  const unsigned long long offsets = block_exclusive_scan(counts, sh);
  int above_at = static_cast<int>(offsets >> 32), tie_at = static_cast<int>(offsets & 0xffffffffu);
  const int n_above = k - remaining;
  for (int i = lo; i < hi; ++i) {
    const float z = __fdiv_rn(x[i], t);
    const uint32_t key = order_key(z);
    int slot = -1;
    if (key > prefix) {
      slot = above_at++;
    } else if (key == prefix) {
      if (tie_at < remaining) slot = n_above + tie_at;
      ++tie_at;
    }
    if (slot >= 0) sh.cand_z[slot] = z, sh.cand_id[slot] = i;
  }
  if (tid >= k) sh.cand_z[tid] = -INFINITY, sh.cand_id[tid] = INT_MAX;
  __syncthreads();

  // Bitonic sort of the 1024 slots into the host's order (the padding last).
  for (int size = 2; size <= kMaxCandidates; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int other = tid ^ stride;
      if (other > tid) {
        const float za = sh.cand_z[tid], zb = sh.cand_z[other];
        const int32_t ia = sh.cand_id[tid], ib = sh.cand_id[other];
        const bool first_half = (tid & size) == 0;
        if (first_half ? before(zb, ib, za, ia) : before(za, ia, zb, ib)) {
          sh.cand_z[tid] = zb, sh.cand_id[tid] = ib;
          sh.cand_z[other] = za, sh.cand_id[other] = ia;
        }
      }
      __syncthreads();
    }
  }

  // Top-p alone normalises by the whole vocabulary's weight, as the host does.
  double total = 0.0;
  if (p.top_k == 0) {
    double s = 0.0;
    for (int i = tid; i < vocab; i += kThreads) s += exp(static_cast<double>(__fdiv_rn(x[i], t) - z_max));
    total = block_sum(s, sh);
  }
  if (tid < k) sh.scan[tid] = exp(static_cast<double>(sh.cand_z[tid] - z_max));
  __syncthreads();
  if (tid != 0) return;
  const double* w = sh.scan;
  int keep = k;
  double sum = 0.0;
  if (p.top_k == 0) {
    double head = 0.0;
    for (int i = 0; i < k; ++i) head += w[i];
    // The host's margin: beyond it the nucleus may reach past the 1024 best, which only the host sorts.
    if (head * (1.0 - 1e-9) < static_cast<double>(p.top_p) * total) {
      tokens[blockIdx.x] = kSampleOnHost;
      return;
    }
    sum = total;
  } else {
    for (int i = 0; i < keep; ++i) sum += w[i];
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    int n = 0;
    while (n < keep) {
      cum += w[n] / sum;
      ++n;
      if (cum >= p.top_p) break;
    }
    keep = n;
    sum = 0.0;
    for (int i = 0; i < keep; ++i) sum += w[i];
  }
  if (p.min_p > 0.0f) {
    const double threshold = static_cast<double>(p.min_p) * w[0];
    int n = 1;
    while (n < keep && w[n] >= threshold) ++n;
    keep = n;
    sum = 0.0;
    for (int i = 0; i < keep; ++i) sum += w[i];
  }
  const double target = p.u * sum;
  double acc = 0.0;
  int pick = keep - 1;
  for (int i = 0; i < keep; ++i) {
    acc += w[i];
    if (target < acc) {
      pick = i;
      break;
    }
  }
  tokens[blockIdx.x] = sh.cand_id[pick];
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, int32_t* tokens,
                 cudaStream_t s) {
  if (n == 0) return;
  check_supported(vocab >= 1 && vocab < INT_MAX, "sample_rows: the vocabulary must hold 1 to 2^31 - 2 tokens");
  sample_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, static_cast<int>(vocab), rows, tokens);
  check_launch("sample_rows_kernel");
}

}  // namespace sy::cuda
