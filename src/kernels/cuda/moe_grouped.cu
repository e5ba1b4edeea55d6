// Routed experts for many (token, expert) pairs, device-only and capturable: a one-block dispatch
// (pairs counted per expert, prefix offsets, a stable permutation and the m-tile table), grouped
// GEMMs over experts on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation, cp.async pipeline)
// for gate_up with SiLU·mul in the epilogue and for down, then a fixed-order weighted combine.
// Launch shapes depend on (pairs, n_experts) only: grids are sized by the bound
// Σ_e ceil(m_e / BM) <= ceil(pairs / BM) + n_experts and CTAs past the real tiles exit.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/q4.cuh"

namespace sy::cuda {

namespace {

constexpr int kBN = 128;  // output columns per CTA (gate_up: 64 gate + the 64 matching up columns)
constexpr int kBK = 64;   // k per pipeline stage: 8 chunks of 16 bytes per smem row, XOR-swizzled
constexpr int kWarpsN = 4;
constexpr int kMaxExperts = 1024;
constexpr int kRouteBatch = 8;  // expert ids each lane loads before the first use (latency in flight)

// ---- dispatch -------------------------------------------------------------------------------------

struct RouteArgs {
  const int32_t* expert_ids;  // [pairs]
  int64_t pairs;
  int n_experts, tile_m, max_tiles;
  GroupedRoute route;
};

// One block of 32·NW threads; warp w owns the pairs [w·seg, (w+1)·seg), read in rounds of
// 32·kRouteBatch. Pass 1 counts each warp's pairs per expert, then the counts become each warp's first
// row within the expert's segment, so that pass 2 places pairs stably (pair order within each expert)
// with no atomics. Pairs whose expert id is out of range get no row (the combine skips them).
__global__ void moe_route_kernel(RouteArgs a) {
  extern __shared__ int sm[];
  const int E = a.n_experts, NW = static_cast<int>(blockDim.x / 32);
  int* cnt = sm;                    // [NW][E]: pass-1 counts, then the next free row of (warp, expert)
  int* rows = cnt + NW * E;         // [E] rows of each expert
  int* first_row = rows + E;        // [E]
  int* first_tile = first_row + E;  // [E]
  __shared__ int total_tiles;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < NW * E; i += blockDim.x) cnt[i] = 0;
  __syncthreads();

  const int64_t seg = (a.pairs + NW - 1) / NW;
  const int64_t begin = warp * seg, end = min(a.pairs, begin + seg);
  const auto expert_of = [&](int64_t p) {
    if (p >= end) return -1;
    const int e = a.expert_ids[p];
    return e >= 0 && e < E ? e : -1;
  };
  int ids[kRouteBatch];
  const auto load_round = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < kRouteBatch; ++j) ids[j] = expert_of(base + j * 32 + lane);
  };
  for (int64_t base = begin; base < end; base += 32 * kRouteBatch) {
    load_round(base);
#pragma unroll
    for (int j = 0; j < kRouteBatch; ++j) {
      const int e = ids[j];
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      if (e >= 0 && lane == __ffs(peers) - 1) cnt[warp * E + e] += __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x) {
    int s = 0;
    for (int w = 0; w < NW; ++w) {
      const int c = cnt[w * E + e];
      cnt[w * E + e] = s;
      s += c;
    }
    rows[e] = s;
  }
  __syncthreads();
  if (warp == 0) {  // exclusive scans of rows and m-tiles over experts: E/32 per lane, then across lanes
    const int per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
    int r_own = 0, t_own = 0;
    for (int e = e0; e < e1; ++e) {
      r_own += rows[e];
      t_own += (rows[e] + a.tile_m - 1) / a.tile_m;
    }
    int r_inc = r_own, t_inc = t_own;
    for (int o = 1; o < 32; o <<= 1) {
      const int r = __shfl_up_sync(0xffffffffu, r_inc, o), t = __shfl_up_sync(0xffffffffu, t_inc, o);
      if (lane >= o) {
        r_inc += r;
        t_inc += t;
      }
    }
    int r = r_inc - r_own, t = t_inc - t_own;
    for (int e = e0; e < e1; ++e) {
      first_row[e] = r;
      first_tile[e] = t;
      r += rows[e];
      t += (rows[e] + a.tile_m - 1) / a.tile_m;
    }
    if (lane == 31) total_tiles = t_inc;
  }
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x) {
    for (int w = 0; w < NW; ++w) cnt[w * E + e] += first_row[e];
    for (int j = 0; j * a.tile_m < rows[e]; ++j) {
      const int g = first_tile[e] + j;
      a.route.tile_expert[g] = e;
      a.route.tile_row0[g] = first_row[e] + j * a.tile_m;
      a.route.tile_rows[g] = min(a.tile_m, rows[e] - j * a.tile_m);
    }
  }
  for (int g = total_tiles + tid; g < a.max_tiles; g += blockDim.x) a.route.tile_expert[g] = -1;
  __syncthreads();
  for (int64_t base = begin; base < end; base += 32 * kRouteBatch) {
    load_round(base);
#pragma unroll
    for (int j = 0; j < kRouteBatch; ++j) {
      const int e = ids[j];
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      if (e >= 0) {
        const int rank = __popc(peers & ((1u << lane) - 1u));
        a.route.row_pair[cnt[warp * E + e] + rank] = static_cast<int32_t>(base + j * 32 + lane);
      }
      __syncwarp();
      if (e >= 0 && lane == __ffs(peers) - 1) cnt[warp * E + e] += __popc(peers);
      __syncwarp();
    }
  }
}

// ---- grouped GEMM ---------------------------------------------------------------------------------

// Element offset of 16-byte chunk c of row r in a [rows][kBK] bf16 tile (swizzle128 in bf16 units).
__device__ __forceinline__ int swizzle(int r, int c) { return swizzle128(r, c) / 2; }

struct GemmArgs {
  const bf16_bits* a;  // gate_up: x in bf16 [tokens, k] (row r reads token row_pair[r] / top_k);
                       // down: act [pairs, k] by row
  const void* w;       // gate_up [n_experts, 2 * n_out, k] (gate rows, then up rows); down [n_experts, n_out, k]
  QuantView q;         // dense: w is bf16; else the quantised form's bytes with these scales
  GroupedRoute route;
  void* out;  // gate_up: bf16 act [pairs, n_out] by row; down: fp32 y [pairs, n_out] by pair
  int64_t k, n_out, top_k;
};

// 16-byte chunks of one B row of kBK weights stored in format F (bf16 8, E4M3 4, 4-bit 2).
template <WeightFormat F>
constexpr int kBChunksPerRow = kBK / weights_per_load(F);
// Elements (bf16 units) of one pipeline stage: the A tile and the B tile, bf16 or quantised bytes, which
// each k step widens into one bf16 B tile after the stages.
template <int BM, WeightFormat F>
constexpr int kStageElems = BM* kBK + kBN* kBChunksPerRow<F> * 8;

// CTA (m-tile blockIdx.x, column block blockIdx.y) of a grouped GEMM; BM rows of one expert × kBN
// columns, WARPS_M × kWarpsN warps of (BM / WARPS_M) × 32. With kGateUp the CTA's B tile is 64 gate
// rows then the 64 matching up rows, and each warp holds 16 gate and the same 16 up columns, so that
// SiLU(gate)·up is formed in registers and stored as bf16. With quantised weights (block-FP8 E4M3 or 4-bit)
// cp.async stages their bytes, and each k step first widens the stage's B bytes with their scales into the
// bf16 B tile the tensor cores read (each thread the chunks it copied), so the weights cross the memory bus
// at one byte (half a byte) each.
template <int BM, int WARPS_M, int STAGES, int MIN_CTAS, bool kGateUp, WeightFormat F>
__global__ void __launch_bounds__(WARPS_M* kWarpsN * 32, MIN_CTAS) grouped_gemm_kernel(GemmArgs g) {
  constexpr bool kQuant = F != WeightFormat::dense, kFp8 = F == WeightFormat::fp8_block;
  constexpr int kThreads = WARPS_M * kWarpsN * 32;
  constexpr int WM = BM / WARPS_M, WN = kBN / kWarpsN, MT = WM / 16, NT = WN / 8;
  constexpr int kAIters = BM * 8 / kThreads;
  // 16-byte chunks of B per thread and stage.
  constexpr int kBChunks = kBChunksPerRow<F>, kBIters = kBN * kBChunks / kThreads;
  constexpr int kStage = kStageElems<BM, F>;
  static_assert(WM % 16 == 0 && NT % 4 == 0 && kAIters >= 1 && BM * 8 % kThreads == 0 &&
                kBN * kBChunks % kThreads == 0);

  const int tile = static_cast<int>(blockIdx.x);
  const int e = g.route.tile_expert[tile];
  if (e < 0) return;  // past the real tiles (uniform across the CTA)
  const int row0 = g.route.tile_row0[tile], rows = g.route.tile_rows[tile];
  const int nb = static_cast<int>(blockIdx.y);
  extern __shared__ __align__(16) bf16_bits smem[];  // [STAGES][(BM + kBN) * kBK]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;

  // This thread's 16-byte chunks: column chunk c (the same for every iteration, kThreads % 8 == 0)
  // of A rows and B rows fixed for the whole k loop.
  const int c = tid & 7;
  const bf16_bits* a_src[kAIters];
  bool a_ok[kAIters];
  int a_dst[kAIters];
#pragma unroll
  for (int i = 0; i < kAIters; ++i) {
    const int r = (tid + i * kThreads) >> 3;
    a_ok[i] = r < rows;
    int64_t arow = 0;
    if (a_ok[i]) arow = kGateUp ? g.route.row_pair[row0 + r] / g.top_k : row0 + r;
    a_src[i] = g.a + arow * g.k + c * 8;
    a_dst[i] = swizzle(r, c);
  }
  const int64_t w_rows = kGateUp ? 2 * g.n_out : g.n_out;
  // Weights per 16-byte chunk, bytes per row, and this thread's B chunk within its row.
  constexpr int kPer = weights_per_load(F);
  const int64_t row_bytes = g.k * 16 / kPer;
  const int bc = tid % kBChunks;
  const char* w_e = static_cast<const char*>(g.w) + static_cast<int64_t>(e) * w_rows * row_bytes;
  const char* b_src[kBIters];
  bool b_ok[kBIters];
  int b_dst[kBIters];
  const float* b_scales[kBIters];  // FP8: the scales of the thread's B rows
  Q4Row b_q4[kBIters];             // 4-bit: likewise
  int b_n[kBIters];
#pragma unroll
  for (int i = 0; i < kBIters; ++i) {
    const int n = (tid + i * kThreads) / kBChunks;
    int64_t col, wrow;
    if constexpr (kGateUp) {
      col = static_cast<int64_t>(nb) * (kBN / 2) + n % (kBN / 2);
      wrow = (n < kBN / 2 ? 0 : g.n_out) + col;
    } else {
      col = static_cast<int64_t>(nb) * kBN + n;
      wrow = col;
    }
    b_ok[i] = col < g.n_out;
    const int64_t src_row = b_ok[i] ? wrow : 0;
    b_n[i] = n;
    if constexpr (kFp8) b_scales[i] = fp8_row_scales(g.q, e, src_row);
    if constexpr (kQuant && !kFp8) b_q4[i] = q4_row<F>(g.q, e, w_rows, src_row);
    b_src[i] = w_e + src_row * row_bytes + bc * 16;
    // bf16: straight into the swizzled tile; quantised: row-major bytes, widened later.
    b_dst[i] = kQuant ? BM * kBK + n * (kBChunks * 8) + bc * 8 : BM * kBK + swizzle(n, c);
  }
  const auto load_stage = [&](int stage, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBK;
    const bool k_ok = k0 + c * 8 < g.k;       // k % 8 == 0: a chunk is all in or all out
    const bool kb_ok = k0 + bc * kPer < g.k;  // likewise for B (k % kPer == 0)
    bf16_bits* st = smem + stage * kStage;
#pragma unroll
    for (int i = 0; i < kAIters; ++i) {
      const bool ok = a_ok[i] && k_ok;
      cp_async16(st + a_dst[i], ok ? a_src[i] + k0 : g.a, ok);
    }
#pragma unroll
    for (int i = 0; i < kBIters; ++i) {
      const bool ok = b_ok[i] && kb_ok;
      cp_async16(st + b_dst[i], ok ? b_src[i] + k0 * 16 / kPer : g.w, ok);
    }
  };
  // Quantised: the bf16 B tile after the stages, filled from stage `stage` (k tile kt) by each thread for
  // the chunks it copied: 16 bytes become bf16 chunks 2·bc and 2·bc + 1 of its row (FP8), or 4·bc to
  // 4·bc + 3 (4-bit).
  bf16_bits* const b_wide = smem + STAGES * kStage;
  const int block_cols = kFp8 ? static_cast<int>(g.q.block_cols) : 1;
  // The scales of the thread's chunks of k tile kt, fetched a k step ahead of their widening (fetched there,
  // right after the barrier, each would stall the whole CTA for a memory latency).
  using ScaleT = std::conditional_t<kFp8, float, float2>;
  ScaleT b_sc[kBIters] = {};
  const auto fetch_scales = [&](int kt) {
    if constexpr (kFp8) {
      const int k0 = kt * kBK + bc * kPer;
      const int kb = k0 / block_cols;  // the scale column of the thread's chunk
#pragma unroll
      for (int i = 0; i < kBIters; ++i) b_sc[i] = b_ok[i] && k0 < g.k ? __ldg(b_scales[i] + kb) : 0.0f;
    } else if constexpr (kQuant) {
      const int64_t chunk = static_cast<int64_t>(kt) * kBChunks + bc;  // of the row
#pragma unroll
      for (int i = 0; i < kBIters; ++i) {
        b_sc[i] = b_ok[i] && chunk * kPer < g.k ? q4_chunk_scales<F>(b_q4[i], g.q.block_cols, chunk)
                                                : make_float2(0.0f, 0.0f);
      }
    } else {
      (void)kt;
    }
  };
  const auto widen_stage = [&](int stage) {
    if constexpr (kFp8) {
      const bf16_bits* st = smem + stage * kStage;
#pragma unroll
      for (int i = 0; i < kBIters; ++i) {
        const uint4 u = *reinterpret_cast<const uint4*>(st + b_dst[i]);
        float f[16];
        unpack16_fp8(u, b_sc[i], f);
        uint32_t p[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
          p[j] = *reinterpret_cast<const uint32_t*>(&b);
        }
        *reinterpret_cast<uint4*>(b_wide + swizzle(b_n[i], 2 * bc)) = make_uint4(p[0], p[1], p[2], p[3]);
        *reinterpret_cast<uint4*>(b_wide + swizzle(b_n[i], 2 * bc + 1)) = make_uint4(p[4], p[5], p[6], p[7]);
      }
      __syncthreads();
    } else if constexpr (kQuant) {
      const bf16_bits* st = smem + stage * kStage;
#pragma unroll
      for (int i = 0; i < kBIters; ++i) {
        const uint4 u = *reinterpret_cast<const uint4*>(st + b_dst[i]);
        float f[32];
        unpack32_q4<F>(u, b_sc[i], f);
#pragma unroll
        for (int o = 0; o < 4; ++o)
          *reinterpret_cast<uint4*>(b_wide + swizzle(b_n[i], 4 * bc + o)) = pack8_bf16(f + 8 * o);
      }
      __syncthreads();
    } else {
      (void)stage;
    }
  };
  const WarpTile<MT, NT, kBN, kGateUp> warp_tile{.m0 = wm * WM, .wn = wn, .lane = lane};

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.0f;

  const int KT = static_cast<int>((g.k + kBK - 1) / kBK);
  fetch_scales(0);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt has landed for everyone, and everyone is done with stage kt - 1
    if (kt + STAGES - 1 < KT) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const bf16_bits* As = smem + (kt % STAGES) * kStage;
    widen_stage(kt % STAGES);
    if (kt + 1 < KT) fetch_scales(kt + 1);
    const bf16_bits* Bs = kQuant ? b_wide : As + BM * kBK;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MT][4], bfr[NT][2];
      warp_tile.load(As, Bs, kk, af, bfr);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_bf16(acc[mt][j], af[mt], bfr[j][0], bfr[j][1]);
    }
  }
  cp_async_wait<0>();
  warp_tile.store(acc, rows, row0, nb, g.route.row_pair, g.out, g.n_out);
}

// ---- combine --------------------------------------------------------------------------------------

// out[t, j] = Σ_k weights[t, k] · y[t·K + k, j], k in order (no atomics: the same sum every run).
__global__ void moe_grouped_combine_kernel(MoeExpertsArgs p, const float* y) {
  const int64_t quads = p.hidden / 4;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * quads) return;
  const int64_t t = i / quads, j = i % quads;
  float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t k = 0; k < p.top_k; ++k) {
    const int64_t pair = t * p.top_k + k;
    const int e = p.expert_ids[pair];
    if (e < 0 || e >= p.n_experts) continue;
    const float w = p.weights[pair];
    const float4 v = reinterpret_cast<const float4*>(y + pair * p.hidden)[j];
    s.x += w * v.x;
    s.y += w * v.y;
    s.z += w * v.z;
    s.w += w * v.w;
  }
  reinterpret_cast<float4*>(p.out + t * p.hidden)[j] = s;
}

// Tile configurations by rows per tile (16 to 128): decode-sized groups stream the weights through
// 16-row tiles (3 CTAs per SM); prefill-sized ones use taller tiles for tensor-core rate.
// MIN_CTAS per SM caps the registers so that the shared memory, not the registers, sets occupancy.
template <int BM, int WARPS_M, int STAGES, int MIN_CTAS>
struct TileConfig {
  static constexpr int kBM = BM, kThreads = WARPS_M * kWarpsN * 32;
  template <WeightFormat F>
  static constexpr size_t kSmem = (size_t(STAGES) * kStageElems<BM, F> +
                                   (F != WeightFormat::dense ? size_t(kBN) * kBK : 0)) *
                                  sizeof(bf16_bits);
  template <bool kGateUp, WeightFormat F>
  static void launch(const GemmArgs& g, int64_t max_tiles, int64_t col_blocks, cudaStream_t s, const char* name) {
    const auto kernel = grouped_gemm_kernel<BM, WARPS_M, STAGES, MIN_CTAS, kGateUp, F>;
    constexpr size_t smem = kSmem<F>;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute(grouped_gemm)");
    kernel<<<dim3(static_cast<unsigned>(max_tiles), static_cast<unsigned>(col_blocks)), kThreads, smem, s>>>(g);
    check_launch(name);
  }
};
using Tiles16 = TileConfig<16, 1, 4, 3>;
using Tiles32 = TileConfig<32, 1, 4, 2>;
using Tiles64 = TileConfig<64, 2, 4, 2>;
using Tiles128 = TileConfig<128, 2, 3, 2>;

int64_t max_tiles(int64_t pairs, int64_t n_experts, int tile_m) { return (pairs + tile_m - 1) / tile_m + n_experts; }

template <typename Config, WeightFormat F>
void run_gemms(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k, tiles = max_tiles(pairs, p.n_experts, Config::kBM);
  check_supported(g.tile_m == Config::kBM, "moe_grouped: tile_m must be 16, 32, 64 or 128");
  Config::template launch<true, F>({.a = g.x_bf16,
                                    .w = p.gate_up,
                                    .q = p.gate_up_q,
                                    .route = g.route,
                                    .out = g.act,
                                    .k = p.hidden,
                                    .n_out = p.inter,
                                    .top_k = p.top_k},
                                   tiles, (p.inter + kBN / 2 - 1) / (kBN / 2), s, "grouped_gemm(gate_up)");
  Config::template launch<false, F>({.a = g.act,
                                     .w = p.down,
                                     .q = p.down_q,
                                     .route = g.route,
                                     .out = g.y,
                                     .k = p.inter,
                                     .n_out = p.hidden,
                                     .top_k = p.top_k},
                                    tiles, (p.hidden + kBN - 1) / kBN, s, "grouped_gemm(down)");
}

template <typename Config>
void run_gemms(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  switch (p.gate_up_q.format) {
    case WeightFormat::dense:
      return run_gemms<Config, WeightFormat::dense>(p, g, s);
    case WeightFormat::fp8_block:
      return run_gemms<Config, WeightFormat::fp8_block>(p, g, s);
    case WeightFormat::int4_group:
      return run_gemms<Config, WeightFormat::int4_group>(p, g, s);
    case WeightFormat::nvfp4:
      return run_gemms<Config, WeightFormat::nvfp4>(p, g, s);
  }
}

}  // namespace

bool moe_grouped_supported(const MoeExpertsArgs& p) {
  return expert_layout_ok(p.gate_up_q, p.down_q, p.hidden, p.inter) && p.n_experts >= 1 && p.n_experts <= kMaxExperts;
}

int moe_grouped_tile_m(int64_t pairs, int64_t n_experts) {
  const int64_t per_expert = pairs / std::max<int64_t>(1, n_experts);
  // Measured on H200 (bench_kernels --cuda-moe, Qwen3-30B-A3B experts): 16 rows up to ~8 pairs per
  // expert, 32 to ~24, 64 to ~80, then 128 (taller tiles re-read fewer weights but waste more rows).
  return per_expert <= 8    ? Tiles16::kBM
         : per_expert <= 24 ? Tiles32::kBM
         : per_expert <= 80 ? Tiles64::kBM
                            : Tiles128::kBM;
}

int64_t moe_grouped_max_tiles(int64_t pairs, int64_t n_experts, int tile_m) {
  return max_tiles(pairs, n_experts, tile_m);
}

int64_t moe_grouped_route_ints(int64_t pairs, int64_t n_experts, int tile_m) {
  return pairs + 3 * max_tiles(pairs, n_experts, tile_m);
}

GroupedRoute moe_grouped_route_at(int32_t* base, int64_t pairs, int64_t n_experts, int tile_m) {
  const int64_t tiles = max_tiles(pairs, n_experts, tile_m);
  return {.row_pair = base,
          .tile_expert = base + pairs,
          .tile_row0 = base + pairs + tiles,
          .tile_rows = base + pairs + 2 * tiles};
}

void moe_grouped_dispatch(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  if (pairs == 0) return;
  check_supported(moe_grouped_supported(p),
                  "moe_grouped: needs hidden and inter multiples of 8 (FP8: of 16, 4-bit: of 32) and 1 <= n_experts "
                  "<= 1024");
  const int warps = p.n_experts <= 256 ? 32 : 8;
  const auto E = static_cast<int>(p.n_experts);
  const size_t smem = static_cast<size_t>(warps * E + 3 * E) * sizeof(int);
  moe_route_kernel<<<1, warps * 32, smem, s>>>({.expert_ids = p.expert_ids,
                                                .pairs = pairs,
                                                .n_experts = E,
                                                .tile_m = g.tile_m,
                                                .max_tiles = static_cast<int>(max_tiles(pairs, E, g.tile_m)),
                                                .route = g.route});
  check_launch("moe_route");
  if (g.x_fp8) return quantise_fp8_rows(p.x, p.tokens, p.hidden, g.x_fp8, g.x_scales, s);
  f32_to_bf16(p.x, g.x_bf16, p.tokens * p.hidden, s);
}

void moe_grouped_gemms(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  if (p.tokens * p.top_k == 0) return;
  if (g.x_fp8) return moe_grouped_gemms_fp8(p, g, s);
  switch (g.tile_m) {
    case Tiles16::kBM:
      return run_gemms<Tiles16>(p, g, s);
    case Tiles32::kBM:
      return run_gemms<Tiles32>(p, g, s);
    case Tiles64::kBM:
      return run_gemms<Tiles64>(p, g, s);
    default:
      return run_gemms<Tiles128>(p, g, s);
  }
}

void moe_grouped_combine(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  const int64_t n = p.tokens * p.hidden / 4;
  if (n == 0) return;
  moe_grouped_combine_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(p, g.y);
  check_launch("moe_grouped_combine");
}

}  // namespace sy::cuda
