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
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "decode_linear.cuh"
#include "decode_mma.cuh"

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

// decode_linear's one-row kernel (decode_linear.cuh) with x read 2 bytes at a time (false,
// as decode.cu ran it until 2026-12-06's evening) and in 16-byte loads all issued at once
// (true, what decode.cu runs where x and the weights are 16-byte aligned); a LayerNorm and
// a residual where given. (At 0aa121e this file timed the version before 2026-12-06's reads
// ahead of the wait, at c6c9409 also the LayerNorm's sums by every warp in block_sum's order
// instead of two block sums, slower: benchmarks/profiles/pdl-chain-h100-20261206-*.txt.)
template <bool VectorRow>
__global__ void __launch_bounds__(gs::kLinearWarps * 32)
    linear_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                  const __nv_bfloat16* ln_w, const __nv_bfloat16* ln_b,
                  const __nv_bfloat16* residual, int N, int K) {
  extern __shared__ float row[];
  __shared__ float red[32];
  gs::linear_outputs<__nv_bfloat16, true, VectorRow>(out, x, w, nullptr, ln_w, ln_b, residual, N,
                                                     K, 1e-5f, false, 0,
                                                     blockIdx.x * gs::kLinearWarps, row, red);
}

// the same with the row in registers (decode_linear.cuh's linear_outputs_in_registers: J 16-byte
// chunks a lane, a LayerNorm folded into the product), what decode.cu runs where x, the weights
// and the LayerNorm's parameters are 16-byte aligned and K <= 2,048
template <int J, bool Ln>
__global__ void __launch_bounds__(gs::kLinearWarps * 32)
    registers_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     const __nv_bfloat16* ln_w, const __nv_bfloat16* ln_b,
                     const __nv_bfloat16* residual, int N, int K) {
  gs::linear_outputs_in_registers<__nv_bfloat16, J, Ln>(out, x, w, nullptr, ln_w, ln_b, residual,
                                                        N, K, 1e-5f, false, 0,
                                                        blockIdx.x * gs::kLinearWarps);
}

template <typename K, typename... A>
void launch(bool pdl, K kernel, dim3 grid, int threads, int smem, cudaStream_t s, A... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
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

std::vector<float> to_host(const __nv_bfloat16* d, int n) {
  std::vector<__nv_bfloat16> bits(n);
  CHECK(cudaMemcpy(bits.data(), d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) out[i] = __bfloat162float(bits[i]);
  return out;
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
  // launches before); both ways of reading x into shared memory and the row in registers, the
  // outputs of one launch of each checked against the 16-byte one (max |difference|: 0
  // expected for the 2-byte x, the same arithmetic in the same order, and for the registers
  // without a LayerNorm; with one, the folded LayerNorm's other roundings); "no PDL" is the
  // vector row launched the ordinary way
  std::printf("%-40s %8s %8s %8s %8s %9s %9s\n", "decode_linear, PDL (grid x threads)",
              "2-byte x", "16-byte", "regs", "no PDL", "diff 2B", "diff regs");
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
      // one launch from the same inputs into x[1]
      auto once = [&](auto kernel) {
        launch(false, kernel, blocks, gs::kLinearWarps * 32, smem, nullptr, x[1],
               static_cast<const __nv_bfloat16*>(x[0]), static_cast<const __nv_bfloat16*>(w),
               static_cast<const __nv_bfloat16*>(ln ? ln_w : nullptr),
               static_cast<const __nv_bfloat16*>(ln ? ln_b : nullptr),
               static_cast<const __nv_bfloat16*>(res ? x[2] : nullptr), K, K);
        CHECK(cudaDeviceSynchronize());
        return to_host(x[1], K);
      };
      auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
        float m = 0.0f;
        for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
        return m;
      };
      // the instance decode.cu launches for K (decode_linear.cuh's with_registers_instance)
      auto with_registers = [&](auto f) {
        gs::with_registers_instance<__nv_bfloat16>(K, ln, [&](auto j, auto has_ln) {
          f(registers_kernel<decltype(j)::value, decltype(has_ln)::value>);
        });
      };
      const auto reference = once(linear_kernel<true>);
      const float diff = max_diff(reference, once(linear_kernel<false>));
      float diff_registers = 0.0f;
      with_registers([&](auto kernel) { diff_registers = max_diff(reference, once(kernel)); });
      const double plain_row = chain(true, linear_kernel<false>);
      const double vector_row = chain(true, linear_kernel<true>);
      double registers = 0.0;
      with_registers([&](auto kernel) { registers = chain(true, kernel); });
      const double no_pdl = chain(false, linear_kernel<true>);
      char name[64];
      std::snprintf(name, sizeof name, "K = N = %d%s (%d x %d)", K,
                    ln ? " + LayerNorm" : res ? " + residual" : "", blocks,
                    gs::kLinearWarps * 32);
      std::printf("%-40s %8.2f %8.2f %8.2f %8.2f %9.2g %9.2g\n", name, plain_row, vector_row,
                  registers, no_pdl, diff, diff_registers);
      for (void* p : {static_cast<void*>(w), static_cast<void*>(ln_w), static_cast<void*>(ln_b),
                      static_cast<void*>(x[0]), static_cast<void*>(x[1]), static_cast<void*>(x[2])})
        CHECK(cudaFree(p));
    }
  }
  // decode_linear's tensor-core kernel (decode_mma.cuh) at the slide window's shapes, in a
  // chain where each call's residual is the output of two calls before (N = K, so x stays the
  // same shape): what the window's matrices would cost as programmatic dependents; and the
  // smallest call (one CTA, one k step) for the kernel's own floor
  std::printf("%-52s %10s %10s\n", "tensor-core decode_linear (R x K x N, grid)", "PDL us",
              "plain us");
  const int mma_shapes[][4] = {{32, 16, 64, 0}, {64, 256, 256, 0}, {64, 256, 256, 1},
                               {64, 256, 768, 1},  {256, 384, 384, 0}, {256, 384, 1152, 1}};
  for (const auto& sh : mma_shapes) {
    const int R = sh[0], K = sh[1], N = sh[2];
    const bool ln = sh[3];
    namespace ml = gs::mma_linear;
    __nv_bfloat16* w = random_bf16(size_t(N) * K, 1.0f / K, rng);
    __nv_bfloat16* ln_w = random_bf16(K, 1.0f, rng);
    __nv_bfloat16* ln_b = random_bf16(K, 1.0f, rng);
    // x is read as (R, K) and out written as (R, N): buffers of the larger, rotated
    const size_t elems = size_t(R) * std::max(K, N);
    __nv_bfloat16* bufs[3] = {random_bf16(elems, 1.0f, rng), random_bf16(elems, 1.0f, rng),
                              random_bf16(elems, 1.0f, rng)};
    const int smem = static_cast<int>(ml::shared_bytes<4>(K));
    const dim3 grid((N + ml::cols<4>() - 1) / ml::cols<4>(), (R + ml::kRows - 1) / ml::kRows);
    auto bits = [](const __nv_bfloat16* p) { return reinterpret_cast<const uint16_t*>(p); };
    double t[2];
    // the instance decode.cu launches for this K (fixed-width where K is one of kFixedWidths)
    ml::with_kernel_for<4>(K, [&](auto kernel) {
      CHECK(cudaFuncSetAttribute(kernel.value, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem));
      for (int pdl = 1; pdl >= 0; --pdl)
        t[1 - pdl] = time_chain([&](cudaStream_t st, int i) {
          const ml::Args a{reinterpret_cast<uint16_t*>(bufs[(i + 1) % 3]), bits(bufs[i % 3]),
                           bits(w), nullptr, ln ? bits(ln_w) : nullptr,
                           ln ? bits(ln_b) : nullptr, N == K ? bits(bufs[(i + 2) % 3]) : nullptr,
                           R, N, K, 1e-5f, false};
          launch(pdl, kernel.value, grid, ml::kThreads, smem, st, a);
        });
    });
    char name[64];
    std::snprintf(name, sizeof name, "%d x %d x %d%s%s (%d x %d)", R, K, N,
                  ln ? " + LayerNorm" : "", N == K ? " + residual" : "", grid.x, grid.y);
    std::printf("%-52s %10.2f %10.2f\n", name, t[0], t[1]);
    for (void* p : {static_cast<void*>(w), static_cast<void*>(ln_w), static_cast<void*>(ln_b),
                    static_cast<void*>(bufs[0]), static_cast<void*>(bufs[1]),
                    static_cast<void*>(bufs[2])})
      CHECK(cudaFree(p));
  }
  return 0;
}
