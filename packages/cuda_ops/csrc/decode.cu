// decode.cu: the fused decode-step kernels on CUDA (formulas in decode.h; CPU reference in
// decode.cpp, both tested against PyTorch).
//
// decode_linear_kernel: grid (ceil(N / 4), R), 128 threads. Each of the block's 4 warps computes
//   one output. Its lanes first issue their 16-byte loads of the weight row (up to 8 each: whole
//   rows up to K = 2,048 in bf16) -- weights do not depend on the kernel before, so with
//   programmatic dependent launch (cuda_launch.h; every kernel here is launched that way on
//   sm_90) those loads and the launch itself overlap the previous kernel's tail. Then it waits
//   for that kernel, loads its input row into shared memory as float (normalizing it there when
//   a LayerNorm is fused: two block reductions, mean then the centred sum of squares), and
//   reduces the dot products across the warp. At batch 1 this is a matrix-vector product: bound
//   by latency (one L2 read of W, a few hundred KB per layer), where cuBLAS's GEMM tiles spend
//   most of a 3-us launch on an 8-row tile of one useful row. One warp per output with 8 warps
//   a block and no early weight loads (the version before) took 3.1 us a call at
//   shakespeare-char (benchmarks/profiles/profile-decode-shakespeare-char-gptstack-h200-20261203.txt).
// decode_linear_registers_kernel (opt-in, set_linear_registers_max_k; 2026-12-06): the same
//   grid where the row fits 16-byte chunks held in registers: each warp reads x itself (no
//   shared memory, no barrier) and a LayerNorm is folded onto the weight row
//   (decode_linear.cuh's linear_outputs_in_registers). Faster in a chain of dependent launches,
//   slower inside the decoder's graph at shakespeare-char (decode.h's kLinearRegistersMaxK).
// decode_attention_kernel: grid (nh, R), 256 threads. Threads < hs write the new key and value
//   into the caches and stage q in shared memory; thread j then scores keys j, j + 256, ...
//   (a whole key row per thread, its loads all in flight: 16-byte loads in the vector version);
//   block max and sum give the softmax; for y, hs / 8 threads (bf16; hs / 4 for float32; hs in
//   the scalar version) read one value row with 16-byte loads, and the 256 threads cover as
//   many keys at once, whose partial sums meet in shared memory. Scores live in shared memory
//   (T floats). The first version (one element per load, 128 threads) took 18.6 us a call at
//   shakespeare-char's T = 256 on the H200: six blocks, each waiting on one L2 read after
//   another.
//
// 2026-12-06: a dependent launch costs ~0.7 us on the H100 (dev/pdl_chain.cu), so each kernel's
//   own chain of reads decides its time. decode_linear reads its bias and LayerNorm parameters
//   before the wait and its residual with x (decode_linear.cuh); decode_attention reads the
//   position with q, k, v, and requests its first value rows before the scores: cached step
//   118.6 -> 109.3 us at shakespeare-char (H100). Everything an earlier kernel wrote is read
//   with load_produced (cuda_common.cuh): the non-coherent path a `const __restrict__` input
//   may take is unsafe for a programmatic dependent.
//
// Tried and reverted (commits 1e654ba, 1238e18): the whole step as one persistent kernel, its
// blocks running the ~31 ops in order with a grid-wide barrier between them (an atomic arrival
// per block, then a spin on a generation word). Bit for bit the op-by-op step, but slower on the
// H200: a decode step of 170-192 us against 127-136 us for these kernels launched one by one with
// programmatic dependent launch (benchmarks/profile_decode.py, profiles/profile-decode-
// shakespeare-char-h200-20261203-persistent{,-384}.json: one block per SM, up to 384 blocks):
// a barrier over 132 blocks cost more than the programmatic launch it replaced.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c decode.cu -I.
#include <cmath>
#include <type_traits>

#include "cuda_common.cuh"
#include "decode.h"
#include "decode_linear.cuh"
#include "decode_mma.cuh"
#include "decode_split.cuh"
#include "decode_vec.cuh"

namespace gs {
namespace {

constexpr int kAttnThreads = 256;
static_assert(kDecodeMaxHeadSize <= kAttnThreads, "decode_attention: one q element a thread");
// decode_attention's vector version: value rows a thread requests before the scores, and 16-byte
// loads of a key row issued before the first is used
constexpr int kValuesAhead = 8;
constexpr int kRowLoads = 8;

template <typename T, bool Vector, bool VectorRow>
__global__ void __launch_bounds__(kLinearWarps * 32)
    decode_linear_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                         const T* __restrict__ b, const T* __restrict__ ln_w,
                         const T* __restrict__ ln_b, const T* __restrict__ residual, int N, int K,
                         float eps, bool gelu) {
  extern __shared__ float row[];  // K floats: the (normalized) input row
  __shared__ float red[32];
  linear_outputs<T, Vector, VectorRow>(out, x, w, b, ln_w, ln_b, residual, N, K, eps, gelu,
                                        blockIdx.y, blockIdx.x * kLinearWarps, row, red);
}

// decode_linear_kernel where the row fits J 16-byte chunks a lane (linear_row_in_registers): no
// shared memory, a LayerNorm (Ln) folded into the product (decode_linear.cuh)
template <typename T, int J, bool Ln>
__global__ void __launch_bounds__(kLinearWarps * 32)
    decode_linear_registers_kernel(T* __restrict__ out, const T* __restrict__ x,
                                   const T* __restrict__ w, const T* __restrict__ b,
                                   const T* __restrict__ ln_w, const T* __restrict__ ln_b,
                                   const T* __restrict__ residual, int N, int K, float eps,
                                   bool gelu) {
  linear_outputs_in_registers<T, J, Ln>(out, x, w, b, ln_w, ln_b, residual, N, K, eps, gelu,
                                        blockIdx.y, blockIdx.x * kLinearWarps);
}

template <typename T, bool Vector>
__global__ void __launch_bounds__(kAttnThreads)
    decode_attention_kernel(T* __restrict__ y, const T* __restrict__ qkv, T* __restrict__ kc,
                            T* __restrict__ vc, const int64_t* __restrict__ pos, int nh, int T_,
                            int hs) {
  // V: elements per load (16 bytes in the vector version); a value row is read by hs / V
  // threads, so blockDim / (hs / V) keys are summed at once
  constexpr int V = Vector ? Vec16<T>::n : 1;
  extern __shared__ float smem[];  // q (hs), scores (T), partial y (groups * hs)
  __shared__ float red[32];
  // each region starts on a 16-byte boundary (compute-sanitizer's racecheck reported reads of
  // q racing with writes of s when hs = 13 left s unaligned right behind q)
  float* q = smem;
  float* s = q + round4(hs);
  float* part = s + round4(T_);
  const int h = blockIdx.x, r = blockIdx.y, C = nh * hs, t = threadIdx.x;
  T* yh = y + int64_t(r) * C + h * hs;
  pdl_launch_dependents();
  pdl_wait();  // qkv is the previous kernel's output
  // the position and this head's q, k, v are read at once (hs <= kDecodeMaxHeadSize <= the
  // block: one element a thread), not the position first
  const T* qr = qkv + int64_t(r) * 3 * C + h * hs;
  T qd{}, kd{}, vd{};
  if (t < hs)
    qd = load_produced(qr + t), kd = load_produced(qr + C + t), vd = load_produced(qr + 2 * C + t);
  const int64_t p64 = load_produced(pos);
  if (p64 < 0 || p64 >= T_) {  // cannot happen from the decoders; make it visible, not silent
    for (int d = t; d < hs; d += blockDim.x) yh[d] = from_f32<T>(NAN);
    return;
  }
  const int p = static_cast<int>(p64);
  T* kh = kc + (int64_t(r) * nh + h) * T_ * hs;
  T* vh = vc + (int64_t(r) * nh + h) * T_ * hs;
  if (t < hs) {
    kh[int64_t(p) * hs + t] = kd;
    vh[int64_t(p) * hs + t] = vd;
    q[t] = to_f32(qd);
  }
  __syncthreads();  // the new key/value are in the caches (global writes of this block) and q
  // y's thread (g, c) sums V columns from c over keys g, g + groups, ... (below); its first
  // kValuesAhead value rows are requested now, to travel while the scores are computed
  const int lanes = hs / V, groups = blockDim.x / lanes;
  const int g = t / lanes, c = (t % lanes) * V;
  uint4 v_ahead[Vector ? kValuesAhead : 1];
  if constexpr (Vector) {
#pragma unroll
    for (int a = 0; a < kValuesAhead; ++a) {
      const int j = g + a * groups;
      if (g < groups && j <= p)
        v_ahead[a] = load_produced(reinterpret_cast<const uint4*>(vh + int64_t(j) * hs + c));
    }
  }
  // scores: one key per thread; its row's loads are independent, so they are all in flight
  // at once (the latency of one L2 read, not hs of them: kRowLoads 16-byte loads are issued
  // before the first is used)
  const float scale = rsqrtf(float(hs));
  float m = -INFINITY;
  for (int j = t; j <= p; j += blockDim.x) {
    const T* kj = kh + int64_t(j) * hs;
    float dot = 0.0f;
    if constexpr (Vector) {
      for (int d0 = 0; d0 < hs; d0 += kRowLoads * V) {
        uint4 raw[kRowLoads];
#pragma unroll
        for (int a = 0; a < kRowLoads; ++a)
          if (d0 + a * V < hs)
            raw[a] = load_produced(reinterpret_cast<const uint4*>(kj + d0 + a * V));
#pragma unroll
        for (int a = 0; a < kRowLoads; ++a) {
          if (d0 + a * V >= hs) break;
          float kv[V];
          Vec16<T>::convert(raw[a], kv);
#pragma unroll
          for (int i = 0; i < V; ++i) dot = fmaf(q[d0 + a * V + i], kv[i], dot);
        }
      }
    } else {
      for (int d = 0; d < hs; ++d) dot = fmaf(q[d], to_f32(load_produced(kj + d)), dot);
    }
    s[j] = dot * scale;
    m = fmaxf(m, s[j]);
  }
  m = block_max(m, red);
  float sum = 0.0f;
  for (int j = t; j <= p; j += blockDim.x) sum += (s[j] = __expf(s[j] - m));
  const float total = block_sum(sum, red);  // its leading __syncthreads also publishes s[]
  // y = sum_j s_j v_j: thread (g, c) sums V columns from c over keys g, g + groups, ...
  if (g < groups) {
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    int j = g;
    if constexpr (Vector) {  // the rows requested before the scores, then the rest
#pragma unroll
      for (int a = 0; a < kValuesAhead; ++a, j += groups) {
        if (j > p) break;
        float vv[V];
        Vec16<T>::convert(v_ahead[a], vv);
        const float sj = s[j];
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = fmaf(sj, vv[i], acc[i]);
      }
    }
#pragma unroll 4
    for (; j <= p; j += groups) {
      float vv[V];
      if constexpr (Vector) {
        Vec16<T>::convert(load_produced(reinterpret_cast<const uint4*>(vh + int64_t(j) * hs + c)),
                          vv);
      } else {
        vv[0] = to_f32(load_produced(vh + int64_t(j) * hs + c));
      }
      const float sj = s[j];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = fmaf(sj, vv[i], acc[i]);
    }
#pragma unroll
    for (int i = 0; i < V; ++i) part[g * hs + c + i] = acc[i];
  }
  __syncthreads();
  for (int d = t; d < hs; d += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < groups; ++k) acc += part[k * hs + d];
    yh[d] = from_f32<T>(acc / total);
  }
}

// decode_linear of many bf16 rows on tensor cores (decode_mma.cuh), where it applies (decode.h:
// kDecodeMmaMinRows, kDecodeMmaMaxK, 16-byte rows); false: the caller runs the one-row kernel.
template <typename T>
bool launch_linear_mma(T* out, const T* x, const T* w, const T* b, const T* ln_w, const T* ln_b,
                       const T* residual, int64_t R, int64_t N, int64_t K, double eps, bool gelu,
                       cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return false;
  } else {
    namespace ml = mma_linear;
    constexpr int kTwoPerSm = 116 * 1024;
    static_assert(ml::shared_bytes<2>(kDecodeMmaMaxK) <= 227 * 1024,
                  "kDecodeMmaMaxK must fit the H100/H200's 227 KiB of shared memory a block");
    auto aligned = [](const void* p, int n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
    if (R < kDecodeMmaMinRows || K % 16 != 0 || K > kDecodeMmaMaxK || !aligned(x, 16) ||
        !aligned(w, 16) || !aligned(out, 4))
      return false;
    auto bits = [](const T* p) { return reinterpret_cast<const uint16_t*>(p); };
    const ml::Args a{reinterpret_cast<uint16_t*>(out), bits(x), bits(w), bits(b), bits(ln_w),
                     bits(ln_b), bits(residual), int(R), int(N), int(K), float(eps), gelu};
    const std::string config = "(R=" + std::to_string(R) + ", N=" + std::to_string(N) +
                               ", K=" + std::to_string(K) + ")";
    // 64 columns a CTA while two CTAs fit an SM, else 32 (one CTA of up to 227 KiB). Each
    // instance's shared-memory limit is raised once, to the most any K of its range needs
    // (LaunchCheck runs once per instance: raised to the first call's K, a later, wider call
    // failed with cudaErrorInvalidValue).
    auto launch = [&](auto kernel, auto nt) {
      constexpr int NT = decltype(nt)::value;
      static LaunchCheck check;
      const int limit = NT == 4 ? kTwoPerSm : static_cast<int>(ml::shared_bytes<2>(kDecodeMmaMaxK));
      check.ensure(reinterpret_cast<const void*>(kernel.value), "decode_linear",
                   NT == 4 ? "tensor-core 32x64" : "tensor-core 32x32", ml::kThreads, limit);
      launch_programmatic(kernel.value, dim3(ceil_div(N, ml::cols<NT>()), ceil_div(R, ml::kRows)),
                          ml::kThreads, static_cast<int>(ml::shared_bytes<NT>(K)), stream, a);
    };
    if (ml::shared_bytes<4>(K) <= kTwoPerSm)
      ml::with_kernel_for<4>(int(K), [&](auto kernel) {
        launch(kernel, std::integral_constant<int, 4>{});
      });
    else
      ml::with_kernel_for<2>(int(K), [&](auto kernel) {
        launch(kernel, std::integral_constant<int, 2>{});
      });
    check_launch("decode_linear", config);
    return true;
  }
}

// decode_linear of many bf16 rows with K split over a thread-block cluster (decode_split.cuh),
// where it applies: asked for, no LayerNorm, K one of its widths, the tensor-core kernel's rows,
// N even, sm_90+; false: the caller runs another kernel.
template <typename T>
bool launch_linear_split(T* out, const T* x, const T* w, const T* b, const T* ln_w,
                         const T* residual, int64_t R, int64_t N, int64_t K, bool gelu,
                         cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return false;
  } else {
    namespace sl = split_linear;
    if (ln_w || R < kDecodeMmaMinRows || N % 2 != 0 || !aligned16(x) || !aligned16(w) ||
        !aligned16(out) || (residual && !aligned16(residual)) || !clusters_here())
      return false;
    auto bits = [](const T* p) { return reinterpret_cast<const uint16_t*>(p); };
    const mma_linear::Args a{reinterpret_cast<uint16_t*>(out), bits(x), bits(w), bits(b),
                             nullptr, nullptr, bits(residual), int(R), int(N), int(K), 0.0f,
                             gelu};
    const std::string config = "(R=" + std::to_string(R) + ", N=" + std::to_string(N) +
                               ", K=" + std::to_string(K) + ", split K)";
    const bool launched = sl::with_kernel_for(int(K), [&](auto kernel, int64_t smem) {
      static LaunchCheck check;  // one per instance (its one K)
      check.ensure(reinterpret_cast<const void*>(kernel.value), "decode_linear", config,
                   sl::kThreads, int(smem));
      launch_cluster_programmatic(
          kernel.value, dim3(sl::kSplit * ceil_div(N, sl::kCols), ceil_div(R, sl::kRows)),
          sl::kThreads, size_t(smem), stream, sl::kSplit, a);
    });
    if (launched) check_launch("decode_linear", config);
    return launched;
  }
}

template <typename T>
void launch_linear(T* out, const T* x, const T* w, const T* b, const T* ln_w, const T* ln_b,
                   const T* residual, int64_t R, int64_t N, int64_t K, double eps, bool gelu,
                   bool split_k, cudaStream_t stream) {
  if (R == 0) return;
  if (split_k && launch_linear_split(out, x, w, b, ln_w, residual, R, N, K, gelu, stream)) return;
  if (launch_linear_mma(out, x, w, b, ln_w, ln_b, residual, R, N, K, eps, gelu, stream)) return;
  const int smem = static_cast<int>(K * sizeof(float));
  const bool vector = linear_vector_loads<T>(w, K);
  // x in 16-byte loads too where it is 16-byte aligned (its rows then are: K is a multiple of
  // 16 bytes wherever the weights are read so)
  const bool vector_row = vector && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const dim3 grid(ceil_div(N, kLinearWarps), static_cast<unsigned>(R));
  const std::string config = "(R=" + std::to_string(R) + ", N=" + std::to_string(N) +
                             ", K=" + std::to_string(K) + ")";
  auto run = [&](auto kernel, LaunchCheck& check, const char* variant, int shared) {
    check.ensure(reinterpret_cast<const void*>(kernel), "decode_linear", variant,
                 kLinearWarps * 32, shared);
    launch_programmatic(kernel, grid, kLinearWarps * 32, shared, stream, out, x, w, b, ln_w, ln_b,
                        residual, int(N), int(K), float(eps), gelu);
  };
  static LaunchCheck vector_row_check, vector_check, scalar_check;
  if (K <= linear_registers_max_k() && linear_row_in_registers<T>(x, w, ln_w, ln_b, K)) {
    with_registers_instance<T>(K, ln_w != nullptr, [&](auto j, auto ln) {
      static LaunchCheck check;  // one per instance
      // asked for the K floats of shared memory it does not use, as dev/pdl_chain.cu (where it
      // won) launched it: no help in the decoder either (decode.h, kLinearRegistersMaxK)
      run(decode_linear_registers_kernel<T, decltype(j)::value, decltype(ln)::value>, check,
          "row in registers", smem);
    });
  } else if (vector_row)
    run(decode_linear_kernel<T, true, true>, vector_row_check, "vector", smem);
  else if (vector)
    run(decode_linear_kernel<T, true, false>, vector_check, "vector weights", smem);
  else
    run(decode_linear_kernel<T, false, false>, scalar_check, "scalar", smem);
  check_launch("decode_linear", config);
}

template <typename T>
void launch_attention(T* y, const T* qkv, T* kc, T* vc, const int64_t* pos, int64_t R,
                      int64_t nh, int64_t T_, int64_t hs, cudaStream_t stream) {
  static LaunchCheck vector_check, scalar_check;
  // 16-byte loads need 16-byte rows: hs a multiple of the vector width, aligned caches
  const bool vector = hs % Vec16<T>::n == 0 && aligned16(kc) && aligned16(vc);
  const int64_t width = vector ? Vec16<T>::n : 1, groups = kAttnThreads / (hs / width);
  const int smem = static_cast<int>((round4(hs) + round4(T_) + groups * hs) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(nh), static_cast<unsigned>(R));
  const std::string config = "(R=" + std::to_string(R) + ", nh=" + std::to_string(nh) +
                             ", T=" + std::to_string(T_) + ", hs=" + std::to_string(hs) + ")";
  if (vector) {
    vector_check.ensure(reinterpret_cast<const void*>(&decode_attention_kernel<T, true>),
                        "decode_attention", "vector " + config, kAttnThreads, smem);
    launch_programmatic(decode_attention_kernel<T, true>, grid, kAttnThreads, smem, stream, y,
                        qkv, kc, vc, pos, int(nh), int(T_), int(hs));
  } else {
    scalar_check.ensure(reinterpret_cast<const void*>(&decode_attention_kernel<T, false>),
                        "decode_attention", "scalar " + config, kAttnThreads, smem);
    launch_programmatic(decode_attention_kernel<T, false>, grid, kAttnThreads, smem, stream, y,
                        qkv, kc, vc, pos, int(nh), int(T_), int(hs));
  }
  check_launch("decode_attention", config);
}

}  // namespace

void decode_linear_cuda(void* out, const void* x, const void* w, const void* b, const void* ln_w,
                        const void* ln_b, const void* residual, int64_t R, int64_t N, int64_t K,
                        double eps, bool gelu, bool split_k, DType dtype, uintptr_t stream) {
  if (dtype == DType::bf16) {
    using T = __nv_bfloat16;
    launch_linear<T>(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(w),
                     static_cast<const T*>(b), static_cast<const T*>(ln_w),
                     static_cast<const T*>(ln_b), static_cast<const T*>(residual), R, N, K, eps,
                     gelu, split_k, as_stream(stream));
  } else {
    launch_linear<float>(static_cast<float*>(out), static_cast<const float*>(x),
                         static_cast<const float*>(w), static_cast<const float*>(b),
                         static_cast<const float*>(ln_w), static_cast<const float*>(ln_b),
                         static_cast<const float*>(residual), R, N, K, eps, gelu, false,
                         as_stream(stream));
  }
}

void decode_attention_cuda(void* y, const void* qkv, void* k_cache, void* v_cache,
                           const int64_t* pos, int64_t R, int64_t nh, int64_t T, int64_t hs,
                           DType dtype, uintptr_t stream) {
  if (dtype == DType::bf16) {
    using V = __nv_bfloat16;
    launch_attention<V>(static_cast<V*>(y), static_cast<const V*>(qkv), static_cast<V*>(k_cache),
                        static_cast<V*>(v_cache), pos, R, nh, T, hs, as_stream(stream));
  } else {
    launch_attention<float>(static_cast<float*>(y), static_cast<const float*>(qkv),
                            static_cast<float*>(k_cache), static_cast<float*>(v_cache), pos, R,
                            nh, T, hs, as_stream(stream));
  }
}

}  // namespace gs
