// attention_wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the attention
// kernels (attention_forward_wgmma.cuh). The 128 threads of a warpgroup (4 warps) multiply a
// 64 x 16 A by a 16 x N B into a 64 x N fp32 accumulator spread over their registers, warp w
// holding rows 16w..16w+15 in mma.m16n8k16's C layout repeated over N / 8 column blocks
// (attention_mma.cuh): float d[N / 8][4] per thread, as the mma.sync kernels keep theirs. A
// comes from shared memory (a descriptor) or from registers (mma.m16n8k16's A layout, per
// warp); B always from shared memory. The instruction is asynchronous: issued after a
// wgmma.fence, committed as a group and waited for (wgmma_wait); until then neither the
// accumulators nor A's registers may be touched (fence_tile keeps the compiler from doing so),
// and shared memory written by ordinary stores or cp.async must be published to the async proxy
// first (fence_proxy_async by the writers, then a barrier). PTX ISA 8.x, "Asynchronous
// Warpgroup Level Matrix Multiply-Accumulate". Built with GS_ATTN_EMULATE the same calls go to
// the host emulator (attention_emu/emu.h), which checks those rules.
//
// Shared-memory operands use the canonical layout without swizzling: 8 x 8 core matrices of 128
// contiguous bytes (8 rows of 16 bytes). smem_desc(p, lbo, sbo): LBO is the byte distance of
// neighbouring core matrices along K, SBO along M/N, for both K-major operands (16-byte rows run
// along K) and MN-major ones (kTransB = 1: rows run along N).
#pragma once

#include <cstdint>

#include "attention_mma.cuh"

// wgmma exists in the sm_90a device pass only; elsewhere the kernels that use it must not run
#if defined(GS_ATTN_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GS_WGMMA 1
#endif

namespace gs::attn {

__device__ __forceinline__ void fence_proxy_async() {
#ifdef GS_ATTN_EMULATE
  emu::fence_proxy_async();
#elif defined(GS_WGMMA)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef GS_ATTN_EMULATE
  emu::wgmma_fence();
#elif defined(GS_WGMMA)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef GS_ATTN_EMULATE
  emu::wgmma_commit();
#elif defined(GS_WGMMA)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Wait until at most N of this thread's committed wgmma groups are still in flight.
template <int N> __device__ __forceinline__ void wgmma_wait() {
#ifdef GS_ATTN_EMULATE
  emu::wgmma_wait(N);
#elif defined(GS_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// An empty asm that "writes" each register: the compiler may not move reads of a wgmma's
// accumulators (or reuse its A registers) across it, so put it after the wait
template <int R> __device__ __forceinline__ void fence_tile(float (&x)[R][4]) {
#ifndef GS_ATTN_EMULATE
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(x[i][j])::"memory");
#endif
}
template <int R> __device__ __forceinline__ void fence_tile(uint32_t (&x)[R][4]) {
#ifndef GS_ATTN_EMULATE
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(x[i][j])::"memory");
#endif
}

// The matrix descriptor of a shared-memory operand at p (16-byte aligned), no swizzling: core
// matrices lbo bytes apart along K and sbo along M/N, K-major and N-major alike (the PTX ISA's
// canonical layouts; the probe of scripts/attention_variants.cu matched them on an H100).
// Adding n to it moves the start by 16 n bytes.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
#ifdef GS_ATTN_EMULATE
  const uint32_t addr = static_cast<uint32_t>(emu::smem_offset(p, 16, 16));
#else
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16 |
         static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
}

// smem_desc with 128-byte swizzling (the canonical layouts' Swizzle<3,4,3>: within each
// 1,024-byte atom of eight 128-byte rows, 16-byte chunk c of row r lies at chunk c ^ (r % 8)),
// for a tile whose row is 64 bf16: K-major, the next 8 rows SBO = 1,024 bytes on (LBO unused);
// N-major, the next 8 rows along K SBO = 1,024 bytes on (LBO, the next 64 columns, unused).
// The atoms must start 1,024-byte aligned in the shared window (align_1024).
__device__ __forceinline__ uint64_t sw128_desc(const void* p) {
  return smem_desc(p, 16, 1024) | (uint64_t{1} << 62);
}

// p rounded up to the next 1,024-byte boundary of the shared window (the swizzle atoms'); a
// kernel that uses it allocates 1,024 bytes more
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) {
#ifdef GS_ATTN_EMULATE
  const uint32_t addr = static_cast<uint32_t>(emu::smem_offset(p, 1, 1));
#else
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
  return p + ((1024 - addr % 1024) % 1024);
}

#if defined(GS_WGMMA) && !defined(GS_ATTN_EMULATE)
template <int N> struct Wgmma;
template <> struct Wgmma<32> {
  template <int kTransB>
  static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, %16, %17, p, 1, 1, 0, %19;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(scale_d), "n"(kTransB));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, {%16,%17,%18,%19}, %20, p, 1, 1, %22;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(kTransB));
  }
};
template <> struct Wgmma<64> {
  template <int kTransB>
  static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, %32, %33, p, 1, 1, 0, %35;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(scale_d), "n"(kTransB));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(kTransB));
  }
};
template <> struct Wgmma<128> {
  template <int kTransB>
  static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
        ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
        : "l"(a), "l"(b), "r"(scale_d), "n"(kTransB));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
        ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(kTransB));
  }
};
#endif

// d (64 x N) = A B + (scale_d ? d : 0), A and B from shared memory (A K-major; B K-major, or
// N-major with kTransB = 1).
template <int N, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b,
                                         bool scale_d) {
#ifdef GS_ATTN_EMULATE
  emu::wgmma_issue({&d[0][0], N, nullptr, a, b, kTransB == 1, scale_d});
#elif defined(GS_WGMMA)
  Wgmma<N>::template ss<kTransB>(&d[0][0], a, b, scale_d ? 1 : 0);
#else
  __trap();  // a kernel with wgmma launched on a build without sm_90a code
#endif
}
// The same with A from this warp's registers (mma.m16n8k16's A fragment of its 16 rows)
template <int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                         uint64_t b, bool scale_d) {
#ifdef GS_ATTN_EMULATE
  emu::wgmma_issue({&d[0][0], N, a, 0, b, kTransB == 1, scale_d});
#elif defined(GS_WGMMA)
  Wgmma<N>::template rs<kTransB>(&d[0][0], a, b, scale_d ? 1 : 0);
#else
  __trap();
#endif
}

}  // namespace gs::attn
