// decode_vec.cuh: device helpers shared by the decode kernels (decode.cu, decode_blocks.cu):
// 16-byte vector loads as floats and the tanh GELU (gelu_tanh.cuh; round4, for shared regions,
// is decode.h's).
#pragma once

#include "cuda_common.cuh"
#include "decode.h"
#include "gelu_tanh.cuh"

namespace gs {

// 16 bytes of T as floats: 4 float32 or 8 bfloat16
template <typename T> struct Vec16;
template <> struct Vec16<float> {
  static constexpr int n = 4;
  __device__ static void convert(uint4 raw, float* out) {
    out[0] = __uint_as_float(raw.x), out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z), out[3] = __uint_as_float(raw.w);
  }
  __device__ static void load(const float* p, float* out) {
    convert(*reinterpret_cast<const uint4*>(p), out);
  }
};
template <> struct Vec16<__nv_bfloat16> {
  static constexpr int n = 8;
  __device__ static void convert(uint4 raw, float* out) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(h[i]);
      out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
  }
  __device__ static void load(const __nv_bfloat16* p, float* out) {
    convert(*reinterpret_cast<const uint4*>(p), out);
  }
};

}  // namespace gs
