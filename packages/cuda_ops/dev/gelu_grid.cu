// dev/gelu_grid.cu: csrc/gelu.cu's kernels launched with other block sizes and grid caps, side
// by side in one binary with the kernel they replaced and variants (streaming stores, several
// packs a thread), on shakespeare-char's (16384 x 1536) and gpt2-124m's (16384 x 3072) MLP
// activations in bf16: what chose gelu.cu's kMaxBlocks and its streaming loads.
//
//   nvcc -arch=sm_90a -O3 -std=c++17 -I packages/cuda_ops/csrc \
//       packages/cuda_ops/dev/gelu_grid.cu -o /tmp/gelu_grid && /tmp/gelu_grid
//
// Times are medians of 15 x 50 calls by cudaEvent; "of copy" is against a 1 GiB device copy
// in the same run (forward moves 2 tensors, backward 3).
#include "gelu.cu"
#include "common.cuh"

#include <algorithm>
#include <cstdio>
#include <vector>

using bf = __nv_bfloat16;

// gelu.cu's kernel until 2026-12-06 (plain loads; launched with up to 132 x 32 blocks of 256).
template <bool Backward>
__global__ void plain_loads_kernel(bf* __restrict__ out, const bf* __restrict__ dout,
                                   const bf* __restrict__ x, int64_t n_packs) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n_packs; p += stride) {
    uint4 xv = reinterpret_cast<const uint4*>(x)[p], dv, r;
    if constexpr (Backward) dv = reinterpret_cast<const uint4*>(dout)[p];
    const bf* xe = reinterpret_cast<const bf*>(&xv);
    const bf* de = reinterpret_cast<const bf*>(&dv);
    bf* re = reinterpret_cast<bf*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float xf = __bfloat162float(xe[j]);
      re[j] = __float2bfloat16(Backward ? __bfloat162float(de[j]) * gs::gelu_grad_f(xf)
                                        : gs::gelu_f(xf));
    }
    reinterpret_cast<uint4*>(out)[p] = r;
  }
}

// gelu.cu's kernel with streaming cache hints: inputs read with ld.global.cs and outputs
// written with st.global.cs (evict-first: each byte is touched once, the tensors are larger
// than L2), 16-byte packs.
template <bool Backward>
__global__ void streaming_kernel(bf* __restrict__ out, const bf* __restrict__ dout,
                                 const bf* __restrict__ x, int64_t n_packs) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n_packs; p += stride) {
    uint4 xv = __ldcs(reinterpret_cast<const uint4*>(x) + p), dv, r;
    if constexpr (Backward) dv = __ldcs(reinterpret_cast<const uint4*>(dout) + p);
    const bf* xe = reinterpret_cast<const bf*>(&xv);
    const bf* de = reinterpret_cast<const bf*>(&dv);
    bf* re = reinterpret_cast<bf*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float xf = __bfloat162float(xe[j]);
      re[j] = __float2bfloat16(Backward ? __bfloat162float(de[j]) * gs::gelu_grad_f(xf)
                                        : gs::gelu_f(xf));
    }
    __stcs(reinterpret_cast<uint4*>(out) + p, r);
  }
}

__global__ void fill(bf* p, int64_t n, float scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = __float2bfloat16(scale * __sinf(float(i % 9973) * 0.37f));
}

// streaming_kernel with U packs a thread, all loaded before any is computed (U x 16 bytes in
// flight per thread), one pass: block b covers packs [b * U * 256, (b + 1) * U * 256).
template <bool Backward, int U>
__global__ void __launch_bounds__(256) streaming_unrolled(bf* __restrict__ out,
                                                          const bf* __restrict__ dout,
                                                          const bf* __restrict__ x,
                                                          int64_t n_packs) {
  const int64_t base = int64_t(blockIdx.x) * U * blockDim.x + threadIdx.x;
  uint4 xv[U], dv[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = base + int64_t(u) * blockDim.x;
    if (p < n_packs) {
      xv[u] = __ldcs(reinterpret_cast<const uint4*>(x) + p);
      if constexpr (Backward) dv[u] = __ldcs(reinterpret_cast<const uint4*>(dout) + p);
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = base + int64_t(u) * blockDim.x;
    if (p >= n_packs) continue;
    uint4 r;
    const bf* xe = reinterpret_cast<const bf*>(&xv[u]);
    const bf* de = reinterpret_cast<const bf*>(&dv[u]);
    bf* re = reinterpret_cast<bf*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float xf = __bfloat162float(xe[j]);
      re[j] = __float2bfloat16(Backward ? __bfloat162float(de[j]) * gs::gelu_grad_f(xf)
                                        : gs::gelu_f(xf));
    }
    __stcs(reinterpret_cast<uint4*>(out) + p, r);
  }
}

int main() {
  const double copy_gbs = copy_bandwidth_gbs();
  std::printf("copy bandwidth %.0f GB/s (read + write)\n", copy_gbs);
  for (int64_t n : {int64_t(16384) * 1536, int64_t(16384) * 3072}) {
    bf *x, *dy, *y, *dx;
    for (bf** p : {&x, &dy, &y, &dx}) CHECK(cudaMalloc(p, n * sizeof(bf)));
    fill<<<(n + 255) / 256, 256>>>(x, n, 3.f);
    fill<<<(n + 255) / 256, 256>>>(dy, n, 1.f);
    constexpr int W = 8;  // bf16 elements per 16-byte pack
    const int64_t packs = n / W;
    auto pct = [&](double tensors, float us) { return 100 * tensors * n * 2 / (us * 1e3) / copy_gbs; };
    for (int threads : {128, 256, 512})
      for (int64_t cap : {int64_t(132) * 8, int64_t(132) * 16, int64_t(132) * 32, int64_t(1) << 30}) {
        const unsigned blocks = unsigned(std::min<int64_t>((packs + threads - 1) / threads, cap));
        const float f = median_us([&] {
          gs::elementwise_kernel<bf, W, false><<<blocks, threads>>>(y, nullptr, x, packs);
        });
        const float bw = median_us([&] {
          gs::elementwise_kernel<bf, W, true><<<blocks, threads>>>(dx, dy, x, packs);
        });
        std::printf("n=%lld, %3d threads x %5u blocks: forward %6.2f us (%3.0f %%), backward "
                    "%6.2f us (%3.0f %%), both %6.2f us\n",
                    (long long)n, threads, blocks, f, pct(2, f), bw, pct(3, bw), f + bw);
      }
    {
      const unsigned blocks = unsigned(std::min<int64_t>((packs + 255) / 256, 132 * 32));
      const float f = median_us([&] { plain_loads_kernel<false><<<blocks, 256>>>(y, nullptr, x, packs); });
      const float bw = median_us([&] { plain_loads_kernel<true><<<blocks, 256>>>(dx, dy, x, packs); });
      std::printf("n=%lld, before 2026-12-06 (plain loads, 256 threads x %5u blocks): forward "
                  "%6.2f us (%3.0f %%), backward %6.2f us (%3.0f %%), both %6.2f us\n",
                  (long long)n, blocks, f, pct(2, f), bw, pct(3, bw), f + bw);
    }
    for (int64_t cap : {int64_t(132) * 32, int64_t(1) << 30}) {
      const unsigned blocks = unsigned(std::min<int64_t>((packs + 255) / 256, cap));
      const float f = median_us([&] { streaming_kernel<false><<<blocks, 256>>>(y, nullptr, x, packs); });
      const float bw = median_us([&] { streaming_kernel<true><<<blocks, 256>>>(dx, dy, x, packs); });
      std::printf("n=%lld, streaming hints, 256 threads x %5u blocks: forward %6.2f us (%3.0f %%), "
                  "backward %6.2f us (%3.0f %%), both %6.2f us\n",
                  (long long)n, blocks, f, pct(2, f), bw, pct(3, bw), f + bw);
    }
    auto unrolled = [&](auto fk, auto bk, int U) {
      const unsigned blocks = unsigned((packs + 256 * U - 1) / (256 * U));
      const float f = median_us([&] { fk<<<blocks, 256>>>(y, nullptr, x, packs); });
      const float bw = median_us([&] { bk<<<blocks, 256>>>(dx, dy, x, packs); });
      std::printf("n=%lld, streaming, %d packs a thread, 256 threads x %5u blocks: forward %6.2f "
                  "us (%3.0f %%), backward %6.2f us (%3.0f %%), both %6.2f us\n",
                  (long long)n, U, blocks, f, pct(2, f), bw, pct(3, bw), f + bw);
    };
    unrolled(streaming_unrolled<false, 1>, streaming_unrolled<true, 1>, 1);
    unrolled(streaming_unrolled<false, 2>, streaming_unrolled<true, 2>, 2);
    unrolled(streaming_unrolled<false, 4>, streaming_unrolled<true, 4>, 4);
    const float f = median_us([&] { gs::gelu_forward_cuda(y, x, n, gs::DType::bf16, 0); });
    const float bw = median_us([&] { gs::gelu_backward_cuda(dx, dy, x, n, gs::DType::bf16, 0); });
    std::printf("n=%lld, gelu.cu's launcher: forward %.2f us, backward %.2f us, both %.2f us\n",
                (long long)n, f, bw, f + bw);
    for (bf* p : {x, dy, y, dx}) cudaFree(p);
  }
  return 0;
}
