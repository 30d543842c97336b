// sampling.cu: sample_tokens on CUDA (formulas and random stream in sampling.h; CPU reference
// in sampling.cpp, both tested against a Python rebuild of the stream).
//
// One 256-thread block per row. The row (a few hundred KB at most) is read from L2 once per
// pass: the max; for top-k, a radix select of the k-th largest z (four passes over the 8-bit
// digits of an order-preserving uint32 key, a 256-bin shared histogram each, warp 0 finding the
// digit); then the race, one Philox call per 4 elements, and a block argmax. Thread t handles
// elements 4t .. 4t+3, then 4(t + 256) .., in increasing order, so a tie keeps the lowest index.
// Launched as a programmatic dependent of the LM head's kernel (cuda_launch.h). Given the graph
// decoder's state, the block that takes the last ticket also updates it (advance_state,
// decode_io.cuh): decode_advance's launch saved.
//
// head_sample_kernel is the LM head and the sampler in one launch: decode_linear's one-row
// blocks (decode_linear.cuh, 128 threads) write the logits, and the block that takes the last
// ticket draws every row's token from them (the same code with 128 threads: the token does not
// depend on the block size) and updates the state. One launch a token fewer; for a large
// vocabulary one block scanning every logit is slower than the sampler's launch (the decoder
// keeps the two launches there: fused_step.HEAD_SAMPLE_MAX_VOCAB).
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "cuda_common.cuh"
#include "decode_io.cuh"
#include "decode_linear.cuh"
#include "sampling.h"

namespace gs {
namespace {

constexpr int kSampleThreads = 256;

// float -> uint32 with the same order (negative numbers flipped whole, positive ones get the
// sign bit): the k-th largest key is the k-th largest float
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_order_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// Read through L2 (ld.global.cg): in head_sample_kernel other blocks of the same launch wrote
// the row, so no stale L1 line may answer.
template <typename T>
__device__ __forceinline__ float scaled(const T* row, int i, float temperature) {
  return to_f32(__ldcg(row + i)) / temperature;  // a true division, as sampling.py's
}

// The k-th largest z of the row (1 <= k < V), every thread gets it.
template <typename T>
__device__ float kth_largest(const T* row, int V, float temperature, int k) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t found_prefix, found_k;
  const int t = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  if (t == 0) found_prefix = 0, found_k = k;  // later passes start from the previous result
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = t; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int i = t; i < V; i += blockDim.x) {
      const uint32_t key = order_key(scaled(row, i, temperature));
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (t < 32) {  // lane l holds bins 255 - 8l down to 248 - 8l: counts from the top
      uint32_t mine = 0;
      for (int p = 0; p < 8; ++p) mine += hist[255 - (8 * t + p)];
      uint32_t above = mine;  // inclusive scan over lanes
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, above, o);
        if (t >= o) above += v;
      }
      uint32_t c = above - mine;  // keys in higher bins than this lane's
      if (c < uint32_t(k) && uint32_t(k) <= above) {
        for (int p = 0; p < 8; ++p) {
          const int b = 255 - (8 * t + p);
          if (c + hist[b] >= uint32_t(k)) {
            found_prefix = prefix | (uint32_t(b) << shift);
            found_k = k - c;
            break;
          }
          c += hist[b];
        }
      }
    }
    __syncthreads();
    prefix = found_prefix, k = int(found_k), mask |= 255u << shift;
  }
  return from_order_key(prefix);
}

// Row r's token, by the whole block (a multiple of 32 threads): thread 0 gets it. red,
// warp_best and warp_index: 32 entries of shared memory each.
template <typename T>
__device__ int draw_row(const T* row, int V, float temperature, int top_k, uint64_t seed,
                        uint64_t draw, int r, float* red, float* warp_best, int* warp_index) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  float m = -INFINITY;
  for (int i = t; i < V; i += blockDim.x) m = fmaxf(m, scaled(row, i, temperature));
  m = block_max(m, red);
  const float kth = (top_k > 0 && top_k < V) ? kth_largest(row, V, temperature, top_k) : -INFINITY;

  float best = -2.0f;  // below every score, so the first element always takes it
  int index = INT_MAX;
  for (int c = t; 4 * c < V; c += blockDim.x) {
    const Philox4 bits = sample_bits(seed, draw, uint32_t(r), uint32_t(c));
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int i = 4 * c + w;
      if (i >= V) break;
      const float z = scaled(row, i, temperature);
      float score = -1.0f;
      if (!(z < kth)) {
        const float e = expf(z - m);
        if (e > 0.0f) score = e / -logf(sample_uniform(bits.w[w]));
      }
      if (score > best) best = score, index = i;
    }
  }
  // block argmax: larger score first, then the lower index (so the block size, which orders
  // the elements between threads, does not change the token)
  for (int o = 16; o > 0; o >>= 1) {
    const float s = __shfl_xor_sync(0xffffffffu, best, o);
    const int j = __shfl_xor_sync(0xffffffffu, index, o);
    if (s > best || (s == best && j < index)) best = s, index = j;
  }
  __syncthreads();  // a previous row's warp_best is read before it is overwritten
  if (lane == 0) warp_best[warp] = best, warp_index[warp] = index;
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w)
      if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < index))
        best = warp_best[w], index = warp_index[w];
  }
  return index;
}

// The block that takes the last of `blocks` tickets (state[2]) returns true, having put the
// ticket back to 0 and advanced the draw count: every block has written what it owes before
// its ticket (the fence), so the last one may read all of it.
__device__ bool last_ticket(int64_t* state, unsigned long long blocks, uint64_t draw,
                            bool* last) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    auto* ticket = reinterpret_cast<unsigned long long*>(state + 2);
    *last = atomicAdd(ticket, 1ull) == blocks - 1;
    if (*last) {
      *ticket = 0;
      state[1] = int64_t(draw + 1);
    }
  }
  __syncthreads();
  if (*last) __threadfence();  // what the other blocks wrote, read through L2 from here on
  return *last;
}

template <typename T>
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(int64_t* __restrict__ tokens, const T* __restrict__ logits,
                  int64_t* __restrict__ state, int V, int64_t stride, float temperature,
                  int top_k, DecodeState advance) {
  extern __shared__ int64_t ids[];  // a window row, where the last block slides the window
  __shared__ bool last;
  __shared__ float red[32];
  __shared__ float warp_best[32];
  __shared__ int warp_index[32];
  const int r = blockIdx.x;
  pdl_launch_dependents();
  pdl_wait();  // the logits are the previous kernel's output
  const uint64_t seed = uint64_t(__ldcg(reinterpret_cast<const long long*>(state)));
  const uint64_t draw = uint64_t(__ldcg(reinterpret_cast<const long long*>(state) + 1));
  const int index = draw_row(logits + int64_t(r) * stride, V, temperature, top_k, seed, draw, r,
                             red, warp_best, warp_index);
  if (threadIdx.x == 0) tokens[r] = index;
  // every block has read `draw` before it takes a ticket; the last one advances it
  if (!last_ticket(state, gridDim.x, draw, &last) || !advance.window) return;
  advance_state(advance, tokens, ids);
}

// head_sample: the LM head's logits (decode_linear_kernel's blocks: ceil(N / 4) per row), then
// the block that finishes last draws every row's token from them and updates the decoder's
// state: the sampler's launch saved.
template <typename T, bool Vector>
__global__ void __launch_bounds__(kLinearWarps * 32)
    head_sample_kernel(int64_t* __restrict__ tokens, T* __restrict__ logits,
                       const T* __restrict__ x, const T* __restrict__ w,
                       const T* __restrict__ ln_w, const T* __restrict__ ln_b, int N, int K,
                       float eps, int64_t* __restrict__ state, int V, float temperature,
                       int top_k, DecodeState advance) {
  // K floats (the input row); afterwards, in the last block, a window row of int64 for a slide
  extern __shared__ __align__(16) float scratch[];
  __shared__ bool last;
  __shared__ float red[32];
  __shared__ float warp_best[32];
  __shared__ int warp_index[32];
  linear_outputs<T, Vector>(logits, x, w, nullptr, ln_w, ln_b, nullptr, N, K, eps, false,
                            blockIdx.y, blockIdx.x * kLinearWarps, scratch, red);
  // read by every block before its ticket (linear_outputs has waited for the kernel before)
  const uint64_t draw = uint64_t(__ldcg(reinterpret_cast<const long long*>(state) + 1));
  if (!last_ticket(state, uint64_t(gridDim.x) * gridDim.y, draw, &last)) return;
  const uint64_t seed = uint64_t(__ldcg(reinterpret_cast<const long long*>(state)));
  for (int r = 0; r < int(gridDim.y); ++r) {
    const int index = draw_row<T>(logits + int64_t(r) * N, V, temperature, top_k, seed, draw, r,
                                  red, warp_best, warp_index);
    if (threadIdx.x == 0) tokens[r] = index;
  }
  if (!advance.window) return;
  __syncthreads();
  __threadfence();
  advance_state(advance, tokens, reinterpret_cast<int64_t*>(scratch));
}

}  // namespace

void sample_tokens_cuda(int64_t* tokens, const void* logits, int64_t* state, int64_t R,
                        int64_t V, int64_t stride, double temperature, int64_t top_k,
                        const DecodeState* advance, DType dtype, uintptr_t stream) {
  if (R == 0) return;
  const std::string config = "(R=" + std::to_string(R) + ", V=" + std::to_string(V) + ")";
  const DecodeState none{};
  const DecodeState& adv = advance ? *advance : none;
  const size_t smem = adv.window && adv.slide ? size_t(adv.T) * sizeof(int64_t) : 0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_programmatic(sample_kernel<T>, unsigned(R), kSampleThreads, smem, as_stream(stream),
                        tokens, static_cast<const T*>(logits), state, int(V), stride,
                        float(temperature), int(top_k), adv);
  };
  if (dtype == DType::bf16) run(__nv_bfloat16{});
  else run(float{});
  check_launch("sample_tokens", config);
}

void head_sample_cuda(int64_t* tokens, void* logits, const void* x, const void* w,
                      const void* ln_w, const void* ln_b, int64_t R, int64_t N, int64_t K,
                      double eps, int64_t* state, int64_t V, double temperature, int64_t top_k,
                      const DecodeState* advance, DType dtype, uintptr_t stream) {
  if (R == 0) return;
  const std::string config = "(R=" + std::to_string(R) + ", N=" + std::to_string(N) +
                             ", K=" + std::to_string(K) + ")";
  const DecodeState none{};
  const DecodeState& adv = advance ? *advance : none;
  const size_t window_bytes = adv.window && adv.slide ? size_t(adv.T) * sizeof(int64_t) : 0;
  const int smem = int(std::max(size_t(K) * sizeof(float), window_bytes));
  const dim3 grid(ceil_div(N, kLinearWarps), unsigned(R));
  auto run = [&](auto tag, auto vector) {
    using T = decltype(tag);
    constexpr bool kVector = decltype(vector)::value;
    static LaunchCheck check;
    check.ensure(reinterpret_cast<const void*>(&head_sample_kernel<T, kVector>), "head_sample",
                 kVector ? "vector" : "scalar", kLinearWarps * 32, smem);
    launch_programmatic(head_sample_kernel<T, kVector>, grid, kLinearWarps * 32, size_t(smem),
                        as_stream(stream), tokens, static_cast<T*>(logits),
                        static_cast<const T*>(x), static_cast<const T*>(w),
                        static_cast<const T*>(ln_w), static_cast<const T*>(ln_b), int(N), int(K),
                        float(eps), state, int(V), float(temperature), int(top_k), adv);
  };
  auto dispatch = [&](auto tag) {
    using T = decltype(tag);
    if (linear_vector_loads<T>(w, K)) run(tag, std::true_type{});
    else run(tag, std::false_type{});
  };
  if (dtype == DType::bf16) dispatch(__nv_bfloat16{});
  else dispatch(float{});
  check_launch("head_sample", config);
}

}  // namespace gs
