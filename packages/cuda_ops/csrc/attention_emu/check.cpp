// check.cpp: runs the CUDA attention kernels under the warp emulator (emu.h) and compares them
// with the CPU implementation (attention_cpu.cpp) on fresh random inputs. No GPU needed: this is
// how the kernels' fragment layouts, masking, dropout stream, tails and shared-memory protocol
// are tested in CI. The bf16 cases go through the real launchers (attention_cuda.cu, compiled as
// C++ against the emulated runtime of runtime.h), so launch configurations are checked too.
// Built and run by tests/test_attention.py (test_kernels_under_emulator):
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/check.cpp
//       csrc/attention_cpu.cpp csrc/attention_cpu_avx2.cpp -x c++ csrc/attention_cuda.cu -o check
//   ./check [case ...]
//
// A case is "kind:hs:warps:T:dropout:layout", e.g. "bwd:64:4:130:1:packed" ("wgf": the wgmma
// forward of attention_forward_wgmma.cuh, warps = its warpgroups, 1 or 2), or "limits" (the
// emulated launch rules and the launchers' error for a configuration that cannot fit), or "all"
// (every configuration the dispatcher can launch: head size x warps x dropout x forward /
// two-stage / atomic backward, launch checks only, one line each with its shared memory);
// none = the default list, then "limits" and "all". Prints one line per case and exits 1 if
// any is off (tolerances: docs/MEASURING.md rule 5).
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
#include "../attention_backward_wgmma.cuh"
#include "../attention_forward_wgmma.cuh"
#include "../attention_simt.cuh"
#include "runtime.h"

using namespace gs;
using namespace gs::attn;

namespace {

struct Case {
  // fwd | bwd (two-stage backward) | atm (atomic-dQ backward) | f32 | wgf (the wgmma forward,
  // attention_forward_wgmma.cuh, launched directly: warps = its warpgroups) | wgb (wgf, then
  // the D pre-pass and the wgmma backward, attention_backward_wgmma.cuh) | wsf, wsb (the same
  // with 128-byte swizzled tiles: hs 64, one warpgroup)
  std::string kind;
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

View4<const bf16_t> as_bf16(View4<const uint16_t> v) {
  return {reinterpret_cast<const bf16_t*>(v.p), v.sb, v.sh, v.st};
}
View4<bf16_t> as_bf16(View4<uint16_t> v) {
  return {reinterpret_cast<bf16_t*>(v.p), v.sb, v.sh, v.st};
}

CudaLaunch launch_of(const DropoutSpec& drop, int warps) {
  CudaLaunch l;
  l.threshold = drop.threshold;
  l.drop_scale = static_cast<float>(drop.scale);
  l.seed = &kSeed;
  l.warps = warps;
  return l;
}

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

// dq, dk, dv of a kernel's backward (run(dq, dk, dv) fills them) against the CPU's, computed
// from the kernel's own forward output yk (bf16) and the reference lse; prints the errors.
template <typename Run>
bool backward_matches(const Case& c, const Operands& in, const Operands& grad,
                      const std::vector<float>& yk, const std::vector<float>& lse_ref, Run run) {
  const Dims d{kB, kNh, c.T, c.hs};
  Out yk_f(c);
  yk_f.f = yk;
  const View4<const float> yv{yk_f.f.data(), yk_f.sb, yk_f.sh, yk_f.st};
  Out dq_r(c), dk_r(c), dv_r(c), dq(c), dk(c), dv(c);
  backward_cpu<float>(d, grad.v[0], in.v[0], in.v[1], in.v[2], yv, lse_ref.data(), dq_r.vf(),
                      dk_r.vf(), dv_r.vf(), drop_spec(c), false, 1);
  run(dq, dk, dv);
  const double e_q = rel_err(dq.from_bits(), dq_r.f), e_k = rel_err(dk.from_bits(), dk_r.f),
               e_v = rel_err(dv.from_bits(), dv_r.f);
  std::printf(" | dq %.2e dk %.2e dv %.2e", e_q, e_k, e_v);
  return e_q < kBf16Tol && e_k < kBf16Tol && e_v < kBf16Tol;
}

bool run_bf16(const Case& c, std::mt19937& rng) {
  const Dims d{kB, kNh, c.T, c.hs};
  const DropoutSpec drop = drop_spec(c);
  Operands in(c, rng), grad(c, rng);  // grad.v[0]: dY (the other two unused)
  Bits in_h(in.buf), grad_h(grad.buf);
  // reference forward in fp32 on the same bf16 values
  Out y_ref(c);
  std::vector<float> lse_ref(kB * kNh * c.T);
  forward_cpu<float>(d, in.v[0], in.v[1], in.v[2], y_ref.vf(), lse_ref.data(), drop, false, 1);
  // kernel forward, through the launcher
  Out y(c);
  std::vector<float> lse(lse_ref.size(), NAN);
  const View4<const uint16_t> qh = in_h.view(in.buf, in.v[0]), kh = in_h.view(in.buf, in.v[1]),
                              vh = in_h.view(in.buf, in.v[2]);
  forward_cuda_bf16(d, as_bf16(qh), as_bf16(kh), as_bf16(vh), as_bf16(y.vh()), lse.data(),
                    launch_of(drop, c.warps));
  const std::vector<float> yk = y.from_bits();
  double e_y = rel_err(yk, y_ref.f), e_lse = rel_err(lse, lse_ref);
  bool ok = e_y < kBf16Tol && e_lse < 1e-5;
  std::printf("%s hs=%d warps=%d T=%d dropout=%d %s: y %.2e lse %.2e", c.kind.c_str(), c.hs,
              c.warps,
              c.T, c.dropout, c.packed ? "packed" : "contig", e_y, e_lse);
  if (c.kind == "bwd" || c.kind == "atm") {
    const bool atomic = c.kind == "atm";
    std::vector<float> dq_accum;  // the atomic mode's scratch; empty: two stages
    if (atomic) dq_accum.assign(size_t(kB) * kNh * c.T * c.hs, 0.0f);
    if (c.warps == kWgmma) dq_accum.assign(size_t(kB) * kNh * c.T, 0.0f);  // D rows
    ok = backward_matches(c, in, grad, yk, lse_ref, [&](Out& dq, Out& dk, Out& dv) {
           backward_cuda_bf16(
               d, as_bf16(grad_h.view(grad.buf, grad.v[0])), as_bf16(qh), as_bf16(kh),
               as_bf16(vh), as_bf16(View4<const uint16_t>{y.h.data(), y.sb, y.sh, y.st}),
               lse.data(), as_bf16(dq.vh()), as_bf16(dk.vh()), as_bf16(dv.vh()),
               dq_accum.empty() ? nullptr : dq_accum.data(), launch_of(drop, c.warps));
         }) && ok;
  }
  std::printf("  %s\n", ok ? "ok" : "FAIL");
  return ok;
}

// The wgmma kernels launched directly (configurations beyond the launchers' one-warpgroup
// instances: two warpgroups, either tile layout at hs=64) against the CPU reference: the
// forward's y and lse; with the backward, dq, dk, dv from the kernel's own y.
template <typename K, typename A>
void launch_opted_in(K kernel, dim3 grid, int threads, int smem, const char* what, A args) {
  cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  emu::launch_checked(kernel, grid, dim3(threads), smem, args);
  if (cudaGetLastError() != cudaSuccess) throw std::runtime_error(std::string(what) + ": refused");
}
template <int HS, int NWG, bool kDrop, bool kSw = false>
void launch_wgmma(const FwdArgs& f, const BwdArgs* g, int B, int nh, int T) {
  using F = WgmmaFwdConfig<HS, NWG, 64, kSw>;
  using G = WgmmaBwdConfig<HS, NWG, kSw>;
  const unsigned bh = static_cast<unsigned>(B * nh);
  if (!g) {
    launch_opted_in(attention_forward_wgmma_kernel<HS, NWG, kDrop, 64, true, kSw>,
                    dim3((T + F::kRows - 1) / F::kRows, bh), F::kThreads, F::kSmemBytes,
                    "wgmma forward", f);
    return;
  }
  const int64_t rows = int64_t(B) * nh * T;
  emu::launch_checked(attention_d_rows_kernel, dim3(static_cast<unsigned>((rows * 8 + 255) / 256)),
                      dim3(256), 0, g->dy, g->y, const_cast<float*>(g->d_rows), nh, T, HS, rows);
  launch_opted_in(attention_backward_wgmma_kernel<HS, NWG, kDrop, 0, true, kSw>,
                  dim3((T + G::kRows - 1) / G::kRows, bh, 2), G::kThreads, G::kSmemBytes,
                  "wgmma backward", *g);
}
template <int HS, int NWG>
void launch_wgmma(const FwdArgs& f, const BwdArgs* g, bool drop, int B, int nh, int T) {
  if (drop)
    launch_wgmma<HS, NWG, true>(f, g, B, nh, T);
  else
    launch_wgmma<HS, NWG, false>(f, g, B, nh, T);
}
void launch_wgmma(int hs, int nwg, const FwdArgs& f, const BwdArgs* g, bool drop, int B, int nh,
                  int T, bool swizzled) {
  if (swizzled) {  // hs = 64, one warpgroup
    drop ? launch_wgmma<64, 1, true, true>(f, g, B, nh, T)
         : launch_wgmma<64, 1, false, true>(f, g, B, nh, T);
    return;
  }
  if (hs == 32)
    nwg == 2 ? launch_wgmma<32, 2>(f, g, drop, B, nh, T) : launch_wgmma<32, 1>(f, g, drop, B, nh, T);
  else if (hs == 64)
    nwg == 2 ? launch_wgmma<64, 2>(f, g, drop, B, nh, T) : launch_wgmma<64, 1>(f, g, drop, B, nh, T);
  else
    nwg == 2 ? launch_wgmma<128, 2>(f, g, drop, B, nh, T)
             : launch_wgmma<128, 1>(f, g, drop, B, nh, T);
}

bool run_wgmma(const Case& c, std::mt19937& rng) {
  const Dims d{kB, kNh, c.T, c.hs};
  const DropoutSpec drop = drop_spec(c);
  Operands in(c, rng), grad(c, rng);  // grad.v[0]: dY
  Bits in_h(in.buf), grad_h(grad.buf);
  Out y_ref(c), y(c);
  std::vector<float> lse_ref(kB * kNh * c.T), lse(lse_ref.size(), NAN);
  forward_cpu<float>(d, in.v[0], in.v[1], in.v[2], y_ref.vf(), lse_ref.data(), drop, false, 1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hs));
  const FwdArgs f{in_h.view(in.buf, in.v[0]), in_h.view(in.buf, in.v[1]),
                  in_h.view(in.buf, in.v[2]), y.vh(), lse.data(), kNh, c.T, scale * kLog2e,
                  drop.threshold, static_cast<float>(drop.scale), &kSeed};
  const bool swizzled = c.kind[1] == 's';  // wsf, wsb
  launch_wgmma(c.hs, c.warps, f, nullptr, c.dropout, kB, kNh, c.T, swizzled);
  const std::vector<float> yk = y.from_bits();
  const double e_y = rel_err(yk, y_ref.f), e_lse = rel_err(lse, lse_ref);
  bool ok = e_y < kBf16Tol && e_lse < 1e-5;
  std::printf("%s hs=%d warpgroups=%d T=%d dropout=%d %s: y %.2e lse %.2e", c.kind.c_str(), c.hs,
              c.warps, c.T, c.dropout, c.packed ? "packed" : "contig", e_y, e_lse);
  if (c.kind == "wgb" || c.kind == "wsb") {
    std::vector<float> d_rows(lse.size(), NAN);
    ok = backward_matches(c, in, grad, yk, lse_ref, [&](Out& dq, Out& dk, Out& dv) {
           const BwdArgs g{grad_h.view(grad.buf, grad.v[0]), f.q, f.k, f.v,
                           View4<const uint16_t>{y.h.data(), y.sb, y.sh, y.st}, lse.data(),
                           dq.vh(), dk.vh(), dv.vh(), kNh, c.T, scale, scale * kLog2e,
                           drop.threshold, static_cast<float>(drop.scale), &kSeed, nullptr,
                           d_rows.data()};
           launch_wgmma(c.hs, c.warps, f, &g, c.dropout, kB, kNh, c.T, swizzled);
         }) && ok;
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
  forward_cuda_f32(d, in.v[0], in.v[1], in.v[2], y.vf(), lse.data(), launch_of(drop, 0));
  Out dq_r(c), dk_r(c), dv_r(c), dq(c), dk(c), dv(c);
  View4<const float> yv{y.f.data(), y.sb, y.sh, y.st};
  backward_cpu<float>(d, grad.v[0], in.v[0], in.v[1], in.v[2], yv, lse_ref.data(), dq_r.vf(),
                      dk_r.vf(), dv_r.vf(), drop, false, 1);
  backward_cuda_f32(d, grad.v[0], in.v[0], in.v[1], in.v[2], yv, lse.data(), dq.vf(), dk.vf(),
                    dv.vf(), launch_of(drop, 0));
  const double e[5] = {rel_err(y.f, y_ref.f), rel_err(lse, lse_ref), rel_err(dq.f, dq_r.f),
                       rel_err(dk.f, dk_r.f), rel_err(dv.f, dv_r.f)};
  bool ok = true;
  for (double x : e) ok = ok && x < kF32Tol;
  std::printf("f32 hs=%d T=%d dropout=%d %s: y %.2e lse %.2e | dq %.2e dk %.2e dv %.2e  %s\n",
              c.hs, c.T, c.dropout, c.packed ? "packed" : "contig", e[0], e[1], e[2], e[3], e[4],
              ok ? "ok" : "FAIL");
  return ok;
}

// Shared memory of the bf16 instance (attention_forward.cuh, attention_backward.cuh).
template <int HS, int NW> int smem_bytes(const std::string& kind) {
  if (kind == "fwd") return FwdConfig<HS, NW>::kSmemBytes;
  return kind == "atm" ? BwdConfig<HS, NW>::kSmemAtomic : BwdConfig<HS, NW>::kSmemBytes;
}
template <int HS> int smem_bytes(int warps, const std::string& kind) {
  return warps == 8 ? smem_bytes<HS, 8>(kind) : smem_bytes<HS, 4>(kind);
}
int smem_bytes(int hs, int warps, const std::string& kind) {
  return hs == 32 ? smem_bytes<32>(warps, kind)
                  : hs == 64 ? smem_bytes<64>(warps, kind) : smem_bytes<128>(warps, kind);
}

// Shared memory of the one-warpgroup wgmma instances the launchers build (attention_*_wgmma.cuh)
template <int HS> int wgmma_smem_bytes(bool forward) {
  constexpr bool kSw = kLauncherSwizzle<HS>;
  return forward ? WgmmaFwdConfig<HS, 1, 64, kSw>::kSmemBytes
                 : WgmmaBwdConfig<HS, 1, kSw>::kSmemBytes;
}
int wgmma_smem_bytes(int hs, bool forward) {
  return hs == 32 ? wgmma_smem_bytes<32>(forward)
                  : hs == 64 ? wgmma_smem_bytes<64>(forward) : wgmma_smem_bytes<128>(forward);
}

// Case "all": every configuration the dispatcher can launch, through the launchers with the
// emulated launch checks only (the kernels do not run), in one process, so that one instance's
// state cannot stand in for another's (the H200's first run failed exactly so). One line each.
bool run_all_configs() {
  emu::g_launch_only = true;
  bool all_ok = true;
  for (int hs : {32, 64, 128})
    for (int warps : {4, 8})
      for (int drop : {0, 1})
        for (const char* kind : {"fwd", "bwd", "atm"}) {
          const Case c{kind, hs, warps, 130, drop == 1, true};
          const Dims d{3, 5, c.T, hs};
          const DropoutSpec spec = drop_spec(c);
          // pointers are never dereferenced: the launches are only checked
          const View4<const bf16_t> in{nullptr, 0, 0, 0};
          const View4<bf16_t> out{nullptr, 0, 0, 0};
          float dummy = 0.0f;
          const long before = emu::g_launches;
          std::string error;
          try {
            if (c.kind == "fwd")
              forward_cuda_bf16(d, in, in, in, out, nullptr, launch_of(spec, warps));
            else
              backward_cuda_bf16(d, in, in, in, in, in, nullptr, out, out, out,
                                 c.kind == "atm" ? &dummy : nullptr, launch_of(spec, warps));
          } catch (const std::exception& e) {
            error = e.what();
          }
          const long expected = c.kind == "atm" ? 2 : 1;  // atomic: + the dQ conversion
          const bool ok = error.empty() && emu::g_launches - before == expected;
          const int bytes = smem_bytes(hs, warps, c.kind);
          std::printf("cfg %s hs=%d warps=%d dropout=%d: %d bytes of shared memory%s%s  %s\n",
                      kind, hs, warps, drop, bytes, bytes > 48 * 1024 ? " (opted in)" : "",
                      error.empty() ? "" : (": " + error).c_str(), ok ? "ok" : "FAIL");
          all_ok = all_ok && ok;
        }
  for (int hs : {32, 64, 128}) {  // the split-keys forward: no dropout
    const Dims d{3, 5, 130, hs};
    const View4<const bf16_t> in{nullptr, 0, 0, 0};
    const View4<bf16_t> out{nullptr, 0, 0, 0};
    const long before = emu::g_launches;
    std::string error;
    try {
      forward_cuda_bf16(d, in, in, in, out, nullptr, launch_of(DropoutSpec{}, kSplitKeys));
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool ok = error.empty() && emu::g_launches - before == 1;
    const int bytes = hs == 32 ? SplitConfig<32>::kSmemBytes
                               : hs == 64 ? SplitConfig<64>::kSmemBytes : SplitConfig<128>::kSmemBytes;
    std::printf("cfg fwd hs=%d split keys dropout=0: %d bytes of shared memory%s%s  %s\n", hs,
                bytes, bytes > 48 * 1024 ? " (opted in)" : "",
                error.empty() ? "" : (": " + error).c_str(), ok ? "ok" : "FAIL");
    all_ok = all_ok && ok;
  }
  for (int hs : {32, 64, 128})  // the wgmma kernels (warps = kWgmma), one warpgroup
    for (int drop : {0, 1})
      for (const char* kind : {"fwd", "bwd"}) {
        const Case c{kind, hs, kWgmma, 130, drop == 1, true};
        const Dims d{3, 5, c.T, hs};
        const View4<const bf16_t> in{nullptr, 0, 0, 0};
        const View4<bf16_t> out{nullptr, 0, 0, 0};
        float scratch = 0.0f;
        const long before = emu::g_launches;
        std::string error;
        try {
          if (c.kind == "fwd")
            forward_cuda_bf16(d, in, in, in, out, nullptr, launch_of(drop_spec(c), kWgmma));
          else
            backward_cuda_bf16(d, in, in, in, in, in, nullptr, out, out, out, &scratch,
                               launch_of(drop_spec(c), kWgmma));
        } catch (const std::exception& e) {
          error = e.what();
        }
        const long expected = c.kind == "bwd" ? 2 : 1;  // backward: + the D pre-pass
        const bool ok = error.empty() && emu::g_launches - before == expected;
        const int bytes = wgmma_smem_bytes(hs, c.kind == "fwd");
        std::printf("cfg %s hs=%d wgmma dropout=%d: %d bytes of shared memory%s%s  %s\n", kind,
                    hs, drop, bytes, bytes > 48 * 1024 ? " (opted in)" : "",
                    error.empty() ? "" : (": " + error).c_str(), ok ? "ok" : "FAIL");
        all_ok = all_ok && ok;
      }
  emu::g_launch_only = false;
  return all_ok;
}

// Case "limits": the emulated runtime refuses what a GPU refuses (so "all" can fail), and a
// configuration beyond the device's opt-in maximum gets the launchers' own error.
bool run_limits() {
  emu::g_launch_only = true;
  const int saved_device = emu::g_device;
  emu::g_device = 7;  // a device no other case used: nothing opted in there yet
  const auto kernel = attention_dq_convert_kernel;
  const void* fn = reinterpret_cast<const void*>(kernel);
  auto try_launch = [&](size_t smem) {
    emu::launch_checked(kernel, dim3(1), dim3(32), smem, nullptr, View4<uint16_t>{}, 1, 1, 32,
                        1.0f, int64_t(0));
    return cudaGetLastError();
  };
  bool ok = try_launch(48 * 1024) == cudaSuccess;
  ok = ok && try_launch(48 * 1024 + 16) == cudaErrorInvalidValue;  // not opted in
  ok = ok && cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  emu::g_smem_optin + 1) == cudaErrorInvalidValue;
  cudaGetLastError();
  ok = ok && cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) ==
                 cudaSuccess;
  ok = ok && try_launch(64 * 1024) == cudaSuccess && try_launch(64 * 1024 + 16) != cudaSuccess;
  emu::launch_checked(kernel, dim3(1, 70000), dim3(32), 0, nullptr, View4<uint16_t>{}, 1, 1, 32,
                      1.0f, int64_t(0));
  ok = ok && cudaGetLastError() == cudaErrorInvalidConfiguration;
  // hs=128 with 8 warps needs 104448 bytes: on a device that allows 100 KiB the launcher says so
  const int saved_optin = emu::g_smem_optin;
  emu::g_smem_optin = 100 * 1024;
  std::string error;
  try {
    const View4<const bf16_t> in{nullptr, 0, 0, 0};
    forward_cuda_bf16(Dims{1, 1, 64, 128}, in, in, in, View4<bf16_t>{nullptr, 0, 0, 0}, nullptr,
                      launch_of(DropoutSpec{}, 8));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const bool named = error.find("causal_attention") != std::string::npos &&
                     error.find("hs=128, 8 warps") != std::string::npos &&
                     error.find("104448") != std::string::npos &&
                     error.find("102400") != std::string::npos;
  ok = ok && named && cudaGetLastError() == cudaSuccess;
  emu::g_smem_optin = saved_optin;
  // the wgmma forward where the device runs code for sm_80: the launcher refuses, naming why
  emu::g_arch = 80;
  emu::g_device = 8;  // its LaunchCheck has not run here yet
  std::string wgmma_error;
  try {
    const View4<const bf16_t> in{nullptr, 0, 0, 0};
    forward_cuda_bf16(Dims{1, 1, 64, 64}, in, in, in, View4<bf16_t>{nullptr, 0, 0, 0}, nullptr,
                      launch_of(DropoutSpec{}, kWgmma));
  } catch (const std::exception& e) {
    wgmma_error = e.what();
  }
  emu::g_arch = 90;
  ok = ok && wgmma_error.find("sm_90a") != std::string::npos &&
       wgmma_error.find("code for sm_80") != std::string::npos;
  emu::g_device = saved_device;
  emu::g_launch_only = false;
  std::printf("limits: 48 KiB without opt-in, opt-in up to the device maximum, grid y <= 65535; "
              "too large: \"%s\"; wgmma on sm_80: \"%s\"  %s\n", error.c_str(),
              wgmma_error.c_str(), ok ? "ok" : "FAIL");
  return ok;
}

bool run(const Case& c, std::mt19937& rng) {
  if (c.kind == "f32") return run_f32(c, rng);
  if (c.kind == "wgf" || c.kind == "wgb" || c.kind == "wsf" || c.kind == "wsb") {
    const bool swizzled = c.kind[1] == 's';
    if (!supported_head_size(c.hs) || (c.warps != 1 && c.warps != 2) ||
        (swizzled && (c.hs != 64 || c.warps != 1))) {
      std::printf("bad case: head size %d, %d warpgroups\n", c.hs, c.warps);
      return false;
    }
    return run_wgmma(c, rng);
  }
  // warps 0 = the launcher's choice, kWgmma = the wgmma kernels, kSplitKeys = the split-keys
  // forward (then the 4-warp backward)
  const bool warps_ok = c.warps == 4 || c.warps == 8 || c.warps == 0 || c.warps == kSplitKeys ||
                        c.warps == kWgmma;
  if (!supported_head_size(c.hs) || !warps_ok) {
    std::printf("bad case: head size %d, %d warps\n", c.hs, c.warps);
    return false;
  }
  return run_bf16(c, rng);
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
             "f32:32:4:45:1:packed",  "f32:64:4:20:0:contig",  "f32:128:4:9:1:contig",
             // the split-keys forward (warps 1): one tile, several, a partial last one, more
             // tiles than warps (T = 300: warp 0 takes tiles 0 and 4), T = 1; its lse feeds the
             // 4-warp backward; and the launcher's own choice (warps 0) for a few-CTA call
             "fwd:32:1:64:0:packed",  "fwd:64:1:256:0:packed", "fwd:64:1:130:0:contig",
             "fwd:128:1:300:0:packed", "fwd:64:1:1:0:contig",  "fwd:64:0:200:0:packed",
             "bwd:64:1:130:0:packed",  "bwd:32:1:77:0:contig",
             // the wgmma forward (warps = warpgroups): one tile, several with a partial last
             // one, two warpgroups (the first given a tile wholly above its rows), dropout
             "wgf:64:1:64:0:packed",   "wgf:64:1:150:0:contig", "wgf:64:2:200:1:packed",
             "wgf:32:2:65:0:contig",   "wgf:128:1:70:1:packed", "wgf:64:2:1:0:packed",
             // then the D pre-pass and the wgmma backward on the kernel's own y and lse
             "wgb:64:1:150:0:packed",  "wgb:64:2:200:1:contig", "wgb:32:1:64:1:packed",
             "wgb:128:1:70:0:contig",  "wgb:64:1:1:0:packed",
             // and with 128-byte swizzled tiles
             "wsf:64:1:150:1:packed",  "wsb:64:1:200:0:contig", "wsb:64:1:77:1:packed",
             // the wgmma kernels through the launchers (warps = kWgmma): hs=64 swizzled
             "bwd:64:2:150:1:packed",  "bwd:64:2:70:0:contig",  "bwd:32:2:77:0:packed",
             "limits",                "all"};
  std::mt19937 rng(2024);
  bool ok = true;
  for (const std::string& s : cases) {
    try {
      if (s == "all")
        ok = run_all_configs() && ok;
      else if (s == "limits")
        ok = run_limits() && ok;
      else
        ok = run(parse(s), rng) && ok;
    } catch (const std::exception& e) {
      std::printf("%s: %s  FAIL\n", s.c_str(), e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
