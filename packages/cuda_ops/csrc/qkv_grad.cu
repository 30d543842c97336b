// qkv_grad.cu: qkv_grad (qkv_grad.h) on CUDA.
//
// qkv_grad_copy_kernel: a block is 32 columns of W-element vectors (16 bytes; one vector never
// straddles dq/dk/dv when C % W == 0) by 8 lanes of rows, over one chunk of rows: each thread
// copies its vector of every 8th row (kInFlight = 4 rows loaded before any is stored; two were
// 2.2-2.5 TB/s on an H100, the copy ~3.0) and adds it into W float sums; the 8
// lanes' sums meet in shared memory and the chunk's row of `partials` is written once. Columns
// across the grid's x, chunks across its y (the caller's count: qkv.py's MAX_CHUNKS): gpt2-124m's
// (65536, 3 x 768) in bfloat16 is 9 x 1024 blocks, every read and write 512 contiguous bytes a
// warp.
// qkv_grad_sum_kernel: dbias[col] = the chunks' partials added in order (32 columns by 32 lanes
// of chunks a block, each lane's run of chunks in order, the lanes then in order: fixed bits).
// Rows with C % W != 0 or unaligned pointers take the same kernels with W = 1.
#include "cuda_common.cuh"
#include "qkv_grad.h"

namespace gs {
namespace {

constexpr int kCols = 32;   // vector columns a block (threadIdx.x)
constexpr int kLanes = 8;   // row lanes a block (threadIdx.y)
constexpr int kInFlight = 4;  // rows a thread loads before it stores any
constexpr int kSumLanes = 32;

template <typename T, int W> struct alignas(sizeof(T) * W) Vec {
  T v[W];
};

template <typename T, int W>
__global__ void __launch_bounds__(kCols * kLanes)
    qkv_grad_copy_kernel(T* __restrict__ dqkv, float* __restrict__ partials,
                         const T* __restrict__ dq, const T* __restrict__ dk,
                         const T* __restrict__ dv, int64_t N, int64_t C, int64_t rows_per_chunk) {
  using V = Vec<T, W>;
  __shared__ float sums[kLanes][kCols * W];
  const int64_t C3 = 3 * C;
  const int64_t col = (int64_t(blockIdx.x) * kCols + threadIdx.x) * W;
  const bool active = col < C3;
  const int part = active ? int(col / C) : 0;
  const int64_t c = col - part * C;
  const T* src = part == 0 ? dq : (part == 1 ? dk : dv);
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(N, r0 + rows_per_chunk);
  float acc[W];
#pragma unroll
  for (int j = 0; j < W; ++j) acc[j] = 0.0f;
  if (active) {
    int64_t r = r0 + threadIdx.y;
    for (; r + (kInFlight - 1) * kLanes < r1; r += kInFlight * kLanes) {
      V a[kInFlight];  // every load issued before the first store
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        a[u] = *reinterpret_cast<const V*>(src + (r + u * kLanes) * C + c);
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        *reinterpret_cast<V*>(dqkv + (r + u * kLanes) * C3 + col) = a[u];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
#pragma unroll
        for (int j = 0; j < W; ++j) acc[j] += to_f32(a[u].v[j]);
    }
    for (; r < r1; r += kLanes) {  // the chunk's last rows, one at a time
      const V a = *reinterpret_cast<const V*>(src + r * C + c);
      *reinterpret_cast<V*>(dqkv + r * C3 + col) = a;
#pragma unroll
      for (int j = 0; j < W; ++j) acc[j] += to_f32(a.v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) sums[threadIdx.y][threadIdx.x * W + j] = acc[j];
  __syncthreads();
  // the block's kCols * W column sums, one thread a column, lanes added in order
  for (int i = threadIdx.y * kCols + threadIdx.x; i < kCols * W; i += kCols * kLanes) {
    const int64_t out_col = int64_t(blockIdx.x) * kCols * W + i;
    if (out_col >= C3) continue;
    float s = 0.0f;
#pragma unroll
    for (int l = 0; l < kLanes; ++l) s += sums[l][i];
    partials[int64_t(blockIdx.y) * C3 + out_col] = s;
  }
}

__global__ void __launch_bounds__(kCols * kSumLanes)
    qkv_grad_sum_kernel(float* __restrict__ dbias, const float* __restrict__ partials,
                        int64_t C3, int64_t chunks) {
  __shared__ float lanes[kSumLanes][kCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kCols + threadIdx.x;
  // lane y adds chunks [y * per, (y + 1) * per) in order
  const int64_t per = (chunks + kSumLanes - 1) / kSumLanes;
  float s = 0.0f;
  if (col < C3) {
    const int64_t j1 = min(chunks, (threadIdx.y + 1) * per);
    for (int64_t j = threadIdx.y * per; j < j1; ++j) s += partials[j * C3 + col];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < C3) {
    float t = 0.0f;
#pragma unroll
    for (int l = 0; l < kSumLanes; ++l) t += lanes[l][threadIdx.x];
    dbias[col] = t;
  }
}

template <typename T>
void launch(T* dqkv, float* dbias, float* partials, const T* dq, const T* dk, const T* dv,
            int64_t N, int64_t C, int64_t chunks, cudaStream_t stream) {
  const int64_t C3 = 3 * C;
  const std::string shape = "(N=" + std::to_string(N) + ", C=" + std::to_string(C) +
                            ", chunks=" + std::to_string(chunks) + ")";
  if (N > 0) {
    const int64_t rows = (N + chunks - 1) / chunks;
    constexpr int W16 = 16 / sizeof(T);
    const bool vec = C % W16 == 0 && aligned16(dqkv) && aligned16(dq) && aligned16(dk) &&
                     aligned16(dv);
    const int W = vec ? W16 : 1;
    const dim3 grid(unsigned(ceil_div(C3 / W, kCols)), unsigned(chunks)), block(kCols, kLanes);
    if (vec)
      qkv_grad_copy_kernel<T, W16><<<grid, block, 0, stream>>>(dqkv, partials, dq, dk, dv, N, C,
                                                               rows);
    else
      qkv_grad_copy_kernel<T, 1><<<grid, block, 0, stream>>>(dqkv, partials, dq, dk, dv, N, C,
                                                             rows);
    check_launch("qkv_grad", shape);
  } else if (cudaMemsetAsync(partials, 0, sizeof(float) * chunks * C3, stream) != cudaSuccess) {
    check_launch("qkv_grad (zero rows)", shape);  // throws with the error the memset left
  }
  qkv_grad_sum_kernel<<<unsigned(ceil_div(C3, kCols)), dim3(kCols, kSumLanes), 0, stream>>>(
      dbias, partials, C3, chunks);
  check_launch("qkv_grad (column sums)", shape);
}

}  // namespace

void qkv_grad_cuda(void* dqkv, float* dbias, float* partials, const void* dq, const void* dk,
                   const void* dv, int64_t N, int64_t C, int64_t chunks, DType dtype,
                   uintptr_t stream) {
  if (dtype == DType::bf16)
    launch(static_cast<__nv_bfloat16*>(dqkv), dbias, partials,
           static_cast<const __nv_bfloat16*>(dq), static_cast<const __nv_bfloat16*>(dk),
           static_cast<const __nv_bfloat16*>(dv), N, C, chunks, as_stream(stream));
  else
    launch(static_cast<float*>(dqkv), dbias, partials, static_cast<const float*>(dq),
           static_cast<const float*>(dk), static_cast<const float*>(dv), N, C, chunks,
           as_stream(stream));
}

}  // namespace gs
