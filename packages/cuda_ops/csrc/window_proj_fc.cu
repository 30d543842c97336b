// window_proj_fc.cu: the launcher of window_proj_fc.cuh's kernel (the slide window's
// attn.c_proj + residual, ln_2 and mlp.c_fc + GELU in one launch; decode.h's window_proj_fc).
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c window_proj_fc.cu -I.
#include <cuda_bf16.h>

#include <string>

#include "cuda_common.cuh"
#include "decode.h"
#include "window_proj_fc.cuh"

namespace gs {

bool window_proj_fc_cuda(void* x1, void* h, const void* y, const void* x, const void* wp,
                         const void* bp, const void* wf, const void* bf, const void* ln_w,
                         const void* ln_b, int64_t R, int64_t C, int64_t N, double eps,
                         DType dtype, uintptr_t stream) {
  namespace pf = window_proj_fc;
  if (dtype != DType::bf16 || !ln_w || R < 1 || N < 2 || N % 2 != 0 || !pf::compiled_for(int(C)))
    return false;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(x1) || !aligned(h) || !aligned(y) || !aligned(x) || !aligned(wp) || !aligned(wf))
    return false;  // cp.async rows, pair loads and stores
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return false;
  const int64_t smem = pf::shared_bytes(C);
  if (smem > optin) return false;
  auto bits = [](const void* p) { return static_cast<const uint16_t*>(p); };
  const pf::Args a{static_cast<uint16_t*>(x1), static_cast<uint16_t*>(h), bits(y), bits(x),
                   bits(wp), bits(bp), bits(wf), bits(bf), bits(ln_w), bits(ln_b),
                   int(R), int(C), int(N), float(eps)};
  const std::string config = "(R=" + std::to_string(R) + ", C=" + std::to_string(C) +
                             ", N=" + std::to_string(N) + ")";
  pf::with_kernel_for(int(C), [&](auto kernel) {
    static LaunchCheck check;  // one per instance (its one C)
    check.ensure(reinterpret_cast<const void*>(kernel.value), "window_proj_fc", config,
                 pf::kThreads, int(smem));
    launch_programmatic(kernel.value, dim3(ceil_div(N, pf::kCols), ceil_div(R, pf::kRows)),
                        pf::kThreads, int(smem), as_stream(stream), a);
  });
  check_launch("window_proj_fc", config);
  return true;
}

}  // namespace gs
