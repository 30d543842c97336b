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
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../window_proj_fc.cuh"

namespace {

namespace ml = gs::mma_linear;
namespace pf = gs::window_proj_fc;

struct Case {
  int R, C, N;
  bool biases, ln_bias;
};

uint16_t to_bf16(float f) { return emu::to_bf16(f); }
float from_bf16(uint16_t b) { return emu::bf16_bits_to_float(b); }

std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = to_bf16(d(rng));
  return v;
}

template <typename A> std::string run(void (*kernel)(A), dim3 grid, size_t smem, const A& a) {
  try {
    emu::launch(kernel, grid, dim3(ml::kThreads), smem, a);
  } catch (const emu::Error& e) {
    return e.what();
  }
  return "";
}

// decode_linear's tensor-core launch as decode.cu makes it (64 columns a CTA at these widths)
std::string decode_linear(const ml::Args& a) {
  std::string error;
  ml::with_kernel_for<4>(a.K, [&](auto kernel) {
    error = run(kernel.value, dim3((a.N + ml::cols<4>() - 1) / ml::cols<4>(),
                                   (a.R + ml::kRows - 1) / ml::kRows),
                ml::shared_bytes<4>(a.K), a);
  });
  return error;
}

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
    error = run(kernel.value, grid, pf::shared_bytes(C), a);
  });
  // the two launches it replaces
  const ml::Args proj{x1_ref.data(), y.data(), wp.data(), bpp, nullptr, nullptr, x.data(),
                      R, C, C, eps, false};
  const ml::Args fc{h_ref.data(), x1_ref.data(), wf.data(), bfp, lw.data(), lbp, nullptr,
                    R, N, C, eps, true};
  std::string error2 = decode_linear(proj);
  if (error2.empty()) error2 = decode_linear(fc);
  if (error.empty()) error = error2;

  int differ = 0;
  for (size_t i = 0; i < x1.size(); ++i) differ += x1[i] != x1_ref[i];
  for (size_t i = 0; i < h.size(); ++i) differ += h[i] != h_ref[i];
  // h in double from the kernel's own x1 (bf16): LayerNorm, c_fc, GELU
  double worst = 0;
  std::vector<double> row(C);
  for (int r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < C; ++k) mean += (row[k] = from_bf16(x1[size_t(r) * C + k]));
    mean /= C;
    for (double v : row) var += (v - mean) * (v - mean);
    const double rstd = 1.0 / std::sqrt(var / C + eps);
    for (int k = 0; k < C; ++k)
      row[k] = from_bf16(to_bf16(float((row[k] - mean) * rstd * from_bf16(lw[k]) +
                                       (lbp ? from_bf16(lb[k]) : 0.0))));
    for (int n = 0; n < N; ++n) {
      double acc = bfp ? from_bf16(bf[n]) : 0.0;
      for (int k = 0; k < C; ++k) acc += row[k] * from_bf16(wf[size_t(n) * C + k]);
      acc = 0.5 * acc * (1.0 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      const double err =
          std::fabs(from_bf16(h[size_t(r) * N + n]) - acc) / (1e-2 * std::fabs(acc) + 1e-2);
      if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
    }
  }
  const bool ok = error.empty() && differ == 0 && worst <= 1.0;
  std::printf("%s R=%d C=%d N=%d biases=%d ln_bias=%d: %d values differ from decode_linear's "
              "two launches (guards included), worst %.3f of tolerance%s%s\n",
              ok ? "ok  " : "FAIL", R, C, N, c.biases, c.ln_bias, differ, worst,
              error.empty() ? "" : ", ", error.c_str());
  return ok;
}

Case parse(const std::string& s) {
  Case c{};
  char sep;
  int biases, ln_bias;
  std::istringstream in(s);
  in >> c.R >> sep >> c.C >> sep >> c.N >> sep >> biases >> sep >> ln_bias;
  c.biases = biases, c.ln_bias = ln_bias;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  for (int i = 1; i < argc; ++i) cases.push_back(parse(argv[i]));
  if (cases.empty())
    cases = {
        {64, 256, 1024, true, true},   // esp32's window
        {40, 256, 192, false, true},   // row tails, no biases, fewer column tiles
        {17, 128, 512, true, false},   // the other width, one partial row tile
    };
  std::mt19937 rng(std::random_device{}());
  bool all = true;
  for (const Case& c : cases) all = run_case(c, rng) && all;
  return all ? 0 : 1;
}
