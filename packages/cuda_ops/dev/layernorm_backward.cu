// dev/layernorm_backward.cu: the LayerNorm backward kernels that were tried, side by side in one
// binary (llm.c dev/cuda style), on the rows of shakespeare-char (16384 x 384) and gpt2-124m
// (16384 x 768) in bf16. The kernels in the tree are csrc/layernorm.cu's, included below (the
// launcher's choice, and the other kernels there instantiated by hand); the float-partials one
// is kept here with the times that retired it (README "Native kernels").
// History of the register-sum kernel (now csrc's layernorm_backward_regsum_kernel): as a dev
// variant without the dsum operand it took 14.7 us at 384 on the H200 and, with the next row
// requested early, 16.3 us on the H100 against 21.7 for the shared slices; put in the tree with
// dsum as a run-time pointer (769accd) it ran no faster than the slices (its SASS: 1,152 vs 912
// instructions, 37 vs 19 global loads: the loop was compiled for both cases). It now takes dsum
// as a template flag, and at 768 two warps share a row (Split = 2) instead of one warp holding
// 24 columns a lane (43.8 vs 35.8 us for the slices on the H100).
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
#include <string>
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

// The parameter reduce before 2026-12-06: 32 columns x 8 lanes a block, one float a load,
// 32 loads a lane at 256 blocks (6.1 us under ncu at (16384, 384) on the H100;
// 4.8 for the tree's).
template <typename T>
__global__ void __launch_bounds__(256)
    reduce_before(T* __restrict__ dweight, T* __restrict__ dbias,
                  const float* __restrict__ workspace, int blocks, int C) {
  __shared__ float part[8][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + tx;
  float total = 0.0f;
  if (c < 2 * C)
    for (int b = ty; b < blocks; b += 8) total += workspace[int64_t(b) * 2 * C + c];
  part[ty][tx] = total;
  __syncthreads();
  if (ty != 0 || c >= 2 * C) return;
  total = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) total += part[j][tx];
  if (c < C)
    dweight[c] = from_f32<T>(total);
  else
    dbias[c - C] = from_f32<T>(total);
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
    auto report = [&](const char* name, float us, double bytes = 0) {
      std::printf("  %-50s %7.2f us  %3.0f %% of copy bandwidth\n", name, us,
                  100 * (bytes > 0 ? bytes : bwd_bytes) / (us * 1e3) / copy_gbs);
    };
    std::printf("(%lld, %d) bf16: forward %.2f us (%.0f %% of copy)\n", (long long)N, C, fwd,
                100 * 2.0 * n * 2 / (fwd * 1e3) / copy_gbs);
    // The forward's kernel by hand, each call on the next of kSets copies of x and y (100 MB
    // and more: twice the L2), so that its loads come from DRAM as in a model (one x and y stay
    // in the 50 MB L2 between back-to-back calls: the line above); at 384 also 8-byte vectors
    // (3 x 128, every lane busy, where the tree's 2 x 256 idles half the lanes in the second:
    // faster from L2, 1.8 % slower from DRAM on the H100, so not the tree's). On the H100 a
    // warp normalizing 2 or 4 rows with every row requested first was slower (13.3 / 15.5 vs
    // 12.4 us at 384, 22.9 / 23.8 vs 21.3 at 768: benchmarks/profiles/*ff02453-forward-rows*).
    constexpr int kSets = 4;
    std::vector<bf*> xs(kSets), ys(kSets);
    for (int k = 0; k < kSets; ++k) {
      CHECK(cudaMalloc(&xs[k], n * sizeof(bf)));
      CHECK(cudaMalloc(&ys[k], n * sizeof(bf)));
      CHECK(cudaMemcpy(xs[k], hx.data(), n * 2, cudaMemcpyHostToDevice));
    }
    auto fwd_by_hand = [&](const char* name, auto kernel, int rows) {
      int k = 0;
      const float us = median_us([&] {
        kernel<<<int((N + 8 * rows - 1) / (8 * rows)), 32 * gs::kFwdWarps>>>(
            ys[k], nullptr, mean, rstd, xs[k], (const bf*)nullptr, w, b, N, C, 1e-5f);
        k = (k + 1) % kSets;
      });
      std::printf("  forward from DRAM, %-31s %7.2f us  %3.0f %% of copy bandwidth\n", name, us,
                  100 * 2.0 * n * 2 / (us * 1e3) / copy_gbs);
    };
    for (int round = 0; round < 2; ++round) {
      if (C == 384) {
        fwd_by_hand("16-byte vectors (the tree)", gs::layernorm_forward_reg_kernel<bf, bf, 8, 2>, 1);
        fwd_by_hand("8-byte vectors (3 x 128)", gs::layernorm_forward_reg_kernel<bf, bf, 4, 3>, 1);
      } else {
        fwd_by_hand("16-byte vectors (the tree)", gs::layernorm_forward_reg_kernel<bf, bf, 8, 3>, 1);
      }
    }
    for (int k = 0; k < kSets; ++k) cudaFree(xs[k]), cudaFree(ys[k]);
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
      std::printf("  %-50s max |dx - tree's| %.3g, dweight rel. %.3g\n", "", e, ew);
      if (e > 0.05f || ew > 0.05f) std::exit(2);  // a variant that computes something else
    };
    // csrc's kernels by hand, on the tree's grid (or a multiple), followed by the tree's
    // parameter reduce or the one before 2026-12-06 (a reduce alone is too short to time back
    // to back: the host's launches would be timed); with dsum, no check (the reference above
    // has none) and four tensors' bytes
    bf* dsum = nullptr;
    CHECK(cudaMalloc(&dsum, n * sizeof(bf)));
    CHECK(cudaMemcpy(dsum, hdy.data(), n * 2, cudaMemcpyHostToDevice));  // any values
    auto by_hand = [&](const char* name, auto kernel, int grid, size_t smem,
                       const bf* ds = nullptr, bool reduce_before = false) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      report(name, median_us([&] {
               kernel<<<grid, 32 * warps, smem>>>(dx2, ws, dy, ds, x, w, mean, rstd, N, C);
               if (reduce_before)
                 dev::reduce_before<bf><<<(2 * C + 31) / 32, 256>>>(dw2, db2, ws, grid, C);
               else
                 gs::param_grad_reduce<bf>(dw2, db2, ws, grid, C, 0);
             }), ds ? 4.0 * n * sizeof(bf) : 0);
      if (!ds) check();
    };
    // a slice per warp (the shared-slice kernel; the register sums one warp a row), or per
    // pair of warps with the pairs' exchange slots
    const size_t slices = gs::regsum_shared_bytes(C, warps, 1);
    const size_t pairs = gs::regsum_shared_bytes(C, warps, 2);
    // the rows both widths have: `tree` is the launcher's register-sum instance, `shared` the
    // shared-slice kernel it replaced
    auto common_rows = [&](auto tree, size_t tree_smem, auto shared) {
      for (const char* again : {"", " (again)"}) {
        std::string name = std::string("the tree's backward + the tree's reduce") + again;
        by_hand(name.c_str(), tree, blocks, tree_smem);
        name = std::string("the tree's backward + the reduce before 2026-12-06") + again;
        by_hand(name.c_str(), tree, blocks, tree_smem, nullptr, true);
      }
      by_hand("shared slices (the default before 2026-12-06)", shared, blocks, slices);
      by_hand("shared slices, 2x grid", shared, 2 * blocks, slices);
    };
    if (C == 384) {
      common_rows(gs::layernorm_backward_regsum_kernel<bf, 4, 3, 1, false>, slices,
                  gs::layernorm_backward_reg_kernel<bf, 4, 3>);
      by_hand("register sums, 2 warps a row, W=4 (V=2 of 1.5)",
              gs::layernorm_backward_regsum_kernel<bf, 4, 2, 2, false>, blocks, pairs);
    } else {
      common_rows(gs::layernorm_backward_regsum_kernel<bf, 4, 3, 2, false>, pairs,
                  gs::layernorm_backward_reg_kernel<bf, 8, 3>);
      by_hand("register sums, 1 warp a row (W=8, V=3)",
              gs::layernorm_backward_regsum_kernel<bf, 8, 3, 1, false>, blocks, slices);
      by_hand("register sums, 2 warps a row, W=8 (V=2 of 1.5)",
              gs::layernorm_backward_regsum_kernel<bf, 8, 2, 2, false>, blocks, pairs);
    }
    auto old_float = [&](const char* name, auto kernel) {
      const size_t row_sums = size_t(2) * C * 4;
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(row_sums)));
      report(name, median_us([&] {
               kernel<<<blocks, 32 * warps, row_sums>>>(dx2, ws, dy, x, w, mean, rstd, N, C);
               gs::param_grad_reduce<bf>(dw2, db2, ws, blocks, C, 0);
             }));
      check();
    };
    if (C == 384) old_float("float partials, W=8 (before 2026-12-03)", dev::float_partials<bf, 8, 2>);
    else old_float("float partials, W=8 (before 2026-12-03)", dev::float_partials<bf, 8, 3>);
    // with the residual stream's gradient (add_layernorm's backward): the launcher against the
    // shared slices
    report("with dsum: backward in the tree", median_us([&] {
             gs::layernorm_backward_cuda(dx, dw, dbias, ws, dy, dsum, x, w, mean, rstd, s,
                                         gs::DType::bf16, 0);
           }), 4.0 * n * sizeof(bf));
    if (C == 384)
      by_hand("with dsum: shared slices", gs::layernorm_backward_reg_kernel<bf, 4, 3>, blocks,
              slices, dsum);
    else
      by_hand("with dsum: shared slices", gs::layernorm_backward_reg_kernel<bf, 8, 3>, blocks,
              slices, dsum);
    CHECK(cudaFree(dsum));
  }
  return 0;
}
