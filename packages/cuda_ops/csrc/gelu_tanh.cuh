// gelu_tanh.cuh: the tanh GELU on the device (gelu.h's formula), for the kernels that fuse it
// into an epilogue (decode.cu, decode_blocks.cu, decode_mma.cuh). Plain float math, so it builds
// for the warp emulator (attention_emu/emu.h) too.
#pragma once

#include <cmath>

#include "gelu.h"

namespace gs {

__device__ __forceinline__ float gelu_tanh_f(float x) {
  const float k = float(kGeluSqrt2OverPi), c = float(kGeluCubic);
  return 0.5f * x * (1.0f + tanhf(k * fmaf(c * x * x, x, x)));
}

}  // namespace gs
