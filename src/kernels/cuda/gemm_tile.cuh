// The warp-level pieces the grouped expert GEMMs share (moe_grouped.cu on bf16 tiles, fp8_gemm.cu on E4M3 tiles):
// tiles of 128-byte shared-memory rows (64 bf16 or 128 E4M3 values of k), chunks XOR-swizzled; each warp's mma
// fragments for a 32-byte slice of k; and the epilogue that stores a warp's accumulators (gate_up: SiLU(gate)·up
// as bf16 by row; down: fp32 by pair).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.cuh"

namespace sy::cuda {

// Byte offset of 16-byte chunk c of row r in a tile of 128-byte rows: chunks XOR-swizzled by the row's low bits, so
// that cp.async writes and ldmatrix reads of 8 rows hit 8 different bank groups.
__device__ __forceinline__ int swizzle128(int r, int c) { return r * 128 + ((c ^ (r & 7)) * 16); }

// A warp's share of a CTA tile of BN output columns: MT m16 tiles from row `m0` and NT n8 tiles. With kGateUp the
// CTA's B tile is BN/2 gate rows then the BN/2 matching up rows, and the warp holds NT/2 gate and the same NT/2 up
// n8 tiles, so that SiLU(gate)·up is formed in registers.
template <int MT, int NT, int BN, bool kGateUp>
struct WarpTile {
  int m0, wn, lane;

  // B tile row of the warp's n8 tile j.
  __device__ __forceinline__ int b_row(int j) const {
    constexpr int WN = NT * 8;
    if constexpr (kGateUp) {
      return j < NT / 2 ? wn * (WN / 2) + j * 8 : BN / 2 + wn * (WN / 2) + (j - NT / 2) * 8;
    } else {
      return wn * WN + j * 8;
    }
  }

  // The A and B fragments of k slice kk (bytes 32·kk to 32·kk + 31 of each row) from swizzled tiles.
  __device__ __forceinline__ void load(const void* As, const void* Bs, int kk, uint32_t (&af)[MT][4],
                                       uint32_t (&bfr)[NT][2]) const {
    const auto* a = static_cast<const uint8_t*>(As);
    const auto* b = static_cast<const uint8_t*>(Bs);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r = m0 + mt * 16 + (lane & 15);
      ldmatrix_x4(af[mt], a + swizzle128(r, kk * 2 + (lane >> 4)));
    }
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
      const int n = b_row(2 * p) + (lane & 7) + ((lane >> 4) << 3);
      uint32_t r[4];
      ldmatrix_x4(r, b + swizzle128(n, kk * 2 + ((lane >> 3) & 1)));
      bfr[2 * p][0] = r[0];
      bfr[2 * p][1] = r[1];
      bfr[2 * p + 1][0] = r[2];
      bfr[2 * p + 1][1] = r[3];
    }
  }

  // Stores the accumulators of the tile rows below `rows` (accumulator q of n8 tile j: row lane/4 + 8·(q/2), column
  // 2·(lane%4) + q%2). gate_up: bf16 act [.., n_out] at tile row r's row row0 + r, columns from nb·BN/2; otherwise
  // fp32 y [.., n_out] at row row_pair[row0 + r] (row0 + r without row_pair), columns from nb·BN, plus bias if any.
  __device__ __forceinline__ void store(const float (&acc)[MT][NT][4], int rows, int64_t row0, int nb,
                                        const int32_t* row_pair, void* out, int64_t n_out,
                                        const bf16_bits* bias = nullptr) const {
    constexpr int WN = NT * 8;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + mt * 16 + (lane >> 2) + h * 8;
        if (r >= rows) continue;
        const int64_t row = row0 + r;
        if constexpr (kGateUp) {
          bf16_bits* act = static_cast<bf16_bits*>(out);
#pragma unroll
          for (int j = 0; j < NT / 2; ++j) {
            const int64_t col = static_cast<int64_t>(nb) * (BN / 2) + wn * (WN / 2) + j * 8 + (lane & 3) * 2;
            if (col >= n_out) continue;
            float v[2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const float gate = acc[mt][j][2 * h + q], up = acc[mt][j + NT / 2][2 * h + q];
              v[q] = gate / (1.0f + __expf(-gate)) * up;
            }
            *reinterpret_cast<__nv_bfloat162*>(act + row * n_out + col) = __floats2bfloat162_rn(v[0], v[1]);
          }
        } else {
          float* y = static_cast<float*>(out) + (row_pair ? static_cast<int64_t>(row_pair[row]) : row) * n_out;
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const int64_t col = static_cast<int64_t>(nb) * BN + wn * WN + j * 8 + (lane & 3) * 2;
            if (col >= n_out) continue;
            float2 v = make_float2(acc[mt][j][2 * h], acc[mt][j][2 * h + 1]);
            if (bias) {
              v.x += bf(bias[col]);
              v.y += bf(bias[col + 1]);
            }
            *reinterpret_cast<float2*>(y + col) = v;
          }
        }
      }
    }
  }
};

}  // namespace sy::cuda
