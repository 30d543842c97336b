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
#include <climits>
#include <cmath>

#include "cuda_common.cuh"
#include "decode_io.cuh"
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

template <typename T>
__device__ __forceinline__ float scaled(const T* row, int i, float temperature) {
  // a true division, as sampling.py's logits / temperature; the logits through L2 (the LM
  // head's kernel wrote them: load_produced)
  return to_f32(load_produced(row + i)) / temperature;
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
  const int r = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
  const T* row = logits + int64_t(r) * stride;
  pdl_launch_dependents();
  pdl_wait();  // the logits are the previous kernel's output
  const uint64_t seed = uint64_t(__ldcg(reinterpret_cast<const long long*>(state)));
  const uint64_t draw = uint64_t(__ldcg(reinterpret_cast<const long long*>(state) + 1));

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
  // block argmax: larger score first, then the lower index
  for (int o = 16; o > 0; o >>= 1) {
    const float s = __shfl_xor_sync(0xffffffffu, best, o);
    const int j = __shfl_xor_sync(0xffffffffu, index, o);
    if (s > best || (s == best && j < index)) best = s, index = j;
  }
  if (lane == 0) warp_best[warp] = best, warp_index[warp] = index;
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w)
      if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < index))
        best = warp_best[w], index = warp_index[w];
    tokens[r] = index;
    // every block has read `draw` before it takes a ticket; the last one advances it
    __threadfence();
    auto* ticket = reinterpret_cast<unsigned long long*>(state + 2);
    last = atomicAdd(ticket, 1ull) == gridDim.x - 1;
    if (last) {
      *ticket = 0;
      state[1] = int64_t(draw + 1);
    }
  }
  if (!advance.window) return;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every row's token is written (the tickets say so): read through L2
  advance_state(advance, tokens, ids);
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

}  // namespace gs
