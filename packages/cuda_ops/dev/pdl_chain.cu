// dev/pdl_chain.cu: what one dependent launch costs in a CUDA graph, with and without
// programmatic dependent launch (PDL), against decode_linear's one-row kernel at the decode
// step's shapes. A batch-1 decode step is a chain of ~33 such launches (~3.7 us each on the
// H100, 2026-12-06); this separates the chain's floor (a kernel that waits, reads one value
// and writes one) from each kernel's own work (x's L2 read, the LayerNorm's block sums, the
// dot products, the warp sums).
//
// Each case captures a chain of kLaunches kernels, each reading the previous one's output, in
// one graph; replays it kReplays times between two events; prints the median over kRounds of
// the time per launch.
//
//   nvcc -arch=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -I packages/cuda_ops/csrc \
//       packages/cuda_ops/dev/pdl_chain.cu -o /tmp/pdl_chain && /tmp/pdl_chain
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "decode_linear.cuh"

namespace gs {
bool programmatic_launch_enabled() { return true; }  // common.cpp's switch (not linked here)
}  // namespace gs

namespace {

constexpr int kLaunches = 64, kReplays = 50, kRounds = 7;

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                             \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// The floor: every CTA waits for the kernel before; one thread reads its value and writes the
// next (blocks CTAs, threads threads: the grid shape of the kernel it stands for).
__global__ void hop_kernel(const float* in, float* out) {
  gs::pdl_launch_dependents();
  gs::pdl_wait();
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = in[0] + 1.0f;
}

// decode_linear.cuh's linear_outputs before 2026-12-06's reads ahead of the wait (76117b8): the
// bias, the LayerNorm's parameters and the residual read where they are used, after the
// dependency wait, and x by whatever path the compiler chose (ld.global.nc)
template <typename T, bool Vector>
__device__ __forceinline__ void linear_outputs_before(T* __restrict__ out, const T* __restrict__ x,
                                               const T* __restrict__ w, const T* __restrict__ b,
                                               const T* __restrict__ ln_w,
                                               const T* __restrict__ ln_b,
                                               const T* __restrict__ residual, int N, int K,
                                               float eps, bool gelu, int r, int n0, float* row,
                                               float* red) {
  constexpr int V = Vector ? gs::Vec16<T>::n : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = n0 + warp;
  const T* wn = w + int64_t(n < N ? n : 0) * K;
  gs::pdl_launch_dependents();
  // The weights do not depend on the kernel before this one: their first loads go out before
  // waiting for it (lane covers columns (j * 32 + lane) * V .. + V - 1 of load j).
  uint4 ahead[Vector ? gs::kLinearAhead : 1];
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < gs::kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (n < N && k < K) ahead[j] = *reinterpret_cast<const uint4*>(wn + k);
    }
  }
  gs::pdl_wait();  // x and residual are the previous kernel's output
  const T* xr = x + int64_t(r) * K;
  for (int k = threadIdx.x; k < K; k += blockDim.x) row[k] = gs::to_f32(xr[k]);
  __syncthreads();
  if (ln_w) {
    float s = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) s += row[k];
    const float mean = gs::block_sum(s, red) / K;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) ss += (row[k] - mean) * (row[k] - mean);
    const float rstd = rsqrtf(gs::block_sum(ss, red) / K + eps);
    __syncthreads();  // every thread has read row[] for the sums before it is overwritten
    for (int k = threadIdx.x; k < K; k += blockDim.x)
      row[k] = (row[k] - mean) * rstd * gs::to_f32(ln_w[k]) + (ln_b ? gs::to_f32(ln_b[k]) : 0.0f);
    __syncthreads();
  }
  if (n >= N) return;
  float acc = 0.0f;
  if constexpr (Vector) {
#pragma unroll
    for (int j = 0; j < gs::kLinearAhead; ++j) {
      const int k = (j * 32 + lane) * V;
      if (k < K) {
        float wv[V];
        gs::Vec16<T>::convert(ahead[j], wv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
      }
    }
    for (int k = (gs::kLinearAhead * 32 + lane) * V; k < K; k += 32 * V) {
      float wv[V];
      gs::Vec16<T>::load(wn + k, wv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc = fmaf(wv[i], row[k + i], acc);
    }
  } else {
    for (int k = lane; k < K; k += 32) acc = fmaf(gs::to_f32(wn[k]), row[k], acc);
  }
  acc = gs::warp_sum(acc);
  if (lane == 0) {
    if (b) acc += gs::to_f32(b[n]);
    if (gelu) acc = gs::gelu_tanh_f(acc);
    if (residual) acc += gs::to_f32(residual[int64_t(r) * N + n]);
    out[int64_t(r) * N + n] = gs::from_f32<T>(acc);
  }
}

// decode_linear's one-row kernel as decode.cu launches it (kTree), with x in 16-byte loads
// (kVectorRow: decode_linear.cuh's VectorRow), with the LayerNorm's statistics summed by every
// warp (kWarpStats: WarpStats), or the version before 2026-12-06's reads ahead of the wait
// (kBefore, x by the non-coherent path); a LayerNorm and a residual where given
enum Variant { kTree, kVectorRow, kWarpStats, kBefore };
template <Variant variant>
__global__ void __launch_bounds__(gs::kLinearWarps * 32)
    linear_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                  const __nv_bfloat16* ln_w, const __nv_bfloat16* ln_b,
                  const __nv_bfloat16* residual, int N, int K) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const int n0 = blockIdx.x * gs::kLinearWarps;
  if constexpr (variant == kBefore)
    linear_outputs_before<__nv_bfloat16, true>(out, x, w, nullptr, ln_w, ln_b, residual, N, K,
                                               1e-5f, false, 0, n0, row, red);
  else
    gs::linear_outputs<__nv_bfloat16, true, variant == kVectorRow, variant == kWarpStats>(
        out, x, w, nullptr, ln_w, ln_b, residual, N, K, 1e-5f, false, 0, n0, row, red);
}

template <typename K, typename... A>
void launch(bool pdl, K kernel, int blocks, int threads, int smem, cudaStream_t s, A... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl) config.attrs = attr, config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Median microseconds per launch of the chain `enqueue(stream, i)` (i = 0 .. kLaunches - 1).
template <typename F>
double time_chain(F enqueue) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunches; ++i) enqueue(s, i);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(exec, s));  // warm up
  std::vector<double> us;
  for (int r = 0; r < kRounds; ++r) {
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < kReplays; ++i) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(1e3 * ms / (kReplays * kLaunches));
  }
  std::sort(us.begin(), us.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  return us[us.size() / 2];
}

__nv_bfloat16* random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<__nv_bfloat16> host(n);
  for (auto& v : host) v = __float2bfloat16(u(rng));
  __nv_bfloat16* d;
  CHECK(cudaMalloc(&d, n * sizeof(__nv_bfloat16)));
  CHECK(cudaMemcpy(d, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("pdl_chain on %s: %d dependent launches a graph, %d replays, median of %d\n",
              prop.name, kLaunches, kReplays, kRounds);
  float* hops;
  CHECK(cudaMalloc(&hops, 2 * sizeof(float)));
  CHECK(cudaMemset(hops, 0, 2 * sizeof(float)));
  std::printf("%-52s %10s %10s\n", "kernel (grid x threads)", "PDL us", "plain us");
  const int shapes[][2] = {{1, 32}, {6, 256}, {96, 128}, {288, 128}, {384, 128}};
  for (const auto& sh : shapes) {
    double t[2];
    for (int pdl = 1; pdl >= 0; --pdl)
      t[1 - pdl] = time_chain([&](cudaStream_t s, int i) {
        launch(pdl, hop_kernel, sh[0], sh[1], 0, s, hops + i % 2, hops + (i + 1) % 2);
      });
    char name[64];
    std::snprintf(name, sizeof name, "hop: wait, read one value, write one (%d x %d)", sh[0],
                  sh[1]);
    std::printf("%-52s %10.2f %10.2f\n", name, t[0], t[1]);
  }
  std::mt19937 rng(7);
  // decode_linear at the decode step's shapes, N = K so each output is the next one's input:
  // plain, with a LayerNorm (weight and bias), with a residual (the kernel's input of two
  // launches before); the kernel in the tree and the version before it
  std::printf("%-40s %8s %8s %8s %8s %8s\n", "decode_linear, PDL (grid x threads)", "tree us",
              "vec-x us", "warp-ln", "before", "plain us");
  for (int K : {256, 384, 1536}) {
    for (int kind = 0; kind < 3; ++kind) {
      const bool ln = kind == 1, res = kind == 2;
      __nv_bfloat16* w = random_bf16(size_t(K) * K, 1.0f / K, rng);
      __nv_bfloat16* ln_w = random_bf16(K, 1.0f, rng);
      __nv_bfloat16* ln_b = random_bf16(K, 1.0f, rng);
      __nv_bfloat16* x[3] = {random_bf16(K, 1.0f, rng), random_bf16(K, 1.0f, rng),
                             random_bf16(K, 1.0f, rng)};
      const int blocks = (K + gs::kLinearWarps - 1) / gs::kLinearWarps;
      const int smem = K * sizeof(float);
      auto chain = [&](bool pdl, auto kernel) {
        return time_chain([&](cudaStream_t s, int i) {
          launch(pdl, kernel, blocks, gs::kLinearWarps * 32, smem, s, x[(i + 1) % 3],
                 static_cast<const __nv_bfloat16*>(x[i % 3]),
                 static_cast<const __nv_bfloat16*>(w),
                 static_cast<const __nv_bfloat16*>(ln ? ln_w : nullptr),
                 static_cast<const __nv_bfloat16*>(ln ? ln_b : nullptr),
                 static_cast<const __nv_bfloat16*>(res ? x[(i + 2) % 3] : nullptr), K, K);
        });
      };
      const double tree = chain(true, linear_kernel<kTree>);
      const double vector_row = chain(true, linear_kernel<kVectorRow>);
      const double warp_stats = chain(true, linear_kernel<kWarpStats>);
      const double before = chain(true, linear_kernel<kBefore>);
      const double plain = chain(false, linear_kernel<kTree>);
      char name[64];
      std::snprintf(name, sizeof name, "K = N = %d%s (%d x %d)", K,
                    ln ? " + LayerNorm" : res ? " + residual" : "", blocks,
                    gs::kLinearWarps * 32);
      std::printf("%-40s %8.2f %8.2f %8.2f %8.2f %8.2f\n", name, tree, vector_row, warp_stats,
                  before, plain);
      for (void* p : {static_cast<void*>(w), static_cast<void*>(ln_w), static_cast<void*>(ln_b),
                      static_cast<void*>(x[0]), static_cast<void*>(x[1]), static_cast<void*>(x[2])})
        CHECK(cudaFree(p));
    }
  }
  return 0;
}
