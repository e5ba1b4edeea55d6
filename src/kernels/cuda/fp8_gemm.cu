// Block-FP8 products on Hopper's FP8 tensor cores (W8A8): activations quantised per row and 128 columns to
// E4M3 (scale = amax / 448), weights read as stored (E4M3 bytes, fp32 scales per block of a multiple of 128
// columns), mma.sync m16n8k32 E4M3 over [rows][128-byte] shared-memory tiles fed by a cp.async pipeline. Each
// 32-column partial product leaves the tensor core unscaled and is added into the fp32 accumulators times its
// activation row's and weight block's scales, so no value is ever widened to bf16 and the weights cross the
// memory bus once, at one byte each. Three uses: the routed experts' gate_up (SiLU·mul in the epilogue) and
// down over moe_grouped.cu's route table, and dense projections (split over k when the output has too few
// tiles to fill the GPU, the slices summed in a fixed order).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

namespace {

constexpr int kBN = 128;  // output columns per CTA (gate_up: 64 gate + the 64 matching up columns)
constexpr int kBK = 128;  // k per pipeline stage: one 128-byte shared-memory row per tile row, 8 chunks of 16
constexpr int kWarpsN = 4;
constexpr int kSms = 132;  // H200; the dense split aims at two waves of CTAs
constexpr int kMaxSplits = 8;
constexpr float kE4m3Max = 448.0f;

enum class Mode { gate_up, down, dense };

struct Fp8GemmArgs {
  const uint8_t* a;       // E4M3: gate_up x [tokens, k] (row r reads token row_pair[r] / top_k); down act [pairs,
                          // k] by row; dense x [m, k]
  const float* a_scales;  // [rows of a, fp8_act_scale_cols(k)]
  const uint8_t* w;       // E4M3: gate_up [n_experts, 2 n_out, k] (gate rows, then up); down [n_experts, n_out, k];
                          // dense [n_out, k]
  QuantView q;            // the weights' block scales
  GroupedRoute route;     // gate_up and down: the tiles by expert
  const bf16_bits* bias;  // dense with one k slice: added in the epilogue
  void* out;  // gate_up: bf16 act [pairs, n_out] by row; down: fp32 y [pairs, n_out] by pair; dense: fp32 [slices][m,
              // n_out]
  int64_t m, k, n_out, top_k;
  int kt_per_slice;  // dense: k tiles per gridDim.z slice
};

// Rows per thread-block tile, warps along m, pipeline stages, CTAs per SM (which caps the registers). Each thread
// holds twice its share of the tile (accumulators and the stage's partial products): 32 rows a warp at most.
template <int BM, int WARPS_M, int STAGES, int MIN_CTAS>
struct Fp8Tiles {
  static constexpr int kBM = BM, kWarpsM = WARPS_M, kStages = STAGES, kMinCtas = MIN_CTAS;
  static constexpr int kThreads = WARPS_M * kWarpsN * 32;
  static constexpr size_t kSmem = size_t(STAGES) * (BM + kBN) * kBK;
};
using Fp8Tiles16 = Fp8Tiles<16, 1, 4, 3>;
using Fp8Tiles32 = Fp8Tiles<32, 1, 4, 2>;
using Fp8Tiles64 = Fp8Tiles<64, 2, 4, 1>;
using Fp8Tiles128 = Fp8Tiles<128, 2, 3, 1>;

template <typename T, Mode M>
__global__ void __launch_bounds__(T::kThreads, T::kMinCtas) fp8_gemm_kernel(Fp8GemmArgs g) {
  constexpr int BM = T::kBM, STAGES = T::kStages, kThreads = T::kThreads;
  constexpr bool kGateUp = M == Mode::gate_up;
  constexpr int WM = BM / T::kWarpsM, WN = kBN / kWarpsN, MT = WM / 16, NT = WN / 8;
  constexpr int kAIters = BM * 8 / kThreads, kBIters = kBN * 8 / kThreads;
  constexpr int kStage = (BM + kBN) * kBK;
  static_assert(WM % 16 == 0 && NT % 4 == 0 && kAIters >= 1 && BM * 8 % kThreads == 0 && kBN * 8 % kThreads == 0);

  int e = 0, row0 = 0, rows = 0;
  if constexpr (M == Mode::dense) {
    row0 = static_cast<int>(blockIdx.x) * BM;
    const int64_t left = g.m - row0;
    rows = static_cast<int>(left < BM ? left : BM);
  } else {
    const int tile = static_cast<int>(blockIdx.x);
    e = g.route.tile_expert[tile];
    if (e < 0) return;  // past the real tiles (uniform across the CTA)
    row0 = g.route.tile_row0[tile];
    rows = g.route.tile_rows[tile];
  }
  const int nb = static_cast<int>(blockIdx.y);
  const int KT = static_cast<int>((g.k + kBK - 1) / kBK);
  const int kt0 = M == Mode::dense ? static_cast<int>(blockIdx.z) * g.kt_per_slice : 0;
  const int kt1 = M == Mode::dense ? min(KT, kt0 + g.kt_per_slice) : KT;
  extern __shared__ __align__(128) uint8_t smem[];  // [STAGES][(BM + kBN) * kBK]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int64_t a_scale_cols = fp8_act_scale_cols(g.k);
  const auto a_row_of = [&](int r) -> int64_t {  // the row of a that tile row r reads
    if constexpr (kGateUp) {
      return g.route.row_pair[row0 + r] / g.top_k;
    } else {
      return row0 + r;
    }
  };

  // This thread's 16-byte chunks: column chunk c of A rows and B rows fixed for the whole k loop.
  const int c = tid & 7;
  const uint8_t* a_src[kAIters];
  bool a_ok[kAIters];
  int a_dst[kAIters];
#pragma unroll
  for (int i = 0; i < kAIters; ++i) {
    const int r = (tid + i * kThreads) >> 3;
    a_ok[i] = r < rows;
    a_src[i] = g.a + (a_ok[i] ? a_row_of(r) : 0) * g.k + c * 16;
    a_dst[i] = swizzle128(r, c);
  }
  const int64_t w_rows = kGateUp ? 2 * g.n_out : g.n_out;
  // The weight row of B tile row n (gate_up: 64 gate rows, then the 64 matching up rows).
  const auto w_row_of = [&](int n, int64_t& col) -> int64_t {
    if constexpr (kGateUp) {
      col = static_cast<int64_t>(nb) * (kBN / 2) + n % (kBN / 2);
      return (n < kBN / 2 ? 0 : g.n_out) + col;
    } else {
      col = static_cast<int64_t>(nb) * kBN + n;
      return col;
    }
  };
  const uint8_t* w_e = g.w + static_cast<int64_t>(e) * w_rows * g.k;
  const uint8_t* b_src[kBIters];
  bool b_ok[kBIters];
  int b_dst[kBIters];
#pragma unroll
  for (int i = 0; i < kBIters; ++i) {
    const int n = (tid + i * kThreads) >> 3;
    int64_t col;
    const int64_t wrow = w_row_of(n, col);
    b_ok[i] = col < g.n_out;
    b_src[i] = w_e + (b_ok[i] ? wrow : 0) * g.k + c * 16;
    b_dst[i] = BM * kBK + swizzle128(n, c);
  }
  const auto load_stage = [&](int stage, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBK;
    const bool k_ok = k0 + c * 16 < g.k;  // k % 16 == 0: a chunk is all in or all out
    uint8_t* st = smem + stage * kStage;
#pragma unroll
    for (int i = 0; i < kAIters; ++i) cp_async16(st + a_dst[i], a_src[i] + (a_ok[i] && k_ok ? k0 : 0), a_ok[i] && k_ok);
#pragma unroll
    for (int i = 0; i < kBIters; ++i) cp_async16(st + b_dst[i], b_src[i] + (b_ok[i] && k_ok ? k0 : 0), b_ok[i] && k_ok);
  };

  const WarpTile<MT, NT, kBN, kGateUp> warp_tile{.m0 = wm * WM, .wn = wn, .lane = lane};
  // The scale rows of this thread's accumulator rows (wm·WM + mt·16 + lane/4 + 8h) and of its n8 tiles' weight
  // rows (8 rows of one block: block_rows % 8 == 0); null past the tile's rows or columns (scale 0).
  const float* as_ptr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * WM + mt * 16 + (lane >> 2) + 8 * h;
      as_ptr[mt][h] = r < rows ? g.a_scales + a_row_of(r) * a_scale_cols : nullptr;
    }
  }
  const float* ws_ptr[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    int64_t col;
    const int64_t wrow = w_row_of(warp_tile.b_row(j), col);
    ws_ptr[j] = col < g.n_out ? g.q.scales + e * g.q.scale_stride + (wrow / g.q.block_rows) * g.q.scale_cols : nullptr;
  }
  const int blocks_per_scale = static_cast<int>(g.q.block_cols / kBK);
  float as[MT][2], ws[NT];
  const auto fetch_scales = [&](int kt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) as[mt][h] = as_ptr[mt][h] ? __ldg(as_ptr[mt][h] + kt) : 0.0f;
#pragma unroll
    for (int j = 0; j < NT; ++j) ws[j] = ws_ptr[j] ? __ldg(ws_ptr[j] + kt / blocks_per_scale) : 0.0f;
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (kt0 + s < kt1) load_stage(s, kt0 + s);
    cp_async_commit();
  }
  for (int kt = kt0; kt < kt1; ++kt) {
    const int i = kt - kt0;
    fetch_scales(kt);  // in flight while the stage lands
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage i has landed for everyone, and everyone is done with stage i - 1
    if (kt + STAGES - 1 < kt1) load_stage((i + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const uint8_t* As = smem + (i % STAGES) * kStage;
    const uint8_t* Bs = As + BM * kBK;
    // The stage's partial products, unscaled (one activation scale per row and one weight scale per n8 tile
    // for all 128 columns), then added into the accumulators with their scales.
    float part[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) part[mt][j][q] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < kBK / 32; ++kk) {
      uint32_t af[MT][4], bfr[NT][2];
      warp_tile.load(As, Bs, kk, af, bfr);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_fp8(part[mt][j], af[mt], bfr[j][0], bfr[j][1]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float s0 = as[mt][0] * ws[j], s1 = as[mt][1] * ws[j];
        acc[mt][j][0] = fmaf(part[mt][j][0], s0, acc[mt][j][0]);
        acc[mt][j][1] = fmaf(part[mt][j][1], s0, acc[mt][j][1]);
        acc[mt][j][2] = fmaf(part[mt][j][2], s1, acc[mt][j][2]);
        acc[mt][j][3] = fmaf(part[mt][j][3], s1, acc[mt][j][3]);
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (M == Mode::dense) {
    warp_tile.store(acc, rows, row0, nb, nullptr,
                    static_cast<float*>(g.out) + static_cast<int64_t>(blockIdx.z) * g.m * g.n_out, g.n_out, g.bias);
  } else {
    warp_tile.store(acc, rows, row0, nb, g.route.row_pair, g.out, g.n_out);
  }
}

template <typename T, Mode M>
void launch(const Fp8GemmArgs& g, dim3 grid, cudaStream_t s, const char* name) {
  const auto kernel = fp8_gemm_kernel<T, M>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmem)),
             "cudaFuncSetAttribute(fp8_gemm)");
  kernel<<<grid, T::kThreads, T::kSmem, s>>>(g);
  check_launch(name);
}

// y[i] = Σ_z part[z][i] + bias, slices in order.
__global__ void sum_slices_kernel(const float* __restrict__ part, int slices, int64_t m, int64_t n,
                                  const bf16_bits* __restrict__ bias, float* __restrict__ y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  float v = bias ? bf(bias[i % n]) : 0.0f;
  for (int z = 0; z < slices; ++z) v += part[z * m * n + i];
  y[i] = v;
}

// One warp per (row, 128-column block): each lane 4 consecutive values (k % 16 == 0).
template <typename In>
__global__ void quantise_fp8_rows_kernel(const In* __restrict__ x, int64_t rows, int64_t k, uint8_t* __restrict__ q,
                                         float* __restrict__ scales) {
  const int64_t sc = fp8_act_scale_cols(k);
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (w >= rows * sc) return;
  const int64_t r = w / sc, col = (w % sc) * kFp8ActCols + lane * 4;
  const bool ok = col < k;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (ok) {
    if constexpr (sizeof(In) == 4) {
      const float4 f = *reinterpret_cast<const float4*>(x + r * k + col);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
      const uint2 u = *reinterpret_cast<const uint2*>(x + r * k + col);
      v[0] = bf(static_cast<bf16_bits>(u.x & 0xffffu)), v[1] = bf(static_cast<bf16_bits>(u.x >> 16));
      v[2] = bf(static_cast<bf16_bits>(u.y & 0xffffu)), v[3] = bf(static_cast<bf16_bits>(u.y >> 16));
    }
  }
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = amax > 0.0f && amax <= 3.0e38f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  if (ok) {
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const float2 p = make_float2(__fdiv_rn(v[j], scale), __fdiv_rn(v[j + 1], scale));
      packed |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
    *reinterpret_cast<uint32_t*>(q + r * k + col) = packed;
  }
  if (lane == 0) scales[r * sc + w % sc] = scale;
}

template <typename In>
void quantise_rows(const In* x, int64_t rows, int64_t k, uint8_t* q, float* scales, cudaStream_t s) {
  check_supported(k % 16 == 0, "quantise_fp8_rows: needs k % 16 == 0");
  const int64_t warps = rows * fp8_act_scale_cols(k);
  if (warps == 0) return;
  quantise_fp8_rows_kernel<In><<<static_cast<unsigned>((warps + 7) / 8), 256, 0, s>>>(x, rows, k, q, scales);
  check_launch("quantise_fp8_rows");
}

// Tiles for a dense product of m rows: 16 or 32-row tiles (two CTAs or more per SM) up to 64 rows, whose weight
// re-reads come from the L2; 128-row tiles beyond (measured on H200: 64-row tiles, one CTA per SM, took 23 µs for
// Qwen3's q/k/v at 64 rows where 32-row ones took 13 at 32).
template <typename F>
void with_dense_tiles(int64_t m, F&& f) {
  if (m <= 16) return f(Fp8Tiles16{});
  if (m <= 64) return f(Fp8Tiles32{});
  return f(Fp8Tiles128{});
}

int dense_bm(int64_t m) {
  int bm = 0;
  with_dense_tiles(m, [&](auto t) { bm = decltype(t)::kBM; });
  return bm;
}

// k slices for a dense product: enough CTAs for two waves when the output alone has fewer, at least 4 k tiles
// a slice.
int dense_slices(int64_t m, int64_t n, int64_t k) {
  const int64_t ctas = ((m + dense_bm(m) - 1) / dense_bm(m)) * ((n + kBN - 1) / kBN);
  const int64_t kt = (k + kBK - 1) / kBK;
  const int64_t want = (2 * kSms + ctas - 1) / ctas;
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(want, kt / 4), 1, kMaxSplits));
}

template <typename T>
void run_experts(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  const int64_t pairs = p.tokens * p.top_k;
  const auto tiles = static_cast<unsigned>(moe_grouped_max_tiles(pairs, p.n_experts, T::kBM));
  launch<T, Mode::gate_up>({.a = g.x_fp8,
                            .a_scales = g.x_scales,
                            .w = static_cast<const uint8_t*>(p.gate_up),
                            .q = p.gate_up_q,
                            .route = g.route,
                            .out = g.act,
                            .k = p.hidden,
                            .n_out = p.inter,
                            .top_k = p.top_k},
                           dim3(tiles, static_cast<unsigned>((p.inter + kBN / 2 - 1) / (kBN / 2))), s,
                           "fp8_gemm(gate_up)");
  quantise_rows(g.act, pairs, p.inter, g.act_fp8, g.act_scales, s);
  launch<T, Mode::down>({.a = g.act_fp8,
                         .a_scales = g.act_scales,
                         .w = static_cast<const uint8_t*>(p.down),
                         .q = p.down_q,
                         .route = g.route,
                         .out = g.y,
                         .k = p.inter,
                         .n_out = p.hidden,
                         .top_k = p.top_k},
                        dim3(tiles, static_cast<unsigned>((p.hidden + kBN - 1) / kBN)), s, "fp8_gemm(down)");
}

}  // namespace

bool fp8_act_supported(const QuantView& q, int64_t k) {
  return q.format == WeightFormat::fp8_block && k % 16 == 0 && q.block_cols > 0 && q.block_cols % kBK == 0 &&
         q.block_rows > 0 && q.block_rows % 8 == 0;
}

void quantise_fp8_rows(const float* x, int64_t rows, int64_t k, uint8_t* q, float* scales, cudaStream_t s) {
  quantise_rows(x, rows, k, q, scales, s);
}
void quantise_fp8_rows(const bf16_bits* x, int64_t rows, int64_t k, uint8_t* q, float* scales, cudaStream_t s) {
  quantise_rows(x, rows, k, q, scales, s);
}

int64_t gemm_fp8_partials(int64_t m, int64_t n, int64_t k) {
  const int slices = dense_slices(m, n, k);
  return slices > 1 ? slices * m * n : 0;
}

void gemm_fp8(const Fp8Rows& x, const uint8_t* w, const QuantView& q, const bf16_bits* bias, float* y, float* partials,
              int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  if (m == 0 || n == 0) return;
  check_supported(fp8_act_supported(q, k) && n % 2 == 0,
                  "gemm_fp8: needs k % 16 == 0, an even n, block_cols a multiple of 128 and block_rows of 8");
  const int slices = dense_slices(m, n, k);
  const int kt = static_cast<int>((k + kBK - 1) / kBK);
  const int per = (kt + slices - 1) / slices;
  check_supported(slices == 1 || partials != nullptr, "gemm_fp8: k slices need gemm_fp8_partials() floats of scratch");
  Fp8GemmArgs g{.a = x.q,
                .a_scales = x.scales,
                .w = w,
                .q = q,
                .route = {},
                .bias = slices == 1 ? bias : nullptr,
                .out = slices == 1 ? y : partials,
                .m = m,
                .k = k,
                .n_out = n,
                .top_k = 1,
                .kt_per_slice = per};
  with_dense_tiles(m, [&](auto t) {
    using T = decltype(t);
    const dim3 grid(static_cast<unsigned>((m + T::kBM - 1) / T::kBM), static_cast<unsigned>((n + kBN - 1) / kBN),
                    static_cast<unsigned>((kt + per - 1) / per));
    launch<T, Mode::dense>(g, grid, s, "fp8_gemm(dense)");
  });
  if (slices > 1) {
    const int64_t total = m * n;
    sum_slices_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(
        partials, static_cast<int>((kt + per - 1) / per), m, n, bias, y);
    check_launch("fp8_gemm(sum_slices)");
  }
}

bool moe_grouped_fp8_act(const MoeExpertsArgs& p) {
  // inter % 8: each n8 tile of up rows (inter + a multiple of 8) lies in one block of rows.
  return fp8_act_supported(p.gate_up_q, p.hidden) && fp8_act_supported(p.down_q, p.inter) && p.inter % 8 == 0;
}

void moe_grouped_gemms_fp8(const MoeExpertsArgs& p, const MoeGroupedScratch& g, cudaStream_t s) {
  if (p.tokens * p.top_k == 0) return;
  check_supported(moe_grouped_fp8_act(p) && g.x_fp8 && g.act_fp8,
                  "moe_grouped_gemms_fp8: needs block-FP8 experts with 128-column blocks and the FP8 scratch");
  switch (g.tile_m) {
    case Fp8Tiles16::kBM:
      return run_experts<Fp8Tiles16>(p, g, s);
    case Fp8Tiles32::kBM:
      return run_experts<Fp8Tiles32>(p, g, s);
    case Fp8Tiles64::kBM:
      return run_experts<Fp8Tiles64>(p, g, s);
    default:
      return run_experts<Fp8Tiles128>(p, g, s);
  }
}

}  // namespace sy::cuda
