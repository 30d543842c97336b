// attention_backward.cuh: the bf16 causal attention backward on tensor cores (attention.h).
//
// One launch, two kinds of CTA (blockIdx.z), each owning 16*NW rows, 16 per warp, and streaming
// the other side in double-buffered tiles of kTile rows (cp.async), as the forward:
//   z = 0, keys:    S^T = K Q^T, P^T = 2^(S^T - lse), dV += P~^T dY, dP^T = V dY^T,
//                   dS^T = P^T (dP~^T - D), dK += dS^T Q      over the query tiles that see them;
//   z = 1, queries: S = Q K^T, P, dP = dY V^T, dS = P (dP~ - D), dQ += dS K   over their keys.
// (Dao 2023, FlashAttention-2, Algorithm 2, with dQ computed by its own CTAs instead of atomic
// adds: no fp32 dQ buffer, no zeroing or conversion kernels, deterministic results, and each
// (b, h) gets T/16*NW + 1 tile steps of work per CTA pair, balanced across the causal triangle.)
// The price is two extra tile matmuls (S and dP are computed by both kinds). Mode kAtomicDq is
// FlashAttention-2's own: key CTAs only (z = 0), which also stage dS^T per tile in shared memory
// and add dS K for the tile's queries into a zeroed fp32 buffer with atomics (dQ by
// ldmatrix.trans of dS^T); attention_dq_convert_kernel then scales and rounds it. Five tile
// matmuls instead of seven, for long T where the kernel is compute-bound. D_i = dY_i . y_i,
// the row term of the softmax backward, is computed where it is needed: by the key CTAs for each
// query tile they load (from the Y tile they load with it) and by the query CTAs for their rows,
// so there is no separate pre-pass kernel. The accumulators of S^T / dS^T (keys x queries) are
// the A fragments of the dV / dK products, and those of dS the A fragments of dS K, so no
// transposes go through shared memory. dK, dQ get the softmax scale at the end.
#pragma once

#include "attention.h"
#include "attention_tiles.cuh"

namespace gs::attn {

struct BwdArgs {
  View4<const uint16_t> dy, q, k, v, y;  // bf16 bits, (B, nh, T, hs)
  const float* lse;                      // (B*nh, T), natural log, from the forward
  View4<uint16_t> dq, dk, dv;
  int nh, T;
  float scale, scale_log2;  // 1/sqrt(hs), log2(e)/sqrt(hs)
  uint32_t threshold;
  float drop_scale;
  const int64_t* seed;
  float* dq_accum;  // kAtomicDq: zeroed (B*nh, T, hs) fp32, dQ / scale accumulates here
  const float* d_rows;  // kDRows: (B*nh, T) fp32, D_i = dY_i . y_i from attention_d_rows_kernel
};

// kDRows: D comes precomputed (attention_d_rows_kernel, FlashAttention-2's dot_do_o pre-pass):
// the key CTAs load no Y tile (a third less of their stages' shared memory) and compute no dot
// products. An experiment of scripts/attention_variants.cu; the launchers do not use it yet.
template <int HS, int NW, bool kDRows = false> struct BwdConfig {
  static constexpr int kThreads = 32 * NW;
  static constexpr int kRows = 16 * NW;              // rows a CTA owns, 16 per warp
  static constexpr int kTile = HS <= 64 ? 64 : 32;   // rows per streamed tile (registers: hs 128)
  static constexpr int kPitch = HS + 8;              // as the forward: conflict-free ldmatrix
  static constexpr int kRowBytes = kRows * kPitch * 2;
  static constexpr int kTileBytes = kTile * kPitch * 2;
  // keys: K, V rows + 2 x (Q, dY, Y tiles (no Y with kDRows), lse and D of the tile)
  static constexpr int kKeyStage = (kDRows ? 2 : 3) * kTileBytes + 2 * kTile * 4;
  static constexpr int kSmemKeys = 2 * kRowBytes + 2 * kKeyStage;
  // queries: Q, dY rows + 2 x (K, V tiles)
  static constexpr int kSmemQueries = 2 * kRowBytes + 2 * 2 * kTileBytes;
  static constexpr int kSmemBytes = kSmemKeys > kSmemQueries ? kSmemKeys : kSmemQueries;
  // kAtomicDq: the key CTA's dS^T of one tile, [kRows][kTile + 8] bf16, after the key stages
  static constexpr int kDsPitch = kTile + 8;
  static constexpr int kSmemAtomic = kSmemKeys + kRows * kDsPitch * 2;
};

// kAtomicDq: dQ_tile += dS K over the CTA's keys, from dS^T staged in `ds_s` (rows = the CTA's
// kRows keys from k0, columns = the tile's queries from i0). Warp w takes query m-tile
// w % (QT/16) and one of NW / (QT/16) column slices of hs; results go to `dq_rows` (this head's
// (T, hs) fp32 accumulator) by atomic adds.
template <int HS, int NW, int QT, int P>
__device__ __forceinline__ void dq_tile_atomic(const uint16_t* ds_s, const uint16_t* k_s,
                                               float* dq_rows, int k0, int i0, int T, int warp,
                                               int lane) {
  constexpr int kMTiles = QT / 16, kCols = HS / (NW / kMTiles), DSP = QT + 8;
  static_assert(NW % kMTiles == 0 && kCols % 16 == 0, "dQ tiles must split evenly over warps");
  const int mq = warp % kMTiles, c0 = (warp / kMTiles) * kCols, q_first = i0 + 16 * mq;
  if (q_first >= T) return;
  float acc[kCols / 8][4] = {};
#pragma unroll
  for (int kb = 0; kb < NW; ++kb) {
    const int key0 = k0 + 16 * kb;
    if (key0 >= T || key0 > q_first + 15) continue;  // past the end, or after these queries
    uint32_t af[4];  // dS (queries x keys) = transposed reads of the stored dS^T
    ldmatrix_x4_trans(af, ds_s + (16 * kb + (lane >> 4) * 8 + (lane & 7)) * DSP + 16 * mq +
                              ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int dp = 0; dp < kCols / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, k_s + (16 * kb + ((lane >> 3) & 1) * 8 + (lane & 7)) * P + c0 +
                                dp * 16 + (lane >> 4) * 8);
      mma_bf16(acc[2 * dp], af, bf[0], bf[1]);
      mma_bf16(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = q_first + g + 8 * hh;
      if (row >= T) continue;
      float* d = dq_rows + static_cast<int64_t>(row) * HS + c0 + nt * 8 + 2 * t;
      atomicAdd(d, acc[nt][2 * hh]);
      atomicAdd(d + 1, acc[nt][2 * hh + 1]);
    }
}

// z = 0: dK, dV of keys [k0, k0 + kRows), over query tiles from the one holding k0 to the end
// (and with kAtomicDq the tiles' dQ shares).
template <int HS, int NW, bool kDropout, bool kAtomicDq, bool kDRows>
__device__ __forceinline__ void backward_keys(const BwdArgs& a, unsigned char* smem) {
  using C = BwdConfig<HS, NW, kDRows>;
  constexpr int P = C::kPitch, QT = C::kTile;
  uint16_t* k_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* v_s = k_s + C::kRows * P;                 // [kRows][P]
  unsigned char* stages = smem + 2 * C::kRowBytes;    // 2 x (Q, dY, Y [QT][P], lse, D [QT])
  auto q_t = [&](int buf) { return reinterpret_cast<uint16_t*>(stages + buf * C::kKeyStage); };
  auto dy_t = [&](int buf) { return q_t(buf) + QT * P; };
  auto y_t = [&](int buf) { return q_t(buf) + 2 * QT * P; };  // not with kDRows
  auto lse_t = [&](int buf) {
    return reinterpret_cast<float*>(q_t(buf) + (kDRows ? 2 : 3) * QT * P);
  };
  auto d_t = [&](int buf) { return lse_t(buf) + QT; };

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int k0 = blockIdx.x * C::kRows;  // the first key blocks see the most queries: first
  const int wk0 = k0 + 16 * warp;
  const int qt0 = k0 / QT, n_tiles = (T + QT - 1) / QT - qt0;
  const float* lse_g = a.lse + static_cast<int64_t>(bh) * T;
  const float* d_rows_g = kDRows ? a.d_rows + static_cast<int64_t>(bh) * T : nullptr;

  load_rows_async<C::kRows, HS, C::kThreads>(k_s, P, a.k.row(b, h, k0), a.k.st, T - k0, tid);
  load_rows_async<C::kRows, HS, C::kThreads>(v_s, P, a.v.row(b, h, k0), a.v.st, T - k0, tid);
  cp_async_commit();
  auto issue = [&](int it, int buf) {
    const int i0 = (qt0 + it) * QT;
    load_rows_async<QT, HS, C::kThreads>(q_t(buf), P, a.q.row(b, h, i0), a.q.st, T - i0, tid);
    load_rows_async<QT, HS, C::kThreads>(dy_t(buf), P, a.dy.row(b, h, i0), a.dy.st, T - i0, tid);
    if (!kDRows)
      load_rows_async<QT, HS, C::kThreads>(y_t(buf), P, a.y.row(b, h, i0), a.y.st, T - i0, tid);
    if (tid < QT) {
      const bool ok = i0 + tid < T;
      cp_async_4(lse_t(buf) + tid, lse_g + (ok ? i0 + tid : 0), ok ? 4 : 0);
      if (kDRows) cp_async_4(d_t(buf) + tid, d_rows_g + (ok ? i0 + tid : 0), ok ? 4 : 0);
    }
    cp_async_commit();
  };
  issue(0, 0);

  uint32_t key0 = 0, key1 = 0;
  if (kDropout) seed_key(a.seed, &key0, &key1);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1, i0 = (qt0 + it) * QT;
    if (it + 1 < n_tiles) {
      issue(it + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    {  // D_i = dY_i . y_i for the tile's rows, kParts threads per row; lse to log2 units
      constexpr int kChunks = HS / 8;
      constexpr int kParts = C::kThreads / QT < kChunks ? C::kThreads / QT : kChunks;
      const int r = tid / kParts, part = tid % kParts;
      float acc = 0.0f;
      if (!kDRows && r < QT)
        for (int ch = part; ch < kChunks; ch += kParts)
          acc += dot8_bf16(lds(reinterpret_cast<const uint4*>(dy_t(buf) + r * P + ch * 8)),
                           lds(reinterpret_cast<const uint4*>(y_t(buf) + r * P + ch * 8)));
#pragma unroll
      for (int off = 1; off < kParts; off <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (r < QT && part == 0) {
        if (!kDRows) sts(d_t(buf) + r, acc);
        sts(lse_t(buf) + r, lds(lse_t(buf) + r) * kLog2e);
      }
    }
    __syncthreads();
    float s[QT / 8][4] = {};  // S^T: rows = keys wk0 + g (+8), columns = queries i0 + 8nt + 2t
    if (wk0 < T && i0 + QT - 1 >= wk0) {
      const uint16_t *qs = q_t(buf), *dys = dy_t(buf);
      const float *lse_s = lse_t(buf), *d_s = d_t(buf);
      auto masked = [&](int np) { return i0 + 16 * np + 15 < wk0; };  // queries before the keys
      mma_rows_rows<HS / 16, QT / 8, P>(s, k_s + 16 * warp * P, qs, lane, masked);
#pragma unroll
      for (int nt = 0; nt < QT / 8; ++nt) {
        const float2 L = lds(reinterpret_cast<const float2*>(lse_s + nt * 8 + 2 * t));
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int key = wk0 + g + 8 * (r >> 1), qi = i0 + nt * 8 + 2 * t + (r & 1);
          const bool visible = key <= qi && qi < T && key < T;
          s[nt][r] = visible ? fast_exp2(fmaf(s[nt][r], a.scale_log2, -((r & 1) ? L.y : L.x)))
                             : 0.0f;
        }
      }
      const uint32_t keep =
          kDropout ? keep_bits_cols<QT>(key0, key1, bh, wk0, i0, a.threshold, g, t) : ~0u;
      const float ds = a.drop_scale;
      auto kept = [&](int nt, int r, float x) {
        return kDropout ? (((keep >> (nt * 4 + r)) & 1u) ? x * ds : 0.0f) : x;
      };
      // dV += P~^T dY
      mma_regs_rows<QT / 16, HS, P>(
          dv, dys, lane, [&](uint32_t(&f)[4], int kk) { pack_a(f, s, kk, kept); }, masked);
      // dP^T = V dY^T, then dS^T = P^T (dP~^T - D) in place of P^T
      float dpt[QT / 8][4] = {};
      mma_rows_rows<HS / 16, QT / 8, P>(dpt, v_s + 16 * warp * P, dys, lane, masked);
#pragma unroll
      for (int nt = 0; nt < QT / 8; ++nt) {
        const float2 D = lds(reinterpret_cast<const float2*>(d_s + nt * 8 + 2 * t));
#pragma unroll
        for (int r = 0; r < 4; ++r)
          s[nt][r] *= kept(nt, r, dpt[nt][r]) - ((r & 1) ? D.y : D.x);
      }
      // dK += dS^T Q
      mma_regs_rows<QT / 16, HS, P>(
          dk, qs, lane,
          [&](uint32_t(&f)[4], int kk) { pack_a(f, s, kk, [](int, int, float x) { return x; }); },
          masked);
    }
    if (kAtomicDq) {  // every warp's dS^T (zeros where it had none) -> dQ shares of this tile
      uint16_t* ds_s = reinterpret_cast<uint16_t*>(smem + C::kSmemKeys);
      constexpr int DSP = C::kDsPitch;
#pragma unroll
      for (int nt = 0; nt < QT / 8; ++nt) {
        sts(reinterpret_cast<uint32_t*>(ds_s + (16 * warp + g) * DSP + nt * 8 + 2 * t),
            pack_bf16(s[nt][0], s[nt][1]));
        sts(reinterpret_cast<uint32_t*>(ds_s + (16 * warp + g + 8) * DSP + nt * 8 + 2 * t),
            pack_bf16(s[nt][2], s[nt][3]));
      }
      __syncthreads();
      dq_tile_atomic<HS, NW, QT, P>(ds_s, k_s, a.dq_accum + static_cast<int64_t>(bh) * T * HS,
                                    k0, i0, T, warp, lane);
    }
    __syncthreads();  // every warp is done with `buf` before the next prefetch overwrites it
  }
  if (wk0 < T) {  // each warp stages through its own K / V rows
    store_tile_bf16<HS>(dk, a.scale, a.scale, k_s + 16 * warp * P, P, a.dk.row(b, h, wk0),
                        a.dk.st, T - wk0, lane);
    store_tile_bf16<HS>(dv, 1.0f, 1.0f, v_s + 16 * warp * P, P, a.dv.row(b, h, wk0), a.dv.st,
                        T - wk0, lane);
  }
}

// z = 1: dQ of queries [q0, q0 + kRows), over the key tiles up to their diagonal.
template <int HS, int NW, bool kDropout, bool kDRows>
__device__ __forceinline__ void backward_queries(const BwdArgs& a, unsigned char* smem) {
  using C = BwdConfig<HS, NW, kDRows>;
  constexpr int P = C::kPitch, KT = C::kTile;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* dy_s = q_s + C::kRows * P;                // [kRows][P]
  uint16_t* kv_s = dy_s + C::kRows * P;               // 2 x (K, V [KT][P])
  auto k_t = [&](int buf) { return kv_s + buf * 2 * KT * P; };
  auto v_t = [&](int buf) { return kv_s + buf * 2 * KT * P + KT * P; };

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * C::kRows;  // longest query blocks first
  const int wq0 = q0 + 16 * warp;
  const int n_tiles = (min(q0 + C::kRows, T) - 1) / KT + 1;

  load_rows_async<C::kRows, HS, C::kThreads>(q_s, P, a.q.row(b, h, q0), a.q.st, T - q0, tid);
  load_rows_async<C::kRows, HS, C::kThreads>(dy_s, P, a.dy.row(b, h, q0), a.dy.st, T - q0, tid);
  cp_async_commit();
  auto issue = [&](int kt, int buf) {
    const int j0 = kt * KT;
    load_rows_async<KT, HS, C::kThreads>(k_t(buf), P, a.k.row(b, h, j0), a.k.st, T - j0, tid);
    load_rows_async<KT, HS, C::kThreads>(v_t(buf), P, a.v.row(b, h, j0), a.v.st, T - j0, tid);
    cp_async_commit();
  };
  issue(0, 0);

  // D and lse of rows g and g+8 (D from global while the first tiles load: lanes 2r, 2r+1
  // share row wq0 + r)
  float D_g, D_g8, lse_g, lse_g8;
  {
    const int r = lane >> 1, row = wq0 + r;
    float acc = 0.0f;
    if (!kDRows && row < T) {
      const uint16_t* dyr = a.dy.row(b, h, row);
      const uint16_t* yr = a.y.row(b, h, row);
      for (int ch = lane & 1; ch < HS / 8; ch += 2)
        acc += dot8_bf16(*reinterpret_cast<const uint4*>(dyr + ch * 8),
                         *reinterpret_cast<const uint4*>(yr + ch * 8));
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    D_g = __shfl_sync(0xffffffffu, acc, 2 * g);
    D_g8 = __shfl_sync(0xffffffffu, acc, 2 * (g + 8));
    const float* lse_row = a.lse + static_cast<int64_t>(bh) * T;
    if (kDRows) {  // precomputed: the dot products above were skipped (acc stays 0)
      const float* d_row = a.d_rows + static_cast<int64_t>(bh) * T;
      D_g = wq0 + g < T ? d_row[wq0 + g] : 0.0f;
      D_g8 = wq0 + g + 8 < T ? d_row[wq0 + g + 8] : 0.0f;
    }
    lse_g = wq0 + g < T ? lse_row[wq0 + g] * kLog2e : 0.0f;
    lse_g8 = wq0 + g + 8 < T ? lse_row[wq0 + g + 8] * kLog2e : 0.0f;
  }
  uint32_t key0 = 0, key1 = 0;
  if (kDropout) seed_key(a.seed, &key0, &key1);
  float dq[HS / 8][4] = {};

  for (int kt = 0; kt < n_tiles; ++kt) {
    const int buf = kt & 1, j0 = kt * KT;
    if (kt + 1 < n_tiles) {
      issue(kt + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (wq0 < T && j0 <= wq0 + 15) {
      const uint16_t *ks = k_t(buf), *vs = v_t(buf);
      auto masked = [&](int np) { return j0 + 16 * np > wq0 + 15; };  // keys after the rows
      float s[KT / 8][4] = {};  // S: rows = queries wq0 + g (+8), columns = keys j0 + 8nt + 2t
      mma_rows_rows<HS / 16, KT / 8, P>(s, q_s + 16 * warp * P, ks, lane, masked);
#pragma unroll
      for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int key = j0 + nt * 8 + 2 * t + (r & 1), row = wq0 + g + 8 * (r >> 1);
          const bool visible = key <= row && key < T && row < T;
          s[nt][r] = visible ? fast_exp2(fmaf(s[nt][r], a.scale_log2, -((r >> 1) ? lse_g8 : lse_g)))
                             : 0.0f;
        }
      const uint32_t keep =
          kDropout ? keep_bits_rows<KT>(key0, key1, bh, wq0, j0, wq0 + 15, a.threshold, g, t)
                   : ~0u;
      float dpm[KT / 8][4] = {};  // dP = dY V^T
      mma_rows_rows<HS / 16, KT / 8, P>(dpm, dy_s + 16 * warp * P, vs, lane, masked);
#pragma unroll
      for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float dp = kDropout ? (((keep >> (nt * 4 + r)) & 1u) ? dpm[nt][r] * a.drop_scale
                                                                     : 0.0f)
                                    : dpm[nt][r];
          s[nt][r] *= dp - ((r >> 1) ? D_g8 : D_g);  // dS
        }
      // dQ += dS K
      mma_regs_rows<KT / 16, HS, P>(
          dq, ks, lane,
          [&](uint32_t(&f)[4], int kk) { pack_a(f, s, kk, [](int, int, float x) { return x; }); },
          masked);
    }
    __syncthreads();
  }
  if (wq0 < T)
    store_tile_bf16<HS>(dq, a.scale, a.scale, q_s + 16 * warp * P, P, a.dq.row(b, h, wq0),
                        a.dq.st, T - wq0, lane);
}

// grid (ceil(T / 16NW), B*nh, 2) — or 1 with kAtomicDq, which has no query CTAs. kMinBlocks: the
// CTAs an SM should hold (__launch_bounds__ caps the registers to fit them; 0, no hint).
// kDRows: D from a.d_rows (BwdConfig).
template <int HS, int NW, bool kDropout, bool kAtomicDq, int kMinBlocks = 0, bool kDRows = false>
__global__ void __launch_bounds__(32 * NW, kMinBlocks)
    attention_backward_mma_kernel(const BwdArgs a) {
  GS_DYNAMIC_SHARED(smem);
  if (blockIdx.z == 0)
    backward_keys<HS, NW, kDropout, kAtomicDq, kDRows>(a, smem);
  else if (!kAtomicDq)
    backward_queries<HS, NW, kDropout, kDRows>(a, smem);
}

// kDRows pre-pass: d_rows[bh * T + t] = dY . y of row t of head bh, 8 threads a row (16-byte
// loads; hs a multiple of 8). Launched with a multiple of 8 threads a block.
__global__ void attention_d_rows_kernel(View4<const uint16_t> dy, View4<const uint16_t> y,
                                        float* d_rows, int nh, int T, int hs, int64_t rows) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int part = threadIdx.x % 8;
  float acc = 0.0f;
  if (row < rows) {
    const int t = static_cast<int>(row % T), bh = static_cast<int>(row / T);
    const uint16_t* dyr = dy.row(bh / nh, bh % nh, t);
    const uint16_t* yr = y.row(bh / nh, bh % nh, t);
    for (int ch = part; ch < hs / 8; ch += 8)
      acc += dot8_bf16(*reinterpret_cast<const uint4*>(dyr + ch * 8),
                       *reinterpret_cast<const uint4*>(yr + ch * 8));
  }
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (row < rows && part == 0) d_rows[row] = acc;
}

// kAtomicDq epilogue: dq = bf16(scale * dq_accum), 8 elements per thread; acc is contiguous
// (B*nh, T, hs) fp32, dq any (B, nh, T, hs) view with 16-byte rows.
__global__ void attention_dq_convert_kernel(const float* acc, View4<uint16_t> dq, int nh, int T,
                                            int hs, float scale, int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const int64_t e = 8 * i, row = e / hs;
  const int d = static_cast<int>(e % hs), t = static_cast<int>(row % T);
  const int bh = static_cast<int>(row / T);
  const float4 x0 = *reinterpret_cast<const float4*>(acc + e);
  const float4 x1 = *reinterpret_cast<const float4*>(acc + e + 4);
  const uint4 out = {pack_bf16(x0.x * scale, x0.y * scale), pack_bf16(x0.z * scale, x0.w * scale),
                     pack_bf16(x1.x * scale, x1.y * scale), pack_bf16(x1.z * scale, x1.w * scale)};
  *reinterpret_cast<uint4*>(dq.row(bh / nh, bh % nh, t) + d) = out;
}

}  // namespace gs::attn
