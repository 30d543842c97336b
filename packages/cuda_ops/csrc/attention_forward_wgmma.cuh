// attention_forward_wgmma.cuh: the bf16 causal attention forward on Hopper's warpgroup MMA
// (wgmma, sm_90a; attention_wgmma.cuh), beside attention_forward.cuh's mma.sync kernel.
//
// Why: at gpt2-124m's shape the mma.sync forward reaches about 170 TFLOP/s on an H200, cuDNN's
// about 300 (benchmarks/JOURNAL.md, 2026-12-07); mma.sync cannot issue the tensor cores at
// Hopper's full rate, wgmma can (HOPPER.md; FlashAttention-3, Shah et al. 2024). The algorithm
// is the same FlashAttention-2 forward: one CTA per (b, h, block of 64 * NWG queries), a
// warpgroup (4 warps) per 64 queries; K and V tiles of KT keys stream through shared memory,
// double-buffered with cp.async. Per tile a warpgroup computes S = Q K^T with Q and K both read
// from shared memory by the tensor cores, then each warp runs the mma.sync kernel's own masking,
// online softmax and dropout on its 16 rows of S (the accumulator layout is the same), packs
// P to bf16 in registers and adds P V with P as wgmma's register operand and V read N-major
// from shared memory. Tiles are laid out as wgmma reads them (WgmmaTile: 128-byte swizzled rows
// for hs=64, the no-swizzle core-matrix layout otherwise). Unlike the mma.sync kernel a warpgroup computes whole tiles: 16-key blocks above a warp's
// rows but not above its warpgroup's are computed and masked.
//
// The softmax of S_j overlaps P_{j-1} V_{j-1} on the tensor cores (kOverlap); other CTAs on the
// SM fill the rest. Not done yet: a producer warp with TMA loads, ping-pong between warpgroups
// (FlashAttention-3's other steps). Timed against the mma.sync kernel by
// scripts/attention_variants.cu; opt-in in the launchers (attention_cuda.cu, kWgmma).
#pragma once

#include "attention_forward.cuh"
#include "attention_wgmma.cuh"

namespace gs::attn {

// A [rows][HS] tile of bf16 in shared memory as wgmma reads it, filled by cp.async:
//  - kSwizzle false, any HS: the core-matrix layout, 8-row x 8-column blocks of 128 contiguous
//    bytes, row-block major (a block row of HS / 8 blocks spans HS * 16 bytes). Chunk i of the
//    copy lands at byte 16 i: 8 consecutive chunks are rows r..r+7 of one 8-column block, so the
//    stores are consecutive in shared memory and a warp reads 8 rows x 64 bytes. As a K-major
//    operand (rows = M or N, columns = K) core matrices lie 128 bytes apart along K and HS * 16
//    along M/N; as an N-major one (rows = K, columns = N), HS * 16 along K and 128 along N.
//  - kSwizzle true, HS = 64: row-major 128-byte rows with 128-byte swizzling (sw128_desc; the
//    layout TMA and cuDNN use); 8 threads copy one row, each to its swizzled chunk (no conflicts).
// kmajor / nmajor: the descriptor of the tile as a K-major / N-major operand; kKStep / kNStep:
// what to add to it for the next 16 columns (K-major) / 16 rows (N-major).
template <int HS, bool kSwizzle> struct WgmmaTile {
  static_assert(!kSwizzle || HS == 64, "the 128-byte swizzled tile holds rows of 64 bf16");
  static constexpr uint32_t kBlockRowBytes = HS * 16;  // 8 rows
  static constexpr uint64_t kKStep = kSwizzle ? 32 >> 4 : 256 >> 4;
  static constexpr uint64_t kNStep = kSwizzle ? 2048 >> 4 : (2 * kBlockRowBytes) >> 4;
  static constexpr int kAlignSlack = kSwizzle ? 1024 : 0;  // align_1024's bytes

  __device__ static uint64_t kmajor(const uint16_t* p) {
    return kSwizzle ? sw128_desc(p) : smem_desc(p, 128, kBlockRowBytes);
  }
  __device__ static uint64_t nmajor(const uint16_t* p) {
    return kSwizzle ? sw128_desc(p) : smem_desc(p, kBlockRowBytes, 128);
  }

  // Copy ROWS rows (global row stride row_stride, rows_valid of them real, the rest zeros)
  template <int ROWS, int THREADS>
  __device__ static void load(uint16_t* dst, const uint16_t* src, int64_t row_stride,
                              int rows_valid, int tid) {
    constexpr int kBlocks = HS / 8;  // 16-byte chunks a row
#pragma unroll
    for (int i = tid; i < ROWS * kBlocks; i += THREADS) {
      int r, c, at;  // row, first column, destination element
      if (kSwizzle) {
        r = i / 8;
        c = (i % 8) * 8;
        at = r * 64 + (((i % 8) ^ (r % 8)) * 8);
      } else {
        const int block = i / 8;
        r = (block / kBlocks) * 8 + i % 8;
        c = (block % kBlocks) * 8;
        at = 8 * i;
      }
      const bool ok = r < rows_valid;
      cp_async_16(dst + at, src + (ok ? r : 0) * row_stride + c, ok ? 16 : 0);
    }
  }
};

// The launchers' tiles (attention_cuda.cu): swizzled where the rows allow. The core-matrix layout
// without swizzling was slower than the mma.sync kernels on an H100 (forward 221.1 against
// 149.7 us at gpt2-124m's shape), the swizzled one faster (121.3; backward 348.8 against 485.8;
// scripts/attention_variants.cu, 2026-12-07, benchmarks/JOURNAL.md).
template <int HS> constexpr bool kLauncherSwizzle = HS == 64;

// NWG warpgroups of 64 queries, key tiles of KT rows. Tiles are [rows][HS] as WgmmaTile lays
// them out: no padding, so Q, two K and two V tiles take (64 NWG + 4 KT) HS 2 bytes (and 1 KiB
// to align swizzled ones).
template <int HS, int NWG, int KT = 64, bool kSwizzle = false> struct WgmmaFwdConfig {
  static constexpr int kThreads = 128 * NWG;
  static constexpr int kRows = 64 * NWG;  // queries per CTA
  static constexpr int kKeys = KT;
  static constexpr int kSmemBytes =
      (kRows + 4 * KT) * HS * 2 + WgmmaTile<HS, kSwizzle>::kAlignSlack;
  // the output goes out through a padded [16][HS + 8] stage per warp, in the K/V tiles' space
  static constexpr int kStagePitch = HS + 8;
  static_assert(4 * NWG * 16 * kStagePitch <= 4 * KT * HS, "the output stages fit in K/V's space");
};

// kOverlap: S_j's softmax runs while the tensor cores add P_{j-1} V_{j-1} (FlashAttention-3's
// intra-warpgroup pipelining, section 3.2); false: each group is waited for before the softmax.
//
// Every warpgroup computes every tile of its CTA, also one wholly above its own rows (the first
// warpgroup's last, with two): the wgmma issues then sit on no branch, which ptxas needs in order
// not to serialize them (its warning C7520). Such a tile is masked to -inf, and the first tile
// holds key 0, which every row sees, so the running max stays finite (softmax_tile).
// kSwizzle: tiles with 128-byte swizzling (hs = 64 only; WgmmaTile). kMinBlocks: the CTAs an
// SM should hold (__launch_bounds__; 0, no hint).
template <int HS, int NWG, bool kDropout, int KT = 64, bool kOverlap = true, bool kSwizzle = false,
          int kMinBlocks = 0>
__global__ void __launch_bounds__(128 * NWG, kMinBlocks)
    attention_forward_wgmma_kernel(const FwdArgs a) {
  using C = WgmmaFwdConfig<HS, NWG, KT, kSwizzle>;
  using Tile = WgmmaTile<HS, kSwizzle>;
  GS_DYNAMIC_SHARED(smem_base);
  unsigned char* smem = kSwizzle ? align_1024(smem_base) : smem_base;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][HS]
  uint16_t* k_s = q_s + C::kRows * HS;                // [2][KT][HS]
  uint16_t* v_s = k_s + 2 * KT * HS;                  // [2][KT][HS]

  const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane >> 2,
            t = lane & 3;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, T = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * C::kRows;  // longest query blocks first
  const int wq0 = q0 + 16 * warp;                         // this warp's first query row
  const int n_tiles = (min(q0 + C::kRows, T) - 1) / KT + 1;
  const uint16_t* k_g = a.k.row(b, h, 0);
  const uint16_t* v_g = a.v.row(b, h, 0);

  pdl_launch_dependents();  // as the mma.sync kernel: nothing is read before pdl_wait
  pdl_wait();
  Tile::template load<C::kRows, C::kThreads>(q_s, a.q.row(b, h, q0), a.q.st, T - q0, tid);
  Tile::template load<KT, C::kThreads>(k_s, k_g, a.k.st, T, tid);
  cp_async_commit();

  uint32_t key0 = 0, key1 = 0;
  if (kDropout) {
    const uint64_t seed = static_cast<uint64_t>(*a.seed);
    key0 = static_cast<uint32_t>(seed);
    key1 = static_cast<uint32_t>(seed >> 32);
  }

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g+8 of the warp
  float s[KT / 8][4];
  uint32_t pf[KT / 16][4];  // P_{j-1}'s A fragments, 16 keys each: live until its PV is waited for
  const uint64_t q_desc = Tile::kmajor(q_s + 64 * wg * HS);

  // Step j computes S_j = Q K_j and adds P_{j-1} V_{j-1}, so K_j and V_{j-1} must be in: K and V
  // tiles each have two buffers, K_j in j % 2 and V_j in j % 2, loaded one step ahead (step j
  // loads K_{j+1} and V_j). Step 0 has no P V, the last one (j = n_tiles) only P V.
  auto begin_step = [&](int j) {
    cp_async_wait<0>();
    fence_proxy_async();  // this thread's copies become visible to the tensor cores' reads
    // K_j and V_{j-1} are in for all; every warpgroup is done with K_{j-1} and V_{j-2}, whose
    // buffers the loads below overwrite
    __syncthreads();
    if (j + 1 < n_tiles)
      Tile::template load<KT, C::kThreads>(k_s + ((j + 1) & 1) * KT * HS,
                                           k_g + (j + 1) * KT * a.k.st, a.k.st,
                                           T - (j + 1) * KT, tid);
    if (j < n_tiles)
      Tile::template load<KT, C::kThreads>(v_s + (j & 1) * KT * HS, v_g + j * KT * a.v.st,
                                           a.v.st, T - j * KT, tid);
    cp_async_commit();
  };
  auto issue_scores = [&](int j) {  // S_j = Q K_j, 16 columns at a time
    const uint64_t k_desc = Tile::kmajor(k_s + (j & 1) * KT * HS);
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk)
      wgmma_ss<KT, 0>(s, q_desc + kk * Tile::kKStep, k_desc + kk * Tile::kKStep, kk > 0);
    wgmma_commit();
  };
  auto issue_pv = [&](int j) {  // O += P_j V_j, 16 keys at a time
    const uint64_t v_desc = Tile::nmajor(v_s + (j & 1) * KT * HS);
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk) wgmma_rs<HS, 1>(o, pf[kk], v_desc + kk * Tile::kNStep, true);
    wgmma_commit();
  };
  auto softmax = [&](int j, float (&alpha)[2]) {  // S_j -> weights, alpha for O
    fence_tile(s);
    mask_tile<KT>(s, j * KT, wq0, T, lane);
    softmax_tile<KT>(s, m, l, alpha, a.scale_log2);
    if (kDropout) drop_weights<KT>(s, j * KT, wq0, bh, key0, key1, a.threshold, lane);
  };
  auto pack_weights = [&] {
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk) {
      pf[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  {  // step 0: o is still 0, nothing to rescale
    begin_step(0);
    wgmma_fence();
    issue_scores(0);
    wgmma_wait<0>();
    float alpha[2];
    softmax(0, alpha);
    pack_weights();
  }
  for (int j = 1; j < n_tiles; ++j) {
    begin_step(j);
    wgmma_fence();
    issue_scores(j);
    issue_pv(j - 1);
    if (kOverlap)
      wgmma_wait<1>();  // S_j is in; P_{j-1} V_{j-1} may still run
    else
      wgmma_wait<0>();
    float alpha[2];
    softmax(j, alpha);
    wgmma_wait<0>();
    fence_tile(o);
    fence_tile(pf);
    rescale_rows<HS>(o, alpha);
    pack_weights();
  }
  begin_step(n_tiles);
  wgmma_fence();
  issue_pv(n_tiles - 1);
  wgmma_wait<0>();
  fence_tile(o);
  fence_tile(pf);
  __syncthreads();  // every warpgroup is done with the tiles: their space becomes output stages

  if (wq0 < T) {
    l[0] = quad_sum(l[0]);
    l[1] = quad_sum(l[1]);
    store_tile_bf16<HS>(o, a.drop_scale / l[0], a.drop_scale / l[1],
                        k_s + warp * 16 * C::kStagePitch, C::kStagePitch, a.y.row(b, h, wq0),
                        a.y.st, T - wq0, lane);
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
