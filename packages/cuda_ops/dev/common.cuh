// dev/common.cuh: what the dev benches share: CHECK, the cudaEvent median, the copy floor.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::printf("CUDA error %s at line %d\n", cudaGetErrorString(e), __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// Median over `rounds` of the mean time of `calls` back-to-back calls of f, in microseconds,
// after 10 warm-up calls.
template <class F> float median_us(F f, int calls = 50, int rounds = 15) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 10; ++i) f();
  std::vector<float> t;
  for (int r = 0; r < rounds; ++r) {
    cudaEventRecord(a);
    for (int i = 0; i < calls; ++i) f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.f / calls);
  }
  CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Device copy bandwidth in GB/s (read + write) of a 1 GiB buffer, far larger than the caches.
inline double copy_bandwidth_gbs() {
  const size_t big = size_t(1) << 30;
  void *src, *dst;
  CHECK(cudaMalloc(&src, big));
  CHECK(cudaMalloc(&dst, big));
  const float us = median_us([&] { cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice); }, 5, 7);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * big / (us * 1e3);
}
