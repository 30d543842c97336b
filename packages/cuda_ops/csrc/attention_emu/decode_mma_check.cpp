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
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../decode_mma.cuh"

using namespace gs::mma_linear;

namespace {

struct Case {
  int nt, R, N, K;
  bool ln, gelu, bias, residual;
};

uint16_t to_bf16(float f) { return emu::to_bf16(f); }
float from_bf16(uint16_t b) { return emu::bf16_bits_to_float(b); }

std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = to_bf16(d(rng));
  return v;
}

// decode.h's formula in double from the same bf16 inputs, the normalized row rounded to bf16
// as the kernel's mma input is
std::vector<double> reference(const Case& c, const std::vector<uint16_t>& x,
                              const std::vector<uint16_t>& w, const std::vector<uint16_t>& b,
                              const std::vector<uint16_t>& lw, const std::vector<uint16_t>& lb,
                              const std::vector<uint16_t>& res, double eps) {
  std::vector<double> out(size_t(c.R) * c.N), row(c.K);
  for (int r = 0; r < c.R; ++r) {
    for (int k = 0; k < c.K; ++k) row[k] = from_bf16(x[size_t(r) * c.K + k]);
    if (c.ln) {
      double mean = 0, var = 0;
      for (double v : row) mean += v;
      mean /= c.K;
      for (double v : row) var += (v - mean) * (v - mean);
      const double rstd = 1.0 / std::sqrt(var / c.K + eps);
      for (int k = 0; k < c.K; ++k)
        row[k] = from_bf16(to_bf16(float((row[k] - mean) * rstd * from_bf16(lw[k]) +
                                         from_bf16(lb[k]))));
    }
    for (int n = 0; n < c.N; ++n) {
      double acc = 0;
      for (int k = 0; k < c.K; ++k) acc += row[k] * from_bf16(w[size_t(n) * c.K + k]);
      if (c.bias) acc += from_bf16(b[n]);
      if (c.gelu) acc = 0.5 * acc * (1.0 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      if (c.residual) acc += from_bf16(res[size_t(r) * c.N + n]);
      out[size_t(r) * c.N + n] = acc;
    }
  }
  return out;
}

bool run_case(const Case& c, std::mt19937& rng) {
  const double eps = 1e-5;
  auto x = random_bf16(rng, size_t(c.R) * c.K, 2.0f);
  auto w = random_bf16(rng, size_t(c.N) * c.K, 1.0f / std::sqrt(float(c.K)));
  auto b = random_bf16(rng, c.N, 1.0f), lw = random_bf16(rng, c.K, 1.0f);
  auto lb = random_bf16(rng, c.K, 1.0f), res = random_bf16(rng, size_t(c.R) * c.N, 1.0f);
  // a guard element past the end: a store out of bounds changes it
  std::vector<uint16_t> out(size_t(c.R) * c.N + 1, 0x7fc1);
  Args a{out.data(), x.data(), w.data(), c.bias ? b.data() : nullptr,
         c.ln ? lw.data() : nullptr, c.ln ? lb.data() : nullptr,
         c.residual ? res.data() : nullptr, c.R, c.N, c.K, float(eps), c.gelu};
  const int cols = c.nt == 4 ? gs::mma_linear::cols<4>() : gs::mma_linear::cols<2>();
  const size_t smem = c.nt == 4 ? shared_bytes<4>(c.K) : shared_bytes<2>(c.K);
  const dim3 grid((c.N + cols - 1) / cols, (c.R + kRows - 1) / kRows);
  std::string error;
  try {
    // the instance decode.cu launches: fixed-width where K is one of kFixedWidths
    auto run = [&](auto kernel) { emu::launch(kernel.value, grid, dim3(kThreads), smem, a); };
    if (c.nt == 4)
      with_kernel_for<4>(c.K, run);
    else
      with_kernel_for<2>(c.K, run);
  } catch (const emu::Error& e) {
    error = e.what();
  }
  const auto ref = reference(c, x, w, b, lw, lb, res, eps);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = from_bf16(out[i]);
    // bf16 output: half an ulp of the value, plus fp32 accumulation over K products
    const double err = std::fabs(got - ref[i]) / (1e-2 * std::fabs(ref[i]) + 1e-2);
    if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
  }
  const bool guard = out.back() == 0x7fc1;
  const bool ok = error.empty() && worst <= 1.0 && guard;
  std::printf("%s nt=%d R=%d N=%d K=%d ln=%d gelu=%d bias=%d residual=%d: worst %.3f of "
              "tolerance%s%s%s\n",
              ok ? "ok  " : "FAIL", c.nt, c.R, c.N, c.K, c.ln, c.gelu, c.bias, c.residual,
              worst, guard ? "" : ", wrote past the end", error.empty() ? "" : ", ",
              error.c_str());
  return ok;
}

Case parse(const std::string& s) {
  Case c{};
  char sep;
  int ln, gelu, bias, residual;
  std::istringstream in(s);
  in >> c.nt >> sep >> c.R >> sep >> c.N >> sep >> c.K >> sep >> ln >> sep >> gelu >> sep >>
      bias >> sep >> residual;
  c.ln = ln, c.gelu = gelu, c.bias = bias, c.residual = residual;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  for (int i = 1; i < argc; ++i) cases.push_back(parse(argv[i]));
  if (cases.empty())
    cases = {
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
    };
  std::mt19937 rng(std::random_device{}());
  bool all = true;
  for (const Case& c : cases) all = run_case(c, rng) && all;
  return all ? 0 : 1;
}
