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
//   cross_entropy_staged_kernel<T, Threads> (sm_90 and newer, the default where two rows fit
//     shared memory: bf16 V up to ~58,000, float32 up to ~29,000; set_cross_entropy_staged):
//     a persistent CTA per SM walks rows blockIdx.x, + gridDim.x, ...; one thread copies each
//     row into shared memory with the Hopper bulk copy (cp.async.bulk on an mbarrier) while the
//     block works on the row before (two buffers), then the same two passes run from shared
//     memory: the row is read from memory once, all of it in flight at once, and written once.
//     The online kernel above keeps one 16-byte load a thread in flight and reads the row a
//     second time (from L2). Side by side on the H100 (dev/cross_entropy_rows.cu, 2026-12-07):
//     at gpt2-124m's (16384, 50304) in bf16, 1,206 vs 1,469 us (90.7 vs 74.5 % of the copy
//     bandwidth); one 2,560-row chunk of the fused LM-head loss in place, 195 vs 210 us (its
//     rows partly still in L2 from the matmul that wrote them). 256 or 1,024 threads: the same
//     within 1.6 %. End to end (gpt2-124m, 64 x 8) a tie: 502.8 k vs 501.5 k tokens/s.
//   cross_entropy_warp_kernel<W>: one warp per row, eight rows a block, for V <= kWarpRowMaxV
//     (the char and esp32 vocabularies): the same two passes with warp shuffles alone, no shared
//     memory and no block barrier. With one block of 32 threads per row, shakespeare-char's
//     16384 x 65 logits took 0.44x the time of torch.compile's loss (2026-12-03).
// The (p - 1) of the target element is formed in float before rounding to bfloat16, so a
// confident prediction keeps its small gradient. Memory: 1 read (loss only) or 2 reads + 1
// write of the row: what any softmax-CE that keeps no fp32 copy of the logits must move.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c cross_entropy.cu -I.
#include <algorithm>

#include "cluster.cuh"
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

// every thread of the block ends with the block's combined (max, sum); shared_m and shared_s
// hold 32 floats each and are read after the barrier inside: a caller that writes them again
// must pass another __syncthreads first
__device__ __forceinline__ void block_merge(float& m, float& s, float* shared_m, float* shared_s) {
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
  block_merge(m, s, shared_m, shared_s);
  const float lse = m + __logf(s);
  if (threadIdx.x == 0) losses[row] = valid ? lse - zt : NAN;
  if (!dr) return;
  write_dlogits<T, W>(dr, zr, V, threadIdx.x * W, blockDim.x * W, lse, t, *grad_scale);
}

// The staged kernel (header comment). Dynamic shared memory: two row buffers of V elements
// (V * sizeof(T) a multiple of 16: the launcher checks), then two mbarriers.
template <typename T, int Threads>
__global__ void __launch_bounds__(Threads, 1)
    cross_entropy_staged_kernel(float* __restrict__ losses, T* dz, const T* z,
                                const int64_t* __restrict__ targets,
                                const float* __restrict__ grad_scale, int64_t ignore_index,
                                int V, int64_t n) {
#ifdef GS_CLUSTERS
  constexpr int W = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ float shared_m[32], shared_s[32];
  const unsigned row_bytes = unsigned(V) * sizeof(T);
  uint64_t* bars = reinterpret_cast<uint64_t*>(staged + 2 * row_bytes);
  const int64_t stride = gridDim.x;
  if (threadIdx.x == 0) {
    mbarrier_init(&bars[0]);
    mbarrier_init(&bars[1]);
    if (blockIdx.x < n) bulk_load(staged, z + int64_t(blockIdx.x) * V, row_bytes, &bars[0]);
  }
  __syncthreads();  // the mbarriers are initialized
  const float scale = dz ? *grad_scale : 0.0f;
  const int first = threadIdx.x * W, step = Threads * W;
  int i = 0;
  for (int64_t row = blockIdx.x; row < n; row += stride, ++i) {
    const int b = i & 1;
    // the next row into the other buffer, free since the barrier that ended the last row
    if (threadIdx.x == 0 && row + stride < n)
      bulk_load(staged + (b ^ 1) * row_bytes, z + (row + stride) * V, row_bytes, &bars[b ^ 1]);
    const int64_t t = targets[row];
    T* dr = dz ? dz + row * V : nullptr;
    mbar_wait<false>(&bars[b], (i >> 1) & 1);
    const T* zr = reinterpret_cast<const T*>(staged + b * row_bytes);
    if (t == ignore_index) {  // the same branch for the whole block
      if (threadIdx.x == 0) losses[row] = 0.0f;
      if (dr)
        for (int c = first; c < V; c += step) {
          Vec<T, W> zero;
#pragma unroll
          for (int k = 0; k < W; ++k) zero.v[k] = from_f32<T>(0.0f);
          *reinterpret_cast<Vec<T, W>*>(dr + c) = zero;
        }
    } else {
      float m = -INFINITY, s = 0.0f;
      online_partial<T, W>(zr, V, first, step, m, s);
      block_merge(m, s, shared_m, shared_s);
      const float lse = m + __logf(s);
      const bool valid = t >= 0 && t < V;
      if (threadIdx.x == 0) losses[row] = valid ? lse - to_f32(zr[t]) : NAN;
      if (dr) write_dlogits<T, W>(dr, zr, V, first, step, lse, t, scale);
    }
    __syncthreads();  // every thread is done with this buffer and with shared_m, shared_s
  }
#else
  __trap();  // sm_80: the launcher runs the online kernel there
#endif
}

constexpr int kWarpRowMaxV = 2048;  // above: a block per row (the warp loops get long)
constexpr int kStagedThreads = 512;
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
  if (vec && cross_entropy_staged_enabled() && clusters_here()) {
    const int row_bytes = int(s.V) * int(sizeof(T));
    const int smem = 2 * row_bytes + 2 * int(sizeof(uint64_t));
    // (1 KiB left for the kernel's static shared memory, which LaunchCheck adds)
    const int limit = smem_optin_here() - 1024;
    if (row_bytes % 16 == 0 && smem <= limit) {
      constexpr int threads = kStagedThreads;
      // LaunchCheck runs once per instance: its shared-memory limit is raised to the most any
      // V may ask, not the first call's (a first call with narrow rows left the limit at
      // 48 KiB, and every wider launch after it failed with cudaErrorInvalidValue: the first
      // GPU run of the tests, 2026-12-07)
      static LaunchCheck check;  // one per T
      auto kernel = cross_entropy_staged_kernel<T, threads>;
      check.ensure(reinterpret_cast<const void*>(kernel), "cross_entropy", "staged", threads,
                   limit);
      const unsigned blocks = unsigned(std::min<int64_t>(s.n, sm_count_here()));
      kernel<<<blocks, threads, smem, stream>>>(losses, dz, z, targets, grad_scale, ignore_index,
                                                int(s.V), s.n);
      check_launch("cross_entropy (staged rows)",
                   "(n=" + std::to_string(s.n) + ", V=" + std::to_string(s.V) + ")");
      return;
    }
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
