// attention_forward.cuh: the bf16 causal attention forward on tensor cores (attention.h).
//
// FlashAttention-2's forward (Dao 2023, Algorithm 1): one CTA per (b, h, block of 16*NW
// queries), each warp owning 16 query rows whose Q fragment stays in registers; keys and values
// stream through shared memory in tiles of 64 rows, double-buffered with cp.async so the next
// tile loads while this one is computed. Per tile a warp computes S = Q K^T (mma.m16n8k16, fp32
// accumulate), masks it (causal and the T boundary, only on tiles that need it), updates the
// online softmax in the log2 domain (running max m, per-thread partial sum l, output rescaled by
// 2^(m_old - m_new)), applies dropout to the weights from the counter-based stream, and adds
// P V with P taken straight from the accumulator registers (attention_mma.cuh). The T x T
// scores live only in registers. Warps skip tiles and 16-key blocks wholly above their diagonal;
// CTAs start with the longest query blocks (FlashAttention-2 section 3.2).
#pragma once

#include "attention.h"
#include "attention_mma.cuh"
#include "attention_tiles.cuh"

namespace gs::attn {

struct FwdArgs {
  View4<const uint16_t> q, k, v;  // bf16 bits, (B, nh, T, hs)
  View4<uint16_t> y;
  float* lse;         // (B*nh, T), natural log
  int nh, T;
  float scale_log2;   // log2(e) / sqrt(hs): scores go straight to the log2 domain
  uint32_t threshold; // dropout: drop iff 16 random bits < threshold
  float drop_scale;   // 1 / (1 - p)
  const int64_t* seed;
};

// NW warps of 16 queries, key tiles of KT rows. The kernel's kMinBlocks: the CTAs an SM should
// hold (__launch_bounds__ caps the registers to fit them); 0, no hint (an explicit 1 costs the
// hs=64 forward 14 registers).
template <int HS, int NW, int KT = 64> struct FwdConfig {
  static constexpr int kThreads = 32 * NW;
  static constexpr int kRows = 16 * NW;  // queries per CTA, 16 per warp
  static constexpr int kKeys = KT;       // keys per tile
  // shared-memory row pitch in elements: 16 padding bytes put the 8 rows an ldmatrix reads in
  // 8 different 16-byte bank groups (HOPPER.md, "Banks")
  static constexpr int kPitch = HS + 8;
  static constexpr int kSmemBytes = (kRows + 4 * kKeys) * kPitch * 2;  // Q, 2 x (K, V)
};

// The steps of a warp's 16 queries (rows r0 .. r0 + 15, Q fragments qf) against one tile of KT
// keys from k0 in shared memory (row pitch P), shared by the kernels below. 16-key blocks past
// the warp's last row are skipped; they stay 0 in s and are masked.
// S = Q K^T, 16 x KT, fp32
template <int HS, int KT, int P>
__device__ __forceinline__ void tile_scores(float (&s)[KT / 8][4], const uint32_t (&qf)[HS / 16][4],
                                            const uint16_t* ks, int k0, int r0, int lane) {
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < KT / 16; ++np) {
      if (k0 + 16 * np > r0 + 15) continue;
      uint32_t kf[4];
      ldmatrix_x4(kf, ks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * P + kk * 16 +
                          ((lane >> 3) & 1) * 8);
      mma_bf16(s[2 * np], qf[kk], kf[0], kf[1]);
      mma_bf16(s[2 * np + 1], qf[kk], kf[2], kf[3]);
    }
  }
}

// -inf for keys after the row (causal) or past T, on tiles that cross the diagonal or the end
template <int KT>
__device__ __forceinline__ void mask_tile(float (&s)[KT / 8][4], int k0, int r0, int T, int lane) {
  if (k0 + KT - 1 <= r0 && k0 + KT <= T) return;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = k0 + nt * 8 + 2 * t + (r & 1), row = r0 + g + 8 * (r >> 1);
      if (key > row || key >= T) s[nt][r] = -INFINITY;
    }
}

// The online softmax in the log2 domain for rows g (r = 0, 1) and g+8 (r = 2, 3): s becomes the
// unnormalized weights, m the running max, l this thread's share of the row sum (undropped), and
// alpha = 2^(m_old - m_new), the factor by which what was accumulated so far must be rescaled.
// Every row sees at least one key of its first tile (key 0), so m is finite from then on and
// 2^(m_old - m_new) never sees -inf - -inf; a later tile wholly above a row (all -inf) leaves m
// as it is and gives weights 0.
template <int KT>
__device__ __forceinline__ void softmax_tile(float (&s)[KT / 8][4], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < KT / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * hh], s[nt][2 * hh + 1]));
    const float m_new = fmaxf(m[hh], quad_max(mx) * scale_log2);
    alpha[hh] = fast_exp2(m[hh] - m_new);
    m[hh] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = fast_exp2(fmaf(s[nt][2 * hh + e], scale_log2, -m_new));
        s[nt][2 * hh + e] = p;
        sum += p;
      }
    l[hh] = l[hh] * alpha[hh] + sum;
  }
}

// o's rows g and g+8 times alpha[0] and alpha[1]
template <int HS>
__device__ __forceinline__ void rescale_rows(float (&o)[HS / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < HS / 8; ++nt) {
    o[nt][0] *= alpha[0];
    o[nt][1] *= alpha[0];
    o[nt][2] *= alpha[1];
    o[nt][3] *= alpha[1];
  }
}

// softmax_tile, then o rescaled at once
template <int HS, int KT>
__device__ __forceinline__ void online_softmax(float (&s)[KT / 8][4], float (&m)[2], float (&l)[2],
                                               float (&o)[HS / 8][4], float scale_log2) {
  float alpha[2];
  softmax_tile<KT>(s, m, l, alpha, scale_log2);
  rescale_rows<HS>(o, alpha);
}

// O += P V: P's accumulators are the A fragments (packed to bf16 here), V^T fragments by
// ldmatrix.trans (attention_tiles.cuh's mma_regs_rows); key slices past row r0 + 15 left out
template <int HS, int KT, int P>
__device__ __forceinline__ void accumulate_pv(float (&o)[HS / 8][4], const float (&s)[KT / 8][4],
                                              const uint16_t* vs, int k0, int r0, int lane) {
  mma_regs_rows<KT / 16, HS, P>(
      o, vs, lane,
      [&](uint32_t (&pf)[4], int kk) {
        pf[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        pf[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        pf[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pf[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      },
      [&](int kk) { return k0 + 16 * kk > r0 + 15; });
}

// Dropout of a warp's weights (rows r0 .. r0 + 15) from the counter-based stream
// (attention_tiles.cuh's keep bits, the ones the backward rebuilds).
template <int KT>
__device__ __forceinline__ void drop_weights(float (&s)[KT / 8][4], int k0, int r0, uint32_t bh,
                                             uint32_t key0, uint32_t key1, uint32_t threshold,
                                             int lane) {
  for_keep_rows<KT>(key0, key1, bh, r0, k0, r0 + 15, threshold, lane >> 2, lane & 3,
                    [&](int nt, int r, bool kept) {
                      if (!kept) s[nt][r] = 0.0f;
                    });
}

template <int HS, int NW, bool kDropout, int KT = 64, int kMinBlocks = 0>
__global__ void __launch_bounds__(32 * NW, kMinBlocks)
    attention_forward_mma_kernel(const FwdArgs a) {
  using C = FwdConfig<HS, NW, KT>;
  constexpr int P = C::kPitch;
  GS_DYNAMIC_SHARED(smem);
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* k_s = q_s + C::kRows * P;                 // [2][KT][P]
  uint16_t* v_s = k_s + 2 * KT * P;                   // [2][KT][P]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * C::kRows;  // longest query blocks first
  const int wq0 = q0 + 16 * warp;                         // this warp's first query row
  const int n_tiles = (min(q0 + C::kRows, T) - 1) / KT + 1;
  const uint16_t* k_g = a.k.row(b, h, 0);
  const uint16_t* v_g = a.v.row(b, h, 0);

  // Launched as a programmatic dependent (launch_programmatic): the next kernel may start its
  // own loads of what does not depend on this one (decode_linear's weights in the slide
  // window) now; q, k, v are the previous kernel's output, and nothing is read or written
  // before it is complete.
  pdl_launch_dependents();
  pdl_wait();
  load_rows_async<C::kRows, HS, C::kThreads>(q_s, P, a.q.row(b, h, q0), a.q.st, T - q0, tid);
  load_rows_async<KT, HS, C::kThreads>(k_s, P, k_g, a.k.st, T, tid);
  load_rows_async<KT, HS, C::kThreads>(v_s, P, v_g, a.v.st, T, tid);
  cp_async_commit();

  uint32_t key0 = 0, key1 = 0;
  if (kDropout) {
    const uint64_t seed = static_cast<uint64_t>(*a.seed);
    key0 = static_cast<uint32_t>(seed);
    key1 = static_cast<uint32_t>(seed >> 32);
  }

  uint32_t qf[HS / 16][4];
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g+8

  for (int kt = 0; kt < n_tiles; ++kt) {
    const int buf = kt & 1, k0 = kt * KT;
    if (kt + 1 < n_tiles) {  // prefetch the next tile into the other buffer
      const int k1 = k0 + KT;
      load_rows_async<KT, HS, C::kThreads>(k_s + (buf ^ 1) * KT * P, P, k_g + k1 * a.k.st,
                                           a.k.st, T - k1, tid);
      load_rows_async<KT, HS, C::kThreads>(v_s + (buf ^ 1) * KT * P, P, v_g + k1 * a.v.st,
                                           a.v.st, T - k1, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk)
        ldmatrix_x4(qf[kk], q_s + (16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7)) * P +
                                kk * 16 + (lane >> 4) * 8);
    }
    if (wq0 < T && k0 <= wq0 + 15) {
      const uint16_t* ks = k_s + buf * KT * P;
      const uint16_t* vs = v_s + buf * KT * P;
      float s[KT / 8][4] = {};
      tile_scores<HS, KT, P>(s, qf, ks, k0, wq0, lane);
      mask_tile<KT>(s, k0, wq0, T, lane);
      online_softmax<HS, KT>(s, m, l, o, a.scale_log2);
      if (kDropout) drop_weights<KT>(s, k0, wq0, bh, key0, key1, a.threshold, lane);
      accumulate_pv<HS, KT, P>(o, s, vs, k0, wq0, lane);
    }
    __syncthreads();  // every warp is done with `buf` before the next prefetch overwrites it
  }

  if (wq0 < T) {
    l[0] = quad_sum(l[0]);
    l[1] = quad_sum(l[1]);
    store_tile_bf16<HS>(o, a.drop_scale / l[0], a.drop_scale / l[1], q_s + 16 * warp * P, P,
                        a.y.row(b, h, wq0), a.y.st, T - wq0, lane);
    if (t == 0) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = wq0 + g + 8 * hh;
        if (row < T) a.lse[static_cast<int64_t>(bh) * T + row] = (m[hh] + log2f(l[hh])) * kLn2;
      }
    }
  }
}

}  // namespace gs::attn

// --- Few CTAs: the keys split over the CTA's warps -------------------------------------------
// Batch-1 generation re-runs the slide window (T = block_size rows, B = 1) through every layer
// for each new token: B * nh * ceil(T / 64) CTAs of the kernel above (24 at shakespeare-char)
// leave most SMs idle, and each CTA walks its key tiles one after another (7.3 us a call on the
// H100). Here a CTA owns only 16 queries and its 4 warps take every 4th key tile of them each
// (T <= 256: at most one tile a warp, all loaded at once), then merge their online-softmax
// states through shared memory (FlashDecoding's split of the keys, Dao et al. 2023, inside one
// CTA). No dropout. Opt-in (cuda_variant(forward_warps="split")): 6.5 vs 7.3 us at
// shakespeare-char's window but slower at esp32's and no faster end to end
// (attention_cuda.cu, split_forward).
namespace gs::attn {

template <int HS> struct SplitConfig {
  static constexpr int kWarps = 4, kThreads = 128;
  static constexpr int kRows = 16;  // queries per CTA
  static constexpr int kKeys = 64;  // keys per tile
  static constexpr int kPitch = HS + 8;
  // Q, then one K and one V tile per warp; the merge reuses the tiles' space for each warp's
  // 16 x HS fp32 output and its 16 row maxima and sums
  static constexpr int kSmemBytes = (kRows + kWarps * 2 * kKeys) * kPitch * 2;
  static_assert(kWarps * kRows * (HS + 2) * 4 <= kWarps * 2 * kKeys * kPitch * 2,
                "the merge buffers fit in the K/V tiles' space");
};

template <int HS>
__global__ void __launch_bounds__(128) attention_forward_split_kernel(const FwdArgs a) {
  using C = SplitConfig<HS>;
  constexpr int P = C::kPitch, KT = C::kKeys, NW = C::kWarps;
  GS_DYNAMIC_SHARED(smem);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);  // [16][P]
  uint16_t* k_s = q_s + C::kRows * P + warp * 2 * KT * P;  // this warp's [KT][P] K tile
  uint16_t* v_s = k_s + KT * P;                            // and V tile
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * C::kRows;  // longest query blocks first
  const int n_tiles = (min(q0 + C::kRows, T) - 1) / KT + 1;
  const uint16_t* k_g = a.k.row(b, h, 0);
  const uint16_t* v_g = a.v.row(b, h, 0);

  // Q (every thread) and each warp's first tile; later tiles (T > 256) one by one
  load_rows_async<C::kRows, HS, C::kThreads>(q_s, P, a.q.row(b, h, q0), a.q.st, T - q0, tid);
  auto load_tile = [&](int kt) {
    const int k0 = kt * KT;
    load_rows_async<KT, HS, 32>(k_s, P, k_g + k0 * a.k.st, a.k.st, T - k0, lane);
    load_rows_async<KT, HS, 32>(v_s, P, v_g + k0 * a.v.st, a.v.st, T - k0, lane);
  };
  if (warp < n_tiles) load_tile(warp);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[HS / 16][4];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
    ldmatrix_x4(qf[kk], q_s + (((lane >> 3) & 1) * 8 + (lane & 7)) * P + kk * 16 + (lane >> 4) * 8);
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g+8
  for (int kt = warp; kt < n_tiles; kt += NW) {
    const int k0 = kt * KT;
    if (kt != warp) {
      load_tile(kt);
      cp_async_commit();
      cp_async_wait<0>();
      __syncwarp();  // the warp's own K/V copies are visible to all its lanes
    }
    // k0 <= q0: every row sees key k0 of each tile
    float s[KT / 8][4] = {};
    tile_scores<HS, KT, P>(s, qf, k_s, k0, q0, lane);
    mask_tile<KT>(s, k0, q0, T, lane);
    online_softmax<HS, KT>(s, m, l, o, a.scale_log2);
    accumulate_pv<HS, KT, P>(o, s, v_s, k0, q0, lane);
    __syncwarp();  // every lane is done with the tile before the warp loads its next one
  }
  __syncthreads();  // every warp is done with its tiles: their space becomes the merge buffer

  // each warp's partial state: o (relative to its own m), m, and l summed over the quad
  float* o_s = reinterpret_cast<float*>(q_s + C::kRows * P);  // [NW][16][HS]
  float* m_s = o_s + NW * C::kRows * HS;                      // [NW][16]
  float* l_s = m_s + NW * C::kRows;                           // [NW][16]
  float* mine = o_s + warp * C::kRows * HS;
#pragma unroll
  for (int nt = 0; nt < HS / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sts(mine + g * HS + nt * 8 + 2 * t + e, o[nt][e]);
      sts(mine + (g + 8) * HS + nt * 8 + 2 * t + e, o[nt][2 + e]);
    }
  const float l0 = quad_sum(l[0]), l1 = quad_sum(l[1]);
  if (t == 0) {
    sts(m_s + warp * C::kRows + g, m[0]);
    sts(m_s + warp * C::kRows + g + 8, m[1]);
    sts(l_s + warp * C::kRows + g, l0);
    sts(l_s + warp * C::kRows + g + 8, l1);
  }
  __syncthreads();
  // 8 threads a row, HS / 8 columns each: y = sum_w 2^(m_w - M) o_w / sum_w 2^(m_w - M) l_w
  constexpr int kCols = HS / 8;
  const int r = tid / 8, c0 = (tid % 8) * kCols;
  float mw[NW], M = -INFINITY;
#pragma unroll
  for (int w = 0; w < NW; ++w) M = fmaxf(M, mw[w] = lds(m_s + w * C::kRows + r));
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    mw[w] = fast_exp2(mw[w] - M);  // 0 for a warp without a tile (m = -inf)
    L += mw[w] * lds(l_s + w * C::kRows + r);
  }
  if (q0 + r >= T) return;
  uint16_t* yr = a.y.row(b, h, q0 + r) + c0;
#pragma unroll
  for (int c = 0; c < kCols; c += 4) {  // 4 columns (8 bytes) a store: kCols is 4, 8 or 16
    float acc[4] = {};
#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += mw[w] * lds(o_s + (w * C::kRows + r) * HS + c0 + c + i);
    *reinterpret_cast<uint2*>(yr + c) =
        uint2{pack_bf16(acc[0] / L, acc[1] / L), pack_bf16(acc[2] / L, acc[3] / L)};
  }
  if (tid % 8 == 0) a.lse[static_cast<int64_t>(bh) * T + q0 + r] = (M + log2f(L)) * kLn2;
}

}  // namespace gs::attn
