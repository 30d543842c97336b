// attention.h: fused causal attention, what the bindings (attention.cpp), the CPU code
// (attention_cpu.cpp) and the CUDA launchers (attention_cuda.cu) share. Plain C++: no nanobind,
// no CUDA headers, so the warp emulator (attention_emu/) builds the same declarations.
//
// The function (per batch b, head h):  y_i = sum_{j<=i} softmax_j(q_i . k_j * scale) v_j,
// scale = 1/sqrt(hs), queries and keys at positions 0..T-1 (the training/prefill case). The
// forward also writes lse_i = log sum_{j<=i} exp(q_i . k_j * scale), what the backward needs to
// rebuild the softmax without the T x T matrix (Dao et al., FlashAttention, 2022, section 3.1).
// With dropout p the weights are masked by attention_philox.h's stream and scaled by 1/(1-p);
// lse stays the undropped one.
#pragma once

#include <cstdint>

#include "attention_philox.h"
#include "dtype.h"

namespace gs::attn {

// A (B, nh, T, hs) array with unit stride along hs: element (b, h, t, d) is at
// p[b*sb + h*sh + t*st + d] (strides in elements). Covers contiguous tensors and the model's
// q/k/v, which are transposed views into c_attn's (B, T, 3C) output.
template <typename T> struct View4 {
  T* p;
  int64_t sb, sh, st;
  GS_HD T* row(int64_t b, int64_t h, int64_t t) const { return p + b * sb + h * sh + t * st; }
};

struct Dims {
  int64_t B, nh, T, hs;
};

// Head sizes the kernels are built for (one template instance each).
inline bool supported_head_size(int64_t hs) { return hs == 32 || hs == 64 || hs == 128; }

// --- CPU (attention_cpu.cpp) -------------------------------------------------------------------
// E is float, double or bf16_t; accumulation and lse in acc_t<E> (double for double, else
// float). `avx2` picks the AVX2/FMA path (float/bf16 only; the caller checks the CPU has it),
// `threads` the OpenMP team size. lse is contiguous (B, nh, T).
template <typename E>
void forward_cpu(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v,
                 View4<E> y, acc_t<E>* lse, const DropoutSpec& drop, bool avx2, int threads);

// dq/dk/dv overwrite their outputs. Two passes, as the CUDA kernel: dK/dV per key tile over the
// queries that see it, then dQ per query tile over its keys; no atomics, deterministic.
template <typename E>
void backward_cpu(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                  View4<const E> v, View4<const E> y, const acc_t<E>* lse, View4<E> dq,
                  View4<E> dk, View4<E> dv, const DropoutSpec& drop, bool avx2, int threads);

// --- CUDA (attention_cuda.cu) ------------------------------------------------------------------
// bf16 runs the tensor-core kernels (attention_forward.cuh, attention_backward.cuh); float32 a
// plain SIMT kernel (exact fp32 for tests). `seed` points at one int64 on the device (read by the
// kernel, so a CUDA graph replays with fresh masks); unused when threshold == 0. `warps`: CTA
// size of the bf16 kernels, 4 or 8, 0 = the default for the shape; for the forward also
// kSplitKeys (4 warps sharing 16 queries, the keys split between them; no dropout; opt-in:
// attention_cuda.cu says why); forward and backward also kWgmma, the warpgroup-MMA kernels of
// attention_forward_wgmma.cuh / attention_backward_wgmma.cuh (sm_90a machine code only: an
// H100/H200 and a build with sm_90a; opt-in). `stream` is a cudaStream_t.
constexpr int kSplitKeys = 1;
constexpr int kWgmma = 2;
struct CudaLaunch {
  uint32_t threshold = 0;  // DropoutSpec::threshold
  float drop_scale = 1.0f;
  const int64_t* seed = nullptr;
  int warps = 0;
  uintptr_t stream = 0;
};

void forward_cuda_bf16(const Dims& d, View4<const bf16_t> q, View4<const bf16_t> k,
                       View4<const bf16_t> v, View4<bf16_t> y, float* lse, const CudaLaunch& l);
void forward_cuda_f32(const Dims& d, View4<const float> q, View4<const float> k,
                      View4<const float> v, View4<float> y, float* lse, const CudaLaunch& l);
// scratch, contiguous float32: with warps = kWgmma, (B, nh, T) for D = dY . y, which the wgmma
// backward takes from a pre-pass (required). Otherwise nullptr for the deterministic two-stage
// backward, or (B, nh, T, hs): dQ is accumulated there with atomics (FlashAttention-2's way:
// fewer tile matmuls, for long T; attention_backward.cuh) and converted into dq.
void backward_cuda_bf16(const Dims& d, View4<const bf16_t> dy, View4<const bf16_t> q,
                        View4<const bf16_t> k, View4<const bf16_t> v, View4<const bf16_t> y,
                        const float* lse, View4<bf16_t> dq, View4<bf16_t> dk, View4<bf16_t> dv,
                        float* scratch, const CudaLaunch& l);
void backward_cuda_f32(const Dims& d, View4<const float> dy, View4<const float> q,
                       View4<const float> k, View4<const float> v, View4<const float> y,
                       const float* lse, View4<float> dq, View4<float> dk, View4<float> dv,
                       const CudaLaunch& l);

}  // namespace gs::attn
