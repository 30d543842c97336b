// window_mlp.cuh: the rest of a transformer block after its attention, for the rows of a short
// slide window, in one launch (bf16, tensor cores, sm_90+):
//   x1  = x + y Wp^T + bp              (attn.c_proj, its residual added)
//   h   = gelu(LN(x1) Wf^T + bf)       (ln_2, mlp.c_fc: 4C columns, the tanh GELU)
//   out = x1 + h Wm^T + bm             (mlp.c_proj)
// what three launches of decode_linear's tensor-core kernel (decode_mma.cuh) compute, to the bit.
//
// Why: the slide window's step (gptstack.model.fused_step.window) is a chain of dependent
// launches where each one's own chain (wait for the kernel before, load its input from L2,
// multiply, store, drain) is the time, ~3.6-4.5 us a matrix at esp32's 64 rows on the H100.
// window_proj_fc (2026-12-06) fused c_proj and c_fc by giving every CTA the whole of c_proj and
// lost (7.25 vs 6.33 us: 32 CTAs each reading 164 KB of weights). Here the weights are split,
// not copied: a thread-block cluster of Q = C / 16 CTAs takes 32 rows, and CTA q owns
//   - 16 columns of x1 and of out (c_proj's and mlp.c_proj's rows [16q, 16q + 16)),
//   - 64 columns of h (c_fc's rows [64q, 64q + 64)),
// so each weight byte is read once per cluster (80 KiB a CTA at esp32's C = 256, all requested
// before pdl_wait). What a CTA needs of the others' columns travels through distributed shared
// memory, pushed, not pulled: each CTA stores its columns of x1 (then of h) into every CTA of
// the cluster by st.async, 16 bytes a store, and each waits on its own mbarrier for the bytes of
// its whole x1 rows (16 KiB: the LayerNorm's input), then of its whole h rows (64 KiB:
// mlp.c_proj's). No cluster barrier between the phases (the one publishing the mbarriers at the
// start is waited for just before the first store), and x1 and h never go through L2. The first
// version pulled the columns (ld.shared::cluster) after two cluster barriers: 14.2 vs 10.4 us a
// call against the three launches on the H100, its time in the loads' round trips (each store
// waited for its load) and in the barriers' release, a GPU-wide memory barrier (ncu:
// benchmarks/profiles/ncu-window-mlp-h100-20261206-01aa308.txt). This one still loses: 12.5 vs
// 10.6 us a call, 9,022 vs 9,526 tok/s for `gptstack sample` at esp32 (H100, 2026-12-06): under
// programmatic launch the three kernels overlap each one's weight loads and launch with the
// kernel before, and one CTA's path through three products (mlp.c_proj's a 64-step mma chain
// on 2 warps) and two exchanges is longer than what the fusion saves. So the model runs it only
// when asked (gptstack.model.fused_step.WINDOW_MLP).
// Bits: each output's sum is mma_rows_k's (k ascending, whatever the tiling), the LayerNorm is
// layernorm_rows (4 rows a warp, as decode_linear's), and the epilogues are linear_epilogue in
// decode_linear's order, so x1, h and out are the three launches' bits; x1 stays in the two mma
// warps' registers from c_proj's epilogue to mlp.c_proj's, where it is the residual.
// Only at the widths it is compiled for (kWindowMlpWidths: C = 256 makes a 16-CTA cluster, a
// non-portable size the H100/H200 allow; 128 an 8-CTA one for small test models), N = 4C, and
// 183 KiB of shared memory a CTA at C = 256.
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/window_mlp_check.cpp compares it with decode_linear's kernel).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cluster.cuh"
#include "decode.h"
#include "decode_mma.cuh"

namespace gs::window_mlp {

using namespace gs::attn;
namespace ml = gs::mma_linear;

struct Args {
  uint16_t* out;           // (R, C) bf16 bits: x1 + h Wm^T + bm
  const uint16_t* y;       // (R, C): the attention's output
  const uint16_t* x;       // (R, C): the residual stream
  const uint16_t* wp;      // (C, C): attn.c_proj
  const uint16_t* bp;      // (C,) or null
  const uint16_t* ln_w;    // (C,): ln_2
  const uint16_t* ln_b;    // (C,) or null
  const uint16_t* wf;      // (4C, C): mlp.c_fc
  const uint16_t* bf;      // (4C,) or null
  const uint16_t* wm;      // (C, 4C): mlp.c_proj
  const uint16_t* bm;      // (C,) or null
  int R;
  float eps;
};

constexpr int kThreads = ml::kThreads;
constexpr int kWarps = ml::kWarps;
constexpr int kRows = ml::kRows;   // rows of a cluster (32): 2 mma warps of 16 rows
constexpr int kOutCols = 16;       // x1's and out's columns a CTA (2 mma tiles of 8)
constexpr int kHidCols = 64;       // h's columns a CTA (N = 4C = 4 kOutCols Q): 4 warps of 16
constexpr int kNT = 2;             // 8-column mma tiles a warp, in all three products
constexpr int kMmaWarps = kRows / 16;
static_assert(kRows == 32 && kWarps == 8 && kOutCols == 8 * kNT && kHidCols == 4 * kOutCols,
              "x1 and out: 2 warps of 16 x 16; h: 2 x 4 warps of 16 x 16");
constexpr auto& kWidths = kWindowMlpWidths;
constexpr int cluster_ctas(int C) { return C / kOutCols; }

// Shared memory (bf16 elements from the start; every region on 16 bytes): y rows, whole x1 rows
// (then LN(x1) in place), whole h rows, the CTA's rows of Wp, Wf and Wm, the CTA's own columns
// of x1 and of h (which the other CTAs read), the LayerNorm's weight and bias, and the CTA's
// slices of bp, bf and bm. Rows padded by 8 elements (decode_mma.cuh's pitch) so the 8 rows an
// ldmatrix reads fall in different bank groups.
template <int C> struct Layout {
  static constexpr int N = 4 * C, P = C + 8, PN = N + 8, PX = kOutCols + 8, PH = kHidCols + 8;
  static constexpr int y = 0;
  static constexpr int x1 = y + kRows * P;
  static constexpr int h = x1 + kRows * P;
  static constexpr int wp = h + kRows * PN;
  static constexpr int wf = wp + kOutCols * P;
  static constexpr int wm = wf + kHidCols * P;
  static constexpr int x1_part = wm + kOutCols * PN;
  static constexpr int h_part = x1_part + kRows * PX;
  static constexpr int lnw = h_part + kRows * PH;
  static constexpr int lnb = lnw + C;
  static constexpr int bp = lnb + C;
  static constexpr int bf = bp + kOutCols;
  static constexpr int bm = bf + kHidCols;
  static constexpr int bars = bm + kOutCols;  // two 8-byte mbarriers: x1's rows, h's rows
  static constexpr int end = bars + 8;
  static_assert(C % 64 == 0 && x1_part % 8 == 0 && lnw % 8 == 0 && bars % 8 == 0,
                "16-byte regions");
};
template <int C> constexpr int64_t shared_bytes() { return int64_t(Layout<C>::end) * 2; }

// This CTA's columns (part_s, pitch PP, Cols columns) into the rows of every CTA of the cluster
// (rows_s, pitch P, at columns [rank Cols, (rank + 1) Cols) for this CTA's rank), each 16-byte
// store completing its bytes on the receiver's mbarrier bar: consecutive threads send one chunk
// to consecutive CTAs.
template <int Cols, int PP, int P>
__device__ __forceinline__ void push_columns(uint16_t* rows_s, const uint16_t* part_s,
                                             uint64_t* bar, int rank, int ctas, int tid) {
  constexpr int kChunks = Cols / 8;  // 16-byte chunks of a row of the part
  for (int i = tid; i < ctas * kRows * kChunks; i += kThreads) {
    const int to = i % ctas, chunk = i / ctas, row = chunk / kChunks, ch = chunk % kChunks;
    const uint4 v = lds(reinterpret_cast<const uint4*>(part_s + row * PP + ch * 8));
    st_async_u4(rows_s + row * P + rank * Cols + ch * 8, to, v, bar);
  }
}

// grid (Q, ceil(R / kRows)) in clusters of (Q, 1, 1), Q = C / kOutCols; kThreads threads
template <int C>
__global__ void __launch_bounds__(kThreads) window_mlp_kernel(const Args a) {
#ifdef GS_CLUSTERS
  using L = Layout<C>;
  constexpr int N = L::N, P = L::P, PN = L::PN, PX = L::PX, PH = L::PH, Q = cluster_ctas(C);
  GS_DYNAMIC_SHARED(smem);
  uint16_t* const s = reinterpret_cast<uint16_t*>(smem);
  uint16_t *y_s = s + L::y, *x1_s = s + L::x1, *h_s = s + L::h, *wp_s = s + L::wp,
           *wf_s = s + L::wf, *wm_s = s + L::wm, *x1p_s = s + L::x1_part, *hp_s = s + L::h_part,
           *lnw_s = s + L::lnw, *lnb_s = s + L::lnb, *bp_s = s + L::bp, *bf_s = s + L::bf,
           *bm_s = s + L::bm;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(s + L::bars);  // x1's rows, h's rows
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int q = cluster_rank();  // = blockIdx.x: the cluster spans x
  const int r0 = blockIdx.y * kRows, c0 = q * kOutCols, n0 = q * kHidCols;

  // the mbarriers the cluster's stores complete on, published by a cluster barrier that is
  // waited for only before this CTA's first store
  if (tid == 0) {
    mbar_init_expect(bars, kRows * C * 2);
    mbar_init_expect(bars + 1, kRows * N * 2);
    fence_mbarrier_init();
  }
  cluster_arrive_relaxed();
  pdl_launch_dependents();
  // every weight of the CTA is on its way (or, the small vectors, in shared memory) before
  // waiting for the kernel before
  ml::copy_rows<kOutCols>(wp_s, a.wp + int64_t(c0) * C, kOutCols, C, P, warp, lane);
  ml::copy_rows<kHidCols>(wf_s, a.wf + int64_t(n0) * C, kHidCols, C, P, warp, lane);
  ml::copy_rows<kOutCols>(wm_s, a.wm + int64_t(c0) * N, kOutCols, N, PN, warp, lane);
  ml::copy_layernorm_params(lnw_s, lnb_s, a.ln_w, a.ln_b, C, tid);
  cp_async_commit();
  for (int c = tid; c < kOutCols; c += kThreads) {
    sts(bp_s + c, a.bp ? a.bp[c0 + c] : uint16_t(0));
    sts(bm_s + c, a.bm ? a.bm[c0 + c] : uint16_t(0));
  }
  for (int c = tid; c < kHidCols; c += kThreads)
    sts(bf_s + c, a.bf ? a.bf[n0 + c] : uint16_t(0));
  pdl_wait();  // y and x are the previous kernels' output
  ml::copy_rows<kRows>(y_s, a.y + int64_t(r0) * C, a.R - r0, C, P, warp, lane);
  cp_async_commit();
  // mma warp w (rows 16 w..): x's pairs at its x1 outputs go out now, into registers
  // (res[nt][hh]: row g + 8 hh, columns 8 nt + 2 t + {0, 1} of the CTA's 16)
  const bool mma_warp = warp < kMmaWarps;
  uint32_t res[kNT][2] = {};
  if (mma_warp) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = r0 + warp * 16 + g + 8 * hh;
      if (row >= a.R) continue;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        res[nt][hh] = ml::load_pair_produced(a.x + int64_t(row) * C + c0 + nt * 8 + 2 * t);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // x1 = x + y Wp^T + bp for the CTA's columns, rounded once; kept in the mma warps' registers
  // (the MLP's residual) and in x1p_s, from where every thread sends them to the cluster
  uint32_t x1_pairs[kNT][2] = {};
  if (mma_warp) {
    float acc[kNT][4] = {};
    ml::mma_rows_k<kNT>(acc, y_s + warp * 16 * P, wp_s, C, P, lane);
    ml::each_acc_pair<kNT>(lane, [&](int nt, int hh, int r, int c) {
      const uint32_t packed = pack_bf16(
          ml::linear_epilogue(acc[nt][2 * hh], lds(bp_s + c), false, bf16_lo(res[nt][hh])),
          ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bp_s + c + 1), false,
                              bf16_hi(res[nt][hh])));
      x1_pairs[nt][hh] = packed;
      sts(reinterpret_cast<uint32_t*>(x1p_s + (warp * 16 + r) * PX + c), packed);
    });
  }
  __syncthreads();
  cluster_wait();  // every CTA's mbarriers are initialized
  push_columns<kOutCols, PX, P>(x1_s, x1p_s, bars, q, Q, tid);
  mbar_wait(bars, 0);  // the whole x1 rows have arrived
  ml::layernorm_rows<kRows / kWarps>(x1_s, P, C, lnw_s, lnb_s, a.eps, warp, lane);
  __syncthreads();

  {  // h = gelu(LN(x1) Wf^T + bf) for the CTA's columns: warp (wm, wn) rows 16 wm.., columns
     // 16 wn.. of its 64, into hp_s for the cluster
    const int wm = warp / 4, wn = warp % 4;
    float acc[kNT][4] = {};
    ml::mma_rows_k<kNT>(acc, x1_s + wm * 16 * P, wf_s + wn * 16 * P, C, P, lane);
    ml::each_acc_pair<kNT>(lane, [&](int nt, int hh, int r, int c) {
      const int cl = wn * 16 + c;
      sts(reinterpret_cast<uint32_t*>(hp_s + (wm * 16 + r) * PH + cl),
          pack_bf16(ml::linear_epilogue(acc[nt][2 * hh], lds(bf_s + cl), true, 0.0f),
                    ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bf_s + cl + 1), true, 0.0f)));
    });
  }
  __syncthreads();
  push_columns<kHidCols, PH, PN>(h_s, hp_s, bars + 1, q, Q, tid);

  if (mma_warp) {  // out = x1 + h Wm^T + bm for the CTA's columns
    mbar_wait(bars + 1, 0);  // the whole h rows have arrived
    float acc[kNT][4] = {};
    ml::mma_rows_k<kNT>(acc, h_s + warp * 16 * PN, wm_s, N, PN, lane);
    ml::each_acc_pair<kNT>(lane, [&](int nt, int hh, int r, int c) {
      const int row = r0 + warp * 16 + r;
      if (row >= a.R) return;
      *reinterpret_cast<uint32_t*>(a.out + int64_t(row) * C + c0 + c) = pack_bf16(
          ml::linear_epilogue(acc[nt][2 * hh], lds(bm_s + c), false, bf16_lo(x1_pairs[nt][hh])),
          ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bm_s + c + 1), false,
                              bf16_hi(x1_pairs[nt][hh])));
    });
  }
  // No CTA reads another's shared memory, and every store into a CTA has arrived before its
  // mma warps pass their waits: a CTA may exit without a cluster barrier.
#endif
}

// f(kernel, ctas, shared bytes) with the instance for width C as a std::integral_constant holding
// the kernel's address (decode_mma.cuh's with_kernel_for), its cluster size and its shared
// memory; false where C is not one of kWidths
template <typename F> bool with_kernel_for(int C, F&& f) {
  return ml::with_width<kWidths>(C, [&](auto width) {
    constexpr int KC = decltype(width)::value;
    constexpr auto kernel = &window_mlp_kernel<KC>;  // named first: see window_attention.cuh
    f(std::integral_constant<void (*)(Args), kernel>{}, cluster_ctas(KC), shared_bytes<KC>());
  });
}

}  // namespace gs::window_mlp
