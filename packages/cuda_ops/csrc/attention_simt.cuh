// attention_simt.cuh: float32 causal attention on CUDA cores, forward and backward.
//
// The exact-fp32 path (tests, fp32 models): one warp per row, hs split over the lanes (hs/32
// each), dot products by warp shuffles, keys read straight from global memory (L1/L2 cached).
// Same math and dropout stream as the bf16 tensor-core kernels and the CPU code; built for
// clarity, not speed: training runs in bf16 (attention_forward.cuh, attention_backward.cuh).
#pragma once

#include "attention.h"
#include "attention_mma.cuh"

namespace gs::attn {

struct SimtArgs {
  View4<const float> q, k, v, y, dy;
  View4<float> out, dq, dk, dv;  // out: the forward's y
  float* lse;                    // written by the forward, read by the backward
  int nh, T, hs;
  float scale;
  uint32_t threshold;
  float drop_scale;
  const int64_t* seed;
};

constexpr int kSimtWarps = 4;         // rows per CTA
constexpr int kSimtMaxPerLane = 4;    // hs <= 128

__device__ __forceinline__ float warp_total(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// x . y over hs, each lane holding hs/32 elements of x (in registers) and reading y at `row`.
__device__ __forceinline__ float warp_dot(const float (&x)[kSimtMaxPerLane], const float* row,
                                          int n, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c)
    if (c < n) s += x[c] * row[lane + 32 * c];
  return warp_total(s);
}

__device__ __forceinline__ void read_row(float (&x)[kSimtMaxPerLane], const float* row, int n,
                                         int lane, float mul = 1.0f) {
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c) x[c] = c < n ? row[lane + 32 * c] * mul : 0.0f;
}

__device__ __forceinline__ bool simt_keep(const SimtArgs& a, uint32_t key0, uint32_t key1,
                                          int bh, int i, int j) {
  return a.threshold == 0 || dropout_bits(key0, key1, bh, i, j) >= a.threshold;
}

__device__ __forceinline__ void simt_seed(const SimtArgs& a, uint32_t* key0, uint32_t* key1) {
  if (a.threshold) {
    const uint64_t s = static_cast<uint64_t>(*a.seed);
    *key0 = static_cast<uint32_t>(s);
    *key1 = static_cast<uint32_t>(s >> 32);
  }
}

// grid (ceil(T / kSimtWarps), B * nh): warp w of CTA x handles query row x * kSimtWarps + w.
__global__ void __launch_bounds__(32 * kSimtWarps) attention_forward_simt_kernel(const SimtArgs a) {
  const int lane = threadIdx.x % 32, i = blockIdx.x * kSimtWarps + threadIdx.x / 32;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, n = a.hs / 32;
  if (i >= a.T) return;
  uint32_t key0 = 0, key1 = 0;
  simt_seed(a, &key0, &key1);
  float q[kSimtMaxPerLane], o[kSimtMaxPerLane] = {};
  read_row(q, a.q.row(b, h, i), n, lane, a.scale);
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float s = warp_dot(q, a.k.row(b, h, j), n, lane);
    const float m_new = fmaxf(m, s), alpha = expf(m - m_new), p = expf(s - m_new);
    l = l * alpha + p;
    const float pv = simt_keep(a, key0, key1, bh, i, j) ? p : 0.0f;
    const float* vj = a.v.row(b, h, j);
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c)
      if (c < n) o[c] = o[c] * alpha + pv * vj[lane + 32 * c];
    m = m_new;
  }
  float* yi = a.out.row(b, h, i);
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c)
    if (c < n) yi[lane + 32 * c] = o[c] * (a.drop_scale / l);
  if (lane == 0) a.lse[static_cast<int64_t>(bh) * a.T + i] = m + logf(l);
}

// grid (ceil(T / kSimtWarps), B * nh, 2): z = 0, a warp per key row (dK, dV over queries i >= j);
// z = 1, a warp per query row (dQ over keys j <= i). D_i = dY_i . y_i is recomputed per use.
__global__ void __launch_bounds__(32 * kSimtWarps)
    attention_backward_simt_kernel(const SimtArgs a) {
  const int lane = threadIdx.x % 32, r = blockIdx.x * kSimtWarps + threadIdx.x / 32;
  const int bh = blockIdx.y, b = bh / a.nh, h = bh % a.nh, n = a.hs / 32, T = a.T;
  if (r >= T) return;
  uint32_t key0 = 0, key1 = 0;
  simt_seed(a, &key0, &key1);
  const float* lse = a.lse + static_cast<int64_t>(bh) * T;
  float x0[kSimtMaxPerLane], x1[kSimtMaxPerLane], g0[kSimtMaxPerLane] = {},
      g1[kSimtMaxPerLane] = {};
  if (blockIdx.z == 0) {  // key j = r: x0 = k_j * scale, x1 = v_j; g0 = dK, g1 = dV
    const int j = r;
    read_row(x0, a.k.row(b, h, j), n, lane, a.scale);
    read_row(x1, a.v.row(b, h, j), n, lane);
    for (int i = j; i < T; ++i) {
      const float* qi = a.q.row(b, h, i);
      const float* dyi = a.dy.row(b, h, i);
      float dyr[kSimtMaxPerLane];
      read_row(dyr, dyi, n, lane);
      const float D = warp_dot(dyr, a.y.row(b, h, i), n, lane);
      const float p = expf(warp_dot(x0, qi, n, lane) - lse[i]);
      const bool keep = simt_keep(a, key0, key1, bh, i, j);
      const float dp = keep ? warp_dot(x1, dyi, n, lane) * a.drop_scale : 0.0f;
      const float pd = keep ? p * a.drop_scale : 0.0f, ds = p * (dp - D);
#pragma unroll
      for (int c = 0; c < kSimtMaxPerLane; ++c)
        if (c < n) {
          g1[c] += pd * dyr[c];
          g0[c] += ds * qi[lane + 32 * c];
        }
    }
    float* dkj = a.dk.row(b, h, j);
    float* dvj = a.dv.row(b, h, j);
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c)
      if (c < n) {
        dkj[lane + 32 * c] = g0[c] * a.scale;
        dvj[lane + 32 * c] = g1[c];
      }
  } else {  // query i = r: x0 = q_i * scale, x1 = dY_i; g0 = dQ
    const int i = r;
    read_row(x0, a.q.row(b, h, i), n, lane, a.scale);
    read_row(x1, a.dy.row(b, h, i), n, lane);
    const float D = warp_dot(x1, a.y.row(b, h, i), n, lane);
    for (int j = 0; j <= i; ++j) {
      const float* kj = a.k.row(b, h, j);
      const float p = expf(warp_dot(x0, kj, n, lane) - lse[i]);
      const bool keep = simt_keep(a, key0, key1, bh, i, j);
      const float dp = keep ? warp_dot(x1, a.v.row(b, h, j), n, lane) * a.drop_scale : 0.0f;
      const float ds = p * (dp - D);
#pragma unroll
      for (int c = 0; c < kSimtMaxPerLane; ++c)
        if (c < n) g0[c] += ds * kj[lane + 32 * c];
    }
    float* dqi = a.dq.row(b, h, i);
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c)
      if (c < n) dqi[lane + 32 * c] = g0[c] * a.scale;
  }
}

}  // namespace gs::attn
