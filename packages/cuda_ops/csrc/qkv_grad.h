// qkv_grad.h: the gradient of c_attn's output from the attention's three input gradients.
//
// The attention takes q, k, v as three (N, C) column blocks of one (N, 3C) matmul output; its
// backward returns dq, dk, dv as three tensors. c_attn's backward needs them as one (N, 3C)
// matrix (for dW = dqkv^T x and dx = dqkv W) and its bias gradient is that matrix's column
// sums. PyTorch makes these in two passes (a concatenation, then a reduction that reads the
// three again: 3.6 ms of a gpt2-124m micro-step of 64 rows on an H100, benchmarks/JOURNAL.md);
// here one pass reads each gradient once, writes dqkv and sums its columns by chunks of rows:
//
//   dqkv[r, p*C + c] = d_p[r, c]                    p = 0, 1, 2 for dq, dk, dv
//   partials[j, col] = sum over rows r of chunk j of dqkv[r, col]   (float; double for f64)
//   dbias[col]       = sum over j = 0 .. chunks-1 of partials[j, col], in that order
//
// Chunk j holds rows [j * R, min(N, (j + 1) * R)) with R = ceil(N / chunks): the caller's
// `partials` (chunks, 3C) fixes the order, so dbias has the same bits every run.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

// CUDA launcher (qkv_grad.cu): dtype float32 or bfloat16; dq, dk, dv (N, C), dqkv (N, 3C)
// contiguous; partials (chunks, 3C) float32 scratch; dbias (3C) float32.
void qkv_grad_cuda(void* dqkv, float* dbias, float* partials, const void* dq, const void* dk,
                   const void* dv, int64_t N, int64_t C, int64_t chunks, DType dtype,
                   uintptr_t stream);

}  // namespace gs
