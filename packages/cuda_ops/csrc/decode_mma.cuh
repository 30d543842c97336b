// decode_mma.cuh: decode_linear (decode.h's formula) for many rows at once on tensor cores, in
// bfloat16: the slide window's step of generation, which re-runs block_size rows through every
// matrix of the model for each new token (gptstack.model.fused_step.window).
//
// There the matrices are small (256 x 384 x 1,152 at shakespeare-char: 75 MFLOP) and the step
// is a chain of dependent launches, so what counts is latency, not FLOP/s. cuBLAS took ~3.5 us a
// matmul, with the LayerNorm, residual add and GELU around it as kernels of their own
// (benchmarks/profiles/profile-decode-shakespeare-char-gptstack-h200-20261204.txt). This kernel
// does the whole of out = act(LN?(x) W^T + b) + residual in one launch:
//   - one CTA of 4 warps (2 x 2) per 32-row x (16 * NT)-column tile of out, each warp a 16 x 8NT
//     slice by mma.m16n8k16 (bf16 in, fp32 accumulate; attention_mma.cuh's fragment layouts);
//   - the whole K extent of both operands in shared memory (rows padded by 16 bytes so the 8 rows
//     an ldmatrix reads fall in 8 different bank groups): no k pipeline, one wait;
//   - the CTA's weight rows are requested (cp.async) *before* pdl_wait, so under programmatic
//     dependent launch they travel while the kernel before is finishing; x comes after the wait;
//   - a LayerNorm of each x row (two passes over shared memory, mean then centred squares, as
//     decode_linear's other kernels) is applied in place and rounded to bf16, the mma's input;
//   - bias, GELU and the residual are added to the fp32 accumulators, and out rounded once.
// So it differs from the one-row kernel (decode.cu) only by that bf16 rounding of the normalized
// row, which is what the window's LayerNorm kernel followed by a matmul did before.
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/decode_mma_check.cpp, run by tests/test_decode.py).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_mma.cuh"
#include "gelu_tanh.cuh"

#ifdef GS_ATTN_EMULATE
namespace gs {
inline void pdl_launch_dependents() {}  // the emulator runs one kernel at a time
inline void pdl_wait() {}
}  // namespace gs
#else
#include "cuda_common.cuh"
#endif

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

constexpr int kThreads = 128;  // 4 warps, 2 along the rows x 2 along the columns
constexpr int kRows = 32;      // rows of out per CTA

// NT 8-column mma tiles per warp: 4 (64 columns a CTA) while both operands' K extent fits
// shared memory twice per SM, else 2 (32 columns)
template <int NT> constexpr int cols() { return 2 * 8 * NT; }
constexpr int64_t pitch(int64_t K) { return K + 8; }  // elements; K % 16 == 0
template <int NT> constexpr int64_t shared_bytes(int64_t K) {
  return (kRows + cols<NT>()) * pitch(K) * 2;
}

__device__ __forceinline__ float bf16_bits(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

template <int NT>
__global__ void __launch_bounds__(kThreads) decode_linear_mma_kernel(const Args a) {
  constexpr int kCols = cols<NT>();
  GS_DYNAMIC_SHARED(smem);
  const int P = static_cast<int>(pitch(a.K)), chunks = a.K / 8;  // 16-byte chunks per row
  uint16_t* x_s = reinterpret_cast<uint16_t*>(smem);  // [kRows][P]
  uint16_t* w_s = x_s + kRows * P;                    // [kCols][P]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int r0 = blockIdx.y * kRows, n0 = blockIdx.x * kCols;

  pdl_launch_dependents();
  // the weights do not depend on the kernel before: on their way before waiting for it
  for (int c = tid; c < kCols * chunks; c += kThreads) {
    const int r = c / chunks, ch = c % chunks;
    const bool ok = n0 + r < a.N;
    cp_async_16(w_s + r * P + ch * 8, a.w + int64_t(ok ? n0 + r : 0) * a.K + ch * 8, ok ? 16 : 0);
  }
  cp_async_commit();
  pdl_wait();  // x and residual are the previous kernel's output
  for (int c = tid; c < kRows * chunks; c += kThreads) {
    const int r = c / chunks, ch = c % chunks;
    const bool ok = r0 + r < a.R;
    cp_async_16(x_s + r * P + ch * 8, a.x + int64_t(ok ? r0 + r : 0) * a.K + ch * 8, ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  if (a.ln_w) {  // each warp normalizes rows warp, warp + 4, ... in place, two columns a lane
    for (int r = warp; r < kRows; r += kThreads / 32) {
      uint32_t* row = reinterpret_cast<uint32_t*>(x_s + r * P);
      float s = 0.0f;
      for (int k2 = lane; k2 < a.K / 2; k2 += 32) {
        const uint32_t v = lds(row + k2);
        s += bf16_lo(v) + bf16_hi(v);
      }
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      const float mean = s / a.K;
      float ss = 0.0f;
      for (int k2 = lane; k2 < a.K / 2; k2 += 32) {
        const uint32_t v = lds(row + k2);
        const float d0 = bf16_lo(v) - mean, d1 = bf16_hi(v) - mean;
        ss += d0 * d0 + d1 * d1;
      }
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float rstd = 1.0f / sqrtf(ss / a.K + a.eps);
      for (int k2 = lane; k2 < a.K / 2; k2 += 32) {
        const uint32_t v = lds(row + k2);
        const int k = 2 * k2;
        const float b0 = a.ln_b ? bf16_bits(a.ln_b[k]) : 0.0f;
        const float b1 = a.ln_b ? bf16_bits(a.ln_b[k + 1]) : 0.0f;
        sts(row + k2, pack_bf16((bf16_lo(v) - mean) * rstd * bf16_bits(a.ln_w[k]) + b0,
                                (bf16_hi(v) - mean) * rstd * bf16_bits(a.ln_w[k + 1]) + b1));
      }
    }
    __syncthreads();
  }

  // out tile = x_s (16 rows of this warp) times w_s (8NT rows of this warp)^T
  const int wm = warp / 2, wn = warp % 2;
  const uint16_t* a_s = x_s + wm * 16 * P;
  const uint16_t* b_s = w_s + wn * 8 * NT * P;
  float acc[NT][4] = {};
  for (int kk = 0; kk < a.K / 16; ++kk) {
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

  // epilogue: accumulator (nt, 2 hh + e) is row g + 8 hh, column nt * 8 + 2 t + e of the slice
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = r0 + wm * 16 + g + 8 * hh;
      const int col = n0 + wn * 8 * NT + nt * 8 + 2 * t;
      if (row >= a.R) continue;
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = col + e;
        v[e] = acc[nt][2 * hh + e];
        if (c >= a.N) continue;
        if (a.b) v[e] += bf16_bits(a.b[c]);
        if (a.gelu) v[e] = gelu_tanh_f(v[e]);
        if (a.residual) v[e] += bf16_bits(a.residual[int64_t(row) * a.N + c]);
      }
      const uint32_t packed = pack_bf16(v[0], v[1]);
      uint16_t* o = a.out + int64_t(row) * a.N + col;
      if (col + 1 < a.N && a.N % 2 == 0) {
        *reinterpret_cast<uint32_t*>(o) = packed;  // 4-byte aligned: N and col are even
      } else {
        if (col < a.N) o[0] = static_cast<uint16_t>(packed);
        if (col + 1 < a.N) o[1] = static_cast<uint16_t>(packed >> 16);
      }
    }
}

}  // namespace gs::mma_linear
