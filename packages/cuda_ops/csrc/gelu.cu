// gelu.cu: GELU (tanh form) forward and backward on CUDA. CPU reference: gelu_forward_scalar /
// gelu_backward_scalar in gelu.cpp (the formula is in gelu.h); tests compare both to torch.
//
// Versions (llm.c dev/cuda style; the launcher picks by alignment, tests cover both):
//   1 elementwise_kernel<.., 1>: one element per thread, any alignment
//   2 elementwise_kernel<.., 16 / sizeof(T)>: 128-bit loads (streaming) and stores (8 bf16 or
//     4 floats per thread), when every pointer is 16-byte aligned; the last n % width elements
//     go through version 1 in a second small launch.
// Tried and reverted (2026-12-03): four packs loaded per thread before any is computed, for more
// bytes in flight. Slower in `gptstack bench ops` on the H200: forward+backward 89.1 vs 71.8 us
// at shakespeare-char's 16384 x 1536 and 166.9 vs 137.7 us at gpt2-124m's (two runs of the same
// bench, not side by side: benchmarks/results/ops-h200-20261203-142331.json vs -125159.json; the
// bf16 backward went from 32 to 56 registers, fewer resident blocks).
// Computed in float: gelu = x / (1 + exp(-2u)) with the fast __expf (memory-bound either
// way: the kernel moves 2 (forward) or 3 (backward) elements per 8-10 FLOPs).
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c gelu.cu -I.
#include "cuda_common.cuh"
#include "gelu.h"

namespace gs {
namespace {

__device__ __forceinline__ float gelu_f(float x) {
  const float k = float(kGeluSqrt2OverPi), c = float(kGeluCubic);
  float u = k * fmaf(c * x * x, x, x);
  return x / (1.0f + __expf(-2.0f * u));
}

// with s = sigmoid(2u): d gelu/dx = s + 2 x s (1 - s) u',  u' = k (1 + 3 c x^2)
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float k = float(kGeluSqrt2OverPi), c = float(kGeluCubic);
  float x2 = x * x;
  float u = k * fmaf(c * x2, x, x);
  float du = k * fmaf(3.0f * c, x2, 1.0f);
  float s = 1.0f / (1.0f + __expf(-2.0f * u));
  return fmaf(2.0f * x * du * s, 1.0f - s, s);
}

template <typename T, int W> struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

// The inputs are read once, long after they were written or never again before they are
// overwritten: 16-byte packs are loaded with the streaming hint (ld.global.cs, evict first).
// The outputs are stored plainly: the next kernel (a matmul) reads them at once.
template <typename P> __device__ __forceinline__ P load_streaming(const P* p) {
  if constexpr (sizeof(P) == 16) {
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<const P*>(&v);
  } else {
    return *p;
  }
}

// out[i] = f(x[i]) for forward; dx[i] = dout[i] * f'(x[i]) for backward (Backward = true).
template <typename T, int W, bool Backward>
__global__ void elementwise_kernel(T* __restrict__ out, const T* __restrict__ dout,
                                   const T* __restrict__ x, int64_t n_packs) {
  using P = Pack<T, W>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n_packs; p += stride) {
    P xv = load_streaming(reinterpret_cast<const P*>(x) + p), r;
    if constexpr (Backward) {
      P dv = load_streaming(reinterpret_cast<const P*>(dout) + p);
#pragma unroll
      for (int j = 0; j < W; ++j)
        r.v[j] = from_f32<T>(to_f32(dv.v[j]) * gelu_grad_f(to_f32(xv.v[j])));
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) r.v[j] = from_f32<T>(gelu_f(to_f32(xv.v[j])));
    }
    reinterpret_cast<P*>(out)[p] = r;
  }
}

constexpr int kThreads = 256;
// One pack a thread (the grid-stride loop runs once; the cap only bounds the grid). On the
// H200 (2026-12-03) up to 4 rounds over 132 x 8 blocks beat one round of 132 x 8 (72.6 -> 69.0
// us forward+backward at 16384 x 1536) and one pack a thread was no faster than that cap;
// on the H100 (2026-12-06, dev/gelu_grid.cu side by side: benchmarks/profiles/
// gelu-grid-h100-20261206-a313b01.txt) this kernel took 91.5 / 176.0 us forward+backward at
// 16384 x 1536 / 16384 x 3072 against 91.6 / 178.8 for the one before (cap 132 x 32, plain
// loads). With streaming stores too it took 87.8 / 170.0, but the output is what the next
// matmul reads at once, so the stores stay plain.
constexpr int64_t kMaxBlocks = int64_t(1) << 30;

template <typename T, bool Backward>
void launch(const char* op, T* out, const T* dout, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = 16 / sizeof(T);
  int64_t head = 0;  // elements done by the vector kernel
  if (aligned16(out) && aligned16(x) && (!Backward || aligned16(dout)) && n >= W) {
    int64_t packs = n / W;
    unsigned blocks = std::min<long long>(ceil_div(packs, kThreads), kMaxBlocks);
    elementwise_kernel<T, W, Backward><<<blocks, kThreads, 0, stream>>>(out, dout, x, packs);
    check_launch(op, "(vector, n=" + std::to_string(n) + ")");
    head = packs * W;
  }
  if (head < n) {
    int64_t rest = n - head;
    unsigned blocks = std::min<long long>(ceil_div(rest, kThreads), kMaxBlocks);
    elementwise_kernel<T, 1, Backward><<<blocks, kThreads, 0, stream>>>(
        out + head, Backward ? dout + head : nullptr, x + head, rest);
    check_launch(op, "(scalar, n=" + std::to_string(n) + ")");
  }
}

}  // namespace

void gelu_forward_cuda(void* out, const void* x, int64_t n, DType dtype, uintptr_t stream) {
  if (dtype == DType::bf16)
    launch<__nv_bfloat16, false>("gelu_forward", static_cast<__nv_bfloat16*>(out), nullptr,
                                 static_cast<const __nv_bfloat16*>(x), n, as_stream(stream));
  else
    launch<float, false>("gelu_forward", static_cast<float*>(out), nullptr,
                         static_cast<const float*>(x), n, as_stream(stream));
}

void gelu_backward_cuda(void* dx, const void* dout, const void* x, int64_t n, DType dtype,
                        uintptr_t stream) {
  if (dtype == DType::bf16)
    launch<__nv_bfloat16, true>("gelu_backward", static_cast<__nv_bfloat16*>(dx),
                                static_cast<const __nv_bfloat16*>(dout),
                                static_cast<const __nv_bfloat16*>(x), n, as_stream(stream));
  else
    launch<float, true>("gelu_backward", static_cast<float*>(dx),
                        static_cast<const float*>(dout), static_cast<const float*>(x), n,
                        as_stream(stream));
}

}  // namespace gs
