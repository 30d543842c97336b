// decode_tail.cuh: the end of a decode step for one row per sequence, in one launch (bf16,
// sm_90+): the last block after its attention and the LM head,
//   x1     = x + y Wp^T + bp                  (attn.c_proj, its residual)
//   h      = gelu(LN2(x1) Wf^T + bf)          (ln_2, mlp.c_fc)
//   x2     = x1 + h Wm^T + bm                 (mlp.c_proj)
//   logits = LNf(x2) Wh^T                     (ln_f, lm_head: no bias)
// what four launches of decode_linear's one-row kernel (decode_linear.cuh) compute, to the bit.
//
// Why: the slide window's step (gptstack.model.fused_step.window) ends with those four
// launches on the last row alone, each a few microseconds of waiting, one L2 round trip for
// its row and a matrix-vector product of a few hundred columns. Here a thread-block cluster of
// Q = C / 32 CTAs takes a row: CTA q owns 32 columns of x1 and x2, 4C / Q of h and ceil(V / Q)
// logits, and its rows of the four matrices (176 KiB at esp32's C = 256, V = 512) are requested
// before pdl_wait, so they travel while the kernel before (the last block's attention) runs.
// Between the phases each CTA pushes its bf16 columns into every CTA of the cluster (st.async
// onto the receivers' mbarriers, as window_mlp.cuh), which wait for their whole rows.
// Bits: each output is a warp's dot product in decode_linear_kernel's order (lane l takes the
// 16-byte chunks l, l + 32, ..., fmaf in column order, then the xor butterfly), the LayerNorm's
// sums are block_sum's over 128 threads (threads 128.. add zeros, which change no sum), and the
// normalized row stays float, as in that kernel.
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/decode_tail_check.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cluster.cuh"
#include "decode.h"
#include "decode_mma.cuh"
#include "gelu_tanh.cuh"

namespace gs::decode_tail {

using namespace gs::attn;
namespace ml = gs::mma_linear;

struct Args {
  uint16_t* logits;                      // (B, V) bf16 bits
  const uint16_t* y;                     // (B, C): the last block's attention output
  const uint16_t* x;                     // (B, C): the residual stream
  const uint16_t *wp, *bp;               // attn.c_proj (C, C), (C,) or null
  const uint16_t *ln2_w, *ln2_b;         // (C,), (C,) or null
  const uint16_t *wf, *bf;               // mlp.c_fc (4C, C), (4C,) or null
  const uint16_t *wm, *bm;               // mlp.c_proj (C, 4C), (C,) or null
  const uint16_t *lnf_w, *lnf_b;         // (C,), (C,) or null
  const uint16_t* wh;                    // lm_head (V, C)
  int V;
  float eps;
};

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLnThreads = 128;  // decode_linear_kernel's block: the LayerNorm's sum order
constexpr int kCols = 32;        // x1's and x2's columns a CTA
constexpr auto& kWidths = kDecodeTailWidths;
constexpr int cluster_ctas(int C) { return C / kCols; }

// Shared memory, in bytes from the start (every region on 16 bytes): the CTA's weight rows
// (bf16: Wp, Wf, Wm, then Wh's VQ rows), the input row as floats (4C: the widest, h), the whole
// x1, h and x2 rows the cluster pushes (bf16), the LayerNorm parameters and biases (bf16), the
// block sums' scratch and three mbarriers
template <int C> struct Layout {
  static constexpr int Q = cluster_ctas(C), N = 4 * C, HC = N / Q;
  static constexpr int64_t wp = 0;
  static constexpr int64_t wf = wp + int64_t(kCols) * C * 2;
  static constexpr int64_t wm = wf + int64_t(HC) * C * 2;
  static constexpr int64_t row = wm + int64_t(kCols) * N * 2;
  static constexpr int64_t x1 = row + int64_t(N) * 4;
  static constexpr int64_t h = x1 + C * 2;
  static constexpr int64_t x2 = h + N * 2;
  static constexpr int64_t part = x2 + C * 2;  // this CTA's columns of the phase, to push
  static constexpr int64_t params = part + HC * 2;  // ln2 w, b, lnf w, b (C each); bp, bf, bm
  static constexpr int64_t red = params + (4 * C + kCols + HC + kCols) * 2;
  static constexpr int64_t bars = red + 32 * 4;
  static constexpr int64_t wh = bars + 32;  // VQ rows, VQ = ceil(V / Q)
  static_assert(C % 256 == 0 || C == 128, "whole 16-byte chunks a lane, 32 columns a CTA");
  static constexpr int64_t bytes(int V) { return wh + int64_t((V + Q - 1) / Q) * C * 2; }
};

// The dots of `Outs` rows (w_s + r * K bf16 each) with the float row row_s (K): each a warp's
// dot in decode_linear_kernel's order, the Outs sums interleaved; every lane gets every total
template <int Outs, int K>
__device__ __forceinline__ void warp_dots(float (&acc)[Outs], const uint16_t* const (&w)[Outs],
                                          const float* row_s, int lane) {
#pragma unroll
  for (int o = 0; o < Outs; ++o) acc[o] = 0.0f;
#pragma unroll
  for (int j = 0; j < (K + 255) / 256; ++j) {
    const int k = (j * 32 + lane) * 8;
    if (k >= K) break;  // (K = 128: lanes 16.. add nothing, as decode_linear's)
    float r[8];
    const float4 lo = lds(reinterpret_cast<const float4*>(row_s + k));
    const float4 hi = lds(reinterpret_cast<const float4*>(row_s + k + 4));
    r[0] = lo.x, r[1] = lo.y, r[2] = lo.z, r[3] = lo.w, r[4] = hi.x, r[5] = hi.y, r[6] = hi.z,
    r[7] = hi.w;
#pragma unroll
    for (int o = 0; o < Outs; ++o) {
      float wv[8];
      ml::unpack8(lds(reinterpret_cast<const uint4*>(w[o] + k)), wv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[o] = fmaf(wv[i], r[i], acc[o]);
    }
  }
  ml::warp_sums(acc);
}

// The dots of the float row row_s (K) with rows w, w + 8, w + 16, w + 24 of w_s (K bf16 each,
// warp w) as warp_dots computes them; lane o < 4 gets row w + 8 o's
template <int K>
__device__ __forceinline__ float own_column_dot(const uint16_t* w_s, const float* row_s, int warp,
                                                int lane) {
  const uint16_t* w[4];
  float acc[4];
#pragma unroll
  for (int o = 0; o < 4; ++o) w[o] = w_s + (warp + kWarps * o) * K;
  warp_dots<4, K>(acc, w, row_s, lane);
  float mine = acc[0];
#pragma unroll
  for (int o = 1; o < 4; ++o) mine = (lane & 3) == o ? acc[o] : mine;
  return mine;
}

// gs::block_sum over 256 threads, where only the first kLnThreads hold partial sums (the rest
// zeros): the totals of decode_linear_kernel's 128-thread block_sum, bit for bit
__device__ __forceinline__ float block_sum_256(float v, float* red, int warp, int lane) {
  float a[1] = {v};
  ml::warp_sums(a);
  __syncthreads();
  if (lane == 0) sts(red + warp, a[0]);
  __syncthreads();
  a[0] = lane < kWarps ? lds(red + lane) : 0.0f;
  ml::warp_sums(a);
  return a[0];
}

// row_s (K floats) = LayerNorm(row_s) as decode_linear_kernel computes it in place: the sums
// over threads t < 128 of columns t, t + 128, ...; lnw/lnb bf16 (lnb null: none)
template <int K>
__device__ __forceinline__ void layernorm_row(float* row_s, const uint16_t* lnw_s,
                                              const uint16_t* lnb_s, float eps, float* red,
                                              int tid) {
  const int warp = tid / 32, lane = tid % 32;
  float s = 0.0f;
  if (tid < kLnThreads)
    for (int k = tid; k < K; k += kLnThreads) s += lds(row_s + k);
  const float mean = block_sum_256(s, red, warp, lane) / K;
  float ss = 0.0f;
  if (tid < kLnThreads)
    for (int k = tid; k < K; k += kLnThreads) {
      const float v = lds(row_s + k);
      ss += (v - mean) * (v - mean);
    }
  const float rstd = rsqrtf(block_sum_256(ss, red, warp, lane) / K + eps);
  __syncthreads();  // every thread has read row_s for the sums before it is overwritten
  for (int k = tid; k < K; k += kThreads) {
    const float lw = ml::bf16_bits(lds(lnw_s + k));
    const float lb = lnb_s ? ml::bf16_bits(lds(lnb_s + k)) : 0.0f;
    sts(row_s + k, (lds(row_s + k) - mean) * rstd * lw + lb);
  }
  __syncthreads();
}

// the bf16 row src (K, shared or, Global, the kernel before's output) as floats into row_s
template <int K, bool Global>
__device__ __forceinline__ void load_row(float* row_s, const uint16_t* src, int tid) {
  for (int i = tid; i < K / 8; i += kThreads) {
    uint4 v;
    if constexpr (Global) {
#ifdef GS_ATTN_EMULATE
      v = *reinterpret_cast<const uint4*>(src + i * 8);
#else
      v = load_produced(reinterpret_cast<const uint4*>(src + i * 8));
#endif
    } else {
      v = lds(reinterpret_cast<const uint4*>(src + i * 8));
    }
    float f[8];
    ml::unpack8(v, f);
    sts(reinterpret_cast<float4*>(row_s + i * 8), float4{f[0], f[1], f[2], f[3]});
    sts(reinterpret_cast<float4*>(row_s + i * 8 + 4), float4{f[4], f[5], f[6], f[7]});
  }
}

// Cols bf16 values of part (this CTA's columns [rank Cols, ..)) into every CTA's row_s at the
// same columns, 16 bytes a store completing on the receiver's mbarrier bar
template <int Cols>
__device__ __forceinline__ void push(uint16_t* row_s, const uint16_t* part, uint64_t* bar,
                                     int rank, int ctas, int tid) {
  constexpr int kChunks = Cols / 8;
  for (int i = tid; i < ctas * kChunks; i += kThreads) {
    const int to = i / kChunks, ch = i % kChunks;
    st_async_u4(row_s + rank * Cols + ch * 8, to,
                lds(reinterpret_cast<const uint4*>(part + ch * 8)), bar);
  }
}

// one CTA of decode_linear's epilogue order: + bias (where there is one), GELU, + residual
// (where there is one), rounded once
__device__ __forceinline__ uint16_t epilogue(float acc, const uint16_t* bias, bool gelu,
                                             const float* residual) {
  if (bias) acc += ml::bf16_bits(*bias);
  if (gelu) acc = gelu_tanh_f(acc);
  if (residual) acc += *residual;
  return static_cast<uint16_t>(pack_bf16(acc, 0.0f) & 0xFFFFu);
}

// grid (Q, B) in clusters of (Q, 1, 1), Q = C / kCols; kThreads threads
template <int C>
__global__ void __launch_bounds__(kThreads) decode_tail_kernel(const Args a) {
#ifdef GS_CLUSTERS
  using L = Layout<C>;
  constexpr int Q = L::Q, N = L::N, HC = L::HC;
  GS_DYNAMIC_SHARED(smem);
  uint16_t* const wp_s = reinterpret_cast<uint16_t*>(smem + L::wp);
  uint16_t* const wf_s = reinterpret_cast<uint16_t*>(smem + L::wf);
  uint16_t* const wm_s = reinterpret_cast<uint16_t*>(smem + L::wm);
  uint16_t* const wh_s = reinterpret_cast<uint16_t*>(smem + L::wh);
  float* const row_s = reinterpret_cast<float*>(smem + L::row);
  uint16_t* const x1_s = reinterpret_cast<uint16_t*>(smem + L::x1);
  uint16_t* const h_s = reinterpret_cast<uint16_t*>(smem + L::h);
  uint16_t* const x2_s = reinterpret_cast<uint16_t*>(smem + L::x2);
  uint16_t* const part_s = reinterpret_cast<uint16_t*>(smem + L::part);
  uint16_t* const ln2w_s = reinterpret_cast<uint16_t*>(smem + L::params);
  uint16_t* const ln2b_s = ln2w_s + C;
  uint16_t* const lnfw_s = ln2b_s + C;
  uint16_t* const lnfb_s = lnfw_s + C;
  uint16_t* const bp_s = lnfb_s + C;
  uint16_t* const bf_s = bp_s + kCols;
  uint16_t* const bm_s = bf_s + HC;
  float* const red = reinterpret_cast<float*>(smem + L::red);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + L::bars);  // x1, h, x2
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int q = cluster_rank(), b = blockIdx.y;
  const int c0 = q * kCols, n0 = q * HC, VQ = (a.V + Q - 1) / Q, v0 = q * VQ;

  if (tid == 0) {
    mbar_init_expect(bars, C * 2);
    mbar_init_expect(bars + 1, N * 2);
    mbar_init_expect(bars + 2, C * 2);
    fence_mbarrier_init();
  }
  cluster_arrive_relaxed();
  pdl_launch_dependents();
  // the CTA's weight rows and the small vectors: nothing the kernel before writes
  ml::copy_rows<kCols>(wp_s, a.wp + int64_t(c0) * C, kCols, C, C, warp, lane);
  ml::copy_rows<HC>(wf_s, a.wf + int64_t(n0) * C, HC, C, C, warp, lane);
  ml::copy_rows<kCols>(wm_s, a.wm + int64_t(c0) * N, kCols, N, N, warp, lane);
  for (int r = warp; r < VQ; r += kWarps)  // rows past V zero-filled
    for (int ch = lane; ch < C / 8; ch += 32)
      cp_async_16(wh_s + r * C + ch * 8, a.wh + int64_t(v0 + r < a.V ? v0 + r : 0) * C + ch * 8,
                  v0 + r < a.V ? 16 : 0);
  ml::copy_layernorm_params(ln2w_s, ln2b_s, a.ln2_w, a.ln2_b, C, tid);
  ml::copy_layernorm_params(lnfw_s, lnfb_s, a.lnf_w, a.lnf_b, C, tid);
  cp_async_commit();
  for (int c = tid; c < kCols; c += kThreads) {
    sts(bp_s + c, a.bp ? a.bp[c0 + c] : uint16_t(0));
    sts(bm_s + c, a.bm ? a.bm[c0 + c] : uint16_t(0));
  }
  for (int c = tid; c < HC; c += kThreads) sts(bf_s + c, a.bf ? a.bf[n0 + c] : uint16_t(0));
  pdl_wait();  // y and x are the kernels before's output
  load_row<C, true>(row_s, a.y + int64_t(b) * C, tid);
  // the residual of this lane's x1 output (warp w: columns w, w + 8, w + 16, w + 24; lane o < 4)
  const int own = warp + kWarps * (lane & 3);
  float x_res = 0.0f;
  if (lane < 4) x_res = ml::bf16_bits(ml::load_bits_produced(a.x + int64_t(b) * C + c0 + own));
  cp_async_wait<0>();
  __syncthreads();

  // x1 = x + y Wp^T + bp: warp w's 4 columns w + 8 o; lane o < 4 rounds output o and keeps it
  // (x2's residual)
  float x1_own = 0.0f;
  {
    const float mine = own_column_dot<C>(wp_s, row_s, warp, lane);
    if (lane < 4) {
      const uint16_t bits = epilogue(mine, a.bp ? bp_s + own : nullptr, false, &x_res);
      sts(part_s + own, bits);
      x1_own = ml::bf16_bits(bits);
    }
  }
  __syncthreads();
  cluster_wait();  // every CTA's mbarriers are initialized
  push<kCols>(x1_s, part_s, bars, q, Q, tid);
  mbar_wait(bars, 0);

  // h = gelu(LN2(x1) Wf^T + bf): warp w's HC / 8 columns w + 8 o
  load_row<C, false>(row_s, x1_s, tid);
  __syncthreads();
  layernorm_row<C>(row_s, ln2w_s, a.ln2_b ? ln2b_s : nullptr, a.eps, red, tid);
  {
    constexpr int kOuts = HC / kWarps;
    const uint16_t* w[kOuts];
    float acc[kOuts];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) w[o] = wf_s + (warp + kWarps * o) * C;
    warp_dots<kOuts, C>(acc, w, row_s, lane);
#pragma unroll
    for (int o = 0; o < kOuts; ++o)
      if (lane == o) {
        const int col = warp + kWarps * o;
        sts(part_s + col, epilogue(acc[o], a.bf ? bf_s + col : nullptr, true, nullptr));
      }
  }
  __syncthreads();
  push<HC>(h_s, part_s, bars + 1, q, Q, tid);
  mbar_wait(bars + 1, 0);

  // x2 = x1 + h Wm^T + bm: warp w's 4 columns w + 8 o
  load_row<N, false>(row_s, h_s, tid);
  __syncthreads();
  {
    const float mine = own_column_dot<N>(wm_s, row_s, warp, lane);
    if (lane < 4) sts(part_s + own, epilogue(mine, a.bm ? bm_s + own : nullptr, false, &x1_own));
  }
  __syncthreads();
  push<kCols>(x2_s, part_s, bars + 2, q, Q, tid);
  mbar_wait(bars + 2, 0);

  // logits = LNf(x2) Wh^T: warp w's rows w, w + 8, ... of the CTA's VQ
  load_row<C, false>(row_s, x2_s, tid);
  __syncthreads();
  layernorm_row<C>(row_s, lnfw_s, a.lnf_b ? lnfb_s : nullptr, a.eps, red, tid);
  for (int r0 = 0; r0 < VQ; r0 += 4 * kWarps) {
    const uint16_t* w[4];
    float acc[4];
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int r = r0 + warp + kWarps * o;
      w[o] = wh_s + (r < VQ ? r : 0) * C;
    }
    warp_dots<4, C>(acc, w, row_s, lane);
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int r = r0 + warp + kWarps * o;
      if (lane == o && r < VQ && v0 + r < a.V)
        a.logits[int64_t(b) * a.V + v0 + r] = epilogue(acc[o], nullptr, false, nullptr);
    }
  }
#endif
}

// f(kernel, ctas, shared_bytes(V)) with the instance for width C (one of kWidths) as a
// std::integral_constant holding the kernel's address, its cluster size and its shared memory
// for a vocabulary V; false where C is not compiled for
template <typename F> bool with_kernel_for(int C, F&& f) {
  return ml::with_width<kWidths>(C, [&](auto width) {
    constexpr int KC = decltype(width)::value;
    constexpr auto kernel = &decode_tail_kernel<KC>;  // named first: see window_attention.cuh
    f(std::integral_constant<void (*)(Args), kernel>{}, cluster_ctas(KC), &Layout<KC>::bytes);
  });
}

}  // namespace gs::decode_tail
