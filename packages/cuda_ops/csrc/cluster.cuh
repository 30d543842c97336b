// cluster.cuh: thread-block cluster primitives (sm_90 and newer; CUDA C++ Programming Guide,
// "Thread Block Clusters" and "Distributed Shared Memory"; PTX ISA barrier.cluster, mapa,
// ld.shared::cluster): the CTA's rank in its cluster, the cluster barrier as a split arrive /
// wait, and 16-byte loads of another CTA's shared memory. Used by decode_blocks.cu and
// window_mlp.cuh. GS_CLUSTERS is defined where they exist: the host pass, sm_90+ device passes,
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
inline uint4 load_cluster_u4(const void* local, int rank) {
  uint4 v;
  emu::cluster_load(&v, local, rank, sizeof v);
  return v;
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
// the 16 bytes at the shared-memory address `local` has in this CTA, read from CTA `rank`'s
// shared memory (16-byte aligned)
__device__ __forceinline__ uint4 load_cluster_u4(const void* local, int rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(local)), "r"(rank));
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}
}  // namespace gs
#endif
