// attention_tiles.cuh: tile-level pieces of the bf16 attention kernels, built on
// attention_mma.cuh: the two tile products (row-major x row-major^T from shared memory, and
// registers x row-major), accumulator-to-fragment packing, the dropout keep bits of a tile in
// either layout (attention_philox.h), and small row helpers.
#pragma once

#include "attention_mma.cuh"
#include "attention_philox.h"

namespace gs::attn {

// Sum of the 8 products of two rows of 8 bf16.
__device__ __forceinline__ float dot8_bf16(uint4 x, uint4 y) {
  return bf16_lo(x.x) * bf16_lo(y.x) + bf16_hi(x.x) * bf16_hi(y.x) + bf16_lo(x.y) * bf16_lo(y.y) +
         bf16_hi(x.y) * bf16_hi(y.y) + bf16_lo(x.z) * bf16_lo(y.z) + bf16_hi(x.z) * bf16_hi(y.z) +
         bf16_lo(x.w) * bf16_lo(y.w) + bf16_hi(x.w) * bf16_hi(y.w);
}

__device__ __forceinline__ void seed_key(const int64_t* seed, uint32_t* key0, uint32_t* key1) {
  const uint64_t s = static_cast<uint64_t>(*seed);
  *key0 = static_cast<uint32_t>(s);
  *key1 = static_cast<uint32_t>(s >> 32);
}

// f(nt, r, kept) for each weight s[nt][r] of a 16 x kTile tile in the mma layout (rows =
// queries), whose first row is i0 and first column j0 (attention_philox.h: one call per 16 x 16
// block), kept = not dropped. Blocks with key block > `last_row` are skipped (all masked).
template <int kTile, typename F>
__device__ __forceinline__ void for_keep_rows(uint32_t key0, uint32_t key1, uint32_t bh, int i0,
                                              int j0, int last_row, uint32_t thr, int g, int t,
                                              F f) {
#pragma unroll
  for (int np = 0; np < kTile / 16; ++np) {
    if (j0 + 16 * np > last_row) continue;
    const Philox4 r = philox4x32_10(((j0 >> 4) + np) * 4 + t, (i0 >> 4) * 8 + g, bh, 0u, key0,
                                    key1);
#pragma unroll
    for (int nl = 0; nl < 2; ++nl)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          f(2 * np + nl, 2 * hh + e, ((r.w[nl * 2 + hh] >> (16 * e)) & 0xFFFFu) >= thr);
  }
}

// Bit nt*4 + r of the result: keep weight s[nt][r] (for_keep_rows; skipped blocks' bits 0).
template <int kTile>
__device__ __forceinline__ uint32_t keep_bits_rows(uint32_t key0, uint32_t key1, uint32_t bh,
                                                   int i0, int j0, int last_row, uint32_t thr,
                                                   int g, int t) {
  uint32_t keep = 0;
  for_keep_rows<kTile>(key0, key1, bh, i0, j0, last_row, thr, g, t, [&](int nt, int r, bool kept) {
    if (kept) keep |= 1u << (nt * 4 + r);
  });
  return keep;
}

// The same for a 16 x kTile tile in the transposed layout (rows = keys from j0, columns =
// queries from i0): two calls per 16 x 16 block. Blocks whose last query < j0 are skipped.
template <int kTile>
__device__ __forceinline__ uint32_t keep_bits_cols(uint32_t key0, uint32_t key1, uint32_t bh,
                                                   int j0, int i0, uint32_t thr, int g, int t) {
  uint32_t keep = 0;
#pragma unroll
  for (int np = 0; np < kTile / 16; ++np) {
    if (i0 + 16 * np + 15 < j0) continue;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const Philox4 r = philox4x32_10((j0 >> 4) * 4 + (g >> 1), ((i0 >> 4) + np) * 8 + 2 * t + e,
                                      bh, 0u, key0, key1);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int nl = 0; nl < 2; ++nl)
          if (((r.w[hh * 2 + nl] >> (16 * (g & 1))) & 0xFFFFu) >= thr)
            keep |= 1u << ((2 * np + nl) * 4 + 2 * hh + e);
    }
  }
  return keep;
}

// Packs accumulator pairs (n-tiles 2kk, 2kk+1) of s into an A fragment, weight w(nt, r) each.
template <typename W>
__device__ __forceinline__ void pack_a(uint32_t (&f)[4], const float (*s)[4], int kk, W w) {
  f[0] = pack_bf16(w(2 * kk, 0, s[2 * kk][0]), w(2 * kk, 1, s[2 * kk][1]));
  f[1] = pack_bf16(w(2 * kk, 2, s[2 * kk][2]), w(2 * kk, 3, s[2 * kk][3]));
  f[2] = pack_bf16(w(2 * kk + 1, 0, s[2 * kk + 1][0]), w(2 * kk + 1, 1, s[2 * kk + 1][1]));
  f[3] = pack_bf16(w(2 * kk + 1, 2, s[2 * kk + 1][2]), w(2 * kk + 1, 3, s[2 * kk + 1][3]));
}

// acc[16 x 8*NT] += A (16 x 16*KS, fragments from shared rows `a_s`) B^T, where B is stored as
// rows (n) of `b_s` (pitch P) — the product of two row-major tiles along their common columns.
// Column blocks np with skip(np) are left out.
template <int KS, int NT, int P, typename Skip>
__device__ __forceinline__ void mma_rows_rows(float (*acc)[4], const uint16_t* a_s,
                                              const uint16_t* b_s, int lane, Skip skip) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a_s + (((lane >> 3) & 1) * 8 + (lane & 7)) * P + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      if (skip(np)) continue;
      uint32_t bf[4];
      ldmatrix_x4(bf, b_s + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * P + kk * 16 +
                          ((lane >> 3) & 1) * 8);
      mma_bf16(acc[2 * np], af, bf[0], bf[1]);
      mma_bf16(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc[16 x HS] += A(kk) B for each 16-row slice kk of the row-major tile `b_s` (rows = the
// common dimension), A(kk) from registers; slices with skip(kk) are left out.
template <int KS, int HS, int P, typename MakeA, typename Skip>
__device__ __forceinline__ void mma_regs_rows(float (*acc)[4], const uint16_t* b_s, int lane,
                                              MakeA make_a, Skip skip) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    if (skip(kk)) continue;
    uint32_t af[4];
    make_a(af, kk);
#pragma unroll
    for (int dp = 0; dp < HS / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b_s + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * P + dp * 16 +
                                (lane >> 4) * 8);
      mma_bf16(acc[2 * dp], af, bf[0], bf[1]);
      mma_bf16(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

}  // namespace gs::attn
