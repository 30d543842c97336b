// cross_entropy.h: softmax cross-entropy over rows of logits, loss and dlogits in one pass;
// entry points shared by cross_entropy.cpp and cross_entropy.cu.
//
// For one row z (V logits) with target t:
//   lse  = max(z) + log(sum_j exp(z_j - max(z)))
//   loss = lse - z_t
//   dz_j = (exp(z_j - lse) - [j == t]) * scale     (scale = dL/dloss_row: 1/valid rows, read
//                                                   from device memory so nothing syncs)
// A row whose target is ignore_index gets loss 0 and dz = 0 (torch's ignore_index). dz may be
// the logits buffer itself (in place): each element is read before it is written, by the same
// thread. The caller feeds chunks of rows so that logits never exist for all B*T rows at once
// (gptstack/cuda_ops/cross_entropy.py).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

struct CrossEntropyShape {
  int64_t n, V;
};

// Whether rows that fit twice in shared memory run the staged kernel on sm_90+ (cross_entropy.cu;
// default on): the switch by which tests cover the online kernel at those sizes too and
// benchmarks compare the two in one process. Defined in cross_entropy.cpp.
bool cross_entropy_staged_enabled();
void set_cross_entropy_staged(bool enabled);

// losses (n,) float32 (float64 for float64 logits, CPU only); dlogits null for loss only; targets (n,) int64 on the device; a target
// outside [0, V) that is not ignore_index gives a NaN loss (the CPU path raises instead).
void cross_entropy_cuda(float* losses, void* dlogits, const void* logits, const int64_t* targets,
                        const float* grad_scale, int64_t ignore_index, CrossEntropyShape shape,
                        DType dtype, uintptr_t stream);

}  // namespace gs
