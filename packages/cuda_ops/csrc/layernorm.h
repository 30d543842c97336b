// layernorm.h: LayerNorm over the last dimension, optionally fused with the residual add
// before it, forward and backward; entry points shared by layernorm.cpp and layernorm.cu.
//
//   forward:  s = x + residual (only with a residual; s is written out, it is the new residual
//             stream), y = (s - mean) * rstd * weight + bias, mean and rstd saved per row
//             (Ba et al. 2016, eq. 4; rstd = 1 / sqrt(var + eps), biased variance as torch).
//   backward: with xhat = (s - mean) * rstd, g = dy * weight:
//             ds = rstd * (g - mean(g) - xhat * mean(g * xhat)) [+ dsum, the gradient that
//             reaches s from the residual stream], dweight = sum_rows dy * xhat,
//             dbias = sum_rows dy. Parameter grads overwrite (they are outputs of the op;
//             autograd accumulates them), activation grads overwrite.
// Rows are N = B*T, columns C. x, s, y, weight, bias, dy, dx share one dtype T; the residual
// may be another (float32 residual stream + bfloat16 branch output under autocast); mean/rstd
// are float32 (float64 for float64).
#pragma once

#include <algorithm>
#include <cstdint>

#include "dtype.h"

namespace gs {

struct LayerNormShape {
  int64_t N, C;
};

// --- CUDA backward work split (layernorm.cu), also needed by the binding to size scratch ---
// Each block keeps per-warp partial sums of dweight and dbias (2C floats per warp) in shared
// memory, then writes the block's sum to a float32 workspace of (blocks, 2C) that a second
// kernel reduces in a fixed order: deterministic, and no atomics.
constexpr int64_t kLnBwdSharedBytes = 48 * 1024;  // the default dynamic shared memory limit
constexpr int64_t kLnBwdMaxBlocks = 512;          // ~4 resident blocks on each of 132 SMs
inline int ln_bwd_warps(int64_t C) {
  return static_cast<int>(std::min<int64_t>(8, kLnBwdSharedBytes / (2 * C * 4)));
}
// At least kLnBwdRowsPerWarp rows per warp: each block's partial sums cost a shared-memory
// pass and 2C floats of workspace, worth it only over several rows.
constexpr int64_t kLnBwdRowsPerWarp = 8;
inline int64_t ln_bwd_blocks(int64_t N, int64_t C) {
  int64_t w = ln_bwd_warps(C) * kLnBwdRowsPerWarp;
  return w < 1 ? 0 : std::max<int64_t>(1, std::min<int64_t>((N + w - 1) / w, kLnBwdMaxBlocks));
}
inline int64_t ln_bwd_workspace_floats(int64_t N, int64_t C) {
  return ln_bwd_blocks(N, C) * 2 * C;
}
constexpr int64_t kLnCudaMaxC = kLnBwdSharedBytes / 8;  // one warp's 2C floats must fit

void layernorm_forward_cuda(void* out, void* sum_out, float* mean, float* rstd, const void* x,
                            const void* residual, DType residual_dtype, const void* weight,
                            const void* bias, LayerNormShape shape, float eps, DType dtype,
                            uintptr_t stream);
void layernorm_backward_cuda(void* dx, void* dweight, void* dbias, float* workspace,
                             const void* dout, const void* dsum, const void* src,
                             const void* weight, const float* mean, const float* rstd,
                             LayerNormShape shape, DType dtype, uintptr_t stream);

}  // namespace gs
