// decode_split_check.cpp: runs decode_linear's split-K kernel (decode_split.cuh: K over a
// thread-block cluster of 4 CTAs, the partials passed to each warp tile's owner by st.async)
// under the warp emulator (emu.h), its CTAs drifting apart, and compares it with a
// double-precision reference of decode.h's formula and with the unsplit tensor-core kernel
// (decode_mma.cuh) run the same way, both within bf16 tolerance (the same terms summed in
// another order; after the bias and residual a near-cancelling output may differ by more than a
// bf16 step). Twice on the same inputs: the same bits (the partials are added in rank order,
// whatever the CTAs' timing). Fresh random inputs each run. Built and run by
// tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/decode_split_check.cpp
//   ./a.out [case ...]
//
// A case is "R:N:K:gelu:bias:residual" (flags 0/1), e.g. "64:256:1024:0:1:1"; none = the
// default list. One line per case; exits 1 if any is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../decode_split.cuh"
#include "bf16_check.h"

namespace {

namespace ml = gs::mma_linear;
namespace sl = gs::split_linear;
using namespace bf16_check;

struct Case {
  int R, N, K;
  bool gelu, bias, residual;
};

std::string run_split(const ml::Args& a) {
  std::string error = "K is not one of decode_split.cuh's widths";
  sl::with_kernel_for(a.K, [&](auto kernel, int64_t smem) {
    error = launch_clusters(sl::kSplit, kernel.value,
                            dim3(sl::kSplit * ((a.N + sl::kCols - 1) / sl::kCols),
                                 (a.R + sl::kRows - 1) / sl::kRows),
                            dim3(sl::kThreads), size_t(smem), a);
  });
  return error;
}

bool run_case(const Case& c, std::mt19937& rng) {
  auto x = random_bf16(rng, size_t(c.R) * c.K, 2.0f);
  auto w = random_bf16(rng, size_t(c.N) * c.K, 1.0f / std::sqrt(float(c.K)));
  auto b = random_bf16(rng, c.N, 1.0f), res = random_bf16(rng, size_t(c.R) * c.N, 1.0f);
  // a guard element past the end of each output: a store out of bounds changes it
  std::vector<uint16_t> out(size_t(c.R) * c.N + 1, 0x7fc1), again(out), plain(out);
  const uint16_t* bias = c.bias ? b.data() : nullptr;
  const uint16_t* residual = c.residual ? res.data() : nullptr;
  ml::Args a{out.data(), x.data(), w.data(), bias, nullptr, nullptr, residual,
             c.R, c.N, c.K, 1e-5f, c.gelu};
  std::string error = run_split(a);
  a.out = again.data();
  if (error.empty()) error = run_split(a);
  a.out = plain.data();
  if (error.empty()) error = decode_linear_mma(a, 4);
  const auto ref = decode_linear_reference(x.data(), c.R, c.K, w.data(), c.N, bias, nullptr,
                                           nullptr, residual, c.gelu, 1e-5);
  Worst worst, apart;
  int differ = 0, repeat = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst.add(from_bf16(out[i]), ref[i]);
    apart.add(from_bf16(out[i]), from_bf16(plain[i]));
    differ += out[i] != plain[i];
    repeat += out[i] != again[i];
  }
  const bool guard = out.back() == 0x7fc1 && again.back() == 0x7fc1;
  const bool ok =
      error.empty() && worst.value <= 1.0 && apart.value <= 1.0 && repeat == 0 && guard;
  std::printf("%s R=%d N=%d K=%d gelu=%d bias=%d residual=%d: worst %.3f of tolerance; %d of %zu "
              "values differ from the unsplit kernel's, worst %.3f of tolerance; %d differ "
              "between runs%s%s%s\n",
              ok ? "ok  " : "FAIL", c.R, c.N, c.K, c.gelu, c.bias, c.residual, worst.value,
              differ, ref.size(), apart.value, repeat, guard ? "" : ", wrote past the end",
              error.empty() ? "" : ", ", error.c_str());
  return ok;
}

Case parse(const std::vector<int>& f) {
  return {f.at(0), f.at(1), f.at(2), f.at(3) != 0, f.at(4) != 0, f.at(5) != 0};
}

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(argc, argv,
                         {
                             {64, 256, 1024, false, true, true},   // esp32's mlp.c_proj
                             {40, 100, 1536, true, true, false},   // row and column tails, GELU
                             {16, 64, 1024, false, false, true},   // one tile, no bias
                         },
                         parse, run_case);
}
