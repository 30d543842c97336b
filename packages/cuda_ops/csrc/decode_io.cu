// decode_io.cu: the graph decoder's embedding and state updates on CUDA (formulas in
// decode_io.h; CPU reference in decode_io.cpp). All three are launched as programmatic dependents
// (cuda_launch.h), like the decode kernels between them: each waits for the kernel before it
// (the previous step's state update, or the sampler) before reading what that one wrote.
//
// decode_embed_kernel: grid B, 128 threads over the C columns of row b.
// window_embed_kernel: grid (T, B), 128 threads over the C columns of row (b, t).
// decode_advance_kernel: one block of 256 threads for every row (B is the batch: small), so the
//   position is read by all before one thread moves it on; a slide shifts each window row
//   through shared memory (every id read before any is written): advance_state, decode_io.cuh,
//   which sample_kernel's last block also runs where the sampler updates the state itself.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c decode_io.cu -I.
#include <cmath>
#include <string>

#include "cuda_common.cuh"
#include "decode_io.cuh"

namespace gs {
namespace {

constexpr int kEmbedThreads = 128;
constexpr int kAdvanceThreads = 256;

template <typename T>
__device__ __forceinline__ void embed_row(T* __restrict__ x, const T* __restrict__ wte,
                                          const T* __restrict__ wpe, int64_t id, int64_t p,
                                          bool valid, int C) {
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    x[c] = from_f32<T>(valid ? to_f32(wte[id * C + c]) + to_f32(wpe[p * C + c]) : NAN);
}

template <typename T>
__global__ void __launch_bounds__(kEmbedThreads)
    decode_embed_kernel(T* __restrict__ x, const int64_t* __restrict__ token,
                        const int64_t* __restrict__ pos, const T* __restrict__ wte,
                        const T* __restrict__ wpe, int C, int64_t vocab, int64_t positions) {
  pdl_launch_dependents();
  pdl_wait();  // token and pos are the previous step's
  const int b = blockIdx.x;
  const int64_t id = load_produced(token + b), p = load_produced(pos);
  embed_row(x + int64_t(b) * C, wte, wpe, id, p, id >= 0 && id < vocab && p >= 0 && p < positions,
            C);
}

template <typename T>
__global__ void __launch_bounds__(kEmbedThreads)
    window_embed_kernel(T* __restrict__ x, const int64_t* __restrict__ window,
                        const int64_t* __restrict__ token, const T* __restrict__ wte,
                        const T* __restrict__ wpe, int T_, int C, int64_t vocab) {
  pdl_launch_dependents();
  pdl_wait();  // window and token are the previous step's
  const int t = blockIdx.x, b = blockIdx.y;
  const int64_t id =
      load_produced(t < T_ - 1 ? window + int64_t(b) * T_ + t + 1 : token + b);
  embed_row(x + (int64_t(b) * T_ + t) * C, wte, wpe, id, t, id >= 0 && id < vocab, C);
}

__global__ void __launch_bounds__(kAdvanceThreads)
    decode_advance_kernel(DecodeState s, const int64_t* __restrict__ new_tokens) {
  extern __shared__ int64_t ids[];  // one window row (slide)
  pdl_launch_dependents();
  pdl_wait();  // new_tokens is the sampler's output
  advance_state(s, new_tokens, ids);
}

std::string rows_text(int64_t B, int64_t T, int64_t C) {
  return "(B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", C=" + std::to_string(C) +
         ")";
}

}  // namespace

void decode_embed_cuda(void* x, const int64_t* token, const int64_t* pos, const void* wte,
                       const void* wpe, int64_t B, int64_t C, int64_t vocab, int64_t positions,
                       DType dtype, uintptr_t stream) {
  if (B == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_programmatic(decode_embed_kernel<T>, unsigned(B), kEmbedThreads, 0, as_stream(stream),
                        static_cast<T*>(x), token, pos, static_cast<const T*>(wte),
                        static_cast<const T*>(wpe), int(C), vocab, positions);
  };
  if (dtype == DType::bf16) run(__nv_bfloat16{});
  else run(float{});
  check_launch("decode_embed", rows_text(B, 1, C));
}

void window_embed_cuda(void* x, const int64_t* window, const int64_t* token, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, int64_t vocab,
                       DType dtype, uintptr_t stream) {
  if (B == 0 || T == 0) return;
  auto run = [&](auto tag) {
    using V = decltype(tag);
    launch_programmatic(window_embed_kernel<V>, dim3(unsigned(T), unsigned(B)), kEmbedThreads, 0,
                        as_stream(stream), static_cast<V*>(x), window, token,
                        static_cast<const V*>(wte), static_cast<const V*>(wpe), int(T), int(C),
                        vocab);
  };
  if (dtype == DType::bf16) run(__nv_bfloat16{});
  else run(float{});
  check_launch("window_embed", rows_text(B, T, C));
}

void decode_advance_cuda(const DecodeState& s, const int64_t* new_tokens, uintptr_t stream) {
  if (s.B == 0) return;
  const size_t smem = s.slide ? size_t(s.T) * sizeof(int64_t) : 0;
  launch_programmatic(decode_advance_kernel, 1u, kAdvanceThreads, smem, as_stream(stream), s,
                      new_tokens);
  check_launch("decode_advance", rows_text(s.B, s.T, 0));
}

}  // namespace gs
