// decode_blocks.cu: every transformer block of a one-token decode step in one launch, run by
// one thread-block cluster per batch row (formulas and layout in decode.h).
//
// Why a cluster: the op-by-op step (decode.cu) is 5 dependent launches a block, ~4 us each on
// the H200 even with programmatic launch, because each kernel waits for the whole previous
// grid to finish and flush. The whole step as one persistent kernel over every SM with a
// software grid barrier lost to that (decode.cu's header). A cluster of up to 16 CTAs has a
// hardware barrier (barrier.cluster: 0.19-0.23 us measured, .device/clusterprobe.cu) and
// distributed shared memory, so each CTA broadcasts its outputs straight into every CTA's
// shared memory and the next phase starts one barrier later. The price: 16 SMs read the
// weights, ~1 TB/s (21 MB in ~22 us at shakespeare-char), so this wins only for small models
// (the caller chooses: fused_step.py).
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
// reductions, and the LayerNorm uses its 128-thread reductions, so the result is the op-by-op
// step's to the bit (tested). The next phase's weights are loaded into registers between the
// barrier's arrive and its wait: they do not depend on the phase before.
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_launch.h"
#include "decode.h"
#include "decode_vec.cuh"

namespace gs {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kHalf = 256;  // threads per attention head (decode_attention_kernel's block)
constexpr int kAhead = 8;  // 16-byte weight loads per lane issued before a phase's barrier

// The cluster's PTX, sm_90 and newer (an sm_80 build compiles the kernel to a trap, and the
// launcher refuses such a GPU before that)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define GS_CLUSTERS 1
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ int cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ int cluster_size() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return static_cast<int>(r);
}
// local[i] of CTA `rank` of this cluster (distributed shared memory) = v
__device__ __forceinline__ void store_remote(float* local, int i, int rank, float v) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(local + i));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(a), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}
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

// out = LayerNorm(x) over K floats, with decode_linear_kernel's reductions
template <typename T>
__device__ void layernorm_row(float* out, const float* x, const T* w, const T* b, int K,
                              float eps, float* red) {
  const int t = threadIdx.x;
  float s = 0.0f;
  if (t < 128)
    for (int k = t; k < K; k += 128) s += x[k];
  const float mean = sum128(s, red) / K;
  float ss = 0.0f;
  if (t < 128)
    for (int k = t; k < K; k += 128) ss += (x[k] - mean) * (x[k] - mean);
  const float rstd = rsqrtf(sum128(ss, red) / K + eps);
  for (int k = t; k < K; k += kThreads)
    out[k] = (x[k] - mean) * rstd * to_f32(w[k]) + (b ? to_f32(b[k]) : 0.0f);
  __syncthreads();
}

// This CTA's rows [n0, n1) of an (N, K) matrix: warp w takes rows n0 + w, n0 + w + kWarps, ...
// A warp's work is its rows' 16-byte chunks in order (lane covers columns (j * 32 + lane) * V
// of chunk j); the first kAhead of them are loaded early into `ahead`.
struct Rows {
  int n0, n1, K, chunks;
  __device__ Rows(int N, int K_, int V, int rank, int cs)
      : n0(rank * N / cs), n1((rank + 1) * N / cs), K(K_), chunks((K_ + 32 * V - 1) / (32 * V)) {}
  __device__ int items(int warp) const {
    const int rows = n1 - n0 > warp ? (n1 - n0 - warp + kWarps - 1) / kWarps : 0;
    return rows * chunks;
  }
};

template <typename T>
__device__ __forceinline__ void prefetch(uint4 (&ahead)[kAhead], const T* w, const Rows& r) {
  constexpr int V = Vec16<T>::n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, items = r.items(warp);
#pragma unroll
  for (int t = 0; t < kAhead; ++t) {
    const int i = t / r.chunks, j = t % r.chunks, k = (j * 32 + lane) * V;
    if (t < items && k < r.K)
      ahead[t] = *reinterpret_cast<const uint4*>(w + int64_t(r.n0 + warp + i * kWarps) * r.K + k);
  }
}

// Each row's dot product with vec (shared, K floats), then epi(n, value) on every lane.
template <typename T, typename Epi>
__device__ __forceinline__ void matvec(const uint4 (&ahead)[kAhead], const T* w, const Rows& r,
                                       const float* vec, Epi epi) {
  constexpr int V = Vec16<T>::n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, items = r.items(warp);
  float acc = 0.0f;
#pragma unroll
  for (int t = 0; t < kAhead; ++t) {
    if (t < items) {
      const int i = t / r.chunks, j = t % r.chunks, k = (j * 32 + lane) * V;
      if (k < r.K) {
        float wv[V];
        Vec16<T>::convert(ahead[t], wv);
#pragma unroll
        for (int e = 0; e < V; ++e) acc = fmaf(wv[e], vec[k + e], acc);
      }
      if (j == r.chunks - 1) {
        epi(r.n0 + warp + i * kWarps, warp_sum(acc));
        acc = 0.0f;
      }
    }
  }
  for (int t = kAhead; t < items; ++t) {
    const int i = t / r.chunks, j = t % r.chunks, k = (j * 32 + lane) * V;
    const int n = r.n0 + warp + i * kWarps;
    if (k < r.K) {
      float wv[V];
      Vec16<T>::load(w + int64_t(n) * r.K + k, wv);
#pragma unroll
      for (int e = 0; e < V; ++e) acc = fmaf(wv[e], vec[k + e], acc);
    }
    if (j == r.chunks - 1) {
      epi(n, warp_sum(acc));
      acc = 0.0f;
    }
  }
}

template <typename T> __device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) decode_blocks_kernel(const DecodeBlocksArgs a) {
#ifndef GS_CLUSTERS
  __trap();
#else
  constexpr int V = Vec16<T>::n;
  const int cs = cluster_size(), rank = cluster_rank();
  const int b = blockIdx.y, C = a.C, nh = a.nh, hs = a.hs, Tc = a.T, lane = threadIdx.x % 32;
  // shared: x (C) xn (C) qkv (3C) y (C) h (4C), then per half: q (hs) s (Tc) part (groups hs)
  extern __shared__ float smem[];
  __shared__ float red[3][32];
  float* x = smem;
  float* xn = x + round4(C);
  float* qkv = xn + round4(C);
  float* y = qkv + round4(3 * C);
  float* h = y + round4(C);
  const int lanes = hs / V, groups = kHalf / lanes;
  const int half_floats = round4(hs) + round4(Tc) + round4(groups * hs);
  const int half = threadIdx.x / kHalf, th = threadIdx.x % kHalf;
  float* hq = h + round4(4 * C) + half * half_floats;
  float* hsc = hq + round4(hs);
  float* hpart = hsc + round4(Tc);

  // every CTA's copy of a vector gets element n (lanes < cs each write one CTA's copy)
  auto broadcast = [&](float* buf, int n, float v) {
    if (lane < cs) store_remote(buf, n, lane, v);
  };
  auto W = [&](int l, int i) { return static_cast<const T*>(a.w[l][i]); };

  uint4 ahead[kAhead];
  const Rows qkv_rows(3 * C, C, V, rank, cs), proj_rows(C, C, V, rank, cs),
      fc_rows(4 * C, C, V, rank, cs), fc2_rows(C, 4 * C, V, rank, cs);
  prefetch<T>(ahead, W(0, kAttnW), qkv_rows);
  pdl_launch_dependents();
  pdl_wait();  // token, pos and the caches come from the kernels before
  const int64_t p64 = *a.pos, tok = a.token[b];
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

  for (int l = 0; l < a.n_layer; ++l) {
    // A: qkv = c_attn(ln_1(x))
    layernorm_row<T>(xn, x, W(l, kLn1W), W(l, kLn1B), C, a.eps, red[0]);
    matvec<T>(ahead, W(l, kAttnW), qkv_rows, xn, [&](int n, float acc) {
      const T* bias = W(l, kAttnB);
      broadcast(qkv, n, round_to<T>(bias ? acc + to_f32(bias[n]) : acc));
    });
    cluster_arrive();
    prefetch<T>(ahead, W(l, kProjW), proj_rows);
    cluster_wait();

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
    cluster_arrive();
    cluster_wait();

    // C: x += c_proj(y)
    matvec<T>(ahead, W(l, kProjW), proj_rows, y, [&](int n, float acc) {
      const T* bias = W(l, kProjB);
      broadcast(x, n, round_to<T>((bias ? acc + to_f32(bias[n]) : acc) + x[n]));
    });
    cluster_arrive();
    prefetch<T>(ahead, W(l, kFcW), fc_rows);
    cluster_wait();

    // D: h = gelu(c_fc(ln_2(x)))
    layernorm_row<T>(xn, x, W(l, kLn2W), W(l, kLn2B), C, a.eps, red[0]);
    matvec<T>(ahead, W(l, kFcW), fc_rows, xn, [&](int n, float acc) {
      const T* bias = W(l, kFcB);
      broadcast(h, n, round_to<T>(gelu_tanh_f(bias ? acc + to_f32(bias[n]) : acc)));
    });
    cluster_arrive();
    prefetch<T>(ahead, W(l, kFc2W), fc2_rows);
    cluster_wait();

    // E: x += mlp.c_proj(h); the last block's rows also go to out
    const bool last = l + 1 == a.n_layer;
    matvec<T>(ahead, W(l, kFc2W), fc2_rows, h, [&](int n, float acc) {
      const T* bias = W(l, kFc2B);
      const float v = (bias ? acc + to_f32(bias[n]) : acc) + x[n];
      broadcast(x, n, round_to<T>(v));
      if (last && lane == 0) static_cast<T*>(a.out)[int64_t(b) * C + n] = from_f32<T>(v);
    });
    cluster_arrive();
    if (!last) prefetch<T>(ahead, W(l + 1, kAttnW), qkv_rows);
    cluster_wait();  // also: no CTA exits while another still writes its shared memory
  }
#endif
}

struct ClusterChoice {
  int size = 0;  // 0: not chosen yet on this device
};

template <typename T>
void launch_blocks(const DecodeBlocksArgs& args, cudaStream_t stream) {
  static LaunchCheck check;
  static ClusterChoice chosen[64];
  auto kernel = decode_blocks_kernel<T>;
  const int64_t V = 16 / sizeof(T), lanes = args.hs / V, groups = kHalf / lanes;
  const int64_t half_floats = round4(args.hs) + round4(args.T) + round4(groups * args.hs);
  const int smem = static_cast<int>(
      (4 * round4(args.C) + round4(3 * args.C) + round4(4 * args.C) + 2 * half_floats) *
      sizeof(float));
  const std::string config = "(B=" + std::to_string(args.B) + ", C=" + std::to_string(args.C) +
                             ", nh=" + std::to_string(args.nh) + ", T=" + std::to_string(args.T) +
                             ")";
  check.ensure(reinterpret_cast<const void*>(kernel), "decode_blocks", config, kThreads, smem);
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (major < 9)
    throw std::runtime_error("gptstack.cuda_ops.decode_blocks: thread-block clusters need "
                             "compute capability 9.0 or newer; use the op-by-op decode kernels");
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  ClusterChoice& choice = chosen[dev & 63];
  if (choice.size == 0) {
    // 16 CTAs (a non-portable size, allowed on the H100/H200) where the GPU can place such a
    // cluster with this kernel's shared memory; else the portable 8
    cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int size : {16, 8}) {
      attr[0].val.clusterDim.x = size;
      cfg.gridDim = dim3(size, 1);
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess &&
          clusters > 0) {
        choice.size = size;
        break;
      }
      cudaGetLastError();
    }
    if (choice.size == 0)
      throw std::runtime_error("gptstack.cuda_ops.decode_blocks: this GPU cannot place a "
                               "cluster of 8 CTAs with " +
                               std::to_string(smem) + " bytes of shared memory each " + config);
  }
  attr[0].val.clusterDim.x = choice.size;
  cfg.gridDim = dim3(choice.size, static_cast<unsigned>(args.B));
  cfg.numAttrs = programmatic_launch_here() ? 2 : 1;
  cudaLaunchKernelEx(&cfg, kernel, args);
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
