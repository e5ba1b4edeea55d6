// Routed experts for a few (token, expert) pairs as GEMVs that stream each pair's expert weights (bf16,
// or block FP8 or 4-bit as stored) with 16-byte loads, many in flight per lane: SiLU·mul fused into the gate/up
// pass, the fixed-order weighted combine fused into the down pass. Two launches, both programmatic
// dependents; no host round trip.
#include <cuda_bf16.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/q4.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kDownPairs = 4;  // pairs whose down rows a warp streams together
// Largest staging of one token's activations in the down kernel (top_k · inter floats); past it they are
// read from global memory.
constexpr size_t kMaxStagedBytes = 160 * 1024;
constexpr size_t kBf16MaxStagedBytes = 48 * 1024;

// An expert array [n_experts, rows, cols] as the kernels stream it: 16-byte chunks of kPer weights, each
// with the Scale its unpacking needs, loaded together with the chunk (a scale fetched only when the chunk is
// unpacked would put a memory latency in front of every chunk's arithmetic).
struct Bf16Experts {
  static constexpr int kPer = 8;
  // 16-byte chunks per lane in flight: of each of the gate and up rows, and of each pair's down row. The
  // FP8 and 4-bit policies hold fewer (a chunk is 16 or 32 weights: a lane's share of a 2048-wide FP8 row is
  // 4 chunks, of a 7168-wide 4-bit row 7), so that their registers allow two blocks per SM.
  static constexpr int kGateUpBatch = 8, kDownBatch = 4;
  using RowScales = const float*;
  using Scale = float;
  const bf16_bits* w;
  int64_t rows, cols;
  __device__ const uint4* row(int64_t e, int64_t r) const {
    return reinterpret_cast<const uint4*>(w + (e * rows + r) * cols);
  }
  // Where the scales of row r of expert e are (bf16: none).
  __device__ const float* row_scales(int64_t e, int64_t r) const {
    (void)e, (void)r;
    return nullptr;
  }
  // The scale of chunk c of a row.
  __device__ Scale scale(const float* scales, int64_t c) const {
    (void)scales, (void)c;
    return 1.0f;
  }
  // Weights 8·part .. 8·part + 7 of a chunk (kParts parts of 8) before their scale, unpacked a part at a
  // time so that few registers hold widened weights; where kScaled, the scale multiplies the part's dot
  // product (part_scale), one multiply per 8 weights instead of one each.
  static constexpr int kParts = 1;
  static constexpr bool kScaled = false;
  __device__ void unpack_part(const uint4& u, int part, float* f) const {
    (void)part;
    unpack8(u, f);
  }
};
struct Fp8Experts {
  static constexpr int kPer = 16;
  static constexpr int kGateUpBatch = 4, kDownBatch = 2;
  using RowScales = const float*;
  using Scale = float;
  const uint8_t* w;
  int64_t rows, cols;
  QuantView q;
  __device__ const uint4* row(int64_t e, int64_t r) const {
    return reinterpret_cast<const uint4*>(w + (e * rows + r) * cols);
  }
  __device__ const float* row_scales(int64_t e, int64_t r) const { return fp8_row_scales(q, e, r); }
  __device__ Scale scale(const float* scales, int64_t c) const {
    return __ldg(scales + static_cast<int>(c) / chunks_per_block);  // 32-bit: a 64-bit division costs a chunk
  }
  static constexpr int kParts = 2;
  static constexpr bool kScaled = true;
  __device__ void unpack_part(const uint4& u, int part, float* f) const {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw r =
            __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[2 * part + i] >> (16 * h)), __NV_E4M3);
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&r));
        f[4 * i + 2 * h] = v.x;
        f[4 * i + 2 * h + 1] = v.y;
      }
    }
  }
  __device__ float part_scale(Scale s, int part) const {
    (void)part;
    return s;
  }
  int chunks_per_block;  // block_cols / 16
};
template <WeightFormat F>
struct Q4Experts {
  static constexpr int kPer = 32;
  static constexpr int kGateUpBatch = 4, kDownBatch = 2;
  using RowScales = Q4Row;
  const uint8_t* w;
  int64_t rows, cols;
  QuantView q;
  __device__ const uint4* row(int64_t e, int64_t r) const {
    return reinterpret_cast<const uint4*>(w + (e * rows + r) * (cols / 2));
  }
  using Scale = float2;
  __device__ Q4Row row_scales(int64_t e, int64_t r) const { return q4_row<F>(q, e, rows, r); }
  __device__ Scale scale(const Q4Row& scales, int64_t c) const { return q4_chunk_scales<F>(scales, q.block_cols, c); }
  static constexpr int kParts = 4;
  static constexpr bool kScaled = true;
  __device__ void unpack_part(const uint4& u, int part, float* f) const {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 v = q4_pair<F>(w[part], j);
      f[j] = v.x;
      f[j + 4] = v.y;
    }
  }
  __device__ float part_scale(Scale s, int part) const { return part < 2 ? s.x : s.y; }
};

// One warp per intermediate row i of one (token, expert) pair: gate and up rows together.
template <typename W>
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_kernel(MoeExpertsArgs p, W gu, float* act) {
  // [kPer][hidden / kPer]: element q of chunk c at q * chunks + c, so that the lanes of a warp, which read
  // consecutive chunks, read consecutive words (x[c * kPer + q] would put every lane on a few banks).
  extern __shared__ float x_s[];
  pdl_launch_dependents();
  pdl_wait();  // the expert ids and x come from the previous kernels
  const int64_t pair = blockIdx.y, t = pair / p.top_k;
  const int64_t e = p.expert_ids[pair];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t chunks = i < p.inter ? p.hidden / W::kPer : 0;
  const uint4* g_row = gu.row(e, i);
  const uint4* u_row = gu.row(e, p.inter + i);
  const typename W::RowScales g_scales = gu.row_scales(e, i);
  const typename W::RowScales u_scales = gu.row_scales(e, p.inter + i);
  uint4 gw[W::kGateUpBatch] = {}, uw[W::kGateUpBatch] = {};
  typename W::Scale gs[W::kGateUpBatch] = {}, us[W::kGateUpBatch] = {};
  const auto load = [&](int64_t c0) {
#pragma unroll
    for (int j = 0; j < W::kGateUpBatch; ++j) {
      const int64_t c = c0 + 32 * j;
      if (c < chunks) {
        gw[j] = __ldg(g_row + c);
        uw[j] = __ldg(u_row + c);
        gs[j] = gu.scale(g_scales, c);
        us[j] = gu.scale(u_scales, c);
      }
    }
  };
  load(lane);  // in flight while x is staged
  // Inputs rounded to bf16, as cuBLAS is fed on the grouped path and as the cpu-bf16 oracle does; four at a
  // time, a few loads in flight per thread (hidden % 8 == 0).
  const int64_t x_chunks = p.hidden / W::kPer;
  const float4* x4 = reinterpret_cast<const float4*>(p.x + t * p.hidden);
#pragma unroll 4
  for (int64_t h4 = threadIdx.x; h4 < p.hidden / 4; h4 += blockDim.x) {
    const float4 v = x4[h4];
    const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t h = 4 * h4 + q;
      x_s[(h % W::kPer) * x_chunks + h / W::kPer] = round_bf16(f[q]);
    }
  }
  __syncthreads();
  if (i >= p.inter) return;
  float g = 0.0f, u = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * W::kGateUpBatch) {
    if (c0 != lane) load(c0);
#pragma unroll
    for (int j = 0; j < W::kGateUpBatch; ++j) {
      const int64_t c = c0 + 32 * j;
      if (c >= chunks) break;
#pragma unroll
      for (int part = 0; part < W::kParts; ++part) {
        float gf[8], uf[8];
        gu.unpack_part(gw[j], part, gf);
        gu.unpack_part(uw[j], part, uf);
        float pg = 0.0f, pu = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float xq = x_s[(8 * part + q) * x_chunks + c];
          pg += gf[q] * xq;
          pu += uf[q] * xq;
        }
        if constexpr (W::kScaled) {
          g += pg * gu.part_scale(gs[j], part);
          u += pu * gu.part_scale(us[j], part);
        } else {
          g += pg;
          u += pu;
        }
      }
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) act[pair * p.inter + i] = g / (1.0f + __expf(-g)) * u;
}

// One warp per hidden row j of one token: y_k = down[e_k][j, :] · bf16(act[t·K + k]) for each of the
// token's pairs k, then out[t, j] = Σ_k weights[t, k] · y_k with k in order (the combine).
// kStaged: the token's activations are first staged in shared memory, rounded to bf16 and laid out as x_s
// in the gate/up kernel (pair k, element q of chunk c at (k·kPer + q)·chunks + c). With 16 or 32 weights a
// chunk, reading them from global memory puts a warp's 32 lanes 64 or 128 bytes apart, 16 or 32 cache lines
// per load; staged, the lanes read consecutive words (bf16: staged where small, see run()).
template <typename W, bool kStaged>
__global__ void __launch_bounds__(kWarps * 32, 2) moe_down_combine_kernel(MoeExpertsArgs p, W dn, const float* act) {
  extern __shared__ float act_s[];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t chunks = p.inter / W::kPer;
  if constexpr (kStaged) {
    const float4* a4 = reinterpret_cast<const float4*>(act + t * p.top_k * p.inter);
#pragma unroll 4
    for (int64_t i4 = threadIdx.x; i4 < p.top_k * p.inter / 4; i4 += blockDim.x) {
      const float4 v = a4[i4];
      const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t i = 4 * i4 + q, k = i / p.inter, h = i % p.inter;
        act_s[(k * W::kPer + h % W::kPer) * chunks + h / W::kPer] = round_bf16(f[q]);
      }
    }
    __syncthreads();
  }
  if (j >= p.hidden) return;
  float s = 0.0f;
  for (int64_t k0 = 0; k0 < p.top_k; k0 += kDownPairs) {
    const uint4* rows[kDownPairs];
    const float* acts[kDownPairs];
    typename W::RowScales scales[kDownPairs];
#pragma unroll
    for (int q = 0; q < kDownPairs; ++q) {
      const int64_t k = min(k0 + q, p.top_k - 1), pair = t * p.top_k + k;
      const int64_t e = p.expert_ids[pair];
      rows[q] = dn.row(e, j);
      scales[q] = dn.row_scales(e, j);
      acts[q] = kStaged ? act_s + k * W::kPer * chunks : act + pair * p.inter;
    }
    float y[kDownPairs] = {};
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * W::kDownBatch) {
      uint4 w[kDownPairs][W::kDownBatch] = {};
      typename W::Scale sc[kDownPairs][W::kDownBatch] = {};
#pragma unroll
      for (int q = 0; q < kDownPairs; ++q) {
#pragma unroll
        for (int b = 0; b < W::kDownBatch; ++b) {
          if (k0 + q < p.top_k && c0 + 32 * b < chunks) {
            w[q][b] = __ldg(rows[q] + c0 + 32 * b);
            sc[q][b] = dn.scale(scales[q], c0 + 32 * b);
          }
        }
      }
#pragma unroll
      for (int q = 0; q < kDownPairs; ++q) {
        if (k0 + q >= p.top_k) break;
#pragma unroll
        for (int b = 0; b < W::kDownBatch; ++b) {
          const int64_t c = c0 + 32 * b;
          if (c >= chunks) break;
#pragma unroll
          for (int part = 0; part < W::kParts; ++part) {
            float wf[8], a[8];
            dn.unpack_part(w[q][b], part, wf);
            if constexpr (kStaged) {
#pragma unroll
              for (int i = 0; i < 8; ++i) a[i] = acts[q][(8 * part + i) * chunks + c];
            } else {
              const float4* a4 = reinterpret_cast<const float4*>(acts[q] + c * W::kPer + 8 * part);
              const float4 lo = a4[0], hi = a4[1];
              const float g[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
              for (int i = 0; i < 8; ++i) a[i] = round_bf16(g[i]);
            }
            float py = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) py += wf[i] * a[i];
            if constexpr (W::kScaled) {
              y[q] += py * dn.part_scale(sc[q][b], part);
            } else {
              y[q] += py;
            }
          }
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kDownPairs; ++q) {
      if (k0 + q >= p.top_k) break;
      s += p.weights[t * p.top_k + k0 + q] * warp_sum(y[q]);
    }
  }
  if (lane == 0) p.out[t * p.hidden + j] = s;
}

}  // namespace

namespace {
template <typename W>
void run(const MoeExpertsArgs& p, const W& gate_up, const W& down, float* act, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  launch_pdl(moe_gate_up_kernel<W>,
             dim3(static_cast<unsigned>((p.inter + kWarps - 1) / kWarps), static_cast<unsigned>(pairs)),
             dim3(kWarps * 32), static_cast<size_t>(p.hidden) * sizeof(float), s, "moe_gate_up", p, gate_up, act);
  const dim3 down_grid(static_cast<unsigned>((p.hidden + kWarps - 1) / kWarps), static_cast<unsigned>(p.tokens));
  const size_t staged = static_cast<size_t>(p.top_k * p.inter) * sizeof(float);
  // bf16 rows (8 weights a chunk) read unstaged activations as two float4 a chunk from L2, a dependent load in
  // the inner loop; staged they are one shared-memory word. Staged only while two blocks still fit an SM.
  if (W::kPer > 8 ? staged <= kMaxStagedBytes : staged <= kBf16MaxStagedBytes) {
    static size_t configured = 48 * 1024;
    if (staged > configured) {
      check_cuda(cudaFuncSetAttribute(moe_down_combine_kernel<W, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kMaxStagedBytes)),
                 "cudaFuncSetAttribute(moe_down_combine)");
      configured = kMaxStagedBytes;
    }
    launch_pdl(moe_down_combine_kernel<W, true>, down_grid, dim3(kWarps * 32), staged, s, "moe_down_combine", p, down,
               static_cast<const float*>(act));
    return;
  }
  launch_pdl(moe_down_combine_kernel<W, false>, down_grid, dim3(kWarps * 32), 0, s, "moe_down_combine", p, down,
             static_cast<const float*>(act));
}
}  // namespace

bool moe_small_batch_supported(const MoeExpertsArgs& p) {
  return expert_layout_ok(p.gate_up_q, p.down_q, p.hidden, p.inter);
}

void moe_small_batch(const MoeExpertsArgs& p, float* act, cudaStream_t s) {
  if (p.tokens * p.top_k == 0) return;
  check_supported(moe_small_batch_supported(p),
                  "moe_small_batch: hidden and inter must be multiples of 8 (FP8: 16, 4-bit: 32)");
  const auto* gu = static_cast<const uint8_t*>(p.gate_up);
  const auto* dn = static_cast<const uint8_t*>(p.down);
  switch (p.gate_up_q.format) {
    case WeightFormat::dense:
      return run(p, Bf16Experts{bf16_storage(p.gate_up), 2 * p.inter, p.hidden},
                 Bf16Experts{bf16_storage(p.down), p.hidden, p.inter}, act, s);
    case WeightFormat::fp8_block:
      return run(p, Fp8Experts{gu, 2 * p.inter, p.hidden, p.gate_up_q, static_cast<int>(p.gate_up_q.block_cols / 16)},
                 Fp8Experts{dn, p.hidden, p.inter, p.down_q, static_cast<int>(p.down_q.block_cols / 16)}, act, s);
    case WeightFormat::int4_group:
      return run(p, Q4Experts<WeightFormat::int4_group>{gu, 2 * p.inter, p.hidden, p.gate_up_q},
                 Q4Experts<WeightFormat::int4_group>{dn, p.hidden, p.inter, p.down_q}, act, s);
    case WeightFormat::nvfp4:
      return run(p, Q4Experts<WeightFormat::nvfp4>{gu, 2 * p.inter, p.hidden, p.gate_up_q},
                 Q4Experts<WeightFormat::nvfp4>{dn, p.hidden, p.inter, p.down_q}, act, s);
  }
}

}  // namespace sy::cuda
