// cuda_common.cuh: what every .cu file shares. Checked launches (cuda_launch.h), bf16/float
// loads and stores computed in float, warp and block reductions. Only .cu files include it.
//
// Every launcher takes the caller's cudaStream_t (torch's current stream, passed in from
// Python), never allocates and never synchronizes, so launches can be captured in a CUDA graph.
// After each launch it calls check_launch: a failure throws std::runtime_error naming the op,
// the shapes and the CUDA error (nanobind turns it into RuntimeError).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_launch.h"
#include "dtype.h"

namespace gs {

// Element types on the device: float32 stays float, bfloat16 is __nv_bfloat16; both computed
// in float (llm.c's floatX pattern).
template <typename T> struct device_type { using type = T; };
template <> struct device_type<bf16_t> { using type = __nv_bfloat16; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The device side of launch_programmatic (cuda_launch.h): let the next kernel in the stream start
// launching, and wait for the previous one to complete. No-ops below sm_90 and in a kernel
// launched the ordinary way.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Reads of what the kernels before wrote, in a kernel launched as their programmatic dependent:
// through L2 (ld.global.cg). Such a kernel starts while they still run, so a `const __restrict__`
// input the compiler reads by the non-coherent path (ld.global.nc: read-only for the kernel's
// lifetime, which these are not) could come from a line cached before they wrote it: the graph
// decoder's drawn texts differed from run to run once the kernels got faster (2026-12-06).
template <typename T>
__device__ __forceinline__ T load_produced(const T* p) {
  return __ldcg(p);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets
// the total. `shared` holds 32 floats; the leading __syncthreads lets callers reuse it.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace gs
