// cuda_launch.h: the host side of a kernel launch, shared by every launcher: checked launches
// (check_launch), the caller's stream, and LaunchCheck, which makes sure a kernel instance can
// run at all (threads per block, shared memory) and raises its shared-memory limit above the
// default 48 KiB before its first launch. Built with GS_ATTN_EMULATE the same code runs against
// the CUDA runtime emulation of attention_emu/runtime.h, which enforces those limits, so the
// attention launchers are tested on a CPU (attention_emu/check.cpp).
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

#ifdef GS_ATTN_EMULATE
#include "attention_emu/runtime.h"
#else
#include <cuda_runtime.h>
#endif

namespace gs {

inline void check_launch(const char* op, const std::string& shapes) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + " " + shapes +
                             ": CUDA error " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
}

inline cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

inline unsigned ceil_div(long long a, long long b) { return static_cast<unsigned>((a + b - 1) / b); }

// Whether p may be read and written in 16-byte vectors (and cp.async'd)
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The current device's opt-in maximum of dynamic shared memory per block (bytes; 227 KiB on the
// H100/H200), or -1 where the runtime cannot say: launchers that fall back when a kernel's
// shared memory does not fit compare with it
inline int smem_optin_here() {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return -1;
  return optin;
}

// kernel<<<grid, block, smem, stream>>>(args...), or its emulation.
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const A&... args) {
#ifdef GS_ATTN_EMULATE
  (void)stream;
  emu::launch_checked(kernel, grid, block, smem, args...);
#else
  kernel<<<grid, block, smem, stream>>>(args...);
#endif
}

#ifndef GS_ATTN_EMULATE
// Programmatic dependent launch (Hopper, sm_90+; CUDA C++ Programming Guide, "Programmatic
// Dependent Launch and Synchronization"): a kernel launched this way may start while the kernel
// before it in the stream is finishing, once every block of that one has called
// pdl_launch_dependents() (cuda_common.cuh) or exited. Its blocks do what does not depend on the
// previous kernel (load weights), then pdl_wait() until that kernel has completed and its writes
// are visible. Stream capture records it as a programmatic edge, so it works in CUDA graphs.
// A batch-1 decode step is a chain of ~30 kernels of 2-4 us; this overlaps each one's launch
// and weight loads with the tail of the one before. On devices below sm_90, or when switched
// off (set_programmatic_launch(false): the A/B switch of tests and benchmarks), it is an
// ordinary launch.
bool programmatic_launch_enabled();  // common.cpp

// The current device's attribute Attr, looked up once per device (an inline function's static
// is one for all; one array per attribute); 0 where it cannot be read
template <cudaDeviceAttr Attr> inline int device_attribute_here() {
  static int value[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return 0;
  if (value[device] == 0 && cudaDeviceGetAttribute(&value[device], Attr, device) != cudaSuccess)
    return value[device] = 0;
  return value[device];
}

// The current device's compute capability major; 0 where it cannot be read
inline int capability_major_here() {
  return device_attribute_here<cudaDevAttrComputeCapabilityMajor>();
}

// The current device's number of SMs, for persistent grids; 1 where it cannot be read
inline int sm_count_here() {
  const int count = device_attribute_here<cudaDevAttrMultiProcessorCount>();
  return count > 0 ? count : 1;
}

// Whether launches on the current device go programmatic: switched on and sm_90 or newer
inline bool programmatic_launch_here() {
  return programmatic_launch_enabled() && capability_major_here() >= 9;
}

// Whether the current device runs thread-block clusters (sm_90 and newer)
inline bool clusters_here() { return capability_major_here() >= 9; }

// A cudaLaunchKernelEx configuration: in thread-block clusters of (cluster_x, 1, 1) where
// cluster_x > 0 (the caller checks clusters_here() and that the GPU places that size), as a
// programmatic dependent where `programmatic`. Not copyable: config.attrs points into it.
struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[2] = {};
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, unsigned cluster_x,
               bool programmatic) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attrs;
    if (cluster_x > 0) {
      cudaLaunchAttribute& a = attrs[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster_x;
      a.val.clusterDim.y = a.val.clusterDim.z = 1;
    }
    if (programmatic) {
      cudaLaunchAttribute& a = attrs[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// launch_programmatic in thread-block clusters of (cluster_x, 1, 1) (see LaunchConfig)
template <typename... P, typename... A>
void launch_cluster_programmatic(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, unsigned cluster_x, const A&... args) {
  LaunchConfig launch(grid, block, smem, stream, cluster_x, programmatic_launch_here());
  cudaLaunchKernelEx(&launch.config, kernel, static_cast<P>(args)...);
}

template <typename... P, typename... A>
void launch_programmatic(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, const A&... args) {
  launch_cluster_programmatic(kernel, grid, block, smem, stream, 0u, args...);
}
#else
// The emulator runs one kernel at a time: an ordinary (emulated) launch
template <typename... P, typename... A>
void launch_programmatic(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, const A&... args) {
  launch_kernel(kernel, grid, block, smem, stream, args...);
}
#endif

// Dynamic shared memory a block may use without asking (CUDA C++ Programming Guide, "Shared
// Memory": above 48 KB a kernel must opt in with cudaFuncSetAttribute; HOPPER.md).
constexpr int kDefaultSmemBytes = 48 * 1024;

// One per kernel instance: a function-local static of the templated launcher, so that every
// instance keeps its own record. (The attribute belongs to one function on one device; a record
// shared by all kernels of one signature once let only the first instance above 48 KiB opt in,
// and every later one failed its launch with cudaErrorInvalidValue.) ensure() runs once per
// device, before the instance's first launch there: it checks that `threads` fits the
// instance's register use (cudaFuncAttributes::maxThreadsPerBlock) and that its static plus
// `smem_bytes` dynamic shared memory fits the device's opt-in maximum
// (cudaDevAttrMaxSharedMemoryPerBlockOptin; 227 KiB on the H100/H200), and raises the
// instance's limit to smem_bytes when that is above 48 KiB. min_arch > 0: the instance needs
// machine code of that compute capability (90: wgmma, built only for sm_90a), not code for an
// older GPU nor PTX compiled at load time (cudaFuncAttributes::binaryVersion, ptxVersion). A
// configuration that cannot run throws std::runtime_error naming the op, the configuration and
// the limit.
class LaunchCheck {
 public:
  void ensure(const void* kernel, const char* op, const std::string& config, int threads,
              int smem_bytes, int min_arch = 0) {
    int dev = 0;
    expect(cudaGetDevice(&dev), op, config, "cudaGetDevice");
    const unsigned long long bit = 1ull << (dev & 63);
    if (ready_.load(std::memory_order_acquire) & bit) return;
    cudaFuncAttributes fa{};
    expect(cudaFuncGetAttributes(&fa, kernel), op, config, "cudaFuncGetAttributes");
    if (fa.binaryVersion < min_arch || fa.ptxVersion < min_arch)
      fail(op, config,
           "machine code for sm_" + std::to_string(min_arch) + " (an H100 or H200 and a build "
           "with sm_90a in GPTSTACK_CUDA_ARCHS); here it runs code for sm_" +
               std::to_string(fa.binaryVersion) + " from PTX " + std::to_string(fa.ptxVersion));
    if (threads > fa.maxThreadsPerBlock)
      fail(op, config,
           std::to_string(threads) + " threads per block, but with " +
               std::to_string(fa.numRegs) + " registers per thread this GPU runs at most " +
               std::to_string(fa.maxThreadsPerBlock));
    int optin = 0;
    expect(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), op,
           config, "cudaDeviceGetAttribute");
    const long long need = static_cast<long long>(fa.sharedSizeBytes) + smem_bytes;
    if (need > optin)
      fail(op, config,
           std::to_string(need) + " bytes of shared memory per block, but this GPU allows " +
               std::to_string(optin) + " (cudaDevAttrMaxSharedMemoryPerBlockOptin)");
    if (smem_bytes > kDefaultSmemBytes)
      expect(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  smem_bytes),
             op, config,
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(smem_bytes) +
                 ")");
    ready_.fetch_or(bit, std::memory_order_acq_rel);
  }

 private:
  std::atomic<unsigned long long> ready_{0};  // bit d: done on device d (up to 64 devices)

  [[noreturn]] static void fail(const char* op, const std::string& config,
                                const std::string& why) {
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + ": the " + config +
                             " kernel cannot run: it needs " + why);
  }
  static void expect(cudaError_t err, const char* op, const std::string& config,
                     const std::string& call) {
    if (err == cudaSuccess) return;
    cudaGetLastError();  // not left behind for the next check_launch
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + ": " + call + " for the " +
                             config + " kernel: CUDA error " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
};

}  // namespace gs
