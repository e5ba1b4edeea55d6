// Multi-head latent attention on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation, online
// softmax), for the published shapes (kv_lora_rank a multiple of 128, latent + rope a multiple of 64:
// DeepSeek-V3, Kimi K2, GLM-5 have 512 + 64). Every head of a token reads the same cache row as its key
// (latent | rope) and the latent as its value, so a block takes 32 heads of one token as the rows of
// its tiles and streams the token's keys through shared memory once for all of them:
//   scores: warp w holds 16 rows (w / 4) and a quarter of the 576 dims (w % 4), its q fragments in
//           registers; the four partial score tiles meet in shared memory, where the block takes the
//           row maxima and writes the probabilities;
//   values: warp w owns latent dims [64w, 64w + 64) of all 32 rows and accumulates P · V for them.
// As the GQA kernels, q and the probabilities go in as two bf16 halves (hi + lo), so the products keep
// fp32-like accuracy against the bf16 cache. Decode splits the keys over blocks (flash decoding) and
// merges the splits in a second kernel. An E4M3 cache (kv_cache.cuh) lands as bytes and is widened, exactly, into
// one bf16 tile that the same mma code reads; its scale is folded into the score scale and the output.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/mla_ops.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/split_merge.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 32;                // query rows (heads of one token) of a block
constexpr int kTileKeys = 32;            // keys per pipeline stage
constexpr int kStages = 3;               // tiles in flight
constexpr int kSlices = 4;               // warps sharing one 16-row tile's q·k, each over a quarter of the dims
constexpr int kSStride = kTileKeys + 8;  // floats per row of the partial-score tiles (conflict-free stores)
constexpr int kPStride = kTileKeys + 8;  // bf16 per row of the probability tiles (conflict-free ldmatrix)
constexpr int kLatent = 512;
constexpr int kRope = 64;
constexpr float kLog2e = 1.4426950408889634f;

// The key tiles: bf16, kStages tiles the mma reads where they land; E4M3, one bf16 tile the mma reads, then
// kStages byte tiles that land and are widened into it.
template <int D, typename KV>
__host__ __device__ constexpr size_t tiles_bytes() {
  return kIsE4m3<KV> ? size_t(kTileKeys) * D * sizeof(bf16_bits) + size_t(kStages) * kTileKeys * D
                     : size_t(kStages) * kTileKeys * D * sizeof(bf16_bits);
}

template <int D, typename KV>
constexpr size_t smem_bytes() {
  return tiles_bytes<D, KV>() + size_t(kSlices) * kRows * kSStride * sizeof(float) +
         2 * size_t(kRows) * kPStride * sizeof(bf16_bits);
}

// Element offset of 16-byte chunk c of key row r in a [kTileKeys][D] tile; chunks XOR-swizzled within
// each group of eight by the row, so the eight rows an ldmatrix reads hit eight different bank groups.
template <int D>
__device__ __forceinline__ int tile_offset(int r, int c) {
  return r * D + (c ^ (r & 7)) * 8;
}

// Key j of a block's list: position j itself, or the indexer's j-th choice; -1 when it is not visible.
__device__ __forceinline__ int64_t key_at(const int32_t* chosen, int64_t j, int64_t j_end, int64_t pos) {
  if (j >= j_end) return -1;
  const int64_t k = chosen ? chosen[j] : j;
  return k >= 0 && k <= pos ? k : -1;
}

// Cache rows of keys [j0, j0 + kTileKeys) into a tile (all threads); keys not visible are zero-filled. bf16 tiles
// are swizzled (tile_offset); E4M3 ones are plain [kTileKeys][D] bytes, which widen_tile swizzles.
template <int D, typename KV>
__device__ __forceinline__ void load_tile(KV* dst, const MlaAttentionArgs& p, const int32_t* table,
                                          const int32_t* chosen, int64_t j0, int64_t j_end, int64_t pos) {
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(KV)), kChunks = D / kPerChunk;
  for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t k = key_at(chosen, j0 + r, j_end, pos);
    const int64_t off = k >= 0 ? slot_of(table, p.block_size, k) * D + c * kPerChunk : 0;
    cp_async16(dst + (kIsE4m3<KV> ? r * D + c * kPerChunk : tile_offset<D>(r, c)),
               static_cast<const KV*>(p.cache) + off, k >= 0);
  }
}

// An E4M3 tile (plain bytes) widened into the swizzled bf16 tile the mma reads (all threads).
template <int D>
__device__ __forceinline__ void widen_tile(const e4m3_bits* src, bf16_bits* dst) {
  constexpr int kChunks = D / 16;
  for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 lo, hi;
    e4m3x16_to_bf16(*reinterpret_cast<const uint4*>(src + r * D + c * 16), lo, hi);
    *reinterpret_cast<uint4*>(dst + tile_offset<D>(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(dst + tile_offset<D>(r, 2 * c + 1)) = hi;
  }
}

// Block (token, group of 32 heads, split of the keys). One split: the block writes the output; several:
// an unnormalised partial (m in the log2 domain, l, acc) for mla_merge_kernel.
template <int L, int R, typename KV>
__global__ void __launch_bounds__(kThreads, 1) mla_flash_kernel(MlaAttentionArgs p, AttentionSplit sp) {
  constexpr int D = L + R, kTileElems = kTileKeys * D;
  constexpr int kSteps = D / 16 / kSlices;  // k steps of one warp's score slice
  constexpr int kDims = L / kWarps;         // latent dims of one warp's output
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_bits* tiles = reinterpret_cast<bf16_bits*>(smem_raw);  // bf16: the kStages tiles; E4M3: the widened tile
  // Where stage s lands: a bf16 tile, or (E4M3) a byte tile after the widened one.
  const auto stage = [&](int s) -> KV* {
    if constexpr (kIsE4m3<KV>) {
      return reinterpret_cast<e4m3_bits*>(tiles + kTileElems) + s * kTileElems;
    } else {
      return tiles + s * kTileElems;
    }
  };
  float* s_part = reinterpret_cast<float*>(smem_raw + tiles_bytes<D, KV>());  // [kSlices][kRows][kSStride]
  bf16_bits* p_hi = reinterpret_cast<bf16_bits*>(s_part + kSlices * kRows * kSStride);
  bf16_bits* p_lo = p_hi + kRows * kPStride;
  __shared__ float m_s[kRows], l_s[kRows], corr_s[kRows];

  pdl_launch_dependents();
  pdl_wait();  // q and the new cache rows come from the previous kernels
  const int64_t H = p.n_heads, groups = (H + kRows - 1) / kRows;
  const int64_t split = blockIdx.x % sp.splits, tg = blockIdx.x / sp.splits;
  const int64_t t = tg / groups, h0 = (tg % groups) * kRows;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4;

  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
  const int32_t* chosen = p.key_positions ? p.key_positions + t * p.n_selected : nullptr;
  // The indexer keeps min(n_selected, pos + 1) keys and pads its list with -1 past them.
  const int64_t n_keys = chosen ? min(p.n_selected, pos + 1) : pos + 1;
  const int64_t all_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int64_t per_split = (all_tiles + sp.splits - 1) / sp.splits;
  const int64_t tile0 = split * per_split, tile1 = min(all_tiles, tile0 + per_split);
  const int64_t j_lo = tile0 * kTileKeys, j_end = min(n_keys, tile1 * kTileKeys);
  const int n = static_cast<int>(max(int64_t(0), tile1 - tile0));

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n) load_tile<D, KV>(stage(s), p, table, chosen, j_lo + s * kTileKeys, j_end, pos);
    cp_async_commit();
  }

  // This warp's q fragments: rows mt·16 + (g, g + 8), k steps slice·kSteps.. (hi and lo halves).
  const int mt = warp / kSlices, slice = warp % kSlices;
  uint32_t qh[kSteps][4], ql[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // fragment register j: row (g, g + 8, g, g + 8), columns +0 / +8
      const int64_t h = h0 + mt * 16 + g + 8 * (j % 2);
      const int d = (slice * kSteps + kk) * 16 + (j / 2) * 8 + 2 * (lane % 4);
      float x0 = 0.0f, x1 = 0.0f;
      if (h < H) {
        const float* src =
            d < L ? p.q_latent + (t * H + h) * L + d : p.q_rope + (t * H + h) * p.q_rope_stride + (d - L);
        x0 = src[0];
        x1 = src[1];
      }
      split_bf16(x0, x1, qh[kk][j], ql[kk][j]);
    }
  }
  if (tid < kRows) {
    m_s[tid] = -FLT_MAX;
    l_s[tid] = 0.0f;
  }
  float o[2][kDims / 8][4] = {};
  const float scale_log2 = p.scale * kLog2e * (kIsE4m3<KV> ? p.kv_quant.k_scale : 1.0f);
  const float v_scale = kIsE4m3<KV> ? p.kv_quant.k_scale : 1.0f;  // the values are the latent keys

  for (int i = 0; i < n; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile i has landed; every warp is past tile i - 1's values
    if (i + kStages - 1 < n) {
      load_tile<D, KV>(stage((i + kStages - 1) % kStages), p, table, chosen,
                       j_lo + int64_t(i + kStages - 1) * kTileKeys, j_end, pos);
    }
    cp_async_commit();
    const bf16_bits* cur = tiles + (i % kStages) * kTileElems;
    if constexpr (kIsE4m3<KV>) {
      // Stage i % kStages is not the one the load above fills; every warp is past the previous tile's values.
      widen_tile<D>(stage(i % kStages), tiles);
      __syncthreads();
      cur = tiles;
    }

    // Partial scores of this warp's 16 rows × 32 keys over its quarter of the dims.
    float s[4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const int chunk = 2 * (slice * kSteps + kk);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t b[4];
        ldmatrix_x4(b, cur + tile_offset<D>(16 * half + (lane & 7) + ((lane >> 4) << 3), chunk + ((lane >> 3) & 1)));
        mma_bf16(s[2 * half], qh[kk], b[0], b[1]);
        mma_bf16(s[2 * half], ql[kk], b[0], b[1]);
        mma_bf16(s[2 * half + 1], qh[kk], b[2], b[3]);
        mma_bf16(s[2 * half + 1], ql[kk], b[2], b[3]);
      }
    }
    float* sw = s_part + (slice * kRows + mt * 16) * kSStride;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int key = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(sw + g * kSStride + key) = make_float2(s[nt][0], s[nt][1]);
      *reinterpret_cast<float2*>(sw + (g + 8) * kSStride + key) = make_float2(s[nt][2], s[nt][3]);
    }
    __syncthreads();

    // Softmax step: eight threads a row, four keys each.
    {
      const int row = tid / 8, k0 = (tid % 8) * 4;
      float v[4], mx = -FLT_MAX;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = 0.0f;
#pragma unroll
        for (int sl = 0; sl < kSlices; ++sl) sum += s_part[(sl * kRows + row) * kSStride + k0 + e];
        const bool ok = key_at(chosen, j_lo + int64_t(i) * kTileKeys + k0 + e, j_end, pos) >= 0;
        v[e] = ok ? sum * scale_log2 : -INFINITY;
        mx = fmaxf(mx, v[e]);
      }
#pragma unroll
      for (int o8 = 1; o8 < 8; o8 <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o8));
      const float m_old = m_s[row], m_new = fmaxf(m_old, mx);
      const float use = m_new == -FLT_MAX ? 0.0f : m_new;  // no key seen yet: nothing to rescale
      float pr[4], sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pr[e] = exp2f(v[e] - use);
        sum += pr[e];
      }
#pragma unroll
      for (int o8 = 1; o8 < 8; o8 <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o8);
      if (tid % 8 == 0) {  // the row's other threads read m_s before the shuffles above
        const float corr = exp2f(m_old - use);
        m_s[row] = m_new;
        l_s[row] = l_s[row] * corr + sum;
        corr_s[row] = corr;
      }
      uint2 hi, lo;
      split_bf16(pr[0], pr[1], hi.x, lo.x);
      split_bf16(pr[2], pr[3], hi.y, lo.y);
      *reinterpret_cast<uint2*>(p_hi + row * kPStride + k0) = hi;
      *reinterpret_cast<uint2*>(p_lo + row * kPStride + k0) = lo;
    }
    __syncthreads();

    // Values: this warp's latent dims of all 32 rows, rescaled, then += P · V.
#pragma unroll
    for (int m2 = 0; m2 < 2; ++m2) {
      const float c0 = corr_s[m2 * 16 + g], c1 = corr_s[m2 * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < kDims / 8; ++nt) {
        o[m2][nt][0] *= c0;
        o[m2][nt][1] *= c0;
        o[m2][nt][2] *= c1;
        o[m2][nt][3] *= c1;
      }
#pragma unroll
      for (int ks = 0; ks < kTileKeys / 16; ++ks) {
        uint32_t ah[4], al[4];
        const int a_off = (m2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kPStride + ks * 16 + (lane >> 4) * 8;
        ldmatrix_x4(ah, p_hi + a_off);
        ldmatrix_x4(al, p_lo + a_off);
#pragma unroll
        for (int dp = 0; dp < kDims / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, cur + tile_offset<D>(ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                    warp * (kDims / 8) + 2 * dp + (lane >> 4)));
          mma_bf16(o[m2][2 * dp], ah, b[0], b[1]);
          mma_bf16(o[m2][2 * dp], al, b[0], b[1]);
          mma_bf16(o[m2][2 * dp + 1], ah, b[2], b[3]);
          mma_bf16(o[m2][2 * dp + 1], al, b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the last tile's l_s

#pragma unroll
  for (int m2 = 0; m2 < 2; ++m2) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m2 * 16 + g + 8 * half;
      const int64_t h = h0 + row;
      if (h >= H) continue;
      const int64_t head = t * H + h;
      const float l = l_s[row];
      if (sp.splits == 1) {
        const float inv = l > 0.0f ? 1.0f / l * v_scale : 0.0f;
        float* out = p.out + head * L + warp * kDims + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < kDims / 8; ++nt) {
          *reinterpret_cast<float2*>(out + nt * 8) =
              make_float2(o[m2][nt][2 * half] * inv, o[m2][nt][2 * half + 1] * inv);
        }
      } else {
        float* acc = sp.acc + (head * sp.splits + split) * L + warp * kDims + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < kDims / 8; ++nt) {
          *reinterpret_cast<float2*>(acc + nt * 8) =
              make_float2(o[m2][nt][2 * half] * v_scale, o[m2][nt][2 * half + 1] * v_scale);
        }
        if (warp == 0 && lane % 4 == 0) {
          sp.m[head * sp.splits + split] = m_s[row];
          sp.l[head * sp.splits + split] = l;
        }
      }
    }
  }
}

// Block (token, head): merges its splits (split_merge.cuh).
__global__ void __launch_bounds__(kMergeThreads) mla_merge_kernel(MlaAttentionArgs p, AttentionSplit sp) {
  extern __shared__ float merge_smem[];
  pdl_launch_dependents();
  pdl_wait();
  merge_split_row(sp, p.out, blockIdx.x, p.kv_lora_rank, merge_smem);
}

}  // namespace

bool mla_flash_supported(int64_t kv_lora_rank, int64_t rope_dim) {
  return kv_lora_rank == kLatent && rope_dim == kRope;
}

int64_t mla_flash_splits(int64_t tokens, int64_t n_heads, int64_t max_keys) {
  // About two blocks per SM of an H200 (132 SMs; one block fits an SM), at least one 32-key tile a split.
  const int64_t blocks = std::max<int64_t>(1, tokens * ((n_heads + kRows - 1) / kRows));
  const int64_t want = (264 + blocks - 1) / blocks;
  return std::max<int64_t>(1, std::min<int64_t>(want, (max_keys + kTileKeys - 1) / kTileKeys));
}

void mla_flash_attention(const MlaAttentionArgs& p, const AttentionSplit& sp, cudaStream_t s) {
  if (p.tokens == 0 || p.n_heads == 0) return;
  check_supported(mla_flash_supported(p.kv_lora_rank, p.rope_dim),
                  "mla_flash_attention: needs kv_lora_rank 512 and rope dim 64");
  const int64_t groups = (p.n_heads + kRows - 1) / kRows;
  with_kv_element(p.kv_quant, [&](auto kv) {
    using KV = decltype(kv);
    constexpr size_t smem = smem_bytes<kLatent + kRope, KV>();
    static bool configured = false;  // per instantiation
    if (!configured) {
      check_cuda(cudaFuncSetAttribute(mla_flash_kernel<kLatent, kRope, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)),
                 "cudaFuncSetAttribute(mla_flash)");
      configured = true;
    }
    launch_pdl(mla_flash_kernel<kLatent, kRope, KV>, dim3(static_cast<unsigned>(p.tokens * groups * sp.splits)),
               dim3(kThreads), smem, s, "mla_flash", p, sp);
  });
  if (sp.splits > 1) {
    launch_pdl(mla_merge_kernel, dim3(static_cast<unsigned>(p.tokens * p.n_heads)), dim3(kMergeThreads),
               merge_smem_bytes(sp.splits), s, "mla_merge", p, sp);
  }
}

}  // namespace sy::cuda
