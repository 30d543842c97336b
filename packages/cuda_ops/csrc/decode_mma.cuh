// decode_mma.cuh: decode_linear (decode.h's formula) for many rows at once on tensor cores, in
// bfloat16: the slide window's step of generation, which re-runs block_size rows through every
// matrix of the model for each new token (gptstack.model.fused_step.window).
//
// There the matrices are small (256 x 384 x 1,152 at shakespeare-char: 75 MFLOP) and the step
// is a chain of dependent launches, so what counts is latency, not FLOP/s. cuBLAS took ~3.5 us a
// matmul, with the LayerNorm, residual add and GELU around it as kernels of their own
// (benchmarks/profiles/profile-decode-shakespeare-char-gptstack-h200-20261204.txt). This kernel
// does the whole of out = act(LN?(x) W^T + b) + residual in one launch:
//   - one CTA of 8 warps per 32-row x (16 * NT)-column tile of out: all 8 copy and normalize,
//     4 of them (2 x 2) multiply, each a 16 x 8NT slice by mma.m16n8k16 (bf16 in, fp32
//     accumulate; attention_mma.cuh's fragment layouts);
//   - the whole K extent of both operands in shared memory (rows padded by 16 bytes so the 8 rows
//     an ldmatrix reads fall in 8 different bank groups): no k pipeline, one wait;
//   - the CTA's weight rows are requested (cp.async) *before* pdl_wait, so under programmatic
//     dependent launch they travel while the kernel before is finishing; x comes after the wait;
//   - the LayerNorm's weight and bias and the CTA's slice of the bias are copied into shared
//     memory before that wait too (loading them per element from global memory inside the
//     LayerNorm loop made the first version ~3x slower than cuBLAS: one L2 round trip each);
//   - the residual's loads go out right after the wait, into registers, while x arrives;
//   - a LayerNorm of each x row (a warp a row, each warp's 4 rows side by side so their
//     shuffles overlap; two passes over shared memory: mean, then centred squares, as
//     decode_linear's other kernels) is applied in place and rounded to bf16, the mma's input;
//   - bias, GELU and the residual are added to the fp32 accumulators, and out rounded once.
// So it differs from the one-row kernel (decode.cu) by that bf16 rounding of the normalized row
// (what the window's LayerNorm kernel followed by a matmul does too) and the order of its sums.
//
// Where it wins (H100, 2026-12-06; gptstack.model.fused_step.WINDOW_ROWS): at esp32's window of
// 64 rows, 2.5-3.9 us a matrix in a chain of dependent calls against 4.1-6.7 us for cuBLAS
// with the LayerNorm or GELU kernel beside it (scripts/window_linear_bench.py), 8,919 vs 8,558
// tok/s end to end. Not at shakespeare-char's 256 rows: each CTA reads its weight slice and
// x tile from L2 for a 32 x 64 tile, ~10 MB a matrix, 7.2 vs 5.7 us at c_attn; bigger tiles
// need a k pipeline (the whole K extent does not fit shared memory twice at K = 1,536).
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/decode_mma_check.cpp, run by tests/test_decode.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attention_mma.cuh"
#include "gelu_tanh.cuh"

namespace gs::mma_linear {

using namespace gs::attn;

struct Args {
  uint16_t* out;              // (R, N) bf16 bits
  const uint16_t* x;          // (R, K)
  const uint16_t* w;          // (N, K)
  const uint16_t* b;          // (N,) or null
  const uint16_t* ln_w;       // (K,) or null: no LayerNorm
  const uint16_t* ln_b;       // (K,) or null
  const uint16_t* residual;   // (R, N) or null
  int R, N, K;
  float eps;
  bool gelu;
};

// 8 warps copy the operands and normalize the rows; the first 4 (2 along the rows x 2 along the
// columns) multiply. One CTA of 4 warps issued ~2,300 instructions a warp at esp32's c_attn (by
// its issue rate under ncu: the copies' divisions, a quad's serial LayerNorm over a quarter row)
// with one warp a scheduler to hide their latencies: 8.1 us where cuBLAS took 4.5
// (benchmarks/profiles/ncu-window-h100-20261206-c6c9409.txt).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMmaWarps = 4;
constexpr int kRows = 32;  // rows of out per CTA
constexpr int kRowsPerWarp = kRows / kWarps;  // the rows a warp normalizes
// The widths K the kernel is compiled for as constants (C and 4C of the esp32, shakespeare-char
// and gpt2-124m presets; 3,072 is past kDecodeMmaMaxK); any other K runs the generic kernel
constexpr int kFixedWidths[] = {256, 384, 768, 1024, 1536};

// NT 8-column mma tiles per mma warp: 4 (64 columns a CTA) while both operands' K extent fits
// shared memory twice per SM, else 2 (32 columns)
template <int NT> constexpr int cols() { return 2 * 8 * NT; }
constexpr int64_t pitch(int64_t K) { return K + 8; }  // elements; K % 16 == 0
// x rows, weight rows, then the LayerNorm weight and bias (K each) and the CTA's bias (bf16)
template <int NT> constexpr int64_t shared_bytes(int64_t K) {
  return ((kRows + cols<NT>()) * pitch(K) + 2 * K + cols<NT>()) * 2;
}

__device__ __forceinline__ float bf16_bits(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
// 8 bf16 of a 16-byte chunk as floats
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) f[2 * i] = bf16_lo(w[i]), f[2 * i + 1] = bf16_hi(w[i]);
}
// A value the kernel before wrote, as bf16 bits (cuda_common.cuh's load_produced; a plain read
// under the emulator)
__device__ __forceinline__ uint16_t load_bits_produced(const uint16_t* p) {
#ifdef GS_ATTN_EMULATE
  return *p;
#else
  return load_produced(reinterpret_cast<const unsigned short*>(p));
#endif
}
// Two adjacent values the kernel before wrote, 4-byte aligned, as one word
__device__ __forceinline__ uint32_t load_pair_produced(const uint16_t* p) {
#ifdef GS_ATTN_EMULATE
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return load_produced(reinterpret_cast<const unsigned int*>(p));
#endif
}
// The sum over the warp of each of N values, the rows' butterflies interleaved
template <int N> __device__ __forceinline__ void warp_sums(float (&v)[N]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
}

// rows [0, Rows) of a (Rows, K) bf16 matrix at src (row r past `valid` zero-filled) into the
// shared rows of pitch P at dst: warp w copies rows w, w + kWarps, ..., its lanes 16-byte
// chunks. Loops of fixed counts, so that with K a constant they unroll into bare copies.
// (stride: src's row stride in elements where it is not K: a K-wide slice of wider rows)
template <int Rows>
__device__ __forceinline__ void copy_rows(uint16_t* dst, const uint16_t* src, int valid, int K,
                                          int P, int warp, int lane, int64_t stride = 0) {
  static_assert(Rows % kWarps == 0, "copy_rows: whole rows a warp");
  const int chunks = K / 8, per_lane = (chunks + 31) / 32;
#pragma unroll
  for (int i = 0; i < Rows / kWarps; ++i) {
    const int r = warp + i * kWarps;
    const bool ok = r < valid;
    const uint16_t* s = src + (ok ? r : 0) * (stride ? stride : K);
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      const int ch = lane + 32 * j;
      if (ch < chunks) cp_async_16(dst + r * P + ch * 8, s + ch * 8, ok ? 16 : 0);
    }
  }
}

// The LayerNorm's weight and bias (K each; ln_b null: zeros) into shared memory, by every
// thread of the CTA: as copies in flight (cp.async, committed by the caller) where both are
// 16-byte aligned, else element by element. Weights: nothing the kernel before writes.
__device__ __forceinline__ void copy_layernorm_params(uint16_t* lnw_s, uint16_t* lnb_s,
                                                      const uint16_t* ln_w, const uint16_t* ln_b,
                                                      int K, int tid) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int chunks = K / 8;
  if (aligned(ln_w) && (!ln_b || aligned(ln_b))) {
    const int per_thread = (chunks + kThreads - 1) / kThreads;
#pragma unroll
    for (int j = 0; j < per_thread; ++j) {
      const int ch = tid + kThreads * j;
      if (ch >= chunks) break;
      cp_async_16(lnw_s + ch * 8, ln_w + ch * 8, 16);
      cp_async_16(lnb_s + ch * 8, (ln_b ? ln_b : ln_w) + ch * 8, ln_b ? 16 : 0);
    }
  } else {
    for (int k = tid; k < K; k += kThreads) {
      sts(lnw_s + k, ln_w[k]);
      sts(lnb_s + k, ln_b ? ln_b[k] : uint16_t(0));
    }
  }
}

// LayerNorm of the bf16 rows w, w + kWarps, ..., w + (RowsPerWarp - 1) kWarps of x_s (pitch P,
// K columns) for each warp w, in place, rounded to bf16 (the mma's input): a warp a row, its
// lanes 16-byte chunks, each warp's rows side by side so that their shuffles overlap; two
// passes over shared memory (mean, then centred squares) as decode_linear's other kernels.
// lnw_s, lnb_s: the LayerNorm's weight and bias in shared memory. A row's result does not
// depend on RowsPerWarp (the same sums in the same order).
template <int RowsPerWarp>
__device__ __forceinline__ void layernorm_rows(uint16_t* x_s, int P, int K, const uint16_t* lnw_s,
                                               const uint16_t* lnb_s, float eps, int warp,
                                               int lane) {
  const int chunks = K / 8;
  uint16_t* rows[RowsPerWarp];
#pragma unroll
  for (int i = 0; i < RowsPerWarp; ++i) rows[i] = x_s + (warp + i * kWarps) * P;
  float mean[RowsPerWarp] = {}, rstd[RowsPerWarp] = {};
  const int per_lane = (chunks + 31) / 32;
  // visit(i, f): the 8 values f of each 16-byte chunk this lane holds of each row i
  auto each_chunk = [&](auto&& visit) {
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      const int ch = lane + 32 * j;
      if (ch >= chunks) break;
#pragma unroll
      for (int i = 0; i < RowsPerWarp; ++i) {
        float f[8];
        unpack8(lds(reinterpret_cast<const uint4*>(rows[i] + ch * 8)), f);
        visit(i, f);
      }
    }
  };
  each_chunk([&](int i, const float (&f)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) mean[i] += f[e];
  });
  warp_sums(mean);
  const float inv_k = 1.0f / K;
#pragma unroll
  for (int i = 0; i < RowsPerWarp; ++i) mean[i] *= inv_k;
  each_chunk([&](int i, const float (&f)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) rstd[i] += (f[e] - mean[i]) * (f[e] - mean[i]);
  });
  warp_sums(rstd);
  float shift[RowsPerWarp];  // (f - mean) * rstd = f * rstd + shift
#pragma unroll
  for (int i = 0; i < RowsPerWarp; ++i) {
    rstd[i] = rsqrtf(rstd[i] * inv_k + eps);
    shift[i] = -mean[i] * rstd[i];
  }
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    const int ch = lane + 32 * j;
    if (ch >= chunks) break;
    float lw[8], lb[8];
    unpack8(lds(reinterpret_cast<const uint4*>(lnw_s + ch * 8)), lw);
    unpack8(lds(reinterpret_cast<const uint4*>(lnb_s + ch * 8)), lb);
#pragma unroll
    for (int i = 0; i < RowsPerWarp; ++i) {
      float f[8];
      unpack8(lds(reinterpret_cast<const uint4*>(rows[i] + ch * 8)), f);
      uint32_t o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[e] = pack_bf16(fmaf(fmaf(f[2 * e], rstd[i], shift[i]), lw[2 * e], lb[2 * e]),
                         fmaf(fmaf(f[2 * e + 1], rstd[i], shift[i]), lw[2 * e + 1],
                              lb[2 * e + 1]));
      sts(reinterpret_cast<uint4*>(rows[i] + ch * 8), uint4{o[0], o[1], o[2], o[3]});
    }
  }
}

// acc (16 x 8NT, fp32) += a_s (16 rows) times b_s (8NT rows)^T over K columns, both bf16 rows
// in shared memory of pitch P: k ascending, so each output's sum has one order whatever the
// tiling around it (mma.m16n8k16, attention_mma.cuh's fragment layouts)
template <int NT>
__device__ __forceinline__ void mma_rows_k(float (&acc)[NT][4], const uint16_t* a_s,
                                           const uint16_t* b_s, int K, int P, int lane) {
  static_assert(NT % 2 == 0, "mma_rows_k: ldmatrix_x4 loads two 8-column tiles at once");
#pragma unroll 4
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a_s + (((lane >> 3) & 1) * 8 + (lane & 7)) * P + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_s + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * P + kk * 16 +
                          ((lane >> 3) & 1) * 8);
      mma_bf16(acc[2 * np], af, bf[0], bf[1]);
      mma_bf16(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// f(nt, hh, r, c) for each accumulator pair of a warp's 16 x 8NT mma tile: acc[nt][2 hh] and
// acc[nt][2 hh + 1] are row r = g + 8 hh, columns c and c + 1 (c = 8 nt + 2 t) of the tile
// (attention_mma.cuh's C fragment layout)
template <int NT, typename F> __device__ __forceinline__ void each_acc_pair(int lane, F&& f) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) f(nt, hh, g + 8 * hh, nt * 8 + 2 * t);
}

// decode_linear's epilogue of one output, in its order: the bias, the GELU, the residual (zeros
// where absent: + 0 keeps every kernel that calls this at decode_linear's bits, signed zeros
// included)
__device__ __forceinline__ float linear_epilogue(float acc, uint16_t bias, bool gelu,
                                                 float residual) {
  float v = acc + bf16_bits(bias);
  if (gelu) v = gelu_tanh_f(v);
  return v + residual;
}

// KC: K as a compile-time constant (the widths of the project's presets, kFixedWidths), or 0
// for any K. With K known the copies, the LayerNorm's loops and the addresses compile to a few
// instructions each: the runtime-K kernel executed ~1,500 instructions a warp at esp32's c_attn,
// ~1,000 of them after the dependency wait, each a dependent step of ~5 cycles with two warps
// a scheduler (benchmarks/profiles/ncu-window-source-h100-20261206-e8a5792.csv.gz).
template <int NT, int KC = 0>
__global__ void __launch_bounds__(kThreads) decode_linear_mma_kernel(const Args a) {
  constexpr int kCols = cols<NT>();
  GS_DYNAMIC_SHARED(smem);
  const int K = KC ? KC : a.K, P = static_cast<int>(pitch(K));
  uint16_t* x_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* w_s = x_s + kRows * P;                    // [kCols][P]
  uint16_t* lnw_s = w_s + kCols * P;                  // [K]
  uint16_t* lnb_s = lnw_s + K;                        // [K]
  uint16_t* b_s = lnb_s + K;                          // [kCols]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int r0 = blockIdx.y * kRows, n0 = blockIdx.x * kCols;
  const int wm = warp / 2, wn = warp % 2;  // of the mma warps

  pdl_launch_dependents();
  // Nothing of the weights depends on the kernel before: all of it is on its way (or, for
  // the small vectors, in shared memory) before waiting for that kernel.
  copy_rows<kCols>(w_s, a.w + int64_t(n0) * K, a.N - n0, K, P, warp, lane);
  if (a.ln_w) copy_layernorm_params(lnw_s, lnb_s, a.ln_w, a.ln_b, K, tid);
  cp_async_commit();
  for (int c = tid; c < kCols; c += kThreads)
    sts(b_s + c, a.b && n0 + c < a.N ? a.b[n0 + c] : uint16_t(0));
  pdl_wait();  // x and residual are the previous kernel's output
  copy_rows<kRows>(x_s, a.x + int64_t(r0) * K, a.R - r0, K, P, warp, lane);
  cp_async_commit();
  // the residual's loads go out now and land in registers during the products
  // res[nt][hh]: the residual's pair of row g + 8 hh, columns nt * 8 + 2 t + {0, 1} of the slice
  // (low, high half), as raw bf16 bits: every load is issued here, none waited for before the
  // epilogue (converted where it is consumed, a use right after each load held the next back)
  uint32_t res[NT][2] = {};
  if (a.residual && warp < kMmaWarps) {
    const bool pairs = a.N % 2 == 0 && reinterpret_cast<uintptr_t>(a.residual) % 4 == 0;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = r0 + wm * 16 + g + 8 * hh;
      const uint16_t* rr = a.residual + int64_t(row < a.R ? row : 0) * a.N;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = n0 + wn * 8 * NT + nt * 8 + 2 * t;
        if (row >= a.R) continue;
        if (pairs) {  // N even: col + 1 < N whenever col < N
          if (col < a.N) res[nt][hh] = load_pair_produced(rr + col);
        } else {
          const uint32_t lo = col < a.N ? load_bits_produced(rr + col) : 0u;
          const uint32_t hi = col + 1 < a.N ? load_bits_produced(rr + col + 1) : 0u;
          res[nt][hh] = lo | (hi << 16);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  if (a.ln_w) {
    layernorm_rows<kRowsPerWarp>(x_s, P, K, lnw_s, lnb_s, a.eps, warp, lane);
    __syncthreads();
  }
  if (warp >= kMmaWarps) return;

  float acc[NT][4] = {};  // x_s's 16 rows of this warp times w_s's 8NT rows of this warp
  mma_rows_k<NT>(acc, x_s + wm * 16 * P, w_s + wn * 8 * NT * P, K, P, lane);

  each_acc_pair<NT>(lane, [&](int nt, int hh, int r, int c) {
    const int row = r0 + wm * 16 + r;
    const int cl = wn * 8 * NT + c, col = n0 + cl;  // in the CTA, in out
    if (row >= a.R) return;
    const uint32_t packed =  // 0 without a bias or a residual
        pack_bf16(linear_epilogue(acc[nt][2 * hh], lds(b_s + cl), a.gelu, bf16_lo(res[nt][hh])),
                  linear_epilogue(acc[nt][2 * hh + 1], lds(b_s + cl + 1), a.gelu,
                                  bf16_hi(res[nt][hh])));
    uint16_t* o = a.out + int64_t(row) * a.N + col;
    if (col + 1 < a.N && a.N % 2 == 0) {
      *reinterpret_cast<uint32_t*>(o) = packed;  // 4-byte aligned: N and col are even
    } else {
      if (col < a.N) o[0] = static_cast<uint16_t>(packed);
      if (col + 1 < a.N) o[1] = static_cast<uint16_t>(packed >> 16);
    }
  });
}

// f(std::integral_constant<int, W>{}) for the width W of the constant array kWidths that equals
// n (the instances a kernel is compiled for); false where none does. The dispatch of the
// kernels compiled per width (decode_split.cuh, decode_tail.cuh, window_mlp.cuh).
template <const auto& kWidths, int I = 0, typename F> bool with_width(int n, F&& f) {
  constexpr int kCount = sizeof(kWidths) / sizeof(kWidths[0]);
  if constexpr (I < kCount) {
    constexpr int W = kWidths[I];
    if (n != W) return with_width<kWidths, I + 1>(n, f);
    f(std::integral_constant<int, W>{});
    return true;
  } else {
    return false;
  }
}

// f(kernel) with the instance of decode_linear_mma_kernel<NT> that runs width K: the fixed-width
// one where K is in kFixedWidths, else the generic one. kernel is a std::integral_constant
// holding the kernel's address, a type of its own per instance (so a launcher's function-local
// static, LaunchCheck's, is per instance); decode.cu and the emulator's check both dispatch so.
template <int NT, int I = 0, typename F>
void with_kernel_for(int K, F&& f) {
  constexpr int kCount = sizeof(kFixedWidths) / sizeof(kFixedWidths[0]);
  if constexpr (I < kCount) {
    constexpr int KC = kFixedWidths[I];
    if (K == KC)
      return f(std::integral_constant<void (*)(Args), &decode_linear_mma_kernel<NT, KC>>{});
    return with_kernel_for<NT, I + 1>(K, f);
  } else {
    return f(std::integral_constant<void (*)(Args), &decode_linear_mma_kernel<NT, 0>>{});
  }
}

}  // namespace gs::mma_linear
