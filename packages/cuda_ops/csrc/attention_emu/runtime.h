// runtime.h: the few CUDA runtime calls the attention launchers (attention_cuda.cu,
// cuda_launch.h) make, emulated on the host, with the launch rules a GPU enforces, so that a
// launcher that would fail on the device fails here too (check.cpp, case "all"):
//   - a block has at most 1024 threads, a grid at most 65535 blocks along y and z;
//   - a kernel may use at most 48 KiB of dynamic shared memory unless its own limit was raised
//     with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
//     which accepts at most the device's opt-in maximum (227 KiB on the H100/H200: CUDA C++
//     Programming Guide, "Technical Specifications per Compute Capability", 9.0);
//   - a failed launch runs nothing and leaves its error for cudaGetLastError.
// One emulated device at a time (g_device); the limits are per (kernel, device), as on a GPU.
// g_launch_only = true checks launches without running them (the configuration sweep).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "emu.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
};
using cudaStream_t = struct emu_stream*;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
struct cudaFuncAttributes {
  size_t sharedSizeBytes;  // static shared memory: the attention kernels have none
  int maxThreadsPerBlock;
  int numRegs;
  int ptxVersion, binaryVersion;  // g_arch: the emulated build and device
};

namespace emu {

inline int g_device = 0;
inline int g_arch = 90;  // the emulated GPU and build: sm_90a (wgmma runs)
inline int g_smem_optin = 227 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin of an H200
inline bool g_launch_only = false;
inline cudaError_t g_last_error = cudaSuccess;
// (kernel, device) -> its dynamic shared-memory limit, once raised
inline std::map<std::pair<const void*, int>, int> g_smem_limit;
inline long g_launches = 0;  // launches that passed the checks (ran, or would have)

inline int smem_limit(const void* kernel) {
  auto it = g_smem_limit.find({kernel, g_device});
  return it == g_smem_limit.end() ? 48 * 1024 : it->second;
}

inline cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}

// kernel<<<grid, block, smem>>>(args...) with the device's launch checks.
template <typename... P, typename... A>
void launch_checked(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                    const A&... args) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (smem_bytes > static_cast<size_t>(smem_limit(reinterpret_cast<const void*>(kernel)))) {
    set_error(cudaErrorInvalidValue);
    return;
  }
  ++g_launches;
  if (!g_launch_only) launch(kernel, grid, block, smem_bytes, args...);
}

}  // namespace emu

inline cudaError_t cudaGetDevice(int* dev) {
  *dev = emu::g_device;
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  }
  return "unknown error";
}
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  *a = cudaFuncAttributes{0, 1024, 0, emu::g_arch, emu::g_arch};  // registers are not modelled
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int) {
  if (attr != cudaDevAttrMaxSharedMemoryPerBlockOptin) return emu::set_error(cudaErrorInvalidValue);
  *v = emu::g_smem_optin;
  return cudaSuccess;
}
inline cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > emu::g_smem_optin)
    return emu::set_error(cudaErrorInvalidValue);
  emu::g_smem_limit[{kernel, emu::g_device}] = value;
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  if (!emu::g_launch_only) std::memset(p, value, n);
  return cudaSuccess;
}
