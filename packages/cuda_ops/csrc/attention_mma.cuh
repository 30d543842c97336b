// attention_mma.cuh: the warp-level building blocks of the bf16 attention kernels: tensor-core
// mma.sync, ldmatrix, cp.async, bf16 packing, fast exp2. Each is one PTX instruction on the GPU
// (PTX ISA 8.x, "Warp-level matrix instructions" and "cp.async"); built with GS_ATTN_EMULATE the
// same calls go to the host warp emulator (attention_emu/emu.h), which runs the kernels on a CPU
// in tests with these exact fragment layouts.
//
// mma.m16n8k16 fragment layouts (bf16 in, fp32 accumulate), lane = 4 * g + t (g = lane / 4):
//   A 16x16 (row-major): a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)
//                        a[2] = (g, 2t+8..)    a[3] = (g+8, 2t+8..)
//   B 16x8  (k x n):     b[0] = (k 2t..2t+1, n g)  b[1] = (k 2t+8..2t+9, n g)
//   C 16x8  (fp32):      c[0], c[1] = (g, 2t), (g, 2t+1)   c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// So the accumulators of two neighbouring n-tiles, packed to bf16 pairs, are exactly the A
// fragment of a 16 x 16 slice (FlashAttention-2's register reuse of P for P V).
#pragma once

#include <cstdint>

#ifdef GS_ATTN_EMULATE
#include "attention_emu/emu.h"
namespace gs {  // programmatic dependent launch (cuda_common.cuh): the emulator runs one kernel
inline void pdl_launch_dependents() {}  // at a time
inline void pdl_wait() {}
}  // namespace gs
#else
#include <cuda_bf16.h>

#include "cuda_common.cuh"  // pdl_launch_dependents, pdl_wait
#endif

// The kernel's dynamic shared memory (16-byte aligned; its size is given at launch).
#ifdef GS_ATTN_EMULATE
#define GS_DYNAMIC_SHARED(name) unsigned char* name = ::emu::dynamic_shared()
#else
#define GS_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace gs::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// d += a * b on the tensor cores.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef GS_ATTN_EMULATE
  emu::mma_m16n8k16_bf16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Four 8x8 b16 matrices from shared memory; lanes 8m..8m+7 give the row addresses of matrix m,
// and lane l receives row l/4, columns 2(l%4)..+1 of each (.trans: column l/4, rows 2(l%4)..+1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* smem_row) {
#ifdef GS_ATTN_EMULATE
  emu::ldmatrix_x4(r, smem_row, false);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* smem_row) {
#ifdef GS_ATTN_EMULATE
  emu::ldmatrix_x4(r, smem_row, true);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

// Asynchronous global -> shared copy of 16 bytes (4 with cp_async_4); src_bytes < size zero-fills
// the rest (src_bytes = 0: nothing is read, the destination becomes zeros).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
#ifdef GS_ATTN_EMULATE
  emu::cp_async(smem, gmem, 16, src_bytes);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, int src_bytes) {
#ifdef GS_ATTN_EMULATE
  emu::cp_async(smem, gmem, 4, src_bytes);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(addr), "l"(gmem),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef GS_ATTN_EMULATE
  emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef GS_ATTN_EMULATE
  emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Plain shared-memory accesses outside ldmatrix/cp.async (the emulator checks them for races).
template <typename T> __device__ __forceinline__ T lds(const T* p) {
#ifdef GS_ATTN_EMULATE
  emu::shared_access(p, sizeof(T), false);
#endif
  return *p;
}
template <typename T> __device__ __forceinline__ void sts(T* p, T v) {
#ifdef GS_ATTN_EMULATE
  emu::shared_access(p, sizeof(T), true);
#endif
  *p = v;
}

// Two floats -> one register of two bf16, round to nearest even; `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
#ifdef GS_ATTN_EMULATE
  return emu::pack_bf16(lo, hi);
#else
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
#endif
}
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// 2^x by the special-function unit (ex2.approx.ftz: relative error ~2^-22, 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef GS_ATTN_EMULATE
  return emu::exp2_approx(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Copy `rows` rows of hs bf16 (starting at global row `row0`, `rows_valid` of them real) into
// shared memory with row pitch `pitch`, 16 bytes per cp.async; rows past the end become zeros.
template <int ROWS, int HS, int THREADS>
__device__ __forceinline__ void load_rows_async(uint16_t* dst, int pitch, const uint16_t* src,
                                                int64_t row_stride, int rows_valid, int tid) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
#pragma unroll
  for (int c = tid; c < ROWS * kChunks; c += THREADS) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = r < rows_valid;
    cp_async_16(dst + r * pitch + ch * 8, src + (ok ? r : 0) * row_stride + ch * 8, ok ? 16 : 0);
  }
}

// A warp's 16 x HS fp32 accumulator tile, times mul_g (rows g) and mul_g8 (rows g+8), as bf16
// into the warp's own 16 shared-memory rows (`stage`, pitch `pitch`), visible to the whole warp
// on return
template <int HS>
__device__ __forceinline__ void stage_tile_bf16(const float (&acc)[HS / 8][4], float mul_g,
                                                float mul_g8, uint16_t* stage, int pitch,
                                                int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < HS / 8; ++nt) {
    sts(reinterpret_cast<uint32_t*>(stage + g * pitch + nt * 8 + 2 * t),
        pack_bf16(acc[nt][0] * mul_g, acc[nt][1] * mul_g));
    sts(reinterpret_cast<uint32_t*>(stage + (g + 8) * pitch + nt * 8 + 2 * t),
        pack_bf16(acc[nt][2] * mul_g8, acc[nt][3] * mul_g8));
  }
  __syncwarp();
}

// Write a warp's 16 x HS fp32 accumulator tile, times mul_g (rows g) and mul_g8 (rows g+8), to
// global rows as bf16: through the warp's own 16 shared-memory rows (`stage`, pitch `pitch`) so
// that the global stores are 16-byte and whole rows; rows >= rows_valid are not written.
template <int HS>
__device__ __forceinline__ void store_tile_bf16(const float (&acc)[HS / 8][4], float mul_g,
                                                float mul_g8, uint16_t* stage, int pitch,
                                                uint16_t* dst, int64_t row_stride, int rows_valid,
                                                int lane) {
  stage_tile_bf16<HS>(acc, mul_g, mul_g8, stage, pitch, lane);
  constexpr int kChunks = HS / 8;
#pragma unroll
  for (int c = lane; c < 16 * kChunks; c += 32) {
    const int r = c / kChunks, ch = c % kChunks;
    if (r < rows_valid)
      *reinterpret_cast<uint4*>(dst + r * row_stride + ch * 8) =
          lds(reinterpret_cast<const uint4*>(stage + r * pitch + ch * 8));
  }
}

}  // namespace gs::attn
