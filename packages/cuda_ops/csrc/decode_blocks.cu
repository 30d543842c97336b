// decode_blocks.cu: every transformer block of a one-token decode step in one launch, run by
// one thread-block cluster per batch row (formulas and layout in decode.h).
//
// Why a cluster: the op-by-op step (decode.cu) is 5 dependent launches a block, ~4 us each on
// the H200 even with programmatic launch, because each kernel waits for the whole previous
// grid to finish and flush. The whole step as one persistent kernel over every SM with a
// software grid barrier lost to that (decode.cu's header). A cluster of 16 CTAs has a hardware
// barrier (barrier.cluster: 0.19-0.23 us measured) and distributed shared memory, so each CTA
// broadcasts its outputs straight into every CTA's shared memory and the next phase starts one
// barrier later. The price: 16 SMs read the weights, so this is for small models (the caller
// chooses: fused_step.py).
//
// Each CTA keeps the whole residual row x and every phase's input vector in its shared memory
// (floats, rounded to T as the op-by-op kernels round their outputs). Per block, five phases
// with a cluster barrier after each:
//   A  LayerNorm(x) -> qkv = c_attn(.)           rows of c_attn split over the CTAs
//   B  attention, one head per half-CTA (256 threads, decode_attention_kernel's code), writing
//      the new key and value into the caches
//   C  x += c_proj(y)                            D  h = gelu(c_fc(LayerNorm(x)))
//   E  x += mlp.c_proj(h)
// A warp computes one output row at a time with decode_linear_kernel's lane order and
// reductions (lane 0's sum goes to every CTA), and the LayerNorm uses its 128-thread
// reductions, so the result is the op-by-op step's to the bit (tested).
//
// Weights: a CTA's rows of each matrix are contiguous, so one thread streams them into shared
// memory with the Hopper bulk copy (cp.async.bulk, completion counted on an mbarrier), two
// slices ahead where two fit (c_fc's slice loads during attention and c_proj, mlp.c_proj's
// during c_fc, ...), else one.
//
// Measured at shakespeare-char on the H200 (bf16), the op-by-op step is still faster, so this
// kernel is opt-in (gptstack.model.fused_step.ONE_LAUNCH). Its versions, the per-phase times
// (dev/decode_blocks_phases.cu) and ncu's view are in
// benchmarks/profiles/decode-blocks-phases-h200-20261204.txt: the 5 cluster barriers a block
// (each arrive.release waits for the phase's remote stores) and matrix-vector phases that issue
// several times the instructions their loads and multiply-adds need (more warps made them
// slower). Next to try: fewer instructions per row (a transposed reduction of a warp's rows,
// with decode_linear_kernel changed alike to keep the bits), remote stores that complete on
// the receiver's mbarrier (st.async) instead of a barrier per phase.
#include <cmath>

#include "cluster.cuh"
#include "cuda_common.cuh"
#include "cuda_launch.h"
#include "decode.h"
#include "decode_vec.cuh"

namespace gs {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kHalf = 256;  // threads per attention head (decode_attention_kernel's block)
constexpr int kLnPerThread = static_cast<int>(kDecodeBlocksMaxC / kThreads);

// Distributed shared memory, sm_90 and newer, beside cluster.cuh's primitives (an sm_80 build
// compiles the kernel to a trap, and the launcher refuses such a GPU before that)
#ifdef GS_CLUSTERS
// local[i] of CTA `rank` of this cluster (distributed shared memory) = v
__device__ __forceinline__ void store_remote(float* local, int i, int rank, float v) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(local + i)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}
#endif
// Built by dev/decode_blocks_phases.cu with GS_DECODE_BLOCKS_STAMPS, thread 0 of each CTA
// records clock64() when each phase's work is done (st 0) and when its barrier is passed (st 1),
// and once before the first block (phase 5): where a step's time goes. Otherwise nothing.
#ifdef GS_DECODE_BLOCKS_STAMPS
__device__ long long decode_blocks_stamps[16][kDecodeMaxLayers][6][2];
__device__ __forceinline__ void phase_stamp(int l, int phase, int st) {
  if (threadIdx.x == 0) decode_blocks_stamps[blockIdx.x % 16][l][phase][st] = clock64();
}
#else
__device__ __forceinline__ void phase_stamp(int, int, int) {}
#endif

// the barrier of one 256-thread half (ids 1 and 2; __syncthreads is barrier 0)
__device__ __forceinline__ void half_sync(int half) {
  asm volatile("bar.sync %0, %1;" ::"r"(half + 1), "n"(kHalf) : "memory");
}

// block_sum / block_max of a 256-thread block, over one half of this CTA
__device__ __forceinline__ float half_sum(float v, float* red, int half) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % kHalf) / 32;
  v = warp_sum(v);
  half_sync(half);
  if (lane == 0) red[warp] = v;
  half_sync(half);
  v = lane < kHalf / 32 ? red[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float half_max(float v, float* red, int half) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % kHalf) / 32;
  v = warp_max(v);
  half_sync(half);
  if (lane == 0) red[warp] = v;
  half_sync(half);
  v = lane < kHalf / 32 ? red[lane] : -INFINITY;
  return warp_max(v);
}

// block_sum of decode_linear_kernel's 128 threads (threads >= 128 pass 0), on all 512
__device__ __forceinline__ float sum128(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0 && warp < 4) red[warp] = v;
  __syncthreads();
  v = lane < 4 ? red[lane] : 0.0f;
  return warp_sum(v);
}

// A LayerNorm's weight and bias, element k = threadIdx.x + i * kThreads in register i (loaded
// before the barrier that ends the previous phase: they do not depend on it)
struct LnParams {
  float w[kLnPerThread], b[kLnPerThread];
  template <typename T> __device__ void load(const T* weight, const T* bias, int C) {
#pragma unroll
    for (int i = 0; i < kLnPerThread; ++i) {
      const int k = threadIdx.x + i * kThreads;
      w[i] = k < C ? to_f32(weight[k]) : 0.0f;
      b[i] = k < C && bias ? to_f32(bias[k]) : 0.0f;
    }
  }
};

// out = LayerNorm(x) over K floats, with decode_linear_kernel's reductions
__device__ void layernorm_row(float* out, const float* x, const LnParams& ln, int K, float eps,
                              float* red) {
  const int t = threadIdx.x;
  float s = 0.0f;
  if (t < 128)
    for (int k = t; k < K; k += 128) s += x[k];
  const float mean = sum128(s, red) / K;
  float ss = 0.0f;
  if (t < 128)
    for (int k = t; k < K; k += 128) ss += (x[k] - mean) * (x[k] - mean);
  const float rstd = rsqrtf(sum128(ss, red) / K + eps);
#pragma unroll
  for (int i = 0; i < kLnPerThread; ++i) {
    const int k = t + i * kThreads;
    if (k < K) out[k] = (x[k] - mean) * rstd * ln.w[i] + ln.b[i];
  }
  __syncthreads();
}

// This CTA's rows [n0, n1) of an (N, K) matrix, contiguous in memory: its slice. Warp w takes
// rows n0 + w, n0 + w + kWarps, ...; lane covers columns (j * 32 + lane) * V of chunk j.
struct Rows {
  int n0, n1, K;
  __device__ Rows(int N, int K_, int rank, int cs)
      : n0(rank * N / cs), n1((rank + 1) * N / cs), K(K_) {}
  __device__ unsigned bytes(int elem) const { return unsigned(n1 - n0) * K * elem; }
  // the bias of the row this lane's index names (lane i: the warp's i-th row), 0 without one
  template <typename T> __device__ float lane_bias(const T* bias) const {
    const int n = n0 + threadIdx.x / 32 + (threadIdx.x % 32) * kWarps;
    return bias && n < n1 ? to_f32(bias[n]) : 0.0f;
  }
};

// Each row's dot product with vec (shared, K floats) from this CTA's slice in shared memory,
// then epi(n, value + bias) with lane 0's sum on every lane (decode_linear_kernel's bits).
// A warp takes its rows kRowGroup at a time: per chunk of columns a lane reads its elements of
// vec once into registers and multiplies every row of the group with them. (Read once per row,
// as the first two versions did, vec's floats 8 apart across lanes were 8-way bank conflicts:
// 78 % of the kernel's shared-memory wavefronts, and matvec was 2/3 of the step: ncu and
// clock64 stamps per phase.) Each row's lane sum still runs over k in ascending order.
constexpr int kRowGroup = 8;
template <typename T, typename Epi>
__device__ __forceinline__ void matvec(const T* slice, const Rows& r, const float* vec,
                                       float lane_bias, bool has_bias, Epi epi) {
  constexpr int V = Vec16<T>::n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = r.n1 - r.n0 > warp ? (r.n1 - r.n0 - warp + kWarps - 1) / kWarps : 0;
  for (int g = 0; g < rows; g += kRowGroup) {
    float acc[kRowGroup];
#pragma unroll
    for (int i = 0; i < kRowGroup; ++i) acc[i] = 0.0f;
    for (int k = lane * V; k < r.K; k += 32 * V) {
      float xv[V];
#pragma unroll
      for (int e = 0; e < V; e += 4) {
        const float4 q = *reinterpret_cast<const float4*>(vec + k + e);
        xv[e] = q.x, xv[e + 1] = q.y, xv[e + 2] = q.z, xv[e + 3] = q.w;
      }
#pragma unroll
      for (int i = 0; i < kRowGroup; ++i) {
        if (g + i < rows) {
          float wv[V];
          Vec16<T>::load(slice + int64_t(warp + (g + i) * kWarps) * r.K + k, wv);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[i] = fmaf(wv[e], xv[e], acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRowGroup; ++i) {
      if (g + i < rows) {  // the same for the whole warp
        const float sum = __shfl_sync(0xffffffffu, warp_sum(acc[i]), 0);
        const float b = __shfl_sync(0xffffffffu, lane_bias, g + i);
        epi(r.n0 + warp + (g + i) * kWarps, has_bias ? sum + b : sum);
      }
    }
  }
}

template <typename T> __device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    decode_blocks_kernel(const DecodeBlocksArgs a, int buffers) {
#ifndef GS_CLUSTERS
  __trap();
#else
  constexpr int V = Vec16<T>::n;
  const int cs = cluster_size(), rank = cluster_rank();
  const int b = blockIdx.y, C = a.C, nh = a.nh, hs = a.hs, Tc = a.T, lane = threadIdx.x % 32;
  // shared: `buffers` weight slices, then floats: x (C) xn (C) qkv (3C) y (C) h (4C), then per
  // half: q (hs) s (Tc) part (groups hs)
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float red[3][32];
  __shared__ uint64_t bars[2];
  const int64_t slice_elems = decode_blocks_slice_elems(C, cs);
  float* x = reinterpret_cast<float*>(smem + buffers * slice_elems * sizeof(T));
  float* xn = x + round4(C);
  float* qkv = xn + round4(C);
  float* y = qkv + round4(3 * C);
  float* h = y + round4(C);
  const int lanes = hs / V, groups = kHalf / lanes;
  const int half = threadIdx.x / kHalf, th = threadIdx.x % kHalf;
  float* hq = h + round4(4 * C) + half * decode_blocks_half_floats(hs, Tc, sizeof(T));
  float* hsc = hq + round4(hs);
  float* hpart = hsc + round4(Tc);

  // every CTA's copy of a vector gets element n (lanes < cs each write one CTA's copy)
  auto broadcast = [&](float* buf, int n, float v) {
    __syncwarp();  // the warp's reads of buf[n] (x += ...) come before this CTA's copy changes
    if (lane < cs) store_remote(buf, n, lane, v);
  };
  auto W = [&](int l, int i) { return static_cast<const T*>(a.w[l][i]); };

  // The weight stream: item 4 l + m is layer l's slice of c_attn, c_proj, c_fc, mlp.c_proj
  // (m = 0..3), in buffer item % buffers; thread 0 issues item + buffers once the phase that
  // read item has passed its cluster barrier.
  const Rows rows[4] = {Rows(3 * C, C, rank, cs), Rows(C, C, rank, cs), Rows(4 * C, C, rank, cs),
                        Rows(C, 4 * C, rank, cs)};
  const int matrix[4] = {kAttnW, kProjW, kFcW, kFc2W};
  const int items = 4 * a.n_layer;
  auto slice = [&](int item) {
    return reinterpret_cast<T*>(smem + (item % buffers) * slice_elems * sizeof(T));
  };
  auto issue = [&](int item) {
    if (threadIdx.x != 0 || item >= items) return;
    const Rows& r = rows[item % 4];
    bulk_load(slice(item), W(item / 4, matrix[item % 4]) + int64_t(r.n0) * r.K,
              r.bytes(sizeof(T)), &bars[item % buffers]);
  };
  auto await = [&](int item) { mbar_wait<false>(&bars[item % buffers], (item / buffers) & 1); };
  if (threadIdx.x == 0)
    for (int i = 0; i < buffers; ++i) mbarrier_init(&bars[i]);
  __syncthreads();
  // no CTA writes into another's shared memory before that one has started (waited for below,
  // before the first broadcast; compute-sanitizer's racecheck flags the writes without it)
  cluster_arrive();
  for (int i = 0; i < buffers; ++i) issue(i);  // weights do not depend on the kernel before

  LnParams ln;
  ln.load(W(0, kLn1W), W(0, kLn1B), C);
  float bias = rows[0].lane_bias(W(0, kAttnB));
  pdl_launch_dependents();
  pdl_wait();  // token, pos and the caches come from the kernels before
  const int64_t p64 = load_produced(a.pos), tok = load_produced(a.token + b);
  const bool valid = p64 >= 0 && p64 < Tc && p64 < a.wpe_rows && tok >= 0 && tok < a.vocab;
  const int p = valid ? static_cast<int>(p64) : 0;
  {
    const T* wte = static_cast<const T*>(a.wte) + (valid ? tok : 0) * C;
    const T* wpe = static_cast<const T*>(a.wpe) + int64_t(p) * C;
    for (int c = threadIdx.x; c < C; c += kThreads)
      x[c] = valid ? round_to<T>(to_f32(wte[c]) + to_f32(wpe[c])) : NAN;
  }
  __syncthreads();
  const float scale = rsqrtf(float(hs));
  cluster_wait();
  phase_stamp(0, 5, 0);  // (the stamps: dev/decode_blocks_phases.cu)

  for (int l = 0; l < a.n_layer; ++l) {
    const int item = 4 * l;
    // A: qkv = c_attn(ln_1(x))
    layernorm_row(xn, x, ln, C, a.eps, red[0]);
    await(item);
    matvec<T>(slice(item), rows[0], xn, bias, W(l, kAttnB) != nullptr,
              [&](int n, float v) { broadcast(qkv, n, round_to<T>(v)); });
    phase_stamp(l, 0, 0);
    cluster_arrive();
    bias = rows[1].lane_bias(W(l, kProjB));
    cluster_wait();
    phase_stamp(l, 0, 1);
    issue(item + buffers);

    // B: one head per half-CTA: heads rank, rank + cs (second half), rank + 2 cs, ...
    for (int head = rank + half * cs; head < nh; head += 2 * cs) {
      const size_t off = ((size_t(l) * a.B + b) * nh + head) * size_t(Tc) * hs;
      T* kh = static_cast<T*>(a.k_cache) + off;
      T* vh = static_cast<T*>(a.v_cache) + off;
      if (valid) {
        for (int d = th; d < hs; d += kHalf) {
          kh[int64_t(p) * hs + d] = from_f32<T>(qkv[C + head * hs + d]);
          vh[int64_t(p) * hs + d] = from_f32<T>(qkv[2 * C + head * hs + d]);
          hq[d] = qkv[head * hs + d];
        }
      }
      half_sync(half);  // the new key/value are in the caches and q in shared memory
      float m = -INFINITY;
      if (valid) {
        for (int j = th; j <= p; j += kHalf) {
          const T* kj = kh + int64_t(j) * hs;
          float dot = 0.0f;
#pragma unroll 4
          for (int d = 0; d < hs; d += V) {
            float kv[V];
            Vec16<T>::load(kj + d, kv);
#pragma unroll
            for (int e = 0; e < V; ++e) dot = fmaf(hq[d + e], kv[e], dot);
          }
          hsc[j] = dot * scale;
          m = fmaxf(m, hsc[j]);
        }
      }
      m = half_max(m, red[1 + half], half);
      float sum = 0.0f;
      if (valid)
        for (int j = th; j <= p; j += kHalf) sum += (hsc[j] = __expf(hsc[j] - m));
      const float total = half_sum(sum, red[1 + half], half);
      const int g = th / lanes, c = (th % lanes) * V;
      if (valid && g < groups) {
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = 0.0f;
#pragma unroll 4
        for (int j = g; j <= p; j += groups) {
          float vv[V];
          Vec16<T>::load(vh + int64_t(j) * hs + c, vv);
          const float sj = hsc[j];
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] = fmaf(sj, vv[e], acc[e]);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) hpart[g * hs + c + e] = acc[e];
      }
      half_sync(half);
      for (int d = th; d < hs; d += kHalf) {
        float acc = 0.0f;
        for (int k = 0; k < groups; ++k) acc += hpart[k * hs + d];
        const float v = valid ? round_to<T>(acc / total) : NAN;
        for (int r = 0; r < cs; ++r) store_remote(y, head * hs + d, r, v);
      }
      half_sync(half);  // hq, hsc and hpart are reused by this half's next head
    }
    phase_stamp(l, 1, 0);
    cluster_arrive();
    cluster_wait();
    phase_stamp(l, 1, 1);

    // C: x += c_proj(y)
    await(item + 1);
    matvec<T>(slice(item + 1), rows[1], y, bias, W(l, kProjB) != nullptr,
              [&](int n, float v) { broadcast(x, n, round_to<T>(v + x[n])); });
    phase_stamp(l, 2, 0);
    cluster_arrive();
    ln.load(W(l, kLn2W), W(l, kLn2B), C);
    bias = rows[2].lane_bias(W(l, kFcB));
    cluster_wait();
    phase_stamp(l, 2, 1);
    issue(item + 1 + buffers);

    // D: h = gelu(c_fc(ln_2(x)))
    layernorm_row(xn, x, ln, C, a.eps, red[0]);
    await(item + 2);
    matvec<T>(slice(item + 2), rows[2], xn, bias, W(l, kFcB) != nullptr,
              [&](int n, float v) { broadcast(h, n, round_to<T>(gelu_tanh_f(v))); });
    phase_stamp(l, 3, 0);
    cluster_arrive();
    bias = rows[3].lane_bias(W(l, kFc2B));
    cluster_wait();
    phase_stamp(l, 3, 1);
    issue(item + 2 + buffers);

    // E: x += mlp.c_proj(h); the last block's rows also go to out
    const bool last = l + 1 == a.n_layer;
    await(item + 3);
    matvec<T>(slice(item + 3), rows[3], h, bias, W(l, kFc2B) != nullptr, [&](int n, float v) {
      v += x[n];
      broadcast(x, n, round_to<T>(v));
      if (last && lane == 0) static_cast<T*>(a.out)[int64_t(b) * C + n] = from_f32<T>(v);
    });
    phase_stamp(l, 4, 0);
    cluster_arrive();
    if (!last) {
      ln.load(W(l + 1, kLn1W), W(l + 1, kLn1B), C);
      bias = rows[0].lane_bias(W(l + 1, kAttnB));
    }
    cluster_wait();  // also: no CTA exits while another still writes its shared memory
    phase_stamp(l, 4, 1);
    issue(item + 3 + buffers);
  }
#endif
}

template <typename T>
void launch_blocks(const DecodeBlocksArgs& args, cudaStream_t stream) {
  static LaunchCheck check;
  static int cluster_of[64];  // per device: the cluster size chosen, 0 before the first call
  auto kernel = decode_blocks_kernel<T>;
  const std::string config = "(B=" + std::to_string(args.B) + ", C=" + std::to_string(args.C) +
                             ", nh=" + std::to_string(args.nh) + ", T=" + std::to_string(args.T) +
                             ")";
  check.ensure(reinterpret_cast<const void*>(kernel), "decode_blocks", config, kThreads, 0);
  int dev = 0, major = 0, optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (major < 9)
    throw std::runtime_error("gptstack.cuda_ops.decode_blocks: thread-block clusters need "
                             "compute capability 9.0 or newer; use the op-by-op decode kernels");
  if (args.C > kDecodeBlocksMaxC)
    throw std::runtime_error("gptstack.cuda_ops.decode_blocks: width " + std::to_string(args.C) +
                             " is above the kernel's " + std::to_string(kDecodeBlocksMaxC) +
                             "; use the op-by-op decode kernels");
  cudaFuncAttributes fa{};
  cudaFuncGetAttributes(&fa, kernel);
  const int64_t room = optin - static_cast<int64_t>(fa.sharedSizeBytes);
  auto shared_bytes = [&](int cs, int buffers) {
    return decode_blocks_shared_bytes(args.C, args.hs, args.T, sizeof(T), cs, buffers);
  };
  // The whole of shared memory may be asked for once: the kernel takes what it needs per call.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(room));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  int& cs = cluster_of[dev & 63];
  if (cs == 0) {
    // 16 CTAs where the GPU can place such a cluster with one slice, else the portable 8
    for (int size : {kDecodeBlocksCluster, 8}) {
      attr[0].val.clusterDim.x = size;
      cfg.gridDim = dim3(size, 1);
      cfg.numAttrs = 1;
      cfg.dynamicSmemBytes = static_cast<size_t>(std::min(shared_bytes(size, 1), room));
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess &&
          clusters > 0) {
        cs = size;
        break;
      }
      cudaGetLastError();
    }
    if (cs == 0)
      throw std::runtime_error("gptstack.cuda_ops.decode_blocks: this GPU cannot place a "
                               "cluster of 8 CTAs of " + std::to_string(kThreads) +
                               " threads " + config);
  }
  const int buffers = shared_bytes(cs, 2) <= room ? 2 : 1;
  if (shared_bytes(cs, buffers) > room)
    throw std::runtime_error(
        "gptstack.cuda_ops.decode_blocks: " + config + " needs " +
        std::to_string(shared_bytes(cs, 1)) + " bytes of shared memory per CTA (one weight "
        "slice of a " + std::to_string(cs) + "-CTA cluster), this GPU has " +
        std::to_string(room) + "; use the op-by-op decode kernels");
  attr[0].val.clusterDim.x = cs;
  cfg.gridDim = dim3(cs, static_cast<unsigned>(args.B));
  cfg.dynamicSmemBytes = static_cast<size_t>(shared_bytes(cs, buffers));
  cfg.numAttrs = programmatic_launch_here() ? 2 : 1;
  cudaLaunchKernelEx(&cfg, kernel, args, buffers);
  check_launch("decode_blocks", config);
}

}  // namespace

void decode_blocks_cuda(const DecodeBlocksArgs& args, DType dtype, uintptr_t stream) {
  if (dtype == DType::bf16)
    launch_blocks<__nv_bfloat16>(args, as_stream(stream));
  else
    launch_blocks<float>(args, as_stream(stream));
}

}  // namespace gs
