// cluster.cuh: thread-block cluster primitives (sm_90 and newer; CUDA C++ Programming Guide,
// "Thread Block Clusters" and "Distributed Shared Memory"; PTX ISA barrier.cluster, mapa,
// st.async, mbarrier): the CTA's rank in its cluster, the cluster barrier as a split arrive /
// wait, and 16-byte stores into another CTA's shared memory (st.async) that complete on the
// receiver's mbarrier, so the receiver waits for the bytes it expects instead of
// a cluster barrier (whose release is a GPU-wide memory barrier: MEMBAR.ALL.GPU + ERRBAR in the
// SASS, ~30 % of window_mlp's first version's stall samples under ncu). Used by decode_blocks.cu
// and window_mlp.cuh. GS_CLUSTERS is defined where they exist: the host pass, sm_90+ device passes,
// and GS_ATTN_EMULATE builds, where they go to the warp emulator (attention_emu/emu.h's
// launch_cluster runs a cluster's CTAs together and checks these accesses for races).
#pragma once

#include <cstdint>

#ifdef GS_ATTN_EMULATE
#include "attention_emu/emu.h"
#define GS_CLUSTERS 1

namespace gs {
inline int cluster_rank() { return emu::cluster_rank(); }
inline void cluster_arrive() { emu::cluster_arrive(); }
inline void cluster_wait() { emu::cluster_wait(); }
inline void cluster_arrive_relaxed() { emu::cluster_arrive(); }
inline void mbar_init_expect(uint64_t* bar, unsigned bytes) { emu::mbar_init_expect(bar, bytes); }
inline void fence_mbarrier_init() {}
inline void st_async_u4(void* local, int rank, uint4 v, uint64_t* local_bar) {
  emu::st_async(local, rank, &v, sizeof v, local_bar);
}
template <bool Cluster = true> inline void mbar_wait(uint64_t* bar, unsigned parity) {
  emu::mbar_wait(bar, parity);
}
}  // namespace gs

#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define GS_CLUSTERS 1

namespace gs {
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Every thread of every CTA of the cluster arrives (release: its writes before, including to
// shared memory, become visible to the others' reads after their wait), then waits (acquire).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ int cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ int cluster_size() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return static_cast<int>(r);
}
// barrier.cluster.arrive without release semantics: for a barrier that orders no memory
// accesses of its own (fence_mbarrier_init publishes the mbarriers before it)
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
// An mbarrier in this CTA's shared memory whose phase 0 completes once `bytes` have arrived
// through st_async_u4 (one arrival, this thread's, expecting them)
__device__ __forceinline__ void mbar_init_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cta.b64 _, [%0], %1;"
               ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// the mbarriers initialized by this thread become visible to the cluster's next barrier
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// v into CTA rank's shared memory at the address `local` has in this CTA, completing 16 bytes of
// the transaction count of rank's mbarrier at local_bar's address (16-byte aligned)
__device__ __forceinline__ void st_async_u4(void* local, int rank, uint4 v, uint64_t* local_bar) {
  unsigned remote, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote_bar)
               : "r"(shared_address(local_bar)), "r"(rank));
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
      ::"r"(remote), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
      : "memory");
}
// An mbarrier that completes a phase when one thread has arrived and the bytes it announced
// (bulk_load) have landed; visible to the CTA's threads after the next __syncthreads
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The Hopper bulk copy (cp.async.bulk): bytes from global src into this CTA's shared dst (both
// 16-byte aligned, a multiple of 16 bytes), counted on bar; the calling thread arrives on it.
// Wait with mbar_wait<false>. Used by decode_blocks.cu and cross_entropy.cu.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes,
                                          uint64_t* bar) {
  const unsigned b = shared_address(bar);
  // the phase's reads of dst (generic proxy) come before the copy's writes (async proxy)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes)
               : "memory");
  if (bytes > 0)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(b)
        : "memory");
}
// until the phase of parity `parity` of this CTA's mbarrier has completed, with acquire at
// cluster scope (the other CTAs' st.async bytes are visible after it) or, Cluster = false, at
// CTA scope (enough for this CTA's own bulk copies: decode_blocks)
template <bool Cluster = true>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    if constexpr (Cluster)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
          "selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(shared_address(bar)), "r"(parity)
          : "memory");
    else
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
          "selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(shared_address(bar)), "r"(parity)
          : "memory");
  }
}
}  // namespace gs
#endif
