// decode_tail_check.cpp: runs the end of a decode step in one launch (decode_tail.cuh: the last
// block after its attention and the LM head, a thread-block cluster of C / 32 CTAs a row passing
// x1, h and x2 between them by st.async) under the warp emulator (emu.h), its CTAs drifting
// apart, and compares the logits with a double-precision reference of the four decode_linear
// calls it stands for (x1, h and x2 rounded to bf16 between them, as those calls round them),
// within bf16 tolerance. (Its bits against decode_linear's one-row kernel are a CUDA test: that
// kernel does not build for the emulator.) Fresh random inputs each run. Built and run by
// tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/decode_tail_check.cpp
//   ./a.out [case ...]
//
// A case is "B:C:V:biases" (flag 0/1), e.g. "1:256:512:1"; none = the default list. One line per
// case; exits 1 if any is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../decode_tail.cuh"
#include "bf16_check.h"

namespace {

namespace dt = gs::decode_tail;
using namespace bf16_check;

struct Case {
  int B, C, V;
  bool biases;
};

std::vector<uint16_t> rounded(const std::vector<double>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(float(v[i]));
  return out;
}

bool run_case(const Case& c, std::mt19937& rng) {
  const int B = c.B, C = c.C, N = 4 * C, V = c.V;
  const double eps = 1e-5;
  auto y = random_bf16(rng, size_t(B) * C, 1.0f), x = random_bf16(rng, size_t(B) * C, 2.0f);
  auto wp = random_bf16(rng, size_t(C) * C, 1.0f / std::sqrt(float(C)));
  auto wf = random_bf16(rng, size_t(N) * C, 1.0f / std::sqrt(float(C)));
  auto wm = random_bf16(rng, size_t(C) * N, 1.0f / std::sqrt(float(N)));
  auto wh = random_bf16(rng, size_t(V) * C, 1.0f / std::sqrt(float(C)));
  auto bp = random_bf16(rng, C, 0.5f), bf = random_bf16(rng, N, 0.5f);
  auto bm = random_bf16(rng, C, 0.5f);
  auto l2w = random_bf16(rng, C, 1.0f), l2b = random_bf16(rng, C, 0.5f);
  auto lfw = random_bf16(rng, C, 1.0f), lfb = random_bf16(rng, C, 0.5f);
  auto opt = [&](const std::vector<uint16_t>& v) { return c.biases ? v.data() : nullptr; };
  std::vector<uint16_t> logits(size_t(B) * V + 1, 0x7fc1);  // a guard element past the end
  const dt::Args a{logits.data(), y.data(), x.data(), wp.data(), opt(bp), l2w.data(), opt(l2b),
                   wf.data(), opt(bf), wm.data(), opt(bm), lfw.data(), opt(lfb), wh.data(), V,
                   float(eps)};
  std::string error = "C is not one of decode_tail.cuh's widths";
  dt::with_kernel_for(C, [&](auto kernel, int ctas, int64_t (*shared_bytes)(int)) {
    error = launch_clusters(ctas, kernel.value, dim3(ctas, B), dim3(dt::kThreads),
                            size_t(shared_bytes(V)), a);
  });
  const auto x1 = rounded(decode_linear_reference(y.data(), B, C, wp.data(), C, opt(bp), nullptr,
                                                  nullptr, x.data(), false, eps));
  const auto h = rounded(decode_linear_reference(x1.data(), B, C, wf.data(), N, opt(bf),
                                                 l2w.data(), opt(l2b), nullptr, true, eps,
                                                 false));
  const auto x2 = rounded(decode_linear_reference(h.data(), B, N, wm.data(), C, opt(bm), nullptr,
                                                  nullptr, x1.data(), false, eps));
  const auto ref = decode_linear_reference(x2.data(), B, C, wh.data(), V, nullptr, lfw.data(),
                                           opt(lfb), nullptr, false, eps, false);
  Worst worst;
  for (size_t i = 0; i < ref.size(); ++i) worst.add(from_bf16(logits[i]), ref[i]);
  const bool guard = logits.back() == 0x7fc1;
  const bool ok = error.empty() && worst.value <= 1.0 && guard;
  std::printf("%s B=%d C=%d V=%d biases=%d: worst %.3f of tolerance%s%s%s\n",
              ok ? "ok  " : "FAIL", B, C, V, c.biases, worst.value,
              guard ? "" : ", wrote past the end", error.empty() ? "" : ", ", error.c_str());
  return ok;
}

Case parse(const std::vector<int>& f) { return {f.at(0), f.at(1), f.at(2), f.at(3) != 0}; }

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(argc, argv,
                         {
                             {1, 256, 512, true},   // esp32's step: 8 CTAs, 64 logits each
                             {2, 128, 101, false},  // two rows, 4 CTAs, a ragged vocabulary
                         },
                         parse, run_case);
}
