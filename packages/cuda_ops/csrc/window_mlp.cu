// window_mlp.cu: the launcher of window_mlp.cuh's kernel (the slide window's attn.c_proj +
// residual, ln_2, mlp.c_fc + GELU and mlp.c_proj + residual in one launch; decode.h's
// window_mlp): a thread-block cluster of C / 16 CTAs per 32 rows, as a programmatic dependent.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c window_mlp.cu -I.
#include <cuda_bf16.h>

#include <string>

#include "cuda_common.cuh"
#include "cuda_launch.h"
#include "decode.h"
#include "window_mlp.cuh"

namespace gs {

bool window_mlp_cuda(void* out, const void* y, const void* x, const void* wp, const void* bp,
                     const void* ln_w, const void* ln_b, const void* wf, const void* bf,
                     const void* wm, const void* bm, int64_t R, int64_t C, double eps, DType dtype,
                     uintptr_t stream) {
  namespace wm_ = window_mlp;
  // decode_linear's tensor-core kernel runs from kDecodeMmaMinRows rows: below, its one-row
  // kernel has other bits, so the three calls are the answer there
  if (dtype != DType::bf16 || !ln_w || R < kDecodeMmaMinRows) return false;
  if (!aligned16(out) || !aligned16(y) || !aligned16(x) || !aligned16(wp) || !aligned16(wf) ||
      !aligned16(wm))
    return false;  // cp.async rows, pair loads and stores
  if (!clusters_here()) return false;  // thread-block clusters: sm_90 and newer
  int dev = 0;
  cudaGetDevice(&dev);
  const int optin = smem_optin_here();
  auto bits = [](const void* p) { return static_cast<const uint16_t*>(p); };
  const wm_::Args a{static_cast<uint16_t*>(out), bits(y), bits(x), bits(wp), bits(bp),
                    bits(ln_w), bits(ln_b), bits(wf), bits(bf), bits(wm), bits(bm), int(R),
                    float(eps)};
  const std::string config = "(R=" + std::to_string(R) + ", C=" + std::to_string(C) + ")";
  bool launched = false;
  wm_::with_kernel_for(int(C), [&](auto kernel, int ctas, int64_t smem) {
    if (smem > optin) return;
    static LaunchCheck check;  // one per instance (its one C)
    static int placeable[64] = {};  // per device: 1 the GPU places the cluster, -1 it does not
    const void* fn = reinterpret_cast<const void*>(kernel.value);
    check.ensure(fn, "window_mlp", config, wm_::kThreads, int(smem));
    const dim3 grid{unsigned(ctas), ceil_div(R, wm_::kRows)};
    int& ok = placeable[dev & 63];
    if (ok == 0) {  // 16 CTAs is a non-portable cluster size: asked for, then checked once
      LaunchConfig probe(grid, wm_::kThreads, size_t(smem), as_stream(stream), unsigned(ctas),
                         false);
      int clusters = 0;
      ok = cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
                       cudaSuccess &&
                   cudaOccupancyMaxActiveClusters(&clusters, kernel.value, &probe.config) ==
                       cudaSuccess &&
                   clusters > 0
               ? 1
               : -1;
      cudaGetLastError();  // a refusal is an answer, not an error for check_launch
    }
    if (ok < 0) return;
    launch_cluster_programmatic(kernel.value, grid, wm_::kThreads, size_t(smem),
                                as_stream(stream), unsigned(ctas), a);
    launched = true;
  });
  if (launched) check_launch("window_mlp", config);
  return launched;
}

}  // namespace gs
