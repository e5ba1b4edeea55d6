// GQA attention over the paged KV cache on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation
// and online softmax): a decode kernel (one token per block, the token's whole query group served
// from one read of each K/V row, keys split over warps and over blocks) and a prefill kernel (flash
// attention: a block's warps hold different query rows and share each K/V tile).
//
// Both keep fp32 accuracy in the products: q and the probabilities are each fed as two bf16 halves
// (hi = bf16(x), lo = bf16(x - hi)), so q·k and p·v carry ~16 mantissa bits against the bf16 K and V,
// as the fp32 CPU kernel does; the cost is twice the tensor-core work, which stays far under the
// memory time. Scores are kept in the log2 domain (scaled by log2 e) for exp2.
//
// An E4M3 cache (kv_cache.cuh) lands in shared memory as bytes and is widened, exactly, into one bf16 K and V tile
// that the same mma code reads; its per-tensor scales are folded into the score scale (K) and the output (V), so
// the tensor cores see the stored values themselves.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/split_merge.cuh"

namespace sy::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 64;   // keys per pipeline stage; four 16-key slices
constexpr int kSliceKeys = 16;  // keys per mma pass of one warp
constexpr int kStages = 2;
constexpr int kMaxGroup = 16;  // query rows of one warp's mma tile
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: the K and V tiles (KvTiles), then the query fragments of `row_sets` sets of 16 rows.
template <int HD>
__host__ __device__ constexpr size_t tile_bytes() {
  return size_t(kStages) * 2 * kTileKeys * HD * sizeof(bf16_bits);
}
template <int HD>
__host__ __device__ constexpr size_t q_frag_bytes() {
  return size_t(HD / 16) * 2 * 32 * sizeof(uint4);
}

// Element offset of 16-byte chunk c of key row r in a [kTileKeys][HD] bf16 tile, XOR-swizzled so that
// the 8 rows an ldmatrix reads hit 8 different bank groups.
template <int HD>
__device__ __forceinline__ int kv_offset(int r, int c) {
  if constexpr (HD == 32) {
    return r * HD + ((c ^ ((r >> 1) & 3)) * 8);  // 4 chunks a row: two rows per 128 bytes
  } else {
    return r * HD + ((c ^ (r & 7)) * 8);
  }
}

// Loads keys [k0, k0 + kTileKeys) of one kv head into a K and a V tile (all threads of the block);
// keys at or past k_end are zero-filled, so that masked probabilities multiply zeros, not garbage.
// The block-table entries of a thread's rows are all loaded before the first copy is issued, so that
// a tile costs one table latency, not one per row. bf16 tiles are swizzled (kv_offset); E4M3 ones are plain
// [kTileKeys][HD] bytes, which widen_kv_tile swizzles.
template <int HD, typename KV>
__device__ __forceinline__ void load_kv_tile(KV* ks, KV* vs, const PagedAttentionArgs& p, const int32_t* table,
                                             int64_t kvh, int64_t k0, int64_t k_end) {
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(KV));
  constexpr int kChunks = HD / kPerChunk, kRowsPerPass = kThreads / kChunks, kPasses = kTileKeys / kRowsPerPass;
  const int c = static_cast<int>(threadIdx.x) % kChunks, r0 = static_cast<int>(threadIdx.x) / kChunks;
  const auto bs = static_cast<int32_t>(p.block_size);  // positions and block ids are int32
  int32_t block[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int64_t kp = k0 + r0 + i * kRowsPerPass;
    block[i] = kp < k_end ? table[static_cast<int32_t>(kp) / bs] : 0;
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = r0 + i * kRowsPerPass;
    const int64_t kp = k0 + r;
    const bool ok = kp < k_end;
    const int64_t slot = static_cast<int64_t>(block[i]) * bs + static_cast<int32_t>(kp) % bs;
    const int64_t off = ok ? (slot * p.kv_heads + kvh) * HD + c * kPerChunk : 0;
    const int at = kIsE4m3<KV> ? r * HD + c * kPerChunk : kv_offset<HD>(r, c);
    cp_async16(ks + at, static_cast<const KV*>(p.k_cache) + off, ok);
    cp_async16(vs + at, static_cast<const KV*>(p.v_cache) + off, ok);
  }
}

// An E4M3 K and V tile (plain bytes) widened into the swizzled bf16 tiles the mma reads (all threads).
template <int HD>
__device__ __forceinline__ void widen_kv_tile(const e4m3_bits* k8, const e4m3_bits* v8, bf16_bits* ks, bf16_bits* vs) {
  constexpr int kChunks = HD / 16;
  for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 lo, hi;
    e4m3x16_to_bf16(*reinterpret_cast<const uint4*>(k8 + r * HD + c * 16), lo, hi);
    *reinterpret_cast<uint4*>(ks + kv_offset<HD>(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(ks + kv_offset<HD>(r, 2 * c + 1)) = hi;
    e4m3x16_to_bf16(*reinterpret_cast<const uint4*>(v8 + r * HD + c * 16), lo, hi);
    *reinterpret_cast<uint4*>(vs + kv_offset<HD>(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(vs + kv_offset<HD>(r, 2 * c + 1)) = hi;
  }
}

// The K/V tiles in the first tile_bytes<HD>() of shared memory. bf16: kStages [K tile, V tile] pairs that the mma
// reads where they land. E4M3: one bf16 pair the mma reads, then kStages pairs of byte tiles [K, V] that land
// (half the size each, so the total is the same) and are widened into it by ready().
template <int HD, typename KV>
struct KvTiles {
  static constexpr int kTileElems = kTileKeys * HD;
  bf16_bits* smem;
  __device__ KV* k_stage(int s) const {
    if constexpr (kIsE4m3<KV>) {
      return reinterpret_cast<e4m3_bits*>(smem + 2 * kTileElems) + s * 2 * kTileElems;
    } else {
      return smem + s * 2 * kTileElems;
    }
  }
  __device__ KV* v_stage(int s) const { return k_stage(s) + kTileElems; }
  // The bf16 K tile of stage s (its V tile follows at + kTileElems), once stage s has landed; called by all
  // threads (E4M3: widens, and synchronises the block).
  __device__ const bf16_bits* ready(int s) const {
    if constexpr (kIsE4m3<KV>) {
      widen_kv_tile<HD>(k_stage(s), v_stage(s), smem, smem + kTileElems);
      __syncthreads();
      return smem;
    } else {
      return smem + s * 2 * kTileElems;
    }
  }
};

// Query rows of one warp's mma tile as A fragments in shared memory, [HD / 16][hi, lo][lane] of 16
// bytes (conflict-free: each lane reads back only its own fragments): row g = lane / 4 (and g + 8)
// is q row row_a (row_b); null is a padding row of zeros. Called by all 32 lanes of one warp.
template <int HD>
__device__ __forceinline__ void store_q(uint4* qf, const float* row_a, const float* row_b) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // fragment register j: row (a, b, a, b), columns +0 / +8
      const float* row = j % 2 == 0 ? row_a : row_b;
      const int d = kk * 16 + (j / 2) * 8 + 2 * (lane % 4);
      const float2 v = row ? *reinterpret_cast<const float2*>(row + d) : make_float2(0.0f, 0.0f);
      split_bf16(v.x, v.y, hi[j], lo[j]);
    }
    qf[(kk * 2) * 32 + lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    qf[(kk * 2 + 1) * 32 + lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// Online-softmax state of one warp's 16 rows: this thread's rows g and g + 8 (lane = 4g + i): running
// max (log2 domain), this thread's share of the running sum, and the output columns 8n + 2i (+1).
template <int HD>
struct RowState {
  float m[2], l[2];
  float o[HD / 8][4];
  __device__ void init() {
    m[0] = m[1] = -FLT_MAX;
    l[0] = l[1] = 0.0f;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  }
};

// One warp's rows against keys [kbase, kbase + 16) held at rows r0.. of the K and V tiles. Row a
// (b) sees keys in [lo[0], hi[0]] ([lo[1], hi[1]]); an empty range masks the row out.
template <int HD>
__device__ __forceinline__ void attend_slice(RowState<HD>& st, const uint4* qf, const bf16_bits* ks,
                                             const bf16_bits* vs, int r0, int64_t kbase, const int64_t (&lo)[2],
                                             const int64_t (&hi)[2], float scale_log2) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float s[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint4 h = qf[(kk * 2) * 32 + lane], l = qf[(kk * 2 + 1) * 32 + lane];
    const uint32_t qh[4] = {h.x, h.y, h.z, h.w}, ql[4] = {l.x, l.y, l.z, l.w};
    uint32_t b[4];
    ldmatrix_x4(b, ks + kv_offset<HD>(r0 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
    mma_bf16(s[0], qh, b[0], b[1]);
    mma_bf16(s[0], ql, b[0], b[1]);
    mma_bf16(s[1], qh, b[2], b[3]);
    mma_bf16(s[1], ql, b[2], b[3]);
  }
  float mx[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = e / 2;
      const int64_t kp = kbase + n * 8 + 2 * (lane % 4) + e % 2;
      s[n][e] = kp >= lo[row] && kp <= hi[row] ? s[n][e] * scale_log2 : -INFINITY;
      mx[row] = fmaxf(mx[row], s[n][e]);
    }
  }
  float corr[2], use[2];
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    mx[row] = fmaxf(mx[row], __shfl_xor_sync(0xffffffffu, mx[row], 1));
    mx[row] = fmaxf(mx[row], __shfl_xor_sync(0xffffffffu, mx[row], 2));
    const float m_new = fmaxf(st.m[row], mx[row]);
    use[row] = m_new == -FLT_MAX ? 0.0f : m_new;  // no key seen yet: nothing to rescale
    corr[row] = exp2f(st.m[row] - use[row]);
    st.m[row] = m_new;
  }
  float pr[2][4];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pr[n][e] = exp2f(s[n][e] - use[e / 2]);
  }
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    st.l[row] = st.l[row] * corr[row] + pr[0][2 * row] + pr[0][2 * row + 1] + pr[1][2 * row] + pr[1][2 * row + 1];
  }
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
    st.o[n][0] *= corr[0];
    st.o[n][1] *= corr[0];
    st.o[n][2] *= corr[1];
    st.o[n][3] *= corr[1];
  }
  // P as the A operand (rows × 16 keys): registers (a, keys 0-7), (b, 0-7), (a, 8-15), (b, 8-15).
  uint32_t ph[4], pl[4];
  split_bf16(pr[0][0], pr[0][1], ph[0], pl[0]);
  split_bf16(pr[0][2], pr[0][3], ph[1], pl[1]);
  split_bf16(pr[1][0], pr[1][1], ph[2], pl[2]);
  split_bf16(pr[1][2], pr[1][3], ph[3], pl[3]);
#pragma unroll
  for (int dp = 0; dp < HD / 16; ++dp) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, vs + kv_offset<HD>(r0 + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dp + (lane >> 4)));
    mma_bf16(st.o[2 * dp], ph, b[0], b[1]);
    mma_bf16(st.o[2 * dp], pl, b[0], b[1]);
    mma_bf16(st.o[2 * dp + 1], ph, b[2], b[3]);
    mma_bf16(st.o[2 * dp + 1], pl, b[2], b[3]);
  }
}

__device__ __forceinline__ int64_t first_visible(const PagedAttentionArgs& p, int64_t pos) {
  return p.sliding_window > 0 ? max(int64_t(0), pos - p.sliding_window + 1) : 0;
}

// Block (token, kv head, split): the token's G query heads are the rows of one mma tile (padded to
// 16); the split's keys go through the block in 64-key tiles, warp w taking keys 16w..16w+15 of each.
// The four warps' states are merged through shared memory; with one split the block writes the
// output, else an unnormalised partial (m in the log2 domain, l, acc) for gqa_attention_merge_kernel.
template <int HD, typename KV>
__global__ void __launch_bounds__(kThreads) gqa_decode_kernel(PagedAttentionArgs p, AttentionSplit sp) {
  extern __shared__ __align__(16) bf16_bits smem[];  // the K/V tiles (KvTiles), then the q fragments
  const KvTiles<HD, KV> tiles{smem};
  uint4* qf = reinterpret_cast<uint4*>(smem + tile_bytes<HD>() / sizeof(bf16_bits));
  pdl_launch_dependents();
  pdl_wait();  // q and the new keys come from the previous kernels
  const int G = static_cast<int>(p.n_heads / p.kv_heads);
  const int64_t split = blockIdx.x % sp.splits, tk = blockIdx.x / sp.splits;
  const int64_t t = tk / p.kv_heads, kvh = tk % p.kv_heads;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  const int64_t pos = p.positions[t], first = first_visible(p, pos);
  const int64_t n_tiles = (pos - first + kTileKeys) / kTileKeys;
  const int64_t per_split = (n_tiles + sp.splits - 1) / sp.splits;
  const int64_t tile0 = split * per_split, tile1 = min(n_tiles, tile0 + per_split);
  const int64_t lo_key = first + tile0 * kTileKeys, hi_key = min(pos, first + tile1 * kTileKeys - 1);
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;

  const int n = static_cast<int>(max(int64_t(0), tile1 - tile0));
  constexpr int kTileElems = kTileKeys * HD;
  if (n > 0) load_kv_tile<HD, KV>(tiles.k_stage(0), tiles.v_stage(0), p, table, kvh, lo_key, hi_key + 1);
  cp_async_commit();
  if (warp == 0) {  // the same rows for every warp; the pipeline's first barrier publishes them
    const float* q0 = p.q + (t * p.n_heads + kvh * G) * HD;
    const int g = lane / 4;
    store_q<HD>(qf, g < G ? q0 + g * HD : nullptr, g + 8 < G ? q0 + (g + 8) * HD : nullptr);
  }
  RowState<HD> st;
  st.init();
  const int64_t lo[2] = {lo_key, lo_key}, hi[2] = {hi_key, hi_key};
  const float scale_log2 = p.scale * kLog2e * (kIsE4m3<KV> ? p.kv_quant.k_scale : 1.0f);
  const float v_scale = kIsE4m3<KV> ? p.kv_quant.v_scale : 1.0f;
  for (int i = 0; i < n; ++i) {
    if (i + 1 < n) {
      const int next = (i + 1) % kStages;
      load_kv_tile<HD, KV>(tiles.k_stage(next), tiles.v_stage(next), p, table, kvh, lo_key + int64_t(i + 1) * kTileKeys,
                           hi_key + 1);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16_bits* cur = tiles.ready(i % kStages);
    const int64_t kbase = lo_key + int64_t(i) * kTileKeys + warp * kSliceKeys;
    if (kbase <= hi_key) {
      attend_slice<HD>(st, qf, cur, cur + kTileElems, warp * kSliceKeys, kbase, lo, hi, scale_log2);
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  // Merge the warps: each writes (m, l, o) of its rows, then the block combines them per (row, dim).
  float* o_s = reinterpret_cast<float*>(smem);  // [kWarps][16][HD], over the K/V tiles (free now)
  __shared__ float m_s[kWarps][kMaxGroup], l_s[kWarps][kMaxGroup];
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    float l = st.l[row];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int g = lane / 4 + 8 * row;
    if (lane % 4 == 0) {
      m_s[warp][g] = st.m[row];
      l_s[warp][g] = l;
    }
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      const int d = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(o_s + (warp * kMaxGroup + g) * HD + d) =
          make_float2(st.o[nt][2 * row], st.o[nt][2 * row + 1]);
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < G * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) {
      if (l_s[w][g] > 0.0f) M = fmaxf(M, m_s[w][g]);
    }
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (l_s[w][g] == 0.0f) continue;  // a warp that saw no key
      const float f = exp2f(m_s[w][g] - M);
      L += l_s[w][g] * f;
      A += o_s[(w * kMaxGroup + g) * HD + d] * f;
    }
    const int64_t head = t * p.n_heads + kvh * G + g;
    if (sp.splits == 1) {
      p.out[head * HD + d] = A / L * v_scale;
    } else {
      sp.acc[(head * sp.splits + split) * HD + d] = A * v_scale;
      if (d == 0) {
        sp.m[head * sp.splits + split] = M;
        sp.l[head * sp.splits + split] = L;
      }
    }
  }
}

// Block (token, head): merges its splits (split_merge.cuh).
__global__ void __launch_bounds__(kMergeThreads) gqa_attention_merge_kernel(PagedAttentionArgs p, AttentionSplit sp) {
  extern __shared__ float merge_smem[];
  pdl_launch_dependents();
  pdl_wait();
  merge_split_row(sp, p.out, blockIdx.x, p.head_dim, merge_smem);
}

// Block (query tile, kv head): the tile is kWarps · (16 / G) consecutive tokens, warp w holding
// tokens w·(16 / G).. as rows token-major, head-minor. The tile's tokens are taken in runs of one
// sequence; each run streams its sequence's visible keys through shared memory once for all four
// warps, masking rows outside the run and keys outside each row's causal (and sliding) window. A
// warp skips the 16-key slices that none of its rows sees (the causal upper triangle).
template <int HD, typename KV>
__global__ void __launch_bounds__(kThreads) gqa_prefill_kernel(PagedAttentionArgs p) {
  extern __shared__ __align__(16) bf16_bits smem[];  // the K/V tiles (KvTiles), then each warp's q fragments
  constexpr int kTileElems = kTileKeys * HD;
  const KvTiles<HD, KV> tiles{smem};
  __shared__ int32_t seq_s[kWarps * kMaxGroup];
  __shared__ int64_t pos_s[kWarps * kMaxGroup];
  const int G = static_cast<int>(p.n_heads / p.kv_heads);
  const int per_warp = kMaxGroup / G, tile_tokens = kWarps * per_warp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tile_tokens, kvh = blockIdx.y;
  const int n_tok = static_cast<int>(min(int64_t(tile_tokens), p.tokens - t0));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int i = static_cast<int>(threadIdx.x); i < n_tok; i += kThreads) {
    seq_s[i] = p.token_seq[t0 + i];
    pos_s[i] = p.positions[t0 + i];
  }
  __syncthreads();

  // This thread's rows g and g + 8 of the warp tile: token index within the block tile (or -1).
  int row_tok[2];
  const float* row_q[2];
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    const int r = lane / 4 + 8 * row;
    const int tok = warp * per_warp + r / G;
    const bool ok = r < per_warp * G && tok < n_tok;
    row_tok[row] = ok ? tok : -1;
    row_q[row] = ok ? p.q + ((t0 + tok) * p.n_heads + kvh * G + r % G) * HD : nullptr;
  }
  uint4* qf = reinterpret_cast<uint4*>(smem + tile_bytes<HD>() / sizeof(bf16_bits)) + warp * (q_frag_bytes<HD>() / 16);
  store_q<HD>(qf, row_q[0], row_q[1]);  // read back by the same lanes only
  RowState<HD> st;
  st.init();
  const float scale_log2 = p.scale * kLog2e * (kIsE4m3<KV> ? p.kv_quant.k_scale : 1.0f);
  const float v_scale = kIsE4m3<KV> ? p.kv_quant.v_scale : 1.0f;

  for (int start = 0; start < n_tok;) {
    const int32_t seq = seq_s[start];
    int end = start + 1;
    int64_t k_lo = first_visible(p, pos_s[start]), k_hi = pos_s[start];
    while (end < n_tok && seq_s[end] == seq) {
      k_lo = min(k_lo, first_visible(p, pos_s[end]));
      k_hi = max(k_hi, pos_s[end]);
      ++end;
    }
    int64_t lo[2], hi[2];
    int64_t w_lo = INT64_MAX, w_hi = -1;
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      const int tok = row_tok[row];
      const bool in_run = tok >= start && tok < end;
      lo[row] = in_run ? first_visible(p, pos_s[tok]) : 1;
      hi[row] = in_run ? pos_s[tok] : 0;
      if (in_run) {
        w_lo = min(w_lo, lo[row]);
        w_hi = max(w_hi, hi[row]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      w_lo = min(w_lo, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(w_lo), o)));
      w_hi = max(w_hi, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(w_hi), o)));
    }
    const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
    const int n = static_cast<int>((k_hi - k_lo + kTileKeys) / kTileKeys);
    load_kv_tile<HD, KV>(tiles.k_stage(0), tiles.v_stage(0), p, table, kvh, k_lo, k_hi + 1);
    cp_async_commit();
    for (int i = 0; i < n; ++i) {
      if (i + 1 < n) {
        const int next = (i + 1) % kStages;
        load_kv_tile<HD, KV>(tiles.k_stage(next), tiles.v_stage(next), p, table, kvh, k_lo + int64_t(i + 1) * kTileKeys,
                             k_hi + 1);
      }
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      const bf16_bits* cur = tiles.ready(i % kStages);
#pragma unroll 1
      for (int j = 0; j < kTileKeys / kSliceKeys; ++j) {
        const int64_t kbase = k_lo + int64_t(i) * kTileKeys + j * kSliceKeys;
        if (kbase > w_hi || kbase + kSliceKeys - 1 < w_lo) continue;  // warp-uniform
        attend_slice<HD>(st, qf, cur, cur + kTileElems, j * kSliceKeys, kbase, lo, hi, scale_log2);
      }
      __syncthreads();
    }
    cp_async_wait<0>();
    start = end;
  }

#pragma unroll
  for (int row = 0; row < 2; ++row) {
    float l = st.l[row];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (row_tok[row] < 0) continue;
    const int r = lane / 4 + 8 * row;
    float* out = p.out + ((t0 + row_tok[row]) * p.n_heads + kvh * G + r % G) * HD;
    const float inv = 1.0f / l * v_scale;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      *reinterpret_cast<float2*>(out + nt * 8 + 2 * (lane % 4)) =
          make_float2(st.o[nt][2 * row] * inv, st.o[nt][2 * row + 1] * inv);
    }
  }
}

// Always raised: the default 48 KB limit counts the kernel's static shared memory too.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), name);
}

template <int HD, typename KV>
void launch_decode(const PagedAttentionArgs& p, const AttentionSplit& sp, cudaStream_t s) {
  constexpr size_t smem = tile_bytes<HD>() + q_frag_bytes<HD>();
  allow_smem(gqa_decode_kernel<HD, KV>, smem, "cudaFuncSetAttribute(gqa_decode)");
  launch_pdl(gqa_decode_kernel<HD, KV>, dim3(static_cast<unsigned>(p.tokens * p.kv_heads * sp.splits)), dim3(kThreads),
             smem, s, "gqa_decode", p, sp);
}

template <int HD, typename KV>
void launch_prefill(const PagedAttentionArgs& p, cudaStream_t s) {
  constexpr size_t smem = tile_bytes<HD>() + kWarps * q_frag_bytes<HD>();
  allow_smem(gqa_prefill_kernel<HD, KV>, smem, "cudaFuncSetAttribute(gqa_prefill)");
  const int64_t tile_tokens = kWarps * (kMaxGroup / (p.n_heads / p.kv_heads));
  const dim3 grid(static_cast<unsigned>((p.tokens + tile_tokens - 1) / tile_tokens), static_cast<unsigned>(p.kv_heads));
  gqa_prefill_kernel<HD, KV><<<grid, kThreads, smem, s>>>(p);
  check_launch("gqa_prefill");
}

}  // namespace

bool gqa_attention_supported(int64_t n_heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim) {
  return kv_heads > 0 && n_heads % kv_heads == 0 && n_heads / kv_heads <= kMaxGroup && head_dim == v_head_dim &&
         (head_dim == 32 || head_dim == 64 || head_dim == 128);
}

int64_t gqa_decode_splits(int64_t tokens, int64_t kv_heads, int64_t max_keys) {
  // No split once the (token, kv head) blocks fill the 132 SMs of an H200; below, about two blocks per SM, but at
  // least one 64-key tile per split. Measured (bench_kernels --cuda-attention, bench/results/merge-h200): at 64
  // tokens of 4 kv heads one split takes 34.7 µs against 55.1 for two; at 32 tokens of 8,256 keys two or three
  // splits beat four (185 against 207 µs); one token of 8,256 keys is fastest at 64 splits (21.8 µs).
  constexpr int64_t kSms = 132;
  const int64_t blocks = tokens * kv_heads;
  if (blocks >= kSms) return 1;
  const int64_t want = (2 * kSms + blocks - 1) / blocks;
  return std::max<int64_t>(1, std::min<int64_t>(want, (max_keys + kTileKeys - 1) / kTileKeys));
}

void gqa_decode_attention(const PagedAttentionArgs& p, const AttentionSplit& sp, cudaStream_t s) {
  if (p.tokens == 0) return;
  check_supported(gqa_attention_supported(p.n_heads, p.kv_heads, p.head_dim, p.v_head_dim),
                  "gqa_decode_attention: needs a group of at most 16 heads and head_dim 32, 64 or 128");
  with_kv_element(p.kv_quant, [&](auto kv) {
    using KV = decltype(kv);
    switch (p.head_dim) {
      case 32:
        return launch_decode<32, KV>(p, sp, s);
      case 64:
        return launch_decode<64, KV>(p, sp, s);
      default:
        return launch_decode<128, KV>(p, sp, s);
    }
  });
  if (sp.splits > 1) {
    launch_pdl(gqa_attention_merge_kernel, dim3(static_cast<unsigned>(p.tokens * p.n_heads)), dim3(kMergeThreads),
               merge_smem_bytes(sp.splits), s, "gqa_attention_merge", p, sp);
  }
}

void gqa_prefill_attention(const PagedAttentionArgs& p, cudaStream_t s) {
  if (p.tokens == 0) return;
  check_supported(gqa_attention_supported(p.n_heads, p.kv_heads, p.head_dim, p.v_head_dim),
                  "gqa_prefill_attention: needs a group of at most 16 heads and head_dim 32, 64 or 128");
  with_kv_element(p.kv_quant, [&](auto kv) {
    using KV = decltype(kv);
    switch (p.head_dim) {
      case 32:
        return launch_prefill<32, KV>(p, s);
      case 64:
        return launch_prefill<64, KV>(p, s);
      default:
        return launch_prefill<128, KV>(p, s);
    }
  });
}

}  // namespace sy::cuda
