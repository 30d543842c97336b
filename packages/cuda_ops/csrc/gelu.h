// gelu.h: GELU, tanh form, entry points on raw pointers shared by gelu.cpp and gelu.cu.
//
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// (Hendrycks & Gimpel 2016, eq. in section 2; the GELU GPT-2 was trained with). Since
// 1 + tanh(u) = 2 sigmoid(2u), the fast paths compute x * sigmoid(2u) = x / (1 + e^(-2u)),
// which has no cancellation near u = 0 and saturates cleanly for large |u|.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;

// CUDA launchers (gelu.cu); dtype float32 or bfloat16, n elements, contiguous.
void gelu_forward_cuda(void* out, const void* x, int64_t n, DType dtype, uintptr_t stream);
void gelu_backward_cuda(void* dx, const void* dout, const void* x, int64_t n, DType dtype,
                        uintptr_t stream);

}  // namespace gs
