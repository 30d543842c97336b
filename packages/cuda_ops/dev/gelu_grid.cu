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

__global__ void fill(bf* p, int64_t n, float scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = __float2bfloat16(scale * __sinf(float(i % 9973) * 0.37f));
}

// The variants of gelu.cu's kernel timed beside it: U 16-byte packs a thread, all loaded before
// any is computed (U x 16 bytes in flight), grid-stride over groups of U packs; Streaming =
// inputs read with ld.global.cs and outputs written with st.global.cs (evict first: each byte is
// touched once and the tensors are larger than L2). <.., false, 1> with up to 132 x 32 blocks of
// 256 is gelu.cu's kernel until 2026-12-06.
template <bool Backward, bool Streaming, int U>
__global__ void __launch_bounds__(512) variant_kernel(bf* __restrict__ out,
                                                      const bf* __restrict__ dout,
                                                      const bf* __restrict__ x, int64_t n_packs) {
  auto load = [](const bf* p, int64_t i) {
    const uint4* q = reinterpret_cast<const uint4*>(p) + i;
    return Streaming ? __ldcs(q) : *q;
  };
  const int64_t stride = int64_t(gridDim.x) * U * blockDim.x;
  for (int64_t base = int64_t(blockIdx.x) * U * blockDim.x + threadIdx.x; base < n_packs;
       base += stride) {
    uint4 xv[U], dv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t p = base + int64_t(u) * blockDim.x;
      if (p >= n_packs) continue;
      xv[u] = load(x, p);
      if constexpr (Backward) dv[u] = load(dout, p);
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
      uint4* o = reinterpret_cast<uint4*>(out) + p;
      if constexpr (Streaming) __stcs(o, r);
      else *o = r;
    }
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
    // fk, bk: the forward and backward instances of a variant, U packs a thread
    auto variant = [&](const char* name, auto fk, auto bk, int U, int64_t cap) {
      const unsigned blocks = unsigned(std::min<int64_t>((packs + 256 * U - 1) / (256 * U), cap));
      const float f = median_us([&] { fk<<<blocks, 256>>>(y, nullptr, x, packs); });
      const float bw = median_us([&] { bk<<<blocks, 256>>>(dx, dy, x, packs); });
      std::printf("n=%lld, %s, %d packs a thread, 256 threads x %5u blocks: forward %6.2f us "
                  "(%3.0f %%), backward %6.2f us (%3.0f %%), both %6.2f us\n",
                  (long long)n, name, U, blocks, f, pct(2, f), bw, pct(3, bw), f + bw);
    };
    constexpr int64_t kNoCap = int64_t(1) << 30;
    variant("before 2026-12-06 (plain loads)", variant_kernel<false, false, 1>,
            variant_kernel<true, false, 1>, 1, 132 * 32);
    variant("streaming hints", variant_kernel<false, true, 1>, variant_kernel<true, true, 1>, 1,
            132 * 32);
    variant("streaming hints", variant_kernel<false, true, 1>, variant_kernel<true, true, 1>, 1,
            kNoCap);
    variant("streaming hints", variant_kernel<false, true, 2>, variant_kernel<true, true, 2>, 2,
            kNoCap);
    variant("streaming hints", variant_kernel<false, true, 4>, variant_kernel<true, true, 4>, 4,
            kNoCap);
    const float f = median_us([&] { gs::gelu_forward_cuda(y, x, n, gs::DType::bf16, 0); });
    const float bw = median_us([&] { gs::gelu_backward_cuda(dx, dy, x, n, gs::DType::bf16, 0); });
    std::printf("n=%lld, gelu.cu's launcher: forward %.2f us, backward %.2f us, both %.2f us\n",
                (long long)n, f, bw, f + bw);
    for (bf* p : {x, dy, y, dx}) cudaFree(p);
  }
  return 0;
}
