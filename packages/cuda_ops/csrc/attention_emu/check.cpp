// check.cpp: runs the CUDA attention kernels under the warp emulator (emu.h) and compares them
// with the CPU implementation (attention_cpu.cpp) on fresh random inputs. No GPU needed: this is
// how the kernels' fragment layouts, masking, dropout stream, tails and shared-memory protocol
// are tested in CI. Built and run by tests/test_attention.py (test_kernels_under_emulator):
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/check.cpp
//       csrc/attention_cpu.cpp -o check && ./check [case ...]
//
// A case is "kind:hs:warps:T:dropout:layout", e.g. "bwd:64:4:130:1:packed"; none = the default
// list. Prints one line per case and exits 1 if any is off (tolerances: MEASURING.md rule 5).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../attention.h"
#include "../attention_backward.cuh"
#include "../attention_forward.cuh"
#include "../attention_simt.cuh"

using namespace gs;
using namespace gs::attn;

namespace {

struct Case {
  std::string kind;  // fwd | bwd (two-stage backward) | atm (atomic-dQ backward) | f32
  int hs, warps, T;
  bool dropout;
  bool packed;  // q, k, v as views into one (B, T, 3C) buffer, like the model's c_attn output
};

constexpr int kB = 1, kNh = 2;  // two heads: the head index enters strides and the RNG
constexpr double kBf16Tol = 1e-2, kF32Tol = 1e-5;
constexpr int64_t kSeed = 0x1234abcd5678ef01LL;
constexpr double kDropP = 0.25;

float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// q, k, v (or any three (B, nh, T, hs) operands) in one buffer, contiguous or packed.
struct Operands {
  std::vector<float> buf;
  View4<const float> v[3];
  Operands(const Case& c, std::mt19937& rng) {
    const int64_t C = int64_t(kNh) * c.hs, T = c.T;
    buf.resize(3 * kB * T * C);
    std::normal_distribution<float> n01;
    for (float& x : buf) x = round_bf16(n01(rng));
    for (int i = 0; i < 3; ++i)
      v[i] = c.packed ? View4<const float>{buf.data() + i * C, T * 3 * C, c.hs, 3 * C}
                      : View4<const float>{buf.data() + i * kB * T * C, T * C, T * c.hs, c.hs};
  }
};

// A (B, T, nh, hs) output buffer (the layout the op returns) and its view.
struct Out {
  std::vector<float> f;
  std::vector<uint16_t> h;
  int64_t sb, sh, st;
  explicit Out(const Case& c) : f(kB * c.T * kNh * c.hs), h(f.size()) {
    st = int64_t(kNh) * c.hs;
    sh = c.hs;
    sb = c.T * st;
  }
  View4<float> vf() { return {f.data(), sb, sh, st}; }
  View4<uint16_t> vh() { return {h.data(), sb, sh, st}; }
  std::vector<float> from_bits() const {
    std::vector<float> r(h.size());
    for (size_t i = 0; i < h.size(); ++i) r[i] = bf16_to_float(bf16_t{h[i]});
    return r;
  }
};

// bf16 copy of a float buffer and views with the same strides into it.
struct Bits {
  std::vector<uint16_t> h;
  explicit Bits(const std::vector<float>& f) : h(f.size()) {
    for (size_t i = 0; i < f.size(); ++i) h[i] = float_to_bf16(f[i]).bits;
  }
  View4<const uint16_t> view(const std::vector<float>& f, View4<const float> v) const {
    return {h.data() + (v.p - f.data()), v.sb, v.sh, v.st};
  }
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

DropoutSpec drop_spec(const Case& c) {
  DropoutSpec d;
  if (c.dropout) {
    d.threshold = dropout_threshold(kDropP);
    d.scale = 65536.0 / (65536.0 - d.threshold);
    d.key0 = uint32_t(uint64_t(kSeed));
    d.key1 = uint32_t(uint64_t(kSeed) >> 32);
  }
  return d;
}

template <int HS, int NW, bool kDrop> bool run_mma(const Case& c, std::mt19937& rng) {
  const Dims d{kB, kNh, c.T, HS};
  const DropoutSpec drop = drop_spec(c);
  Operands in(c, rng), grad(c, rng);  // grad.v[0]: dY (the other two unused)
  Bits in_h(in.buf), grad_h(grad.buf);
  // reference forward in fp32 on the same bf16 values
  Out y_ref(c);
  std::vector<float> lse_ref(kB * kNh * c.T);
  forward_cpu<float>(d, in.v[0], in.v[1], in.v[2], y_ref.vf(), lse_ref.data(), drop, false, 1);
  // kernel forward
  Out y(c);
  std::vector<float> lse(lse_ref.size(), NAN);
  FwdArgs fa{in_h.view(in.buf, in.v[0]), in_h.view(in.buf, in.v[1]), in_h.view(in.buf, in.v[2]),
             y.vh(), lse.data(), kNh, c.T, kLog2e / std::sqrt(float(HS)), drop.threshold,
             static_cast<float>(drop.scale), &kSeed};
  using F = FwdConfig<HS, NW>;
  emu::launch(attention_forward_mma_kernel<HS, NW, kDrop>,
              dim3((c.T + F::kRows - 1) / F::kRows, kB * kNh), dim3(F::kThreads), F::kSmemBytes,
              fa);
  const std::vector<float> yk = y.from_bits();
  double e_y = rel_err(yk, y_ref.f), e_lse = rel_err(lse, lse_ref);
  bool ok = e_y < kBf16Tol && e_lse < 1e-5;
  std::printf("%s hs=%d warps=%d T=%d dropout=%d %s: y %.2e lse %.2e", c.kind.c_str(), HS, NW,
              c.T, c.dropout, c.packed ? "packed" : "contig", e_y, e_lse);
  if (c.kind == "bwd" || c.kind == "atm") {
    const bool atomic = c.kind == "atm";
    // reference backward from the kernel's own y (bf16) and the reference lse
    Out yk_f(c);
    yk_f.f = yk;
    View4<const float> yv{yk_f.f.data(), yk_f.sb, yk_f.sh, yk_f.st};
    Out dq_r(c), dk_r(c), dv_r(c);
    backward_cpu<float>(d, grad.v[0], in.v[0], in.v[1], in.v[2], yv, lse_ref.data(), dq_r.vf(),
                        dk_r.vf(), dv_r.vf(), drop, false, 1);
    Out dq(c), dk(c), dv(c);
    BwdArgs ba{grad_h.view(grad.buf, grad.v[0]), fa.q, fa.k, fa.v,
               {y.h.data(), y.sb, y.sh, y.st}, lse.data(), dq.vh(), dk.vh(), dv.vh(), kNh, c.T,
               1.0f / std::sqrt(float(HS)), kLog2e / std::sqrt(float(HS)), drop.threshold,
               static_cast<float>(drop.scale), &kSeed, nullptr};
    using Bc = BwdConfig<HS, NW>;
    const dim3 grid((c.T + Bc::kRows - 1) / Bc::kRows, kB * kNh, atomic ? 1 : 2);
    std::vector<float> dq_accum;
    if (!atomic) {
      emu::launch(attention_backward_mma_kernel<HS, NW, kDrop, false>, grid, dim3(Bc::kThreads),
                  Bc::kSmemBytes, ba);
    } else {  // as launch_backward: zeroed buffer, key CTAs, conversion
      dq_accum.assign(size_t(kB) * kNh * c.T * HS, 0.0f);
      ba.dq_accum = dq_accum.data();
      emu::launch(attention_backward_mma_kernel<HS, NW, kDrop, true>, grid, dim3(Bc::kThreads),
                  Bc::kSmemAtomic, ba);
      const int64_t n8 = int64_t(dq_accum.size()) / 8;
      emu::launch(attention_dq_convert_kernel, dim3(unsigned((n8 + 127) / 128)), dim3(128), 0,
                  dq_accum.data(), ba.dq, kNh, c.T, HS, ba.scale, n8);
    }
    const double e_q = rel_err(dq.from_bits(), dq_r.f), e_k = rel_err(dk.from_bits(), dk_r.f),
                 e_v = rel_err(dv.from_bits(), dv_r.f);
    std::printf(" | dq %.2e dk %.2e dv %.2e", e_q, e_k, e_v);
    ok = ok && e_q < kBf16Tol && e_k < kBf16Tol && e_v < kBf16Tol;
  }
  std::printf("  %s\n", ok ? "ok" : "FAIL");
  return ok;
}

bool run_f32(const Case& c, std::mt19937& rng) {
  const Dims d{kB, kNh, c.T, c.hs};
  const DropoutSpec drop = drop_spec(c);
  Operands in(c, rng), grad(c, rng);
  Out y_ref(c), y(c);
  std::vector<float> lse_ref(kB * kNh * c.T), lse(lse_ref.size(), NAN);
  forward_cpu<float>(d, in.v[0], in.v[1], in.v[2], y_ref.vf(), lse_ref.data(), drop, false, 1);
  SimtArgs a{};
  a.q = in.v[0];
  a.k = in.v[1];
  a.v = in.v[2];
  a.out = y.vf();
  a.lse = lse.data();
  a.nh = kNh;
  a.T = c.T;
  a.hs = c.hs;
  a.scale = 1.0f / std::sqrt(float(c.hs));
  a.threshold = drop.threshold;
  a.drop_scale = static_cast<float>(drop.scale);
  a.seed = &kSeed;
  const dim3 grid((c.T + kSimtWarps - 1) / kSimtWarps, kB * kNh);
  emu::launch(attention_forward_simt_kernel, grid, dim3(32 * kSimtWarps), 0, a);
  Out dq_r(c), dk_r(c), dv_r(c), dq(c), dk(c), dv(c);
  View4<const float> yv{y.f.data(), y.sb, y.sh, y.st};
  backward_cpu<float>(d, grad.v[0], in.v[0], in.v[1], in.v[2], yv, lse_ref.data(), dq_r.vf(),
                      dk_r.vf(), dv_r.vf(), drop, false, 1);
  a.dy = grad.v[0];
  a.y = yv;
  a.dq = dq.vf();
  a.dk = dk.vf();
  a.dv = dv.vf();
  emu::launch(attention_backward_simt_kernel, dim3(grid.x, grid.y, 2), dim3(32 * kSimtWarps), 0,
              a);
  const double e[5] = {rel_err(y.f, y_ref.f), rel_err(lse, lse_ref), rel_err(dq.f, dq_r.f),
                       rel_err(dk.f, dk_r.f), rel_err(dv.f, dv_r.f)};
  bool ok = true;
  for (double x : e) ok = ok && x < kF32Tol;
  std::printf("f32 hs=%d T=%d dropout=%d %s: y %.2e lse %.2e | dq %.2e dk %.2e dv %.2e  %s\n",
              c.hs, c.T, c.dropout, c.packed ? "packed" : "contig", e[0], e[1], e[2], e[3], e[4],
              ok ? "ok" : "FAIL");
  return ok;
}

template <int HS> bool run_hs(const Case& c, std::mt19937& rng) {
  if (c.warps == 8) return c.dropout ? run_mma<HS, 8, true>(c, rng) : run_mma<HS, 8, false>(c, rng);
  return c.dropout ? run_mma<HS, 4, true>(c, rng) : run_mma<HS, 4, false>(c, rng);
}

bool run(const Case& c, std::mt19937& rng) {
  if (c.kind == "f32") return run_f32(c, rng);
  switch (c.hs) {
    case 32: return run_hs<32>(c, rng);
    case 64: return run_hs<64>(c, rng);
    case 128: return run_hs<128>(c, rng);
  }
  std::printf("bad head size %d\n", c.hs);
  return false;
}

Case parse(const std::string& s) {
  Case c;
  std::stringstream in(s);
  std::string f[6];
  for (auto& x : f) std::getline(in, x, ':');
  c.kind = f[0];
  c.hs = std::atoi(f[1].c_str());
  c.warps = std::atoi(f[2].c_str());
  c.T = std::atoi(f[3].c_str());
  c.dropout = f[4] == "1";
  c.packed = f[5] == "packed";
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty())
    cases = {"bwd:32:4:64:0:packed",  "bwd:32:4:1:0:contig",   "bwd:32:4:37:1:packed",
             "bwd:64:4:130:0:packed", "bwd:64:4:130:1:contig", "bwd:64:8:200:1:packed",
             "bwd:128:4:70:1:packed", "bwd:128:8:33:0:contig", "bwd:32:8:129:0:contig",
             "atm:32:4:64:1:packed",  "atm:64:4:150:0:contig", "atm:64:8:200:1:packed",
             "atm:128:4:70:1:contig", "atm:128:8:45:0:packed", "atm:32:8:7:0:contig",
             "f32:32:4:45:1:packed",  "f32:64:4:20:0:contig",  "f32:128:4:9:1:contig"};
  std::mt19937 rng(2024);
  bool ok = true;
  for (const std::string& s : cases) {
    try {
      ok = run(parse(s), rng) && ok;
    } catch (const std::exception& e) {
      std::printf("%s: %s  FAIL\n", s.c_str(), e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
