// layernorm.cu: LayerNorm (+ fused residual add) forward and backward on CUDA. Formulas in
// layernorm.h; CPU reference: forward_row_scalar / backward_row_scalar in layernorm.cpp.
//
// Versions (llm.c dev/cuda/layernorm_*.cu style; the launcher picks one, tests cover each):
//   forward  layernorm_forward_reg_kernel<W, V>: one warp per row held in registers (V vectors
//            of W elements per lane, C <= 32 * W * V, V <= 4: every preset's width): one read
//            of x (+ r), one write of y (+ s); mean, then the centred sum of squares, from the
//            registers. The default wherever rows are 16-byte aligned and C % W == 0. (bf16 rows
//            of 384 in 8-byte vectors, every lane busy, as the backward does: faster with x in
//            L2, 1.8 % slower from DRAM on the H100, dev/layernorm_backward.cu: not kept.)
//   backward layernorm_backward_reg_kernel<W, V> (now only where regsum_shape finds no shape: an
//            odd count of warps a block with rows too wide for one warp, bf16 C of 776-872):
//            one warp per row, warps stride over rows;
//            dy, s and the weight are read once into registers and stay packed (bf16: half
//            the registers of floats); each lane adds its columns' dweight and dbias into
//            the warp's own slice of shared memory, float4 by float4 (no bank conflicts), and
//            the block sums its warps' slices by column at the end. The first versions (below)
//            read every row two or three times, and added into shared memory with 8-way bank
//            conflicts: forward+backward at shakespeare-char's (16384, 384) in bf16 took 61.8
//            us on the H200. The next kept the partial sums in float registers (96-128 per
//            thread: 16 warps per SM) and added them up one warp after another behind a
//            barrier each: backward 24.4 us. This one: 14.7-15.3 us, and 29.0 vs 44.7 us at
//            gpt2-124m's (16384, 768) (side by side: dev/layernorm_backward.cu, 2026-12-03).
//   forward  layernorm_forward_warp_kernel<W> (the fallback, as for the backward below): one
//            warp per row, three passes over the row
//            (sum -> mean; squared deviations -> rstd; normalize and store). With a residual,
//            pass 1 also writes s = x + r and later passes read s back (L1/L2 hits). W = 16
//            bytes / sizeof(T) elements per load (128-bit) when C % W == 0 and every pointer
//            is 16-byte aligned, else W = 1. Two-pass variance, not E[x^2] - E[x]^2.
//   backward layernorm_backward_warp_kernel<W>: one warp per row, warps stride over rows
//            (the fallback: unaligned rows, C % W != 0, or C > 32 * W * 4).
//            Pass 1 sums g = dy*w and g*xhat, pass 2 writes dx and adds dy*xhat, dy into the
//            warp's own slice of shared memory (each lane owns fixed columns: no atomics).
//            The block then sums its warps into workspace[block] (2C floats).
//   backward layernorm_backward_regsum_kernel<W, V, Split, HasDsum> (the default where a lane
//            needs at most 16 columns: bf16 rows up to 512, or up to 1024 with Split = 2; float32
//            up to 512 / 1024): `Split` warps share a row, each holding V vectors of W elements
//            of its C / Split columns; dweight and dbias summed in float registers (2 V W a
//            lane) and written to the row group's shared slice once at the end; the next
//            row's dy, s (and dsum), mean and rstd requested before this row is computed; with
//            Split = 2 the two warps add their halves of mean(g) and mean(g * xhat) through
//            shared memory behind a two-warp named barrier (gpt2-124m's 768: 12 columns a lane
//            instead of 24, whose registers halved the resident blocks). `dsum` is a template
//            flag: as a run-time pointer (769accd) it doubled the loop's loads and unpacks in
//            the SASS (1,152 vs 912 instructions) and the kernel ran no faster than the slices.
//            Side by side on the H100 (2026-12-06, dev/layernorm_backward.cu, bf16): 15.9 vs
//            19.4 us at (16384, 384), 25.0 vs 32.9 us with dsum; 34.7 vs 35.4 / 42.0 vs 48.1 us
//            at (16384, 768). Tried and slower there: a forward whose warps walk rows with the
//            next row requested early (benchmarks/profiles/*89fae37*); launching these kernels
//            as programmatic dependents (benchmarks/results/launch-ab-h100-20261206.json).
// All backward versions end with layernorm_param_grad_reduce_kernel: 32 threads per group of 4
// columns sum every 32nd block's partials, then one sums the 32 (the same order every run, so
// dweight and dbias are deterministic, no atomics). Folding it into the backward (fd316cf: the
// last block of each 16 to finish sums their rows, the last of those the groups, on tickets
// each call leaves at zero) was slower on the H100: 15.9 vs 15.1 us at (16384, 384), 36.6 vs
// 34.4 at 768: two fences and atomics in a row cost more than a launch the GPU overlaps.
// Memory per row: forward reads x (+ r) and writes y (+ s); backward reads dy, s (+ dsum),
// writes dx; the parameter traffic (blocks x 2C floats) is small next to it.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c layernorm.cu -I.
#include <type_traits>

#include "cuda_common.cuh"
#include "layernorm.h"

namespace gs {
namespace {

constexpr int kFwdWarps = 8;  // rows per forward block

template <typename T, int W> struct alignas(sizeof(T) * W) Vec {
  T v[W];
};

template <typename T, int W> __device__ __forceinline__ void load_vec(float* out, const T* p) {
  Vec<T, W> v = *reinterpret_cast<const Vec<T, W>*>(p);
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = to_f32(v.v[k]);
}
template <typename T, int W> __device__ __forceinline__ void store_vec(T* p, const float* in) {
  Vec<T, W> v;
#pragma unroll
  for (int k = 0; k < W; ++k) v.v[k] = from_f32<T>(in[k]);
  *reinterpret_cast<Vec<T, W>*>(p) = v;
}

constexpr int kRegMaxV = 4;  // vectors per lane the register kernels hold (C <= 32 * W * 4)

// Lane `lane`'s i-th vector of a row starts at column (i * 32 + lane) * W; columns past C
// (the last vector of a width that is not a multiple of 32 * W) are skipped.
__device__ __forceinline__ int reg_col(int i, int lane, int W) { return (i * 32 + lane) * W; }

template <typename T, typename R, int W, int V>
__global__ void __launch_bounds__(kFwdWarps * 32)
    layernorm_forward_reg_kernel(T* __restrict__ out, T* __restrict__ sum_out,
                                 float* __restrict__ mean, float* __restrict__ rstd,
                                 const T* __restrict__ x, const R* __restrict__ res,
                                 const T* __restrict__ weight, const T* __restrict__ bias,
                                 int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kFwdWarps + threadIdx.x / 32;
  if (row >= N) return;
  float v[V][W];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = reg_col(i, lane, W);
    if (c >= C) continue;
    load_vec<T, W>(v[i], x + row * C + c);
    if (res) {
      float rb[W];
      load_vec<R, W>(rb, res + row * C + c);
      Vec<T, W> packed;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        packed.v[k] = from_f32<T>(v[i][k] + rb[k]);
        v[i][k] = to_f32(packed.v[k]);  // the rounded sum, as stored and as backward reads it
      }
      *reinterpret_cast<Vec<T, W>*>(sum_out + row * C + c) = packed;
    }
#pragma unroll
    for (int k = 0; k < W; ++k) sum += v[i][k];
  }
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (reg_col(i, lane, W) >= C) continue;
#pragma unroll
    for (int k = 0; k < W; ++k) var += (v[i][k] - m) * (v[i][k] - m);
  }
  const float rs = rsqrtf(warp_sum(var) / C + eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = reg_col(i, lane, W);
    if (c >= C) continue;
    float wb[W], bb[W];
    load_vec<T, W>(wb, weight + c);
    if (bias) load_vec<T, W>(bb, bias + c);
#pragma unroll
    for (int k = 0; k < W; ++k) v[i][k] = (v[i][k] - m) * rs * wb[k] + (bias ? bb[k] : 0.0f);
    store_vec<T, W>(out + row * C + c, v[i]);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// The end of every backward kernel: once all its warps are done, the block's `slices` shared
// slices of 2C floats (dweight, then dbias) summed column by column, in slice order, into the
// block's row of the workspace, which layernorm_param_grad_reduce_kernel reduces.
__device__ __forceinline__ void block_partials_to_workspace(float* __restrict__ workspace,
                                                            const float* shared, int slices,
                                                            int C) {
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float total = 0.0f;
    for (int k = 0; k < slices; ++k) total += shared[k * 2 * C + c];
    workspace[int64_t(blockIdx.x) * 2 * C + c] = total;
  }
}

template <typename T, int W, int V>
__global__ void __launch_bounds__(256)
    layernorm_backward_reg_kernel(T* __restrict__ dx, float* __restrict__ workspace,
                                  const T* __restrict__ dout, const T* __restrict__ dsum,
                                  const T* __restrict__ src, const T* __restrict__ weight,
                                  const float* __restrict__ mean, const float* __restrict__ rstd,
                                  int64_t N, int C) {
  static_assert(W % 4 == 0, "the partial sums move as float4");
  extern __shared__ float shared[];  // [warps][2C]: each warp's dweight, then dbias
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* mine = shared + warp * 2 * C;
  using P = Vec<T, W>;
  P w[V];  // the row's inputs stay packed (bf16: half the registers of floats)
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = reg_col(i, lane, W);
    if (c >= C) continue;
    w[i] = *reinterpret_cast<const P*>(weight + c);
#pragma unroll
    for (int k = 0; k < W; k += 4) {
      *reinterpret_cast<float4*>(mine + c + k) = make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(mine + C + c + k) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < N;
       row += int64_t(gridDim.x) * warps) {
    P dy[V], xs[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = reg_col(i, lane, W);
      if (c >= C) continue;
      dy[i] = *reinterpret_cast<const P*>(dout + row * C + c);
      xs[i] = *reinterpret_cast<const P*>(src + row * C + c);
    }
    const float m = mean[row], rs = rstd[row];
    float c1 = 0.0f, c2 = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (reg_col(i, lane, W) >= C) continue;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float g = to_f32(dy[i].v[k]) * to_f32(w[i].v[k]);
        c1 += g;
        c2 += g * ((to_f32(xs[i].v[k]) - m) * rs);
      }
    }
    c1 = warp_sum(c1) / C;
    c2 = warp_sum(c2) / C;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = reg_col(i, lane, W);
      if (c >= C) continue;
      float dsb[W];
      if (dsum) load_vec<T, W>(dsb, dsum + row * C + c);
      P out;
#pragma unroll
      for (int k = 0; k < W; k += 4) {
        // this lane's own columns of the warp's slice: float4 read-modify-writes, lanes on
        // consecutive 16-byte words (no bank conflicts)
        float4 aw = *reinterpret_cast<float4*>(mine + c + k);
        float4 ab = *reinterpret_cast<float4*>(mine + C + c + k);
        float* sw = &aw.x;
        float* sb = &ab.x;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float d = to_f32(dy[i].v[k + j]), xh = (to_f32(xs[i].v[k + j]) - m) * rs;
          out.v[k + j] = from_f32<T>(rs * (d * to_f32(w[i].v[k + j]) - c1 - xh * c2) +
                                     (dsum ? dsb[k + j] : 0.0f));
          sw[j] += d * xh;
          sb[j] += d;
        }
        *reinterpret_cast<float4*>(mine + c + k) = aw;
        *reinterpret_cast<float4*>(mine + C + c + k) = ab;
      }
      *reinterpret_cast<P*>(dx + row * C + c) = out;
    }
  }
  block_partials_to_workspace(workspace, shared, warps, C);
}

// The backward with register partial sums (header comment). Warp `warp` of the block is part
// `warp % Split` of row group `warp / Split`; a group's warps walk the same rows, so they reach
// each named barrier together.
constexpr int kRegSumMaxElems = 16;  // columns a lane holds: 2 x 16 float sums + packed inputs
template <typename T, int W, int V, int Split, bool HasDsum>
__global__ void __launch_bounds__(256)
    layernorm_backward_regsum_kernel(T* __restrict__ dx, float* __restrict__ workspace,
                                     const T* __restrict__ dout, const T* __restrict__ dsum,
                                     const T* __restrict__ src, const T* __restrict__ weight,
                                     const float* __restrict__ mean,
                                     const float* __restrict__ rstd, int64_t N, int C) {
  // [groups][2C]: each group's dweight, then dbias; with Split > 1 then [2][groups][Split][2]:
  // each warp's share of (c1, c2), double-buffered by row parity
  extern __shared__ float shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int groups = blockDim.x / 32 / Split, group = warp / Split, part = warp % Split;
  const int cs = C / Split, c0 = part * cs;  // this warp's columns: [c0, c0 + cs)
  using P = Vec<T, W>;
  P w[V];
  float dw[V][W] = {}, db[V][W] = {};
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = reg_col(i, lane, W);
    if (c < cs) w[i] = *reinterpret_cast<const P*>(weight + c0 + c);
  }
  const int64_t stride = int64_t(gridDim.x) * groups;
  P dy[V], xs[V], ds[V];
  float m = 0.0f, rs = 0.0f;
  auto load_row = [&](int64_t r, P (&dyr)[V], P (&xr)[V], P (&dr)[V], float& mr, float& rr) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = reg_col(i, lane, W);
      if (c >= cs) continue;
      dyr[i] = *reinterpret_cast<const P*>(dout + r * C + c0 + c);
      xr[i] = *reinterpret_cast<const P*>(src + r * C + c0 + c);
      if constexpr (HasDsum) dr[i] = *reinterpret_cast<const P*>(dsum + r * C + c0 + c);
    }
    mr = mean[r];
    rr = rstd[r];
  };
  int64_t row = int64_t(blockIdx.x) * groups + group;
  if (row < N) load_row(row, dy, xs, ds, m, rs);
  for (int parity = 0; row < N; row += stride, parity ^= 1) {
    P ndy[V], nxs[V], nds[V];
    float nm = 0.0f, nrs = 0.0f;
    if (row + stride < N) load_row(row + stride, ndy, nxs, nds, nm, nrs);
    float c1 = 0.0f, c2 = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (reg_col(i, lane, W) >= cs) continue;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float g = to_f32(dy[i].v[k]) * to_f32(w[i].v[k]);
        c1 += g;
        c2 += g * ((to_f32(xs[i].v[k]) - m) * rs);
      }
    }
    c1 = warp_sum(c1);
    c2 = warp_sum(c2);
    if constexpr (Split > 1) {
      // Slot `parity` is rewritten two rows later, after the next barrier, which the partner
      // reaches only once it has read this row's values.
      float* slot = shared + groups * 2 * C + (parity * groups + group) * Split * 2;
      if (lane == 0) slot[2 * part] = c1, slot[2 * part + 1] = c2;
      asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(32 * Split) : "memory");
      c1 = c2 = 0.0f;
#pragma unroll
      for (int p = 0; p < Split; ++p) c1 += slot[2 * p], c2 += slot[2 * p + 1];  // one order
    }
    c1 /= C;
    c2 /= C;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = reg_col(i, lane, W);
      if (c >= cs) continue;
      P out;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = to_f32(dy[i].v[k]), xh = (to_f32(xs[i].v[k]) - m) * rs;
        float v = rs * (d * to_f32(w[i].v[k]) - c1 - xh * c2);
        if constexpr (HasDsum) v += to_f32(ds[i].v[k]);
        out.v[k] = from_f32<T>(v);
        dw[i][k] += d * xh;
        db[i][k] += d;
      }
      *reinterpret_cast<P*>(dx + row * C + c0 + c) = out;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      dy[i] = ndy[i], xs[i] = nxs[i];
      if constexpr (HasDsum) ds[i] = nds[i];
    }
    m = nm;
    rs = nrs;
  }
  float* mine = shared + group * 2 * C + c0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = reg_col(i, lane, W);
    if (c >= cs) continue;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      mine[c + k] = dw[i][k];
      mine[C + c + k] = db[i][k];
    }
  }
  block_partials_to_workspace(workspace, shared, groups, C);
}

template <typename T, typename R, int W>
__global__ void layernorm_forward_warp_kernel(T* __restrict__ out, T* sum_out,
                                              float* __restrict__ mean, float* __restrict__ rstd,
                                              const T* x, const R* __restrict__ res,
                                              const T* __restrict__ weight,
                                              const T* __restrict__ bias, int64_t N, int C,
                                              float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kFwdWarps + threadIdx.x / 32;
  if (row >= N) return;
  const T* src = x + row * C;
  float sum = 0.0f, buf[W], rb[W];
  if (res) {
    T* s = sum_out + row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
      load_vec<T, W>(buf, src + c);
      load_vec<R, W>(rb, res + row * C + c);
      Vec<T, W> packed;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        packed.v[k] = from_f32<T>(buf[k] + rb[k]);
        sum += to_f32(packed.v[k]);  // the rounded sum, as stored and as backward reads it
      }
      *reinterpret_cast<Vec<T, W>*>(s + c) = packed;
    }
    src = s;
    __syncwarp();  // this warp's stores of s are visible to its own reads below
  } else {
    for (int c = lane * W; c < C; c += 32 * W) {
      load_vec<T, W>(buf, src + c);
#pragma unroll
      for (int k = 0; k < W; ++k) sum += buf[k];
    }
  }
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    load_vec<T, W>(buf, src + c);
#pragma unroll
    for (int k = 0; k < W; ++k) var += (buf[k] - m) * (buf[k] - m);
  }
  const float rs = rsqrtf(warp_sum(var) / C + eps);
  float wb[W], bb[W];
  for (int c = lane * W; c < C; c += 32 * W) {
    load_vec<T, W>(buf, src + c);
    load_vec<T, W>(wb, weight + c);
    if (bias) load_vec<T, W>(bb, bias + c);
#pragma unroll
    for (int k = 0; k < W; ++k) buf[k] = (buf[k] - m) * rs * wb[k] + (bias ? bb[k] : 0.0f);
    store_vec<T, W>(out + row * C + c, buf);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

template <typename T, int W>
__global__ void layernorm_backward_warp_kernel(T* __restrict__ dx, float* __restrict__ workspace,
                                               const T* __restrict__ dout,
                                               const T* __restrict__ dsum,
                                               const T* __restrict__ src,
                                               const T* __restrict__ weight,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, int64_t N, int C) {
  extern __shared__ float shared[];  // [warps][2C]: this block's dweight, dbias per warp
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* mine = shared + warp * 2 * C;
  for (int c = lane; c < 2 * C; c += 32) mine[c] = 0.0f;
  __syncwarp();
  float dyb[W], sb[W], wb[W], dsb[W], dxb[W];
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < N;
       row += int64_t(gridDim.x) * warps) {
    const float m = mean[row], rs = rstd[row];
    const T *dy = dout + row * C, *s = src + row * C;
    float c1 = 0.0f, c2 = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      load_vec<T, W>(dyb, dy + c);
      load_vec<T, W>(sb, s + c);
      load_vec<T, W>(wb, weight + c);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        float g = dyb[k] * wb[k];
        c1 += g;
        c2 += g * (sb[k] - m) * rs;
      }
    }
    c1 = warp_sum(c1) / C;
    c2 = warp_sum(c2) / C;
    for (int c = lane * W; c < C; c += 32 * W) {
      load_vec<T, W>(dyb, dy + c);
      load_vec<T, W>(sb, s + c);
      load_vec<T, W>(wb, weight + c);
      if (dsum) load_vec<T, W>(dsb, dsum + row * C + c);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        float xh = (sb[k] - m) * rs;
        dxb[k] = rs * (dyb[k] * wb[k] - c1 - xh * c2) + (dsum ? dsb[k] : 0.0f);
        mine[c + k] += dyb[k] * xh;
        mine[C + c + k] += dyb[k];
      }
      store_vec<T, W>(dx + row * C + c, dxb);
    }
  }
  block_partials_to_workspace(workspace, shared, warps, C);
}

// The parameter reduce: column group tx of a block owns Cols consecutive columns of the 2C
// (dweight, then dbias), lane ty sums blocks ty, ty + 32, ... (float4 loads when 2C % 4 == 0:
// every load of a lane independent of the others, 8 at shakespeare-char's 256 blocks), then
// one thread per column group adds the 32 lanes in order. The same order every run, so
// dweight and dbias are deterministic without atomics. It replaced 8 lanes of one float each
// (32 loads a lane at 256 blocks): 4.8 vs 6.1 us under ncu at (16384, 384) on the H100
// (benchmarks/profiles/ncu-layernorm-h100-20261206-*.txt).
constexpr int kReduceGroups = 8, kReduceLanes = 32;
template <typename T, int Cols>
__global__ void __launch_bounds__(kReduceGroups * kReduceLanes)
    layernorm_param_grad_reduce_kernel(T* __restrict__ dweight, T* __restrict__ dbias,
                                       const float* __restrict__ workspace, int blocks, int C) {
  __shared__ float part[kReduceLanes][kReduceGroups * Cols + 1];
  const int tx = threadIdx.x % kReduceGroups, ty = threadIdx.x / kReduceGroups;
  const int c = (blockIdx.x * kReduceGroups + tx) * Cols;  // this thread's first column
  float total[Cols] = {};
  if (c < 2 * C) {
#pragma unroll 4
    for (int b = ty; b < blocks; b += kReduceLanes) {
      const float* p = workspace + int64_t(b) * 2 * C + c;
      if constexpr (Cols == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        total[0] += v.x, total[1] += v.y, total[2] += v.z, total[3] += v.w;
      } else {
        total[0] += p[0];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < Cols; ++k) part[ty][tx * Cols + k] = total[k];
  __syncthreads();
  if (ty != 0 || c >= 2 * C) return;
#pragma unroll
  for (int k = 0; k < Cols; ++k) {
    float sum = 0.0f;
    for (int j = 0; j < kReduceLanes; ++j) sum += part[j][tx * Cols + k];
    const int col = c + k;
    if (col < C)
      dweight[col] = from_f32<T>(sum);
    else if (col < 2 * C)
      dbias[col - C] = from_f32<T>(sum);
  }
}

// dweight, dbias from the backward's (blocks, 2C) float partials
template <typename T>
void param_grad_reduce(T* dweight, T* dbias, const float* workspace, int blocks, int C,
                       cudaStream_t stream) {
  const bool vec = C % 2 == 0 && reinterpret_cast<uintptr_t>(workspace) % 16 == 0;
  const int cols = vec ? 4 : 1;
  const unsigned grid = ceil_div(2 * int64_t(C), kReduceGroups * cols);
  if (vec)
    layernorm_param_grad_reduce_kernel<T, 4><<<grid, kReduceGroups * kReduceLanes, 0, stream>>>(
        dweight, dbias, workspace, blocks, C);
  else
    layernorm_param_grad_reduce_kernel<T, 1><<<grid, kReduceGroups * kReduceLanes, 0, stream>>>(
        dweight, dbias, workspace, blocks, C);
}

std::string shape_text(LayerNormShape s) {
  return "(N=" + std::to_string(s.N) + ", C=" + std::to_string(s.C) + ")";
}

template <typename T, typename R>
void forward(T* out, T* sum_out, float* mean, float* rstd, const T* x, const R* res,
             const T* weight, const T* bias, LayerNormShape s, float eps, cudaStream_t stream) {
  if (s.N == 0) return;
  constexpr int W = 16 / sizeof(T);
  const bool vec = s.C % W == 0 && aligned16(out) && aligned16(x) && aligned16(weight) &&
                   (!bias || aligned16(bias)) && (!res || (aligned16(sum_out) &&
                   reinterpret_cast<uintptr_t>(res) % (sizeof(R) * W) == 0));
  const unsigned blocks = ceil_div(s.N, kFwdWarps);
  const int V = int(ceil_div(s.C, 32 * W));
  auto launch = [&](auto kernel) {
    kernel<<<blocks, 32 * kFwdWarps, 0, stream>>>(out, sum_out, mean, rstd, x, res, weight, bias,
                                                  s.N, int(s.C), eps);
  };
  if (vec && V <= kRegMaxV) {
    if (V == 1) launch(layernorm_forward_reg_kernel<T, R, W, 1>);
    else if (V == 2) launch(layernorm_forward_reg_kernel<T, R, W, 2>);
    else if (V == 3) launch(layernorm_forward_reg_kernel<T, R, W, 3>);
    else launch(layernorm_forward_reg_kernel<T, R, W, 4>);
  } else if (vec)
    layernorm_forward_warp_kernel<T, R, W><<<blocks, 32 * kFwdWarps, 0, stream>>>(
        out, sum_out, mean, rstd, x, res, weight, bias, s.N, int(s.C), eps);
  else
    layernorm_forward_warp_kernel<T, R, 1><<<blocks, 32 * kFwdWarps, 0, stream>>>(
        out, sum_out, mean, rstd, x, res, weight, bias, s.N, int(s.C), eps);
  check_launch("layernorm_forward", shape_text(s));
}

// The register-sum kernel's shape for rows of C columns: `split` warps a row, each lane V vectors
// of W elements; w == 0 where none fits (the shared-slice kernels run). The smallest split
// that fits; bf16 also tries 8-byte vectors, preferring a W whose vectors fill every lane
// (shakespeare-char's 384 in bf16: 3 x 128 columns in 8-byte vectors, not 2 x 256 with half the
// lanes idle in the second: 15.3 vs 17.4 us on the H200, side by side).
struct RegSumShape {
  int w = 0, v = 0, split = 0;
};
// Its dynamic shared memory for a block of `warps` warps: a slice of 2C floats per row group,
// then with split > 1 the (c1, c2) exchange slots, [2][groups][split][2] floats.
inline size_t regsum_shared_bytes(int64_t C, int warps, int split) {
  return (size_t(warps / split) * 2 * C + (split > 1 ? 4 * warps : 0)) * sizeof(float);
}
template <typename T> RegSumShape regsum_shape(int64_t C, int warps) {
  constexpr int Wf = 16 / sizeof(T);
  constexpr int Ws[2] = {Wf, sizeof(T) == 2 ? Wf / 2 : Wf};
  for (int split : {1, 2}) {
    if (warps % split != 0 || C % split != 0) continue;
    const int64_t cs = C / split;
    for (bool full_lanes : {true, false})
      for (int w : Ws) {
        const int64_t v = ceil_div(cs, int64_t(32) * w);
        if (cs % w == 0 && (!full_lanes || cs % (32 * w) == 0) && v * w <= kRegSumMaxElems)
          return {w, int(v), split};
      }
  }
  return {};
}

template <typename T>
void backward(T* dx, T* dweight, T* dbias, float* workspace, const T* dout, const T* dsum,
              const T* src, const T* weight, const float* mean, const float* rstd,
              LayerNormShape s, cudaStream_t stream) {
  constexpr int W = 16 / sizeof(T);
  const int warps = ln_bwd_warps(s.C);
  const int blocks = int(ln_bwd_blocks(s.N, s.C));
  const bool vec = s.C % W == 0 && aligned16(dx) && aligned16(dout) && aligned16(src) &&
                   aligned16(weight) && (!dsum || aligned16(dsum));
  const RegSumShape rs = vec ? regsum_shape<T>(s.C, warps) : RegSumShape{};
  if (rs.w != 0) {
    const size_t smem = regsum_shared_bytes(s.C, warps, rs.split);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, 32 * warps, smem, stream>>>(dx, workspace, dout, dsum, src, weight,
                                                   mean, rstd, s.N, int(s.C));
    };
    // every (W, V, Split, dsum) the shape rule can return, and no more (compile time)
    auto by_dsum = [&](auto w, auto v, auto split) {
      constexpr int Wc = decltype(w)::value, Vc = decltype(v)::value;
      constexpr int Sc = decltype(split)::value;
      if constexpr (Vc * Wc <= kRegSumMaxElems) {
        if (dsum) launch(layernorm_backward_regsum_kernel<T, Wc, Vc, Sc, true>);
        else launch(layernorm_backward_regsum_kernel<T, Wc, Vc, Sc, false>);
      }
    };
    auto by_split = [&](auto w, auto v) {
      if (rs.split == 1) by_dsum(w, v, std::integral_constant<int, 1>{});
      else by_dsum(w, v, std::integral_constant<int, 2>{});
    };
    auto by_v = [&](auto w) {
      if (rs.v == 1) by_split(w, std::integral_constant<int, 1>{});
      else if (rs.v == 2) by_split(w, std::integral_constant<int, 2>{});
      else if (rs.v == 3) by_split(w, std::integral_constant<int, 3>{});
      else by_split(w, std::integral_constant<int, 4>{});
    };
    if (rs.w == W) by_v(std::integral_constant<int, W>{});
    else if constexpr (sizeof(T) == 2) by_v(std::integral_constant<int, W / 2>{});
  } else {
    const size_t smem = size_t(warps) * 2 * s.C * sizeof(float);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, 32 * warps, smem, stream>>>(dx, workspace, dout, dsum, src, weight, mean,
                                                   rstd, s.N, int(s.C));
    };
    const int V = int(ceil_div(s.C, 32 * W));
    if (vec && V <= kRegMaxV) {
      if (V == 1) launch(layernorm_backward_reg_kernel<T, W, 1>);
      else if (V == 2) launch(layernorm_backward_reg_kernel<T, W, 2>);
      else if (V == 3) launch(layernorm_backward_reg_kernel<T, W, 3>);
      else launch(layernorm_backward_reg_kernel<T, W, 4>);
    } else if (vec) {
      launch(layernorm_backward_warp_kernel<T, W>);
    } else {
      launch(layernorm_backward_warp_kernel<T, 1>);
    }
  }
  check_launch("layernorm_backward", shape_text(s));
  param_grad_reduce<T>(dweight, dbias, workspace, blocks, int(s.C), stream);
  check_launch("layernorm_backward (parameter reduce)", shape_text(s));
}

template <typename T> using D = typename device_type<T>::type;

}  // namespace

void layernorm_forward_cuda(void* out, void* sum_out, float* mean, float* rstd, const void* x,
                            const void* residual, DType residual_dtype, const void* weight,
                            const void* bias, LayerNormShape shape, float eps, DType dtype,
                            uintptr_t stream) {
  auto run = [&](auto ttag, auto rtag) {
    using T = decltype(ttag);
    using R = decltype(rtag);
    forward<T, R>(static_cast<T*>(out), static_cast<T*>(sum_out), mean, rstd,
                  static_cast<const T*>(x), static_cast<const R*>(residual),
                  static_cast<const T*>(weight), static_cast<const T*>(bias), shape, eps,
                  as_stream(stream));
  };
  const bool tb = dtype == DType::bf16, rb = residual_dtype == DType::bf16;
  if (tb && rb) run(__nv_bfloat16{}, __nv_bfloat16{});
  else if (tb) run(__nv_bfloat16{}, float{});
  else if (rb) run(float{}, __nv_bfloat16{});
  else run(float{}, float{});
}

void layernorm_backward_cuda(void* dx, void* dweight, void* dbias, float* workspace,
                             const void* dout, const void* dsum, const void* src,
                             const void* weight, const float* mean, const float* rstd,
                             LayerNormShape shape, DType dtype, uintptr_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    backward<T>(static_cast<T*>(dx), static_cast<T*>(dweight), static_cast<T*>(dbias), workspace,
                static_cast<const T*>(dout), static_cast<const T*>(dsum),
                static_cast<const T*>(src), static_cast<const T*>(weight), mean, rstd, shape,
                as_stream(stream));
  };
  if (dtype == DType::bf16) run(__nv_bfloat16{});
  else run(float{});
}

}  // namespace gs
