// window_attention_check.cpp: runs the slide window's fused c_attn + attention kernel
// (window_attention.cuh) under the warp emulator (emu.h) and compares it, bit for bit, with the
// two kernels it replaces run the same way: decode_linear's tensor-core kernel (decode_mma.cuh)
// for qkv = LN(x) W^T + b, then the attention forward (attention_forward.cuh) over qkv's q, k, v
// views. Also against a double-precision reference within bf16 tolerance, so that the two
// paths cannot agree on a wrong answer. The instance that embeds its input (ids, wte, wpe)
// against the plain one on x = window_embed's rows made here, both y and the x it writes, bit
// for bit. Then the instance with attn.c_proj (a thread-block
// cluster of the sequence's heads; x1 = x + y Wp^T + bp) against decode_linear's kernel run on
// the two kernels' y, bit for bit, where the heads make a portable cluster (nh <= 8). Fresh
// random inputs each run. Built and run by tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/window_attention_check.cpp
//   ./a.out [case ...]
//
// A case is "HS:B:T:C:bias:ln_bias" (flags 0/1), e.g. "32:1:64:256:1:1"; none = the default
// list. One line per case; exits 1 if any is off.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../window_attention.cuh"
#include "bf16_check.h"

namespace {

namespace ml = gs::mma_linear;
namespace wa = gs::window_attn;
using gs::attn::FwdArgs;
using gs::attn::View4;
using namespace bf16_check;

struct Case {
  int hs, B, T, C;
  bool bias, ln_bias;
};

// y in double from qkv's bf16 values (the reference of the attention alone)
std::vector<double> reference_attention(const Case& c, const std::vector<uint16_t>& qkv) {
  const int C = c.C, nh = C / c.hs;
  std::vector<double> y(size_t(c.B) * c.T * C), p(c.T);
  auto at = [&](int b, int t, int col) {
    return from_bf16(qkv[(size_t(b) * c.T + t) * 3 * C + col]);
  };
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < c.T; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < c.hs; ++d)
            dot += at(b, i, h * c.hs + d) * at(b, j, C + h * c.hs + d);
          p[j] = dot / std::sqrt(double(c.hs));
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int d = 0; d < c.hs; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += p[j] * at(b, j, 2 * C + h * c.hs + d);
          y[(size_t(b) * c.T + i) * C + h * c.hs + d] = acc / sum;
        }
      }
  return y;
}

template <int HS> std::string run_fused(const Case& c, const wa::Args& a) {
  std::string error;
  wa::with_kernel_for<HS>(c.C, [&](auto kernel) {
    error = launch(kernel.value, dim3(c.C / HS, c.B), dim3(wa::kThreads),
                   wa::shared_bytes(HS, false, c.C), a);
  });
  return error;
}

template <int HS> std::string run_fused_embed(const Case& c, const wa::Args& a) {
  std::string error;
  wa::with_kernel_for<HS, false, true>(c.C, [&](auto kernel) {
    error = launch(kernel.value, dim3(c.C / HS, c.B), dim3(wa::kThreads),
                   wa::shared_bytes(HS, false, c.C), a);
  });
  return error;
}

// The embedded instance: window ids (B, T) and tokens (B,) drawn from a vocabulary of 50, x's
// rows bf16(wte[id] + wpe[t]) (window_embed's formula) made here; y and x from the one launch
// against the plain kernel's y from those rows, bit for bit
bool run_embed(const Case& c, const wa::Args& plain_args, std::mt19937& rng) {
  const int C = c.C, R = c.B * c.T, vocab = 50;
  auto wte = random_bf16(rng, size_t(vocab) * C, 1.0f);
  auto wpe = random_bf16(rng, size_t(c.T) * C, 1.0f);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int64_t> window(size_t(c.B) * c.T), token(c.B);
  for (auto& id : window) id = pick(rng);
  for (auto& id : token) id = pick(rng);
  std::vector<uint16_t> x(size_t(R) * C);
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t) {
      const int64_t id = t < c.T - 1 ? window[size_t(b) * c.T + t + 1] : token[b];
      for (int k = 0; k < C; ++k)
        x[(size_t(b) * c.T + t) * C + k] =
            to_bf16(from_bf16(wte[id * C + k]) + from_bf16(wpe[size_t(t) * C + k]));
    }
  std::vector<uint16_t> y(size_t(R) * C + 1, 0x7fc1), y_embed(y), x_out(y);
  wa::Args a = plain_args;
  a.y = y.data(), a.x = x.data();
  std::string error = c.hs == 32 ? run_fused<32>(c, a) : run_fused<64>(c, a);
  a.y = y_embed.data(), a.x = nullptr, a.x_out = x_out.data();
  a.window = window.data(), a.token = token.data(), a.wte = wte.data(), a.wpe = wpe.data();
  a.vocab = vocab;
  const std::string error2 = c.hs == 32 ? run_fused_embed<32>(c, a) : run_fused_embed<64>(c, a);
  if (error.empty()) error = error2;
  int differ = 0, x_differ = 0;
  for (size_t i = 0; i < size_t(R) * C; ++i) {
    differ += y[i] != y_embed[i];
    x_differ += x[i] != x_out[i];
  }
  const bool guard = y_embed.back() == 0x7fc1 && x_out.back() == 0x7fc1;
  const bool ok = error.empty() && differ == 0 && x_differ == 0 && guard;
  std::printf("%s   embedded: %d of %d values of y and %d of x differ from window_embed's rows "
              "through the plain kernel%s%s%s\n",
              ok ? "ok  " : "FAIL", differ, R * C, x_differ, guard ? "" : ", wrote past the end",
              error.empty() ? "" : ", ", error.c_str());
  return ok;
}

template <int HS> std::string run_fused_proj(const Case& c, const wa::Args& a) {
  std::string error;
  const int nh = c.C / HS;
  wa::with_kernel_for<HS, true>(c.C, [&](auto kernel) {
    error = launch_clusters(nh, kernel.value, dim3(nh, c.B), dim3(wa::kThreads),
                            wa::shared_bytes(HS, true, c.C), a);
  });
  return error;
}

// the two kernels the window ran before, as decode.cu and attention_cuda.cu launch them
template <int HS>
std::string run_two_kernels(const Case& c, const ml::Args& la, const FwdArgs& fa) {
  const std::string error = decode_linear_mma(la, 4);
  if (!error.empty()) return error;
  using F = gs::attn::FwdConfig<HS, 4>;
  return launch(gs::attn::attention_forward_mma_kernel<HS, 4, false>,
                dim3((c.T + F::kRows - 1) / F::kRows, c.B * (c.C / HS)), dim3(F::kThreads),
                F::kSmemBytes, fa);
}

bool run_case(const Case& c, std::mt19937& rng) {
  const int C = c.C, R = c.B * c.T, nh = C / c.hs;
  const float eps = 1e-5f, scale_log2 = gs::attn::kLog2e / std::sqrt(float(c.hs));
  auto x = random_bf16(rng, size_t(R) * C, 2.0f);
  auto w = random_bf16(rng, size_t(3) * C * C, 1.0f / std::sqrt(float(C)));
  auto b = random_bf16(rng, 3 * C, 0.5f), lw = random_bf16(rng, C, 1.0f);
  auto lb = random_bf16(rng, C, 0.5f);
  // a guard element past the end of each output: a store out of bounds changes it
  std::vector<uint16_t> y(size_t(R) * C + 1, 0x7fc1), y2(y), qkv(size_t(R) * 3 * C + 1, 0x7fc1);
  std::vector<float> lse(size_t(c.B) * nh * c.T);
  const uint16_t* bias = c.bias ? b.data() : nullptr;
  const uint16_t* ln_b = c.ln_bias ? lb.data() : nullptr;

  const wa::Args a{y.data(), x.data(), w.data(), bias, lw.data(), ln_b, c.T, C, eps, scale_log2};
  std::string error = c.hs == 32 ? run_fused<32>(c, a) : run_fused<64>(c, a);

  const ml::Args la{qkv.data(), x.data(), w.data(), bias, lw.data(), ln_b, nullptr,
                    R, 3 * C, C, eps, false};
  const int64_t st = 3 * C, sh = c.hs, sb = int64_t(c.T) * 3 * C;  // q, k, v views of qkv
  const FwdArgs fa{View4<const uint16_t>{qkv.data(), sb, sh, st},
                   View4<const uint16_t>{qkv.data() + C, sb, sh, st},
                   View4<const uint16_t>{qkv.data() + 2 * C, sb, sh, st},
                   View4<uint16_t>{y2.data(), int64_t(c.T) * C, c.hs, C},
                   lse.data(), nh, c.T, scale_log2, 0u, 1.0f, nullptr};
  const std::string error2 = c.hs == 32 ? run_two_kernels<32>(c, la, fa)
                                        : run_two_kernels<64>(c, la, fa);
  if (error.empty()) error = error2;

  int differ = 0;
  for (size_t i = 0; i < size_t(R) * C; ++i) differ += y[i] != y2[i];
  const auto ref = reference_attention(c, qkv);
  Worst worst;
  for (size_t i = 0; i < ref.size(); ++i) worst.add(from_bf16(y[i]), ref[i]);
  bool guard = y.back() == 0x7fc1 && y2.back() == 0x7fc1 && qkv.back() == 0x7fc1;
  bool ok = error.empty() && differ == 0 && worst.value <= 1.0 && guard;
  std::printf("%s hs=%d B=%d T=%d C=%d bias=%d ln_bias=%d: %d of %d values differ from the two "
              "kernels, worst %.3f of tolerance%s%s%s\n",
              ok ? "ok  " : "FAIL", c.hs, c.B, c.T, C, c.bias, c.ln_bias, differ, R * C,
              worst.value,
              guard ? "" : ", wrote past the end", error.empty() ? "" : ", ", error.c_str());
  ok = run_embed(c, a, rng) && ok;
  if (nh > 8) return ok;

  // with c_proj: x1 against decode_linear(y2, Wp, bp, residual = x), and x1 from y2 in double
  auto wp = random_bf16(rng, size_t(C) * C, 1.0f / std::sqrt(float(C)));
  auto bp = random_bf16(rng, C, 0.5f);
  const uint16_t* proj_bias = c.bias ? bp.data() : nullptr;
  std::vector<uint16_t> x1(size_t(R) * C + 1, 0x7fc1), x1_ref(x1);
  wa::Args pa = a;
  pa.y = x1.data(), pa.wp = wp.data(), pa.bp = proj_bias;
  std::string perror = c.hs == 32 ? run_fused_proj<32>(c, pa) : run_fused_proj<64>(c, pa);
  const ml::Args proj{x1_ref.data(), y2.data(), wp.data(), proj_bias, nullptr, nullptr, x.data(),
                      R, C, C, eps, false};
  const std::string perror2 = decode_linear_mma(proj, 4);
  if (perror.empty()) perror = perror2;
  const auto pref = decode_linear_reference(y2.data(), R, C, wp.data(), C, proj_bias, nullptr,
                                            nullptr, x.data(), false, eps);
  int pdiffer = 0;
  Worst pworst;
  for (size_t i = 0; i < pref.size(); ++i) {
    pdiffer += x1[i] != x1_ref[i];
    pworst.add(from_bf16(x1[i]), pref[i]);
  }
  guard = x1.back() == 0x7fc1 && x1_ref.back() == 0x7fc1;
  const bool pok = perror.empty() && pdiffer == 0 && pworst.value <= 1.0 && guard;
  std::printf("%s   with c_proj: %d of %d values differ from decode_linear's, worst %.3f of "
              "tolerance%s%s%s\n",
              pok ? "ok  " : "FAIL", pdiffer, R * C, pworst.value,
              guard ? "" : ", wrote past the end", perror.empty() ? "" : ", ", perror.c_str());
  return ok && pok;
}

Case parse(const std::vector<int>& f) {
  return {f.at(0), f.at(1), f.at(2), f.at(3), f.at(4) != 0, f.at(5) != 0};
}

}  // namespace

int main(int argc, char** argv) {
  return run_cases<Case>(
      argc, argv,
      {
          {32, 1, 64, 256, true, true},   // esp32's window: the fixed-width instance
          {32, 2, 64, 256, false, true},  // two sequences, no bias
          {32, 1, 40, 128, true, false},  // the generic kernel, a partial window
          {64, 1, 64, 128, true, true},   // head size 64
          {64, 2, 17, 192, false, false}, // rows past T in both tiles; ln without a bias
          {32, 1, 1, 64, true, true},     // one row
      },
      parse, run_case);
}
