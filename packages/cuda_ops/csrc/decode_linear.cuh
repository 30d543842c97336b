// decode_linear.cuh: one CTA's share of decode_linear's one-row kernel (decode.h has the
// formula; decode.cu the design), as a device function: decode_linear_kernel, and the dev
// benches (dev/pdl_chain.cu), run it.
#pragma once

#include <type_traits>

#include "cuda_common.cuh"
#include "decode_vec.cuh"

namespace gs {

constexpr int kLinearWarps = 4;
// 16-byte weight loads per lane issued before waiting for the previous kernel (launch_
// programmatic): whole rows up to K = 2,048 in bfloat16 (1,024 in float32)
constexpr int kLinearAhead = 8;
// LayerNorm weights and biases a thread holds in registers from before that wait: its columns
// t, t + blockDim, ... of the first kLnAhead (up to K = 1,024 with 128 threads; the rest are
// read where they are used)
constexpr int kLnAhead = 8;

// 16-byte loads of x a thread issues before storing the first (VectorRow): rows up to
// 4 * 128 * 8 = 4,096 bf16 in one round trip
constexpr int kRowAhead = 4;

// 16 bytes of T stored as floats at row (16-byte aligned): two float4 stores for bf16
template <typename T>
__device__ __forceinline__ void store_row(float* row, uint4 raw) {
  float f[Vec16<T>::n];
  Vec16<T>::convert(raw, f);
#pragma unroll
  for (int e = 0; e < Vec16<T>::n; e += 4)
    *reinterpret_cast<float4*>(row + e) = make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
}

// Outputs n0 .. n0 + kLinearWarps - 1 of row r (warp w computes n0 + w; none past N), with the
// block's kLinearWarps * 32 threads. row: K floats of shared memory for the (normalized)
// input row; red: 32 floats. Calls pdl_launch_dependents and pdl_wait (x and residual are the
// previous kernel's output; the weights are requested before waiting for it). Every thread
// returns (no early exit), so a caller may synchronize the block afterwards. VectorRow: x in
// 16-byte loads all issued at once (K a multiple of 16 bytes, x 16-byte aligned), not one
// 2-byte L2 read after another: 5.78 -> 2.63 us at K = 1,536, 1.92 -> 1.53 at 384, the same
// bits (dev/pdl_chain.cu, H100).
template <typename T, bool Vector, bool VectorRow>
__device__ __forceinline__ void linear_outputs(T* __restrict__ out, const T* __restrict__ x,
                                               const T* __restrict__ w, const T* __restrict__ b,
                                               const T* __restrict__ ln_w,
                                               const T* __restrict__ ln_b,
                                               const T* __restrict__ residual, int N, int K,
                                               float eps, bool gelu, int r, int n0, float* row,
                                               float* red) {
  constexpr int V = Vector ? Vec16<T>::n : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = n0 + warp;
  const T* wn = w + int64_t(n < N ? n : 0) * K;
  pdl_launch_dependents();
  // The weights do not depend on the kernel before this one: their first loads go out before
  // waiting for it (lane covers columns (j * 32 + lane) * V .. + V - 1 of load j).
  uint4 ahead[Vector ? kLinearAhead : 1];
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (n < N && k < K) ahead[j] = *reinterpret_cast<const uint4*>(wn + k);
    }
  }
  // So are the bias and the LayerNorm's parameters: read here, they are not an L2 round trip
  // after the LayerNorm's sums and the dot product (each was ~0.6 us of a 3-us launch on the
  // H100: benchmarks/profiles/pdl-chain-*.txt)
  const float bias = b && n < N && lane == 0 ? to_f32(b[n]) : 0.0f;
  float ln_wr[kLnAhead], ln_br[kLnAhead];
  if (ln_w) {
#pragma unroll
    for (int j = 0; j < kLnAhead; ++j) {
      const int k = threadIdx.x + j * blockDim.x;
      ln_wr[j] = k < K ? to_f32(ln_w[k]) : 0.0f;
      ln_br[j] = k < K && ln_b ? to_f32(ln_b[k]) : 0.0f;
    }
  }
  pdl_wait();  // x and residual are the previous kernel's output
  // the residual's load goes out with x's
  const float res =
      residual && n < N && lane == 0 ? to_f32(load_produced(residual + int64_t(r) * N + n)) : 0.0f;
  const T* xr = x + int64_t(r) * K;
  if constexpr (VectorRow) {
    // every 16-byte load of the row is issued before the first is stored (one L2 round trip
    // for rows up to kRowAhead * blockDim * 16 bytes), not one load after another
    constexpr int E = Vec16<T>::n;
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    const int packs = K / E;
    uint4 raw[kRowAhead];
#pragma unroll
    for (int a = 0; a < kRowAhead; ++a) {
      const int i = threadIdx.x + a * blockDim.x;
      if (i < packs) raw[a] = load_produced(xv + i);
    }
#pragma unroll
    for (int a = 0; a < kRowAhead; ++a) {
      const int i = threadIdx.x + a * blockDim.x;
      if (i < packs) store_row<T>(row + i * E, raw[a]);
    }
    for (int i = threadIdx.x + kRowAhead * blockDim.x; i < packs; i += blockDim.x)
      store_row<T>(row + i * E, load_produced(xv + i));
  } else {
    for (int k = threadIdx.x; k < K; k += blockDim.x) row[k] = to_f32(load_produced(xr + k));
  }
  __syncthreads();
  if (ln_w) {
    float s = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) s += row[k];
    const float mean = block_sum(s, red) / K;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) ss += (row[k] - mean) * (row[k] - mean);
    const float rstd = rsqrtf(block_sum(ss, red) / K + eps);
    __syncthreads();  // every thread has read row[] for the sums before it is overwritten
#pragma unroll
    for (int j = 0; j < kLnAhead; ++j) {
      const int k = threadIdx.x + j * blockDim.x;
      if (k < K) row[k] = (row[k] - mean) * rstd * ln_wr[j] + ln_br[j];
    }
    for (int k = threadIdx.x + kLnAhead * blockDim.x; k < K; k += blockDim.x)
      row[k] = (row[k] - mean) * rstd * to_f32(ln_w[k]) + (ln_b ? to_f32(ln_b[k]) : 0.0f);
    __syncthreads();
  }
  if (n >= N) return;
  float acc = 0.0f;
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (k < K) {
        float wv[V];
        Vec16<T>::convert(ahead[j], wv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
      }
    }
    for (int k = (kLinearAhead * 32 + lane) * V; k < K; k += 32 * V) {
      float wv[V];
      Vec16<T>::load(wn + k, wv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
    }
  } else {
    for (int k = lane; k < K; k += 32) acc = fmaf(to_f32(wn[k]), row[k], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) {
    if (b) acc += bias;
    if (gelu) acc = gelu_tanh_f(acc);
    if (residual) acc += res;
    out[int64_t(r) * N + n] = from_f32<T>(acc);
  }
}

// linear_outputs for rows that fit J 16-byte chunks a lane (K <= J * 32 * V; x, the weights and
// any LayerNorm parameters 16-byte aligned; Ln: whether there is a LayerNorm, ln_w not null):
// each warp reads x itself, straight into its lanes' registers in the weight rows' chunk
// layout (lane covers columns (j * 32 + lane) * V .. + V - 1 of chunk j), so nothing goes
// through shared memory and no thread waits for another warp: no __syncthreads. (J and Ln are
// compile-time so that only the registers a width needs are held: 185 a thread for J = 8 with
// a LayerNorm, two CTAs an SM where shakespeare-char's c_fc wants three.)
// Without a LayerNorm the products and sums are linear_outputs' in its order (the same bits).
// With one, the LayerNorm's weight g and bias b move onto the weight row w:
//   sum_k w_k ((x_k - m) r g_k + b_k) = r sum_k (w_k g_k)(x_k - m) + sum_k w_k b_k
// (m, r: the row's mean and rstd), so the row is never normalized and stored: each lane sums
// its own x for the mean (one warp butterfly), then its centred squares and products together
// (a second one), while sum_k w_k b_k is made as x travels. linear_outputs normalized the row
// in shared memory behind two block sums and four barriers (~0.9 us of a 2.5-us launch at
// K = 384 in dev/pdl_chain.cu). The centring comes first, as in linear_outputs, so rows far from
// zero lose nothing to cancellation; other bits (g applied to w, r after the sum), within the
// dtype's tolerance of linear_outputs. Opt-in (set_linear_registers_max_k): faster in a chain
// of dependent launches (dev/pdl_chain.cu: 1.22 vs 2.16 us at K = 256 with a LayerNorm, 1.69
// vs 2.47 at 384, 1.14 vs 1.54 without one; slower at 1,536, 3.96 vs 2.63 us, where four
// warps a CTA each read the whole row), but not end to end at shakespeare-char (decode.h's
// kLinearRegistersMaxK). The fused kernels that promise decode_linear's bits (decode_tail,
// decode_blocks) keep linear_outputs' LayerNorm.
template <typename T, int J, bool Ln>
__device__ __forceinline__ void linear_outputs_in_registers(
    T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
    const T* __restrict__ b, const T* __restrict__ ln_w, const T* __restrict__ ln_b,
    const T* __restrict__ residual, int N, int K, float eps, bool gelu, int r, int n0) {
  constexpr int V = Vec16<T>::n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = n0 + warp;
  const bool has_output = n < N;
  const T* wn = w + int64_t(has_output ? n : 0) * K;
  auto column = [&](int j) { return (j * 32 + lane) * V; };
  pdl_launch_dependents();
  // the weight row, the LayerNorm's parameters and the bias do not depend on the kernel before
  uint4 wv[J], gv[Ln ? J : 1], bv[Ln ? J : 1];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int k = column(j);
    if (k >= K) continue;
    wv[j] = *reinterpret_cast<const uint4*>(wn + k);
    if constexpr (Ln) {
      gv[j] = *reinterpret_cast<const uint4*>(ln_w + k);
      bv[j] = ln_b ? *reinterpret_cast<const uint4*>(ln_b + k) : uint4{0, 0, 0, 0};
    }
  }
  const float bias = b && has_output && lane == 0 ? to_f32(b[n]) : 0.0f;
  pdl_wait();  // x and residual are the previous kernel's output
  const float res =
      residual && has_output && lane == 0 ? to_f32(load_produced(residual + int64_t(r) * N + n))
                                          : 0.0f;
  const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(r) * K);
  uint4 xv[J];
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (column(j) < K) xv[j] = load_produced(xr + column(j) / V);
  // the warp's sum of the weight row times the chunks v (fmaf in column order, then the xor
  // butterfly: linear_outputs' order)
  auto row_dot = [&](const uint4* v) {
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (column(j) >= K) break;
      float wf[V], vf[V];
      Vec16<T>::convert(wv[j], wf);
      Vec16<T>::convert(v[j], vf);
#pragma unroll
      for (int i = 0; i < V; ++i) dot = fmaf(wf[i], vf[i], dot);
    }
    return warp_sum(dot);
  };
  float acc = 0.0f;
  if constexpr (!Ln) {
    acc = row_dot(xv);
  } else {
    const float wb = row_dot(bv);  // B = sum_k w_k b_k, while x is in flight
    // the mean of x, then the centred squares and sum_k (w_k g_k)(x_k - m) together
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (column(j) >= K) break;
      float xf[V];
      Vec16<T>::convert(xv[j], xf);
#pragma unroll
      for (int i = 0; i < V; ++i) sum += xf[i];
    }
    const float mean = warp_sum(sum) / K;
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (column(j) >= K) break;
      float wf[V], gf[V], xf[V];
      Vec16<T>::convert(wv[j], wf);
      Vec16<T>::convert(gv[j], gf);
      Vec16<T>::convert(xv[j], xf);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = xf[i] - mean;
        ss = fmaf(d, d, ss);
        acc = fmaf(wf[i] * gf[i], d, acc);
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      ss += __shfl_xor_sync(0xffffffffu, ss, offset);
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    }
    acc = fmaf(rsqrtf(ss / K + eps), acc, wb);
  }
  if (lane == 0 && has_output) {
    if (b) acc += bias;
    if (gelu) acc = gelu_tanh_f(acc);
    if (residual) acc += res;
    out[int64_t(r) * N + n] = from_f32<T>(acc);
  }
}

// f(J, Ln) with the compile-time instance of linear_outputs_in_registers that runs a row of K:
// J the fewest of 1, 2, 4, 8 16-byte chunks a lane that hold it (K <= 8 * 32 * V, as
// linear_row_in_registers asks), Ln whether there is a LayerNorm; J and Ln as
// std::integral_constant / std::bool_constant (decode.cu and dev/pdl_chain.cu dispatch so)
template <typename T, typename F>
void with_registers_instance(int64_t K, bool ln, F&& f) {
  auto with_ln = [&](auto j) {
    if (ln)
      f(j, std::true_type{});
    else
      f(j, std::false_type{});
  };
  const int64_t chunks = (K + 32 * Vec16<T>::n - 1) / (32 * Vec16<T>::n);
  if (chunks <= 1)
    with_ln(std::integral_constant<int, 1>{});
  else if (chunks <= 2)
    with_ln(std::integral_constant<int, 2>{});
  else if (chunks <= 4)
    with_ln(std::integral_constant<int, 4>{});
  else
    with_ln(std::integral_constant<int, 8>{});
}

// Whether linear_outputs_in_registers runs: 16-byte rows of K <= kLinearAhead * 32 * V (its
// largest J), every operand it reads in 16-byte loads aligned (ln_w, ln_b: null where absent)
template <typename T>
inline bool linear_row_in_registers(const void* x, const void* w, const void* ln_w,
                                    const void* ln_b, int64_t K) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return K * int64_t(sizeof(T)) % 16 == 0 && K <= kLinearAhead * 32 * Vec16<T>::n &&
         aligned(x) && aligned(w) && (!ln_w || aligned(ln_w)) && (!ln_b || aligned(ln_b));
}

// Whether the 16-byte version runs: aligned weights, 16-byte rows
template <typename T>
inline bool linear_vector_loads(const void* w, int64_t K) {
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && (K * int64_t(sizeof(T))) % 16 == 0;
}

}  // namespace gs
