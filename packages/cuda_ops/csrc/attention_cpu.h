// attention_cpu.h: what the two CPU paths of causal attention share (internal to the CPU code):
// the row-at-a-time path in attention_cpu.cpp (scalar, and the reference) and the tiled
// AVX2/FMA path in attention_cpu_avx2.cpp. Both run the same tasks, (b, h, tile of 16 rows or
// keys), under OpenMP, and draw the same dropout masks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attention.h"

namespace gs::attn {

constexpr int64_t kRowTile = 16;  // rows per task (and the dropout stream's 16-key blocks)
// B*nh*T*hs below which one thread is faster than waking the OpenMP team (the order of
// common.h's kParallelMinElements; attention does ~T/2 multiply-adds per element, hence lower)
constexpr int64_t kParallelMinWork = int64_t(1) << 14;

// Keep flags of row i for keys 16*j16 .. 16*j16+15 (attention_philox.h: four calls per row of a
// 16 x 16 block; each also covers row i^8, which the CPU code does not reuse).
inline void dropout_row16(const DropoutSpec& d, uint32_t bh, uint32_t i, uint32_t j16,
                          bool keep[16]) {
  const uint32_t c1 = (i >> 4) * 8u + (i & 7u);
  const int ih = static_cast<int>((i >> 3) & 1u);
  for (uint32_t t = 0; t < 4; ++t) {
    Philox4 r = philox4x32_10(j16 * 4u + t, c1, bh, 0u, d.key0, d.key1);
    for (int jh = 0; jh < 2; ++jh)
      for (int e = 0; e < 2; ++e) {
        uint32_t bits = (r.w[jh * 2 + ih] >> (16 * e)) & 0xFFFFu;
        keep[jh * 8 + 2 * t + e] = bits >= d.threshold;
      }
  }
}

// Run task(b, h, tile) for every (b, h, tile of kRowTile rows), in parallel when worth it.
template <typename F> void for_each_tile(const Dims& d, int threads, F&& task) {
  const int64_t tiles = (d.T + kRowTile - 1) / kRowTile, n = d.B * d.nh * tiles;
  const bool parallel = threads > 1 && d.B * d.nh * d.T * d.hs >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (parallel)
  for (int64_t w = 0; w < n; ++w) task(w / (d.nh * tiles), (w / tiles) % d.nh, w % tiles);
}

// The AVX2/FMA path (attention_cpu_avx2.cpp; only where cpu_simd.h has it, and called only when
// the CPU runs AVX2/FMA). E is float or bf16_t.
template <typename E>
void forward_avx2(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v,
                  View4<E> y, float* lse, const DropoutSpec& drop, int threads);
template <typename E>
void backward_avx2(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                   View4<const E> v, View4<const E> y, const float* lse, View4<E> dq,
                   View4<E> dk, View4<E> dv, const DropoutSpec& drop, int threads);

}  // namespace gs::attn
