// decode_mma_check.cpp: runs decode_linear's tensor-core kernel (decode_mma.cuh) under the warp
// emulator (emu.h) and compares it with a double-precision reference of decode.h's formula on
// fresh random inputs: fragment layouts, tails of rows and columns, the in-place LayerNorm, the
// epilogue, and shared-memory races. Built and run by tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/decode_mma_check.cpp -o check
//   ./check [case ...]
//
// A case is "NT:R:N:K:ln:gelu:bias:residual" (flags 0/1), e.g. "4:40:72:48:1:1:1:0"; none = the
// default list. One line per case; exits 1 if any is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bf16_check.h"

using namespace gs::mma_linear;
using namespace bf16_check;

namespace {

struct Case {
  int nt, R, N, K;
  bool ln, gelu, bias, residual;
};

bool run_case(const Case& c, std::mt19937& rng) {
  const double eps = 1e-5;
  auto x = random_bf16(rng, size_t(c.R) * c.K, 2.0f);
  auto w = random_bf16(rng, size_t(c.N) * c.K, 1.0f / std::sqrt(float(c.K)));
  auto b = random_bf16(rng, c.N, 1.0f), lw = random_bf16(rng, c.K, 1.0f);
  auto lb = random_bf16(rng, c.K, 1.0f), res = random_bf16(rng, size_t(c.R) * c.N, 1.0f);
  // a guard element past the end: a store out of bounds changes it
  std::vector<uint16_t> out(size_t(c.R) * c.N + 1, 0x7fc1);
  const uint16_t* bias = c.bias ? b.data() : nullptr;
  const uint16_t* ln_w = c.ln ? lw.data() : nullptr;
  const uint16_t* ln_b = c.ln ? lb.data() : nullptr;
  const uint16_t* residual = c.residual ? res.data() : nullptr;
  const Args a{out.data(), x.data(), w.data(), bias, ln_w, ln_b, residual,
               c.R, c.N, c.K, float(eps), c.gelu};
  const std::string error = decode_linear_mma(a, c.nt);
  const auto ref = decode_linear_reference(x.data(), c.R, c.K, w.data(), c.N, bias, ln_w, ln_b,
                                           residual, c.gelu, eps);
  Worst worst;
  for (size_t i = 0; i < ref.size(); ++i) worst.add(from_bf16(out[i]), ref[i]);
  const bool guard = out.back() == 0x7fc1;
  const bool ok = error.empty() && worst.value <= 1.0 && guard;
  std::printf("%s nt=%d R=%d N=%d K=%d ln=%d gelu=%d bias=%d residual=%d: worst %.3f of "
              "tolerance%s%s%s\n",
              ok ? "ok  " : "FAIL", c.nt, c.R, c.N, c.K, c.ln, c.gelu, c.bias, c.residual,
              worst.value, guard ? "" : ", wrote past the end", error.empty() ? "" : ", ",
              error.c_str());
  return ok;
}

Case parse(const std::vector<int>& f) {
  return {f.at(0), f.at(1), f.at(2), f.at(3), f.at(4) != 0, f.at(5) != 0, f.at(6) != 0,
          f.at(7) != 0};
}

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(
      argc, argv,
      {
          {4, 32, 64, 16, false, false, false, false},  // one CTA, one k step
          {4, 40, 72, 48, true, true, true, false},     // row and column tails, LayerNorm + GELU
          {2, 33, 35, 64, true, false, true, true},     // odd N: the scalar stores
          {2, 16, 32, 96, false, false, true, true},    // fewer rows than a tile
          {4, 70, 130, 32, true, true, true, true},     // three row tiles, three column tiles
          {4, 64, 64, 384, true, true, true, true},     // shakespeare-char's c_fc slice
          {2, 32, 32, 1536, false, false, true, true},  // and its mlp.c_proj slice
          {4, 40, 80, 256, true, false, true, false},   // esp32's c_attn, with tails
          {2, 33, 40, 1024, false, false, false, true}, // esp32's mlp.c_proj, with tails
          {2, 40, 48, 768, true, true, true, true},     // gpt2-124m's width, with tails
      },
      parse, run_case);
}
