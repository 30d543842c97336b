// cross_entropy.cu: softmax cross-entropy loss and dlogits per row on CUDA. Formulas in
// cross_entropy.h; CPU reference: row_scalar in cross_entropy.cpp.
//
// Versions (the launcher picks W by alignment; tests cover both):
//   cross_entropy_online_kernel<W>: one block per row. Pass 1 reads the row once with an
//     online max/sum (each thread keeps (m, s) and rescales s when its max grows, Milakov &
//     Gimelshein 2018, "Online normalizer calculation for softmax"); the block combines the
//     pairs. Pass 2 (with a gradient) reads the row again, mostly from L2, and writes
//     (softmax - onehot) * scale over it (in place). W = 128-bit loads when V % W == 0 and the
//     row pointers are 16-byte aligned, else 1.
//   cross_entropy_warp_kernel<W>: one warp per row, eight rows a block, for V <= kWarpRowMaxV
//     (the char and esp32 vocabularies): the same two passes with warp shuffles alone, no shared
//     memory and no block barrier. With one block of 32 threads per row, shakespeare-char's
//     16384 x 65 logits took 0.44x the time of torch.compile's loss (2026-12-03).
// The (p - 1) of the target element is formed in float before rounding to bfloat16, so a
// confident prediction keeps its small gradient. Memory: 1 read (loss only) or 2 reads + 1
// write of the row: what any softmax-CE that keeps no fp32 copy of the logits must move.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c cross_entropy.cu -I.
#include "cross_entropy.h"
#include "cuda_common.cuh"

namespace gs {
namespace {

template <typename T, int W> struct alignas(sizeof(T) * W) Vec {
  T v[W];
};

// merge two online-softmax states (max m, sum s of exp(z - m)); an empty state has m = -inf
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;
  s = (m == -INFINITY ? 0.0f : s * __expf(m - nm)) + (om == -INFINITY ? 0.0f : os * __expf(om - nm));
  m = nm;
}

// this thread's online (max, sum) over its vectors of the row: columns first, first + step, ...
template <typename T, int W>
__device__ __forceinline__ void online_partial(const T* zr, int V, int first, int step, float& m,
                                               float& s) {
  for (int c = first; c < V; c += step) {
    Vec<T, W> v = *reinterpret_cast<const Vec<T, W>*>(zr + c);
    float x[W], pm = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      x[k] = to_f32(v.v[k]);
      pm = fmaxf(pm, x[k]);
    }
    if (pm > m) {
      s = m == -INFINITY ? 0.0f : s * __expf(m - pm);
      m = pm;
    }
#pragma unroll
    for (int k = 0; k < W; ++k) s += __expf(x[k] - m);
  }
}

// every lane of the warp ends with the warp's combined (max, sum)
__device__ __forceinline__ void warp_merge(float& m, float& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    float om = __shfl_xor_sync(0xffffffffu, m, offset);
    float os = __shfl_xor_sync(0xffffffffu, s, offset);
    merge(m, s, om, os);
  }
}

// dz = (softmax - onehot(t)) * scale over this thread's vectors of the row (dr may be zr)
template <typename T, int W>
__device__ __forceinline__ void write_dlogits(T* dr, const T* zr, int V, int first, int step,
                                              float lse, int64_t t, float scale) {
  for (int c = first; c < V; c += step) {
    Vec<T, W> v = *reinterpret_cast<const Vec<T, W>*>(zr + c), out;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float p = __expf(to_f32(v.v[k]) - lse);
      out.v[k] = from_f32<T>((p - (c + k == t ? 1.0f : 0.0f)) * scale);
    }
    *reinterpret_cast<Vec<T, W>*>(dr + c) = out;
  }
}

template <typename T, int W>
__global__ void cross_entropy_online_kernel(float* __restrict__ losses, T* dz, const T* z,
                                            const int64_t* __restrict__ targets,
                                            const float* __restrict__ grad_scale,
                                            int64_t ignore_index, int V) {
  __shared__ float shared_m[32], shared_s[32];
  const int64_t row = blockIdx.x;
  const T* zr = z + row * V;
  T* dr = dz ? dz + row * V : nullptr;
  const int64_t t = targets[row];
  if (t == ignore_index) {  // the same branch for the whole block
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (dr)
      for (int c = threadIdx.x; c < V; c += blockDim.x) dr[c] = from_f32<T>(0.0f);
    return;
  }
  const bool valid = t >= 0 && t < V;
  // read z_t before pass 2 may overwrite it; the reductions below order the two
  const float zt = threadIdx.x == 0 && valid ? to_f32(zr[t]) : 0.0f;

  float m = -INFINITY, s = 0.0f;
  online_partial<T, W>(zr, V, threadIdx.x * W, blockDim.x * W, m, s);
  warp_merge(m, s);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? shared_m[lane] : -INFINITY;
  s = lane < warps ? shared_s[lane] : 0.0f;
  warp_merge(m, s);
  const float lse = m + __logf(s);
  if (threadIdx.x == 0) losses[row] = valid ? lse - zt : NAN;
  if (!dr) return;
  write_dlogits<T, W>(dr, zr, V, threadIdx.x * W, blockDim.x * W, lse, t, *grad_scale);
}

constexpr int kWarpRowMaxV = 2048;  // above: a block per row (the warp loops get long)
constexpr int kWarpRowsPerBlock = 8;

template <typename T, int W>
__global__ void cross_entropy_warp_kernel(float* __restrict__ losses, T* dz, const T* z,
                                          const int64_t* __restrict__ targets,
                                          const float* __restrict__ grad_scale,
                                          int64_t ignore_index, int V, int64_t n) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
  if (row >= n) return;  // the whole warp: rows are per warp
  const T* zr = z + row * V;
  T* dr = dz ? dz + row * V : nullptr;
  const int64_t t = targets[row];
  if (t == ignore_index) {
    if (lane == 0) losses[row] = 0.0f;
    if (dr)
      for (int c = lane; c < V; c += 32) dr[c] = from_f32<T>(0.0f);
    return;
  }
  const bool valid = t >= 0 && t < V;
  // z_t, read by lane 0 and broadcast before any lane can write pass 2 over it (in place):
  // every lane needs the shuffle's value, so none passes it before lane 0's load is done
  float zt = lane == 0 && valid ? to_f32(zr[t]) : 0.0f;
  zt = __shfl_sync(0xffffffffu, zt, 0);

  float m = -INFINITY, s = 0.0f;
  online_partial<T, W>(zr, V, lane * W, 32 * W, m, s);
  warp_merge(m, s);
  const float lse = m + __logf(s);
  if (lane == 0) losses[row] = valid ? lse - zt : NAN;
  if (!dr) return;
  write_dlogits<T, W>(dr, zr, V, lane * W, 32 * W, lse, t, *grad_scale);
}

template <typename T>
void launch(float* losses, T* dz, const T* z, const int64_t* targets, const float* grad_scale,
            int64_t ignore_index, CrossEntropyShape s, cudaStream_t stream) {
  if (s.n == 0) return;
  constexpr int W = 16 / sizeof(T);
  const bool vec = s.V % W == 0 && aligned16(z) && (!dz || aligned16(dz));
  const int width = vec ? W : 1;
  if (s.V <= kWarpRowMaxV) {
    const unsigned blocks = unsigned((s.n + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    const unsigned threads = 32 * kWarpRowsPerBlock;
    if (vec)
      cross_entropy_warp_kernel<T, W><<<blocks, threads, 0, stream>>>(
          losses, dz, z, targets, grad_scale, ignore_index, int(s.V), s.n);
    else
      cross_entropy_warp_kernel<T, 1><<<blocks, threads, 0, stream>>>(
          losses, dz, z, targets, grad_scale, ignore_index, int(s.V), s.n);
    check_launch("cross_entropy (warp per row)",
                 "(n=" + std::to_string(s.n) + ", V=" + std::to_string(s.V) + ")");
    return;
  }
  // about four vector loads per thread, between one warp and 1024 threads
  long long threads = ((s.V / width + 3) / 4 + 31) / 32 * 32;
  threads = std::max(32LL, std::min(1024LL, threads));
  if (vec)
    cross_entropy_online_kernel<T, W><<<unsigned(s.n), unsigned(threads), 0, stream>>>(
        losses, dz, z, targets, grad_scale, ignore_index, int(s.V));
  else
    cross_entropy_online_kernel<T, 1><<<unsigned(s.n), unsigned(threads), 0, stream>>>(
        losses, dz, z, targets, grad_scale, ignore_index, int(s.V));
  check_launch("cross_entropy",
               "(n=" + std::to_string(s.n) + ", V=" + std::to_string(s.V) + ")");
}

}  // namespace

void cross_entropy_cuda(float* losses, void* dlogits, const void* logits, const int64_t* targets,
                        const float* grad_scale, int64_t ignore_index, CrossEntropyShape shape,
                        DType dtype, uintptr_t stream) {
  if (dtype == DType::bf16)
    launch(losses, static_cast<__nv_bfloat16*>(dlogits), static_cast<const __nv_bfloat16*>(logits),
           targets, grad_scale, ignore_index, shape, as_stream(stream));
  else
    launch(losses, static_cast<float*>(dlogits), static_cast<const float*>(logits), targets,
           grad_scale, ignore_index, shape, as_stream(stream));
}

}  // namespace gs
