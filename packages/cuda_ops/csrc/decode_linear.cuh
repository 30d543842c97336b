// decode_linear.cuh: one CTA's share of decode_linear's one-row kernel (decode.h has the
// formula; decode.cu the design), as a device function.
#pragma once

#include "cuda_common.cuh"
#include "decode_vec.cuh"

namespace gs {

constexpr int kLinearWarps = 4;
// 16-byte weight loads per lane issued before waiting for the previous kernel (launch_
// programmatic): whole rows up to K = 2,048 in bfloat16 (1,024 in float32)
constexpr int kLinearAhead = 8;

// decode_merge_linear's input row (decode.h): parts (R, heads, K) float, bias (K,) or null,
// x_out (R, K) written by the block of outputs 0 (none: plain decode_linear)
template <typename T> struct MergeArgs {
  const float* parts;
  int heads;
  const T* bias;
  T* x_out;
};

// Outputs n0 .. n0 + kLinearWarps - 1 of row r (warp w computes n0 + w; none past N), with the
// block's kLinearWarps * 32 threads. row: K floats of shared memory for the (normalized)
// input row; red: 32 floats. Calls pdl_launch_dependents and pdl_wait (x and residual are the
// previous kernel's output; the weights are requested before waiting for it). Every thread
// returns (no early exit), so a caller may synchronize the block afterwards.
template <typename T, bool Vector>
__device__ __forceinline__ void linear_outputs(T* __restrict__ out, const T* __restrict__ x,
                                               const T* __restrict__ w, const T* __restrict__ b,
                                               const T* __restrict__ ln_w,
                                               const T* __restrict__ ln_b,
                                               const T* __restrict__ residual, int N, int K,
                                               float eps, bool gelu, const MergeArgs<T>& merge,
                                               int r, int n0, float* row, float* red) {
  constexpr int V = Vector ? Vec16<T>::n : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = n0 + warp;
  const T* wn = w + int64_t(n < N ? n : 0) * K;
  pdl_launch_dependents();
  // The weights do not depend on the kernel before this one: their first loads go out before
  // waiting for it (lane covers columns (j * 32 + lane) * V .. + V - 1 of load j).
  uint4 ahead[Vector ? kLinearAhead : 1];
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (n < N && k < K) ahead[j] = *reinterpret_cast<const uint4*>(wn + k);
    }
  }
  pdl_wait();  // x and residual are the previous kernel's output
  const T* xr = x + int64_t(r) * K;
  if (merge.parts) {  // x + c_proj(y) from the attention's per-head projections (decode.h)
    const float* __restrict__ pr = merge.parts + int64_t(r) * merge.heads * K;
    T* xo = n0 == 0 && merge.x_out ? merge.x_out + int64_t(r) * K : nullptr;
    // kMergeCols columns a thread at a time, every head's load of them issued before any sum
    // is stored (one L2 round trip, not one per column and head)
    constexpr int kMergeCols = 4;
    for (int k0 = threadIdx.x; k0 < K; k0 += kMergeCols * blockDim.x) {
      float s[kMergeCols];
#pragma unroll
      for (int j = 0; j < kMergeCols; ++j) s[j] = 0.0f;
#pragma unroll 4
      for (int h = 0; h < merge.heads; ++h)
#pragma unroll
        for (int j = 0; j < kMergeCols; ++j) {
          const int k = k0 + j * blockDim.x;
          if (k < K) s[j] += __ldcg(pr + int64_t(h) * K + k);
        }
#pragma unroll
      for (int j = 0; j < kMergeCols; ++j) {
        const int k = k0 + j * blockDim.x;
        if (k >= K) break;
        if (merge.bias) s[j] += to_f32(merge.bias[k]);
        const T v = from_f32<T>(s[j] + to_f32(xr[k]));
        row[k] = to_f32(v);
        if (xo) xo[k] = v;
      }
    }
  } else {
    for (int k = threadIdx.x; k < K; k += blockDim.x) row[k] = to_f32(xr[k]);
  }
  __syncthreads();
  if (ln_w) {
    float s = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) s += row[k];
    const float mean = block_sum(s, red) / K;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) ss += (row[k] - mean) * (row[k] - mean);
    const float rstd = rsqrtf(block_sum(ss, red) / K + eps);
    __syncthreads();  // every thread has read row[] for the sums before it is overwritten
    for (int k = threadIdx.x; k < K; k += blockDim.x)
      row[k] = (row[k] - mean) * rstd * to_f32(ln_w[k]) + (ln_b ? to_f32(ln_b[k]) : 0.0f);
    __syncthreads();
  }
  if (n >= N) return;
  float acc = 0.0f;
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (k < K) {
        float wv[V];
        Vec16<T>::convert(ahead[j], wv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
      }
    }
    for (int k = (kLinearAhead * 32 + lane) * V; k < K; k += 32 * V) {
      float wv[V];
      Vec16<T>::load(wn + k, wv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
    }
  } else {
    for (int k = lane; k < K; k += 32) acc = fmaf(to_f32(wn[k]), row[k], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) {
    if (b) acc += to_f32(b[n]);
    if (gelu) acc = gelu_tanh_f(acc);
    if (residual) acc += to_f32(residual[int64_t(r) * N + n]);
    out[int64_t(r) * N + n] = from_f32<T>(acc);
  }
}

// Whether the 16-byte version runs: aligned weights, 16-byte rows
template <typename T>
inline bool linear_vector_loads(const void* w, int64_t K) {
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && (K * int64_t(sizeof(T))) % 16 == 0;
}

}  // namespace gs
