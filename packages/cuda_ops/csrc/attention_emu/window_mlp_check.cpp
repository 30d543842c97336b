// window_mlp_check.cpp: runs the slide window's fused attn.c_proj + ln_2 + MLP kernel
// (window_mlp.cuh: a thread-block cluster passing x1 and h through distributed shared memory)
// under the warp emulator (emu.h's launch_cluster) and compares out, bit for bit, with the three
// decode_linear tensor-core launches it replaces (decode_mma.cuh) run the same way, and with a
// double-precision reference from the kernel's inputs within bf16 tolerance. Fresh random inputs
// each run. Built and run by tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/window_mlp_check.cpp
//   ./a.out [case ...]
//
// A case is "R:C:biases:ln_bias" (flags 0/1), e.g. "64:256:1:1"; none = the default list. One
// line per case; exits 1 if any is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../window_mlp.cuh"
#include "bf16_check.h"

namespace {

namespace ml = gs::mma_linear;
namespace wm_ = gs::window_mlp;
using namespace bf16_check;

struct Case {
  int R, C;
  bool biases, ln_bias;
};

bool run_case(const Case& c, std::mt19937& rng) {
  const int R = c.R, C = c.C, N = 4 * C;
  const float eps = 1e-5f;
  auto y = random_bf16(rng, size_t(R) * C, 1.0f), x = random_bf16(rng, size_t(R) * C, 2.0f);
  auto wp = random_bf16(rng, size_t(C) * C, 1.0f / std::sqrt(float(C)));
  auto wf = random_bf16(rng, size_t(N) * C, 1.0f / std::sqrt(float(C)));
  auto wm = random_bf16(rng, size_t(C) * N, 1.0f / std::sqrt(float(N)));
  auto bp = random_bf16(rng, C, 0.5f), bf = random_bf16(rng, N, 0.5f);
  auto bm = random_bf16(rng, C, 0.5f);
  auto lw = random_bf16(rng, C, 1.0f), lb = random_bf16(rng, C, 0.5f);
  // a guard element past the end of the output: a store out of bounds changes it
  std::vector<uint16_t> out(size_t(R) * C + 1, 0x7fc1), out_ref(out);
  std::vector<uint16_t> x1_ref(size_t(R) * C), h_ref(size_t(R) * N);
  const uint16_t* bpp = c.biases ? bp.data() : nullptr;
  const uint16_t* bfp = c.biases ? bf.data() : nullptr;
  const uint16_t* bmp = c.biases ? bm.data() : nullptr;
  const uint16_t* lbp = c.ln_bias ? lb.data() : nullptr;

  const wm_::Args a{out.data(), y.data(), x.data(), wp.data(), bpp, lw.data(), lbp,
                    wf.data(), bfp, wm.data(), bmp, R, eps};
  std::string error = "no instance for C";
  wm_::with_kernel_for(C, [&](auto kernel, int ctas, int64_t smem) {
    error = launch_clusters(unsigned(ctas), kernel.value,
                            dim3(ctas, (R + wm_::kRows - 1) / wm_::kRows), dim3(wm_::kThreads),
                            size_t(smem), a);
  });
  // the three launches it replaces
  const ml::Args proj{x1_ref.data(), y.data(), wp.data(), bpp, nullptr, nullptr, x.data(),
                      R, C, C, eps, false};
  const ml::Args fc{h_ref.data(), x1_ref.data(), wf.data(), bfp, lw.data(), lbp, nullptr,
                    R, N, C, eps, true};
  const ml::Args fc2{out_ref.data(), h_ref.data(), wm.data(), bmp, nullptr, nullptr,
                     x1_ref.data(), R, C, N, eps, false};
  std::string error2 = decode_linear_mma(proj, 4);
  if (error2.empty()) error2 = decode_linear_mma(fc, 4);
  if (error2.empty()) error2 = decode_linear_mma(fc2, 2);
  if (error.empty()) error = error2;

  int differ = 0;
  for (size_t i = 0; i < out.size(); ++i) differ += out[i] != out_ref[i];
  // out in double from the decode_linear chain's own bf16 h and x1 (their bits are the
  // kernel's where nothing above differs): mlp.c_proj and the residual
  const auto out_double = decode_linear_reference(h_ref.data(), R, N, wm.data(), C, bmp, nullptr,
                                                  nullptr, x1_ref.data(), false, eps);
  Worst worst;
  for (size_t i = 0; i < out_double.size(); ++i) worst.add(from_bf16(out[i]), out_double[i]);
  const bool ok = error.empty() && differ == 0 && worst.value <= 1.0;
  std::printf("%s R=%d C=%d biases=%d ln_bias=%d: %d values differ from decode_linear's three "
              "launches (guard included), worst %.3f of tolerance%s%s\n",
              ok ? "ok  " : "FAIL", R, C, c.biases, c.ln_bias, differ, worst.value,
              error.empty() ? "" : ", ", error.c_str());
  return ok;
}

Case parse(const std::vector<int>& f) { return {f.at(0), f.at(1), f.at(2) != 0, f.at(3) != 0}; }

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(argc, argv,
                         {
                             {40, 128, true, true},   // a whole and a partial row tile
                             {17, 128, false, false}, // no biases, one partial tile
                             {33, 256, true, false},  // esp32's width: a 16-CTA cluster
                         },
                         parse, run_case);
}
