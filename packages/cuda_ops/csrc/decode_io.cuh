// decode_io.cuh: decode_advance's device code (decode_io.h), run by decode_advance_kernel and by
// the last block of sample_kernel (sampling.cu) when the sampler updates the state itself.
#pragma once

#include "cuda_common.cuh"
#include "decode_io.h"

namespace gs {

// The whole block updates every row's state after new_tokens (read through L2: in the sampler
// other blocks wrote them). ids: T int64 of shared memory for a slide (one row at a time, every
// id read before any is written). The position is read by all threads before one moves it on.
__device__ __forceinline__ void advance_state(const DecodeState& s,
                                              const int64_t* __restrict__ new_tokens,
                                              int64_t* ids) {
  const int t0 = threadIdx.x, T_ = int(s.T);
  const int64_t p = s.slide ? 0 : *s.pos;
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t* row = s.window + b * T_;
    if (s.slide) {
      for (int t = t0; t < T_; t += blockDim.x) ids[t] = t < T_ - 1 ? row[t + 1] : s.token[b];
      __syncthreads();
      for (int t = t0; t < T_; t += blockDim.x) row[t] = ids[t];
      __syncthreads();
    } else if (t0 == 0 && p >= 0 && p < T_) {
      row[p] = s.token[b];
    }
  }
  __syncthreads();  // token and pos are read above before they are written below
  for (int64_t b = t0; b < s.B; b += blockDim.x) {
    const int64_t v = __ldcg(reinterpret_cast<const long long*>(new_tokens) + b);
    s.out[b * s.out_cols + s.column] = v;
    s.token[b] = v;
  }
  if (!s.slide && t0 == 0) *s.pos = p + 1;
}

}  // namespace gs
