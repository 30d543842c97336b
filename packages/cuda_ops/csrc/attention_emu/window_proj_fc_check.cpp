// window_proj_fc_check.cpp: runs the slide window's fused attn.c_proj + ln_2 + mlp.c_fc kernel
// (window_proj_fc.cuh) under the warp emulator (emu.h) and compares x1 and h, bit for bit, with
// the two decode_linear tensor-core launches it replaces (decode_mma.cuh) run the same way,
// and h with a double-precision reference within bf16 tolerance. Fresh random inputs each run.
// Built and run by tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/window_proj_fc_check.cpp
//   ./a.out [case ...]
//
// A case is "R:C:N:biases:ln_bias" (flags 0/1), e.g. "64:256:1024:1:1"; none = the default
// list. One line per case; exits 1 if any is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../window_proj_fc.cuh"
#include "bf16_check.h"

namespace {

namespace ml = gs::mma_linear;
namespace pf = gs::window_proj_fc;
using namespace bf16_check;

struct Case {
  int R, C, N;
  bool biases, ln_bias;
};

bool run_case(const Case& c, std::mt19937& rng) {
  const int R = c.R, C = c.C, N = c.N;
  const float eps = 1e-5f;
  auto y = random_bf16(rng, size_t(R) * C, 1.0f), x = random_bf16(rng, size_t(R) * C, 2.0f);
  auto wp = random_bf16(rng, size_t(C) * C, 1.0f / std::sqrt(float(C)));
  auto wf = random_bf16(rng, size_t(N) * C, 1.0f / std::sqrt(float(C)));
  auto bp = random_bf16(rng, C, 0.5f), bf = random_bf16(rng, N, 0.5f);
  auto lw = random_bf16(rng, C, 1.0f), lb = random_bf16(rng, C, 0.5f);
  // a guard element past the end of each output: a store out of bounds changes it
  std::vector<uint16_t> x1(size_t(R) * C + 1, 0x7fc1), h(size_t(R) * N + 1, 0x7fc1);
  std::vector<uint16_t> x1_ref(x1), h_ref(h);
  const uint16_t* bpp = c.biases ? bp.data() : nullptr;
  const uint16_t* bfp = c.biases ? bf.data() : nullptr;
  const uint16_t* lbp = c.ln_bias ? lb.data() : nullptr;

  const pf::Args a{x1.data(), h.data(), y.data(), x.data(), wp.data(), bpp, wf.data(), bfp,
                   lw.data(), lbp, R, C, N, eps};
  std::string error = "no instance for C";
  pf::with_kernel_for(C, [&](auto kernel) {
    const dim3 grid((N + pf::kCols - 1) / pf::kCols, (R + pf::kRows - 1) / pf::kRows);
    error = launch(kernel.value, grid, dim3(pf::kThreads), pf::shared_bytes(C), a);
  });
  // the two launches it replaces
  const ml::Args proj{x1_ref.data(), y.data(), wp.data(), bpp, nullptr, nullptr, x.data(),
                      R, C, C, eps, false};
  const ml::Args fc{h_ref.data(), x1_ref.data(), wf.data(), bfp, lw.data(), lbp, nullptr,
                    R, N, C, eps, true};
  std::string error2 = decode_linear_mma(proj, 4);
  if (error2.empty()) error2 = decode_linear_mma(fc, 4);
  if (error.empty()) error = error2;

  int differ = 0;
  for (size_t i = 0; i < x1.size(); ++i) differ += x1[i] != x1_ref[i];
  for (size_t i = 0; i < h.size(); ++i) differ += h[i] != h_ref[i];
  // h in double from the kernel's own x1 (bf16): LayerNorm, c_fc, GELU
  const auto h_double = decode_linear_reference(x1.data(), R, C, wf.data(), N, bfp, lw.data(),
                                                lbp, nullptr, true, eps);
  Worst worst;
  for (size_t i = 0; i < h_double.size(); ++i) worst.add(from_bf16(h[i]), h_double[i]);
  const bool ok = error.empty() && differ == 0 && worst.value <= 1.0;
  std::printf("%s R=%d C=%d N=%d biases=%d ln_bias=%d: %d values differ from decode_linear's "
              "two launches (guards included), worst %.3f of tolerance%s%s\n",
              ok ? "ok  " : "FAIL", R, C, N, c.biases, c.ln_bias, differ, worst.value,
              error.empty() ? "" : ", ", error.c_str());
  return ok;
}

Case parse(const std::vector<int>& f) {
  return {f.at(0), f.at(1), f.at(2), f.at(3) != 0, f.at(4) != 0};
}

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(
      argc, argv,
      {
          {64, 256, 1024, true, true},  // esp32's window
          {40, 256, 192, false, true},  // row tails, no biases, fewer column tiles
          {17, 128, 512, true, false},  // the other width, one partial row tile
      },
      parse, run_case);
}
