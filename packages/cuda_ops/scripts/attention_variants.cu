// attention_variants.cu: shapes of the bf16 attention forward kernel (csrc/attention_forward.cuh)
// side by side on one GPU, outside the extension (which builds only the launcher's choices):
// warps per CTA, m-tiles of 16 query rows per warp, keys per tile, and the CTAs per SM that
// __launch_bounds__ asks registers to fit. The model's layout (q, k, v as views of one
// (B, T, 3C) buffer), no dropout.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Xptxas -v -I packages/cuda_ops/csrc \
//       packages/cuda_ops/scripts/attention_variants.cu -o attention_variants
//   ./attention_variants [B nh T] [--json FILE]     (default: gpt2-124m, B=16 nh=12 T=1024)
//
// Each variant's output and lse are compared with the first (the launcher's default) before any
// timing; then rounds alternate the variants (docs/MEASURING.md), each round timing 10
// back-to-back launches with CUDA events; medians per variant and per-round ratios to the first.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_forward.cuh"

using namespace gs::attn;

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int HS = 64;

struct Variant {
  std::string name;
  void (*kernel)(FwdArgs);
  int threads, rows, smem;
};

template <int NW, int MT, int KT, int MB> Variant variant() {
  using C = FwdConfig<HS, NW, MT, KT>;
  const auto k = attention_forward_mma_kernel<HS, NW, false, MT, KT, MB>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  const std::string name = std::to_string(NW) + "w x " + std::to_string(16 * MT) + " rows, " +
                           std::to_string(KT) + " keys" +
                           (MB ? ", >=" + std::to_string(MB) + " CTA/SM" : "");
  return {name, k, C::kThreads, C::kRows, C::kSmemBytes};
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int B = 16, nh = 12, T = 1024;
  const char* json = nullptr;
  for (int i = 1, pos = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      const int v = std::atoi(argv[i]);
      (pos == 0 ? B : pos == 1 ? nh : T) = v;
      ++pos;
    }
  }
  const int C = nh * HS;
  const int64_t n_qkv = int64_t(B) * T * 3 * C, n_y = int64_t(B) * T * C;
  std::vector<uint16_t> host(n_qkv);
  std::mt19937 rng(0);
  std::normal_distribution<float> n01;
  for (auto& x : host) {
    const float f = n01(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  uint16_t *qkv, *y;
  float* lse;
  CHECK(cudaMalloc(&qkv, n_qkv * 2));
  CHECK(cudaMalloc(&y, n_y * 2));
  CHECK(cudaMalloc(&lse, int64_t(B) * nh * T * 4));
  CHECK(cudaMemcpy(qkv, host.data(), n_qkv * 2, cudaMemcpyHostToDevice));
  // (B, nh, T, hs) views: batch stride T*3C, head stride hs, row stride 3C; y is (B, T, C)
  const int64_t sb = int64_t(T) * 3 * C, st = 3 * C;
  FwdArgs a{};
  a.q = {qkv, sb, HS, st};
  a.k = {qkv + C, sb, HS, st};
  a.v = {qkv + 2 * C, sb, HS, st};
  a.y = {y, int64_t(T) * C, HS, C};
  a.lse = lse;
  a.nh = nh;
  a.T = T;
  a.scale_log2 = kLog2e / std::sqrt(float(HS));
  a.threshold = 0;
  a.drop_scale = 1.0f;
  a.seed = nullptr;

  std::vector<Variant> vs = {
      variant<4, 1, 64, 0>(), variant<4, 1, 64, 4>(), variant<4, 2, 64, 0>(),
      variant<4, 2, 64, 2>(), variant<4, 2, 32, 0>(), variant<8, 1, 64, 0>(),
      variant<8, 2, 64, 0>(), variant<4, 1, 32, 0>(), variant<4, 1, 32, 4>(),
      variant<2, 2, 64, 0>(),
  };
  auto launch = [&](const Variant& v) {
    const dim3 grid((T + v.rows - 1) / v.rows, B * nh);
    v.kernel<<<grid, v.threads, v.smem>>>(a);
  };

  // outputs against the first variant
  std::vector<uint16_t> y0(n_y), y1(n_y);
  std::vector<float> l0(int64_t(B) * nh * T), l1(l0.size());
  auto bf = [](uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<double> err(vs.size(), 0.0);
  for (size_t i = 0; i < vs.size(); ++i) {
    CHECK(cudaMemset(y, 0xFF, n_y * 2));
    launch(vs[i]);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    auto& yy = i == 0 ? y0 : y1;
    auto& ll = i == 0 ? l0 : l1;
    CHECK(cudaMemcpy(yy.data(), y, n_y * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ll.data(), lse, ll.size() * 4, cudaMemcpyDeviceToHost));
    if (i == 0) continue;
    double num = 0, den = 0, lerr = 0;
    for (int64_t j = 0; j < n_y; ++j) {
      const double d = bf(y1[j]) - bf(y0[j]);
      num += d * d;
      den += double(bf(y0[j])) * bf(y0[j]);
    }
    for (size_t j = 0; j < l0.size(); ++j) lerr = std::max(lerr, double(std::fabs(l1[j] - l0[j])));
    err[i] = std::sqrt(num / den);
    std::printf("%-34s y rel. error vs first %.2e, lse max abs diff %.2e\n", vs[i].name.c_str(),
                err[i], lerr);
    if (!(err[i] < 1e-2) || !(lerr < 1e-2)) {
      std::printf("  OUTPUT MISMATCH: not timed\n");
      vs[i].kernel = nullptr;
    }
  }

  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  constexpr int kRounds = 15, kCalls = 10;
  std::vector<std::vector<float>> us(vs.size());
  for (int warm = 0; warm < 3; ++warm)
    for (auto& v : vs)
      if (v.kernel) launch(v);
  for (int r = 0; r < kRounds; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      if (!vs[i].kernel) continue;
      CHECK(cudaEventRecord(e0));
      for (int c = 0; c < kCalls; ++c) launch(vs[i]);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      us[i].push_back(1000.0f * ms / kCalls);
    }
  CHECK(cudaGetLastError());
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double flops = 4.0 * B * nh * double(T) * T * HS / 2;  // causal: half of QK^T and PV
  std::printf("\n%s, B=%d nh=%d T=%d hs=%d, %d rounds of %d calls\n", prop.name, B, nh, T, HS,
              kRounds, kCalls);
  std::FILE* f = json ? std::fopen(json, "w") : nullptr;
  if (f)
    std::fprintf(f, "{\"device\": \"%s\", \"B\": %d, \"nh\": %d, \"T\": %d, \"hs\": %d, "
                    "\"rounds\": %d, \"calls\": %d, \"variants\": [",
                 prop.name, B, nh, T, HS, kRounds, kCalls);
  for (size_t i = 0; i < vs.size(); ++i) {
    if (!vs[i].kernel) continue;
    std::vector<float> ratio;
    for (int r = 0; r < kRounds; ++r) ratio.push_back(us[0][r] / us[i][r]);
    const float med = median(us[i]);
    std::printf("%-34s %8.1f us  %6.1f TFLOP/s  %.3fx the first\n", vs[i].name.c_str(), med,
                flops / med * 1e-6, median(ratio));
    if (f) {
      std::fprintf(f, "%s{\"name\": \"%s\", \"median_us\": %.2f, \"ratio_vs_first\": %.4f, "
                      "\"rel_error_vs_first\": %.3e, \"us\": [",
                   i ? ", " : "", vs[i].name.c_str(), med, median(ratio), err[i]);
      for (int r = 0; r < kRounds; ++r) std::fprintf(f, "%s%.2f", r ? ", " : "", us[i][r]);
      std::fprintf(f, "]}");
    }
  }
  if (f) {
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
