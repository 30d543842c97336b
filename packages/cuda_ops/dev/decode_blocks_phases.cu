// dev/decode_blocks_phases.cu: where a decode_blocks step spends its time. Builds
// csrc/decode_blocks.cu with its per-phase clock64 stamps (GS_DECODE_BLOCKS_STAMPS), runs one
// step of a random bf16 model at shakespeare-char's shape (or C, layers, position from the
// command line; head size 64, T 256, batch 1), and prints the step's time and, per phase of a
// block, the work (from the last barrier to this phase's arrive) and the barrier (arrive to
// wait: the wait for the slowest CTA and the release of the remote stores), averaged over the
// layers, for the first and the last CTA of the cluster.
//
//   nvcc -arch=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -I packages/cuda_ops/csrc \
//       packages/cuda_ops/dev/decode_blocks_phases.cu -o /tmp/phases && /tmp/phases [C L pos]
#define GS_DECODE_BLOCKS_STAMPS
#include "decode_blocks.cu"
#include "common.cuh"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace gs {
bool programmatic_launch_enabled() { return false; }  // common.cpp's switch: one step alone
}  // namespace gs

namespace {

std::mt19937 rng(1234);

void* random_bf16(size_t n, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<__nv_bfloat16> host(n);
  for (auto& v : host) v = __float2bfloat16(u(rng));
  void* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(__nv_bfloat16)));
  CHECK(cudaMemcpy(dev, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  return dev;
}

}  // namespace

int main(int argc, char** argv) {
  const int C = argc > 1 ? std::atoi(argv[1]) : 384, L = argc > 2 ? std::atoi(argv[2]) : 6;
  const int64_t pos = argc > 3 ? std::atoi(argv[3]) : 200;
  const int hs = 64, nh = C / hs, T = 256, vocab = 65;
  if (C % hs || L < 1 || L > gs::kDecodeMaxLayers || pos < 0 || pos >= T) {
    std::printf("usage: %s [C (a multiple of 64)] [layers 1..%d] [position 0..%d]\n", argv[0],
                gs::kDecodeMaxLayers, T - 1);
    return 2;
  }
  gs::DecodeBlocksArgs a{};
  const size_t CC = size_t(C) * C;
  for (int l = 0; l < L; ++l) {
    const size_t sizes[gs::kDecodeLayerTensors] = {size_t(C), size_t(C), 3 * CC, size_t(3 * C),
                                                   CC, size_t(C), size_t(C), size_t(C), 4 * CC,
                                                   size_t(4 * C), 4 * CC, size_t(C)};
    for (int i = 0; i < gs::kDecodeLayerTensors; ++i)
      a.w[l][i] = random_bf16(sizes[i], i == gs::kLn1W || i == gs::kLn2W ? 1.0f : 0.05f);
  }
  a.wte = random_bf16(size_t(vocab) * C, 0.5f);
  a.wpe = random_bf16(size_t(T) * C, 0.5f);
  a.k_cache = random_bf16(size_t(L) * nh * T * hs, 1.0f);
  a.v_cache = random_bf16(size_t(L) * nh * T * hs, 1.0f);
  CHECK(cudaMalloc(&a.out, size_t(C) * sizeof(__nv_bfloat16)));
  int64_t host_ids[2] = {7, pos}, *ids = nullptr;  // token, position
  CHECK(cudaMalloc(&ids, sizeof(host_ids)));
  CHECK(cudaMemcpy(ids, host_ids, sizeof(host_ids), cudaMemcpyHostToDevice));
  a.token = ids;
  a.pos = ids + 1;
  a.n_layer = L, a.B = 1, a.C = C, a.nh = nh, a.hs = hs, a.T = T;
  a.vocab = vocab, a.wpe_rows = T, a.eps = 1e-5f;

  auto step = [&] { gs::decode_blocks_cuda(a, gs::DType::bf16, 0); };
  const float us = median_us(step);
  step();
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> st(16 * gs::kDecodeMaxLayers * 6 * 2);
  CHECK(cudaMemcpyFromSymbol(st.data(), gs::decode_blocks_stamps, st.size() * sizeof(long long)));
  int khz = 0, cs = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  for (int r = 0; r < 16; ++r) cs += st[(r * gs::kDecodeMaxLayers * 6 + 5) * 2] != 0;
  auto at = [&](int r, int l, int ph, int s) {
    return st[((size_t(r) * gs::kDecodeMaxLayers + l) * 6 + ph) * 2 + s];
  };
  std::printf("decode_blocks C=%d layers=%d pos=%lld, bf16, cluster of %d: %.1f us a step "
              "(median of 15 x 50 back to back)\n",
              C, L, static_cast<long long>(pos), cs, us);
  std::printf("per block, us (mean over layers; SM clock %.2f GHz): work + barrier\n", khz / 1e6);
  const char* names[5] = {"A ln_1+c_attn", "B attention", "C c_proj", "D ln_2+c_fc",
                          "E mlp.c_proj"};
  for (int r : {0, cs - 1}) {
    std::printf("CTA %2d:", r);
    double total = 0;
    for (int ph = 0; ph < 5; ++ph) {
      double work = 0, wait = 0;
      for (int l = 0; l < L; ++l) {
        const long long start = ph ? at(r, l, ph - 1, 1) : l ? at(r, l - 1, 4, 1) : at(r, 0, 5, 0);
        work += at(r, l, ph, 0) - start;
        wait += at(r, l, ph, 1) - at(r, l, ph, 0);
      }
      work /= L * (khz / 1e3), wait /= L * (khz / 1e3);
      total += work + wait;
      std::printf("  %s %.2f + %.2f", names[ph], work, wait);
    }
    std::printf("  = %.2f a block\n", total);
  }
  return 0;
}
