// dev/layernorm_backward.cu: the LayerNorm backward kernels that were tried, side by side in one
// binary (llm.c dev/cuda style), on the rows of shakespeare-char (16384 x 384) and gpt2-124m
// (16384 x 768) in bf16. The kernel in the tree is csrc/layernorm.cu's, included below; the
// others are kept here with the times that retired them (README "Native kernels").
//
//   nvcc -arch=sm_90a -O3 -std=c++17 -I packages/cuda_ops/csrc \
//       packages/cuda_ops/dev/layernorm_backward.cu -o /tmp/ln_bwd && /tmp/ln_bwd
//
// Every variant ends with the tree's parameter-reduce kernel (the same grid: 8 warps of 8 rows
// each); times are medians of 15 x 50 calls by cudaEvent; dx and dweight are checked against
// the tree's kernel.
#include "layernorm.cu"
#include "common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace dev {
using gs::from_f32;
using gs::to_f32;
using gs::warp_sum;

template <typename T, int W> struct alignas(sizeof(T) * W) Vec {
  T v[W];
};
__device__ __forceinline__ int col(int i, int lane, int W) { return (i * 32 + lane) * W; }

// Before 2026-12-03 (late evening): the row as floats, dweight/dbias as float registers
// (96-128 per thread: 16 warps per SM), added up warp after warp behind a barrier each.
template <typename T, int W, int V>
__global__ void float_partials(T* __restrict__ dx, float* __restrict__ workspace,
                               const T* __restrict__ dout, const T* __restrict__ src,
                               const T* __restrict__ weight, const float* __restrict__ mean,
                               const float* __restrict__ rstd, int64_t N, int C) {
  extern __shared__ float block_sums[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float dw[V][W] = {}, db[V][W] = {};
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < N;
       row += int64_t(gridDim.x) * warps) {
    const float m = mean[row], rs = rstd[row];
    float dy[V][W], xh[V][W], c1 = 0.0f, c2 = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = col(i, lane, W);
      if (c >= C) continue;
      Vec<T, W> a = *reinterpret_cast<const Vec<T, W>*>(dout + row * C + c);
      Vec<T, W> b = *reinterpret_cast<const Vec<T, W>*>(src + row * C + c);
      Vec<T, W> w = *reinterpret_cast<const Vec<T, W>*>(weight + c);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        dy[i][k] = to_f32(a.v[k]);
        xh[i][k] = (to_f32(b.v[k]) - m) * rs;
        const float g = dy[i][k] * to_f32(w.v[k]);
        c1 += g;
        c2 += g * xh[i][k];
      }
    }
    c1 = warp_sum(c1) / C;
    c2 = warp_sum(c2) / C;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = col(i, lane, W);
      if (c >= C) continue;
      Vec<T, W> w = *reinterpret_cast<const Vec<T, W>*>(weight + c), o;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        o.v[k] = from_f32<T>(rs * (dy[i][k] * to_f32(w.v[k]) - c1 - xh[i][k] * c2));
        dw[i][k] += dy[i][k] * xh[i][k];
        db[i][k] += dy[i][k];
      }
      *reinterpret_cast<Vec<T, W>*>(dx + row * C + c) = o;
    }
  }
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) block_sums[c] = 0.0f;
  for (int w = 0; w < warps; ++w) {
    __syncthreads();
    if (warp != w) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = col(i, lane, W);
      if (c >= C) continue;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        block_sums[c + k] += dw[i][k];
        block_sums[C + c + k] += db[i][k];
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x)
    workspace[int64_t(blockIdx.x) * 2 * C + c] = block_sums[c];
}

// Packed inputs (as in the tree) but the partial sums in float registers, written to per-warp
// shared slices once at the end: 14.7 us at 384 (96 registers), 32.8 us at 768 (171) on the H200.
// Prefetch: the next row's dy, x, mean and rstd are requested before this row is computed. On
// the H100 (2026-12-06, benchmarks/profiles/layernorm-backward-h100-20261206*) that took 16.3 us
// at 384 and 43.8 at 768 here, against 21.7 / 35.8 for the tree's kernel. Put in the tree for
// rows up to 384 (with the dsum operand the tree's launcher passes) it took 21.7 us and
// `gptstack bench ops` did not move, so it was reverted (769accd has it). Its SASS against this
// kernel's (cuobjdump, sm_90a): 1,152 vs 912 instructions, 37 vs 19 global loads, 146 vs 54 byte
// permutes: the run-time dsum operand doubles the load and unpack code of the loop. An instance
// per "dsum or not" (a template flag) is the next thing to try.
template <typename T, int W, int V, bool Prefetch>
__global__ void __launch_bounds__(256)
    register_partials(T* __restrict__ dx, float* __restrict__ workspace,
                      const T* __restrict__ dout, const T* __restrict__ src,
                      const T* __restrict__ weight, const float* __restrict__ mean,
                      const float* __restrict__ rstd, int64_t N, int C) {
  extern __shared__ float slices[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float dw[V][W] = {}, db[V][W] = {};
  Vec<T, W> pw[V];
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (col(i, lane, W) < C) pw[i] = *reinterpret_cast<const Vec<T, W>*>(weight + col(i, lane, W));
  const int64_t stride = int64_t(gridDim.x) * warps;
  Vec<T, W> pdy[V], px[V];
  float m = 0.f, rs = 0.f;
  auto load = [&](int64_t r, Vec<T, W> (&a)[V], Vec<T, W> (&b)[V], float& mr, float& rr) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = col(i, lane, W);
      if (c >= C) continue;
      a[i] = *reinterpret_cast<const Vec<T, W>*>(dout + r * C + c);
      b[i] = *reinterpret_cast<const Vec<T, W>*>(src + r * C + c);
    }
    mr = mean[r];
    rr = rstd[r];
  };
  int64_t row = int64_t(blockIdx.x) * warps + warp;
  if (Prefetch && row < N) load(row, pdy, px, m, rs);
  for (; row < N; row += stride) {
    Vec<T, W> ndy[V], nx[V];
    float nm = 0.f, nrs = 0.f;
    if constexpr (Prefetch) {
      if (row + stride < N) load(row + stride, ndy, nx, nm, nrs);
    } else {
      load(row, pdy, px, m, rs);
    }
    float c1 = 0.f, c2 = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (col(i, lane, W) >= C) continue;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float g = to_f32(pdy[i].v[k]) * to_f32(pw[i].v[k]);
        c1 += g;
        c2 += g * ((to_f32(px[i].v[k]) - m) * rs);
      }
    }
    c1 = warp_sum(c1) / C;
    c2 = warp_sum(c2) / C;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = col(i, lane, W);
      if (c >= C) continue;
      Vec<T, W> o;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = to_f32(pdy[i].v[k]), xh = (to_f32(px[i].v[k]) - m) * rs;
        o.v[k] = from_f32<T>(rs * (d * to_f32(pw[i].v[k]) - c1 - xh * c2));
        dw[i][k] += d * xh;
        db[i][k] += d;
      }
      *reinterpret_cast<Vec<T, W>*>(dx + row * C + c) = o;
    }
    if constexpr (Prefetch) {
#pragma unroll
      for (int i = 0; i < V; ++i) pdy[i] = ndy[i], px[i] = nx[i];
      m = nm;
      rs = nrs;
    }
  }
  float* mine = slices + warp * 2 * C;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = col(i, lane, W);
    if (c >= C) continue;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      mine[c + k] = dw[i][k];
      mine[C + c + k] = db[i][k];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += slices[w * 2 * C + c];
    workspace[int64_t(blockIdx.x) * 2 * C + c] = total;
  }
}
}  // namespace dev

using bf = __nv_bfloat16;

int main() {
  const double copy_gbs = copy_bandwidth_gbs();
  std::printf("copy bandwidth %.0f GB/s (read + write)\n", copy_gbs);
  for (int C : {384, 768}) {
    const int64_t N = 16384, n = N * C;
    std::mt19937 g(1);
    std::normal_distribution<float> d;
    std::vector<bf> hx(n), hdy(n), hw(C), hb(C);
    for (auto& e : hx) e = __float2bfloat16(d(g));
    for (auto& e : hdy) e = __float2bfloat16(d(g));
    for (auto& e : hw) e = __float2bfloat16(1.f + 0.1f * d(g));
    for (auto& e : hb) e = __float2bfloat16(0.1f * d(g));
    bf *x, *dy, *w, *b, *y, *dx, *dx2, *dw, *dbias, *dw2, *db2;
    float *mean, *rstd, *ws;
    for (bf** p : {&x, &dy, &y, &dx, &dx2}) CHECK(cudaMalloc(p, n * sizeof(bf)));
    for (bf** p : {&w, &b, &dw, &dbias, &dw2, &db2}) CHECK(cudaMalloc(p, C * sizeof(bf)));
    CHECK(cudaMalloc(&mean, N * 4));
    CHECK(cudaMalloc(&rstd, N * 4));
    const int warps = gs::ln_bwd_warps(C), blocks = int(gs::ln_bwd_blocks(N, C));
    CHECK(cudaMalloc(&ws, size_t(4) * blocks * 2 * C * 4));  // up to 4x the tree's grid
    CHECK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, hdy.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, hw.data(), C * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb.data(), C * 2, cudaMemcpyHostToDevice));
    const gs::LayerNormShape s{N, C};
    const double bwd_bytes = 3.0 * n * sizeof(bf);  // reads dy, x; writes dx
    const float fwd = median_us([&] {
      gs::layernorm_forward_cuda(y, nullptr, mean, rstd, x, nullptr, gs::DType::bf16, w, b, s,
                                 1e-5f, gs::DType::bf16, 0);
    });
    auto report = [&](const char* name, float us) {
      std::printf("  %-44s %7.2f us  %3.0f %% of copy bandwidth\n", name, us,
                  100 * bwd_bytes / (us * 1e3) / copy_gbs);
    };
    std::printf("(%lld, %d) bf16: forward %.2f us (%.0f %% of copy)\n", (long long)N, C, fwd,
                100 * 2.0 * n * 2 / (fwd * 1e3) / copy_gbs);
    report("backward in the tree (csrc/layernorm.cu)", median_us([&] {
             gs::layernorm_backward_cuda(dx, dw, dbias, ws, dy, nullptr, x, w, mean, rstd, s,
                                         gs::DType::bf16, 0);
           }));
    std::vector<bf> want(n), got(n), want_w(C), got_w(C);
    CHECK(cudaMemcpy(want.data(), dx, n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(want_w.data(), dw, C * 2, cudaMemcpyDeviceToHost));
    auto check = [&] {
      CHECK(cudaMemcpy(got.data(), dx2, n * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(got_w.data(), dw2, C * 2, cudaMemcpyDeviceToHost));
      float e = 0, ew = 0;
      for (int64_t i = 0; i < n; ++i)
        e = std::max(e, std::fabs(__bfloat162float(got[i]) - __bfloat162float(want[i])));
      for (int i = 0; i < C; ++i)
        ew = std::max(ew, std::fabs(__bfloat162float(got_w[i]) - __bfloat162float(want_w[i])) /
                              (1e-3f + std::fabs(__bfloat162float(want_w[i]))));
      std::printf("  %-44s max |dx - tree's| %.3g, dweight rel. %.3g\n", "", e, ew);
      if (e > 0.05f || ew > 0.05f) std::exit(2);  // a variant that computes something else
    };
    // the tree's kernel on 2x and 4x its grid (4 and 2 rows a warp)
    auto tree_grid = [&](const char* name, auto kernel, int grid) {
      const size_t smem = size_t(warps) * 2 * C * 4;
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      report(name, median_us([&] {
               kernel<<<grid, 32 * warps, smem>>>(dx2, ws, dy, nullptr, x, w, mean, rstd, N, C);
               gs::layernorm_param_grad_reduce_kernel<bf><<<(2 * C + 31) / 32, 256>>>(dw2, db2, ws, grid, C);
             }));
      check();
    };
    if (C == 384) {
      tree_grid("tree's kernel, 2x grid", gs::layernorm_backward_reg_kernel<bf, 4, 3>, 2 * blocks);
      tree_grid("tree's kernel, 4x grid", gs::layernorm_backward_reg_kernel<bf, 4, 3>, 4 * blocks);
    } else {
      tree_grid("tree's kernel, 2x grid", gs::layernorm_backward_reg_kernel<bf, 8, 3>, 2 * blocks);
      tree_grid("tree's kernel, 4x grid", gs::layernorm_backward_reg_kernel<bf, 8, 3>, 4 * blocks);
    }
    auto variant = [&](const char* name, auto kernel, size_t smem) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      const float us = median_us([&] {
        kernel<<<blocks, 32 * warps, smem>>>(dx2, ws, dy, x, w, mean, rstd, N, C);
        gs::layernorm_param_grad_reduce_kernel<bf><<<(2 * C + 31) / 32, 256>>>(dw2, db2, ws, blocks, C);
      });
      report(name, us);
      check();
    };
    const size_t row_sums = size_t(2) * C * 4, slices = size_t(warps) * row_sums;
    if (C == 384) {
      variant("float partials, W=8 (before)", dev::float_partials<bf, 8, 2>, row_sums);
      variant("packed, float register partials, W=4", dev::register_partials<bf, 4, 3, false>, slices);
      variant("register partials + prefetch, W=4", dev::register_partials<bf, 4, 3, true>, slices);
    } else {
      variant("float partials, W=8 (before)", dev::float_partials<bf, 8, 3>, row_sums);
      variant("packed, float register partials, W=8", dev::register_partials<bf, 8, 3, false>, slices);
      variant("register partials + prefetch, W=8", dev::register_partials<bf, 8, 3, true>, slices);
    }
  }
  return 0;
}
