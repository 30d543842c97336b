// window_proj_fc.cuh: the slide window's attention projection and the MLP's first matrix in
// one launch (bf16, tensor cores), for narrow models:
//   x1 = x + y Wp^T + bp              (attn.c_proj, its residual added)
//   h  = gelu(LN(x1) Wf^T + bf)       (ln_2, mlp.c_fc, the tanh GELU)
// what decode_linear's tensor-core kernel (decode_mma.cuh) computes in two launches, to the bit.
//
// The fc tile of a CTA (32 rows x 64 columns of h) needs whole rows of x1 for the LayerNorm, so
// each CTA computes its 32 rows of x1 itself: the whole of Wp (C x C) sits in its shared memory
// next to its 64 rows of Wf. That is C^2 more weight bytes a CTA (128 KiB at esp32's C = 256;
// it does not fit at shakespeare-char's 384), but all of them are weights: requested (cp.async)
// before pdl_wait, they travel while the kernel before (the window's attention) runs. After the
// wait the CTA loads its rows of y and x, multiplies (8 warps, 16 x C/4 each), adds bias and
// residual in the epilogue and rounds x1 to bf16 into shared memory (the CTAs of the first
// column tile also write it out: the MLP's residual), normalizes it in place
// (decode_mma.cuh's layernorm_rows), and multiplies again (4 warps, 16 x 32 each) into h.
// Both products sum k ascending (mma_rows_k) and both epilogues do decode_linear's arithmetic
// in its order, so x1 and h are its bits.
//
// Measured (H100, 2026-12-06) it loses: 7.25 vs 6.33 us a call against the two launches at
// esp32's window (its 32 CTAs each read 164 KB of weights, ~6 MB of L2 reads against ~2 MB for
// the two launches), 9,612 vs 9,684 tok/s for `gptstack sample`; so the model runs it only
// when asked (gptstack.model.fused_step.WINDOW_PROJ_FC).
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/window_proj_fc_check.cpp compares it with decode_linear's kernel).
#pragma once

#include <cstdint>
#include <type_traits>

#include "decode.h"
#include "decode_mma.cuh"

namespace gs::window_proj_fc {

using namespace gs::attn;
namespace ml = gs::mma_linear;

struct Args {
  uint16_t* x1;            // (R, C) bf16 bits: x + y Wp^T + bp
  uint16_t* h;             // (R, N): gelu(LN(x1) Wf^T + bf)
  const uint16_t* y;       // (R, C): the attention's output
  const uint16_t* x;       // (R, C): the residual stream
  const uint16_t* wp;      // (C, C)
  const uint16_t* bp;      // (C,) or null
  const uint16_t* wf;      // (N, C)
  const uint16_t* bf;      // (N,) or null
  const uint16_t* ln_w;    // (C,)
  const uint16_t* ln_b;    // (C,) or null
  int R, C, N;
  float eps;
};

constexpr int kThreads = ml::kThreads;
constexpr int kWarps = ml::kWarps;
constexpr int kRows = ml::kRows;  // rows of a CTA (32)
constexpr int kCols = 64;         // columns of h a CTA: 2 x 2 mma warps of 16 x 32
static_assert(kRows == 32 && kWarps == 8, "2 x 4 warps for x1, 2 x 2 for h");
// The widths the kernel is compiled for (decode.h: esp32's C = 256; 128 for small test models)
constexpr auto& kWidths = kWindowProjFcWidths;

// y rows, x1 rows, Wp's C rows, Wf's kCols rows (pitch C + 8), the LayerNorm's weight and bias
// and bp (C each), bf's kCols; every region starts on 16 bytes (C % 16 == 0)
constexpr int64_t shared_bytes(int64_t C) {
  return ((2 * kRows + C + kCols) * ml::pitch(C) + 3 * C + kCols) * 2;
}

// grid (N / kCols, ceil(R / kRows)), kThreads threads, C = KC
template <int KC>
__global__ void __launch_bounds__(kThreads) window_proj_fc_kernel(const Args a) {
  constexpr int C = KC, P = static_cast<int>(ml::pitch(C));
  constexpr int NT1 = C / 4 / 8;  // x1's 8-column mma tiles a warp: 4 warps across C
  constexpr int NT2 = 4;          // h's: 2 warps across kCols
  static_assert(C % 64 == 0 && NT1 % 2 == 0, "whole ldmatrix_x4 pairs of x1 columns a warp");
  GS_DYNAMIC_SHARED(smem);
  uint16_t* y_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* x1_s = y_s + kRows * P;                   // [kRows][P]
  uint16_t* wp_s = x1_s + kRows * P;                  // [C][P]
  uint16_t* wf_s = wp_s + C * P;                      // [kCols][P]
  uint16_t* lnw_s = wf_s + kCols * P;                 // [C]
  uint16_t* lnb_s = lnw_s + C;                        // [C]
  uint16_t* bp_s = lnb_s + C;                         // [C]
  uint16_t* bf_s = bp_s + C;                          // [kCols]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int r0 = blockIdx.y * kRows, n0 = blockIdx.x * kCols;

  pdl_launch_dependents();
  // every weight is on its way (or in shared memory) before waiting for the kernel before
  ml::copy_rows<C>(wp_s, a.wp, C, C, P, warp, lane);
  ml::copy_rows<kCols>(wf_s, a.wf + int64_t(n0) * C, a.N - n0, C, P, warp, lane);
  ml::copy_layernorm_params(lnw_s, lnb_s, a.ln_w, a.ln_b, C, tid);
  cp_async_commit();
  for (int c = tid; c < C; c += kThreads) sts(bp_s + c, a.bp ? a.bp[c] : uint16_t(0));
  for (int c = tid; c < kCols; c += kThreads)
    sts(bf_s + c, a.bf && n0 + c < a.N ? a.bf[n0 + c] : uint16_t(0));
  pdl_wait();  // y and x are the previous kernels' output
  ml::copy_rows<kRows>(y_s, a.y + int64_t(r0) * C, a.R - r0, C, P, warp, lane);
  cp_async_commit();
  // x1's warp (wm, wn): rows 16 wm.., columns 8 NT1 wn..; its residual pairs go out now, into
  // registers (res[nt][hh]: row g + 8 hh, columns 8 nt + 2 t + {0, 1} of the warp's slice)
  const int wm = warp / 4, wn = warp % 4;
  uint32_t res[NT1][2] = {};
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = r0 + wm * 16 + g + 8 * hh;
    if (row >= a.R) continue;
#pragma unroll
    for (int nt = 0; nt < NT1; ++nt)
      res[nt][hh] = ml::load_pair_produced(a.x + int64_t(row) * C + wn * 8 * NT1 + nt * 8 + 2 * t);
  }
  cp_async_wait<0>();
  __syncthreads();

  {  // x1 = x + y Wp^T + bp, rounded once (decode_linear's epilogue: bias, then residual)
    float acc[NT1][4] = {};
    ml::mma_rows_k<NT1>(acc, y_s + wm * 16 * P, wp_s + wn * 8 * NT1 * P, C, P, lane);
    ml::each_acc_pair<NT1>(lane, [&](int nt, int hh, int r, int c) {
      const int row = wm * 16 + r, col = wn * 8 * NT1 + c;
      const uint32_t packed = pack_bf16(
          ml::linear_epilogue(acc[nt][2 * hh], lds(bp_s + col), false, bf16_lo(res[nt][hh])),
          ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bp_s + col + 1), false,
                              bf16_hi(res[nt][hh])));
      sts(reinterpret_cast<uint32_t*>(x1_s + row * P + col), packed);
      if (blockIdx.x == 0 && r0 + row < a.R)  // one column tile writes the residual stream
        *reinterpret_cast<uint32_t*>(a.x1 + int64_t(r0 + row) * C + col) = packed;
    });
  }
  __syncthreads();
  ml::layernorm_rows<kRows / kWarps>(x1_s, P, C, lnw_s, lnb_s, a.eps, warp, lane);
  __syncthreads();
  if (warp >= 4) return;

  // h = gelu(LN(x1) Wf^T + bf): warp (wm2, wn2) takes rows 16 wm2.., columns 32 wn2..
  const int wm2 = warp / 2, wn2 = warp % 2;
  float acc[NT2][4] = {};
  ml::mma_rows_k<NT2>(acc, x1_s + wm2 * 16 * P, wf_s + wn2 * 8 * NT2 * P, C, P, lane);
  ml::each_acc_pair<NT2>(lane, [&](int nt, int hh, int r, int c) {
    const int row = r0 + wm2 * 16 + r, cl = wn2 * 8 * NT2 + c, col = n0 + cl;
    if (row >= a.R || col >= a.N) return;
    *reinterpret_cast<uint32_t*>(a.h + int64_t(row) * a.N + col) =
        pack_bf16(ml::linear_epilogue(acc[nt][2 * hh], lds(bf_s + cl), true, 0.0f),
                  ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bf_s + cl + 1), true, 0.0f));
  });
}

// f(kernel) with the instance for width C (one of kWidths; the caller checks), as a
// std::integral_constant holding the kernel's address (decode_mma.cuh's with_kernel_for)
template <int I = 0, typename F> void with_kernel_for(int C, F&& f) {
  constexpr int kCount = sizeof(kWidths) / sizeof(kWidths[0]);
  if constexpr (I < kCount) {
    constexpr int KC = kWidths[I];
    constexpr auto kernel = &window_proj_fc_kernel<KC>;  // named first: see window_attention.cuh
    if (C == KC) return f(std::integral_constant<void (*)(Args), kernel>{});
    return with_kernel_for<I + 1>(C, f);
  }
}

constexpr bool compiled_for(int C) {
  for (int w : kWidths)
    if (w == C) return true;
  return false;
}

}  // namespace gs::window_proj_fc
