// attention_backward_wgmma.cuh: the bf16 causal attention backward on Hopper's warpgroup MMA
// (wgmma, sm_90a; attention_wgmma.cuh), beside attention_backward.cuh's mma.sync kernel, whose
// two-stage scheme it keeps: one launch, two kinds of CTA (blockIdx.z), each warpgroup owning
// 64 rows and streaming the other side in double-buffered tiles of 64 rows (cp.async):
//   z = 0, keys:    S^T = K Q^T, dP^T = V dY^T (K, V rows and the Q, dY tile all read from
//                   shared memory by the tensor cores), P^T = 2^(S^T - lse), dS^T =
//                   P^T (dP~^T - D); dV += P~^T dY and dK += dS^T Q with P~^T and dS^T as the
//                   register operand and dY, Q read N-major;
//   z = 1, queries: S = Q K^T, dP = dY V^T, dS = P (dP~ - D), dQ += dS K (K read N-major).
// Every product takes its operands as they lie in the tiles (attention_forward_wgmma.cuh's
// WgmmaTile, K-major or N-major), so nothing is transposed through shared memory. D = dY . y comes
// from attention_d_rows_kernel's pre-pass (BwdArgs::d_rows): the key CTAs load no Y tile.
// As in the wgmma forward, every warpgroup computes every tile of its CTA (no wgmma on a
// branch); masking zeroes what lies outside the causal triangle.
//
// Within a tile the softmax weights are computed while the tensor cores compute dP, and dS^T
// while they add to dV (kOverlap); tiles follow one another (no producer warp, no TMA). Timed
// against the mma.sync backward by scripts/attention_variants.cu; opt-in in the launchers.
#pragma once

#include "attention_backward.cuh"
#include "attention_forward_wgmma.cuh"

namespace gs::attn {

template <int HS, int NWG, bool kSwizzle = false> struct WgmmaBwdConfig {
  static constexpr int kThreads = 128 * NWG;
  static constexpr int kRows = 64 * NWG;  // rows a CTA owns, 64 per warpgroup
  static constexpr int kTile = 64;        // rows per streamed tile
  static constexpr int kRowBytes = kRows * HS * 2;
  static constexpr int kTileBytes = kTile * HS * 2;
  // keys: K, V rows + 2 x (Q, dY tiles, lse and D of the tile), a stage rounded up to 1 KiB so
  // that every tile starts 1,024-byte aligned (swizzled tiles need it)
  static constexpr int kKeyStage = (2 * kTileBytes + 2 * kTile * 4 + 1023) / 1024 * 1024;
  static constexpr int kSmemKeys = 2 * kRowBytes + 2 * kKeyStage;
  // queries: Q, dY rows + 2 x (K, V tiles)
  static constexpr int kSmemQueries = 2 * kRowBytes + 2 * 2 * kTileBytes;
  static constexpr int kSmemBytes = (kSmemKeys > kSmemQueries ? kSmemKeys : kSmemQueries) +
                                    WgmmaTile<HS, kSwizzle>::kAlignSlack;
  // outputs leave through padded [16][HS + 8] stages per warp, in shared memory no longer read:
  // two a warp on the key side (dK, dV), in place of everything; one for dQ, of the K/V tiles
  static constexpr int kStagePitch = HS + 8;
  static constexpr int kStageBytes = 16 * kStagePitch * 2;
  static_assert(2 * 4 * NWG * kStageBytes <= kSmemKeys, "the dK, dV stages fit");
  static_assert(4 * NWG * kStageBytes <= 4 * kTileBytes, "the dQ stages fit");
};

// Both sides' first products, all operands K-major in shared memory, HS / 16 steps of 16
// columns each, as two wgmma groups: x = A_x B_x^T (the scores), then y = A_y B_y^T (dP), so
// that wgmma_wait<1> returns with x in while y may still run.
template <int HS, int N, typename Tile>
__device__ __forceinline__ void issue_score_products(float (&x)[N / 8][4], uint64_t ax,
                                                     uint64_t bx, float (&y)[N / 8][4],
                                                     uint64_t ay, uint64_t by) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
    wgmma_ss<N, 0>(x, ax + kk * Tile::kKStep, bx + kk * Tile::kKStep, kk > 0);
  wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
    wgmma_ss<N, 0>(y, ay + kk * Tile::kKStep, by + kk * Tile::kKStep, kk > 0);
  wgmma_commit();
}

// z = 0: dK, dV of keys [k0, k0 + kRows), over the query tiles from the one holding k0 to the end.
template <int HS, int NWG, bool kDropout, bool kOverlap, bool kSwizzle>
__device__ __forceinline__ void wgmma_backward_keys(const BwdArgs& a, unsigned char* smem) {
  using C = WgmmaBwdConfig<HS, NWG, kSwizzle>;
  using Tile = WgmmaTile<HS, kSwizzle>;
  constexpr int QT = C::kTile;
  uint16_t* k_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][HS]
  uint16_t* v_s = k_s + C::kRows * HS;                // [kRows][HS]
  unsigned char* stages = smem + 2 * C::kRowBytes;    // 2 x (Q, dY [QT][HS], lse, D [QT])
  auto q_t = [&](int buf) { return reinterpret_cast<uint16_t*>(stages + buf * C::kKeyStage); };
  auto dy_t = [&](int buf) { return q_t(buf) + QT * HS; };
  auto lse_t = [&](int buf) { return reinterpret_cast<float*>(q_t(buf) + 2 * QT * HS); };
  auto d_t = [&](int buf) { return lse_t(buf) + QT; };

  const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane >> 2,
            t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int k0 = blockIdx.x * C::kRows;  // the first key blocks see the most queries: first
  const int wk0 = k0 + 16 * warp;
  const int qt0 = k0 / QT, n_tiles = (T + QT - 1) / QT - qt0;
  const float* lse_g = a.lse + static_cast<int64_t>(bh) * T;
  const float* d_rows_g = a.d_rows + static_cast<int64_t>(bh) * T;

  Tile::template load<C::kRows, C::kThreads>(k_s, a.k.row(b, h, k0), a.k.st, T - k0, tid);
  Tile::template load<C::kRows, C::kThreads>(v_s, a.v.row(b, h, k0), a.v.st, T - k0, tid);
  cp_async_commit();
  auto issue = [&](int it, int buf) {
    const int i0 = (qt0 + it) * QT;
    Tile::template load<QT, C::kThreads>(q_t(buf), a.q.row(b, h, i0), a.q.st, T - i0, tid);
    Tile::template load<QT, C::kThreads>(dy_t(buf), a.dy.row(b, h, i0), a.dy.st, T - i0,
                                              tid);
    if (tid < QT) {
      const bool ok = i0 + tid < T;
      cp_async_4(lse_t(buf) + tid, lse_g + (ok ? i0 + tid : 0), ok ? 4 : 0);
      cp_async_4(d_t(buf) + tid, d_rows_g + (ok ? i0 + tid : 0), ok ? 4 : 0);
    }
    cp_async_commit();
  };
  issue(0, 0);

  uint32_t key0 = 0, key1 = 0;
  if (kDropout) seed_key(a.seed, &key0, &key1);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  // K and V rows as the A operand (K-major), this warpgroup's 64
  const uint64_t k_desc = Tile::kmajor(k_s + 64 * wg * HS);
  const uint64_t v_desc = Tile::kmajor(v_s + 64 * wg * HS);

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1, i0 = (qt0 + it) * QT;
    if (it + 1 < n_tiles) {
      issue(it + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();  // this thread's copies become visible to the tensor cores' reads
    __syncthreads();
    float s[QT / 8][4], dpt[QT / 8][4];  // S^T, dP^T: rows = keys wk0 + g (+8), columns = queries
    issue_score_products<HS, QT, Tile>(s, k_desc, Tile::kmajor(q_t(buf)), dpt, v_desc,
                                       Tile::kmajor(dy_t(buf)));
    wgmma_wait<kOverlap ? 1 : 0>();  // S^T is in; dP^T may still run
    fence_tile(s);
    const float *lse_s = lse_t(buf), *d_s = d_t(buf);
#pragma unroll
    for (int nt = 0; nt < QT / 8; ++nt) {
      const float2 L = lds(reinterpret_cast<const float2*>(lse_s + nt * 8 + 2 * t));
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = wk0 + g + 8 * (r >> 1), qi = i0 + nt * 8 + 2 * t + (r & 1);
        const bool visible = key <= qi && qi < T && key < T;
        const float lse2 = ((r & 1) ? L.y : L.x) * kLog2e;
        s[nt][r] = visible ? fast_exp2(fmaf(s[nt][r], a.scale_log2, -lse2)) : 0.0f;
      }
    }
    const uint32_t keep =
        kDropout ? keep_bits_cols<QT>(key0, key1, bh, wk0, i0, a.threshold, g, t) : ~0u;
    const float ds = a.drop_scale;
    auto kept = [&](int nt, int r, float x) {
      return kDropout ? (((keep >> (nt * 4 + r)) & 1u) ? x * ds : 0.0f) : x;
    };
    uint32_t pf[QT / 16][4], dsf[QT / 16][4];  // P~^T and dS^T as A fragments, 16 queries each
#pragma unroll
    for (int kk = 0; kk < QT / 16; ++kk) pack_a(pf[kk], s, kk, kept);
    wgmma_wait<0>();
    fence_tile(dpt);
    // dV += P~^T dY (dY N-major, 16 queries, two block rows, a step) while dS^T is computed
    const uint64_t dy_n_desc = Tile::nmajor(dy_t(buf));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QT / 16; ++kk)
      wgmma_rs<HS, 1>(dv, pf[kk], dy_n_desc + kk * Tile::kNStep, true);
    wgmma_commit();
    if (!kOverlap) wgmma_wait<0>();
#pragma unroll
    for (int nt = 0; nt < QT / 8; ++nt) {
      const float2 D = lds(reinterpret_cast<const float2*>(d_s + nt * 8 + 2 * t));
#pragma unroll
      for (int r = 0; r < 4; ++r) s[nt][r] *= kept(nt, r, dpt[nt][r]) - ((r & 1) ? D.y : D.x);
    }
#pragma unroll
    for (int kk = 0; kk < QT / 16; ++kk)
      pack_a(dsf[kk], s, kk, [](int, int, float x) { return x; });
    wgmma_fence();
    {  // dK += dS^T Q: Q N-major
      const uint64_t q_desc = Tile::nmajor(q_t(buf));
#pragma unroll
      for (int kk = 0; kk < QT / 16; ++kk)
        wgmma_rs<HS, 1>(dk, dsf[kk], q_desc + kk * Tile::kNStep, true);
      wgmma_commit();
      wgmma_wait<0>();
      fence_tile(dk);
      fence_tile(dv);
      fence_tile(pf);
      fence_tile(dsf);
    }
    __syncthreads();  // every warpgroup is done with `buf` before the next prefetch overwrites it
  }
  if (wk0 < T) {  // two stages a warp; every wgmma has been waited for before the last barrier
    uint16_t* dk_stage = reinterpret_cast<uint16_t*>(smem + warp * C::kStageBytes);
    uint16_t* dv_stage = reinterpret_cast<uint16_t*>(smem + (4 * NWG + warp) * C::kStageBytes);
    store_tile_bf16<HS>(dk, a.scale, a.scale, dk_stage, C::kStagePitch, a.dk.row(b, h, wk0),
                        a.dk.st, T - wk0, lane);
    store_tile_bf16<HS>(dv, 1.0f, 1.0f, dv_stage, C::kStagePitch, a.dv.row(b, h, wk0), a.dv.st,
                        T - wk0, lane);
  }
}

// z = 1: dQ of queries [q0, q0 + kRows), over the key tiles up to their diagonal.
template <int HS, int NWG, bool kDropout, bool kOverlap, bool kSwizzle>
__device__ __forceinline__ void wgmma_backward_queries(const BwdArgs& a, unsigned char* smem) {
  using C = WgmmaBwdConfig<HS, NWG, kSwizzle>;
  using Tile = WgmmaTile<HS, kSwizzle>;
  constexpr int KT = C::kTile;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][HS]
  uint16_t* dy_s = q_s + C::kRows * HS;               // [kRows][HS]
  uint16_t* kv_s = dy_s + C::kRows * HS;              // 2 x (K, V [KT][HS])
  auto k_t = [&](int buf) { return kv_s + buf * 2 * KT * HS; };
  auto v_t = [&](int buf) { return kv_s + buf * 2 * KT * HS + KT * HS; };

  const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane >> 2,
            t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * C::kRows;  // longest query blocks first
  const int wq0 = q0 + 16 * warp;
  const int n_tiles = (min(q0 + C::kRows, T) - 1) / KT + 1;

  Tile::template load<C::kRows, C::kThreads>(q_s, a.q.row(b, h, q0), a.q.st, T - q0, tid);
  Tile::template load<C::kRows, C::kThreads>(dy_s, a.dy.row(b, h, q0), a.dy.st, T - q0,
                                                  tid);
  cp_async_commit();
  auto issue = [&](int kt, int buf) {
    const int j0 = kt * KT;
    Tile::template load<KT, C::kThreads>(k_t(buf), a.k.row(b, h, j0), a.k.st, T - j0, tid);
    Tile::template load<KT, C::kThreads>(v_t(buf), a.v.row(b, h, j0), a.v.st, T - j0, tid);
    cp_async_commit();
  };
  issue(0, 0);

  // lse (log2 units) and D of rows g and g+8, read while the first tiles load
  const float* lse_row = a.lse + static_cast<int64_t>(bh) * T;
  const float* d_row = a.d_rows + static_cast<int64_t>(bh) * T;
  const int row_g = wq0 + g, row_g8 = wq0 + g + 8;
  const float lse_g = row_g < T ? lse_row[row_g] * kLog2e : 0.0f;
  const float lse_g8 = row_g8 < T ? lse_row[row_g8] * kLog2e : 0.0f;
  const float D_g = row_g < T ? d_row[row_g] : 0.0f;
  const float D_g8 = row_g8 < T ? d_row[row_g8] : 0.0f;
  uint32_t key0 = 0, key1 = 0;
  if (kDropout) seed_key(a.seed, &key0, &key1);
  float dq[HS / 8][4] = {};
  const uint64_t q_desc = Tile::kmajor(q_s + 64 * wg * HS);
  const uint64_t dy_desc = Tile::kmajor(dy_s + 64 * wg * HS);

  for (int kt = 0; kt < n_tiles; ++kt) {
    const int buf = kt & 1, j0 = kt * KT;
    if (kt + 1 < n_tiles) {
      issue(kt + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    float s[KT / 8][4], dpm[KT / 8][4];  // S, dP: rows = queries wq0 + g (+8), columns = keys
    issue_score_products<HS, KT, Tile>(s, q_desc, Tile::kmajor(k_t(buf)), dpm, dy_desc,
                                       Tile::kmajor(v_t(buf)));
    wgmma_wait<kOverlap ? 1 : 0>();  // S is in; dP may still run
    fence_tile(s);
#pragma unroll
    for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {  // P
        const int key = j0 + nt * 8 + 2 * t + (r & 1), row = wq0 + g + 8 * (r >> 1);
        const bool visible = key <= row && key < T && row < T;
        s[nt][r] = visible
                       ? fast_exp2(fmaf(s[nt][r], a.scale_log2, -((r >> 1) ? lse_g8 : lse_g)))
                       : 0.0f;
      }
    const uint32_t keep =
        kDropout ? keep_bits_rows<KT>(key0, key1, bh, wq0, j0, wq0 + 15, a.threshold, g, t) : ~0u;
    wgmma_wait<0>();
    fence_tile(dpm);
#pragma unroll
    for (int nt = 0; nt < KT / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float dp = kDropout ? (((keep >> (nt * 4 + r)) & 1u) ? dpm[nt][r] * a.drop_scale
                                                                   : 0.0f)
                                  : dpm[nt][r];
        s[nt][r] *= dp - ((r >> 1) ? D_g8 : D_g);  // dS
      }
    uint32_t dsf[KT / 16][4];
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk)
      pack_a(dsf[kk], s, kk, [](int, int, float x) { return x; });
    wgmma_fence();
    {  // dQ += dS K: K N-major, 16 keys (two block rows) a step
      const uint64_t k_desc = Tile::nmajor(k_t(buf));
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk)
        wgmma_rs<HS, 1>(dq, dsf[kk], k_desc + kk * Tile::kNStep, true);
      wgmma_commit();
      wgmma_wait<0>();
      fence_tile(dq);
      fence_tile(dsf);
    }
    __syncthreads();
  }
  if (wq0 < T)  // a stage a warp in the K/V tiles' space, free after the last barrier
    store_tile_bf16<HS>(dq, a.scale, a.scale, kv_s + warp * 16 * C::kStagePitch, C::kStagePitch,
                        a.dq.row(b, h, wq0), a.dq.st, T - wq0, lane);
}

// grid (ceil(T / 64 NWG), B*nh, 2); a.d_rows from attention_d_rows_kernel. kMinBlocks: the
// CTAs an SM should hold (__launch_bounds__; 0, no hint). kOverlap: the softmax weights are
// computed while the tensor cores compute dP (and dS^T while they add to dV); false: each
// group is waited for at once.
// kSwizzle: tiles with 128-byte swizzling (hs = 64 only; WgmmaTile).
template <int HS, int NWG, bool kDropout, int kMinBlocks = 0, bool kOverlap = true,
          bool kSwizzle = false>
__global__ void __launch_bounds__(128 * NWG, kMinBlocks)
    attention_backward_wgmma_kernel(const BwdArgs a) {
  GS_DYNAMIC_SHARED(smem_base);
  unsigned char* smem = kSwizzle ? align_1024(smem_base) : smem_base;
  if (blockIdx.z == 0)
    wgmma_backward_keys<HS, NWG, kDropout, kOverlap, kSwizzle>(a, smem);
  else
    wgmma_backward_queries<HS, NWG, kDropout, kOverlap, kSwizzle>(a, smem);
}

}  // namespace gs::attn
