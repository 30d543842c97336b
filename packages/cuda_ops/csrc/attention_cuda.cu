// attention_cuda.cu: launchers of the causal attention kernels (attention.h). bf16 goes to the
// tensor-core kernels, one template instance per (head size, warps per CTA, dropout on/off, and
// for the backward its mode: two-stage, or atomic dQ when the caller passes the fp32 scratch);
// float32 to the SIMT kernels. Each launcher runs on the caller's stream, never allocates or
// synchronizes (CUDA-graph capturable; the atomic mode's zeroing is a cudaMemsetAsync on that
// stream), and checks its launch (cuda_launch.h). Before an instance's first launch on a device,
// its LaunchCheck checks that the block fits and raises its shared-memory limit where it needs
// more than 48 KiB (every hs=64 backward, hs=64 with 8 warps and every hs=128 forward). The
// CTA size defaults to 4 warps (cta_warps). Built with GS_ATTN_EMULATE (attention_emu/check.cpp)
// the same launchers run on the CPU against an emulated CUDA runtime that enforces those limits.
// Opt-in (warps = kWgmma): the warpgroup-MMA kernels of attention_forward_wgmma.cuh and
// attention_backward_wgmma.cuh, one warpgroup a CTA, where the device runs their sm_90a code.
#include <cmath>
#include <string>
#include <type_traits>

#include "attention.h"
#include "attention_backward.cuh"
#include "attention_backward_wgmma.cuh"
#include "attention_forward.cuh"
#include "attention_forward_wgmma.cuh"
#include "attention_simt.cuh"
#include "cuda_launch.h"

namespace gs::attn {
namespace {

std::string shape_of(const Dims& d) {
  return "(B=" + std::to_string(d.B) + ", nh=" + std::to_string(d.nh) + ", T=" +
         std::to_string(d.T) + ", hs=" + std::to_string(d.hs) + ")";
}

// "hs=64, 8 warps, dropout, two-stage backward": the instance, for LaunchCheck's messages.
std::string config_of(int hs, int warps, bool drop, const char* kind) {
  return "hs=" + std::to_string(hs) + ", " + std::to_string(warps) + " warps, " +
         (drop ? "dropout, " : "no dropout, ") + kind;
}

template <typename E> View4<const uint16_t> bits(View4<const E> v) {
  return {reinterpret_cast<const uint16_t*>(v.p), v.sb, v.sh, v.st};
}
template <typename E> View4<uint16_t> bits(View4<E> v) {
  return {reinterpret_cast<uint16_t*>(v.p), v.sb, v.sh, v.st};
}

// The CTA size of the forward and the backward: 8 warps where asked, otherwise (0, the
// default) 4 at every T. 8 forward warps (128 queries sharing each K/V tile, half the tiles'
// L2 traffic) had been the choice from T = 512 on, but scripts/attention_bench.py found them
// slower at every preset shape on the H200, in CUDA graphs side by side: gpt2-124m's T = 1024
// 165.5 us with 4 against 199.6 with 8, shakespeare-char 33.7 against 43.3, esp32 5.6 against
// 7.1 (2026-12-02, benchmarks/results/attention-bench-h200-20261202-063743.json).
int cta_warps(int requested) { return requested == 8 ? 8 : 4; }

// CTAs per SM that an instance's registers are capped for (__launch_bounds__; 0: no cap).
// These kernels are latency bound: at gpt2-124m's shape 12-18 % of an SM's warp slots were
// occupied, and Nsight Compute found no eligible warp in 45-70 % of the cycles. Capping the
// hs=64, 4-warp, dropout-free forward at 128 registers (4 CTAs, from 3 at 131) and the
// two-stage backward at 168 (3 CTAs, from 2 at 210) costs a few bytes of spills and gained,
// side by side on an H200 (scripts/attention_variants.cu, 2026-12-07): forward 149.4 vs
// 159.7 us at B=16 nh=12 T=1024 and 32.1 vs 34.0 at B=64 nh=6 T=256; backward 484.4 vs
// 588.3 us (and vs 645.7 for the atomic-dQ mode, until then the choice from T = 512) and
// 96.6 vs 115.9. The atomic-dQ backward stays at 2 CTAs: its shared memory (82 KiB) fits no
// third, and its cap was slower (660.4 us). Dropout instances are left uncapped: their extra
// registers would spill more, unmeasured.
template <int HS, int NW, bool kDrop> constexpr int forward_min_blocks() {
  return HS == 64 && NW == 4 && !kDrop ? 4 : 0;
}
template <int HS, int NW, bool kDrop> constexpr int backward_min_blocks() {
  return HS == 64 && NW == 4 && !kDrop ? 3 : 0;
}

// The split-keys forward (SplitConfig) runs only when asked for (warps == kSplitKeys). For two
// commits of 2026-12-06 it was the launcher's choice for dropout-free calls with fewer CTAs
// than an H100 has SMs, and lost where it was meant to win: 6.5 vs 7.3 us a call at shakespeare-char's slide window
// (B=1, nh=6, T=256, hs=64) but 3.8 vs 3.0 at esp32's (nh=8, T=64, hs=32), and 6,462 vs 6,483
// / 7,647 vs 7,881 tok/s for `gptstack sample` side by side on the H100 (benchmarks/results/
// sample-speed-*-h100-split-attention-20261206.json): the merge's barriers and round trip
// through shared memory cost what the parallel key tiles saved.
bool split_forward(int requested, bool drop) {
  if (requested != kSplitKeys) return false;
  if (drop)
    throw std::invalid_argument(
        "gptstack.cuda_ops.causal_attention: the split-keys forward has no dropout; use "
        "dropout_p=0 or another CTA size");
  return true;
}

template <int HS> void launch_forward_split(const FwdArgs& a, const Dims& d, cudaStream_t s) {
  using C = SplitConfig<HS>;
  const auto kernel = attention_forward_split_kernel<HS>;
  static LaunchCheck ready;
  ready.ensure(reinterpret_cast<const void*>(kernel), "causal_attention",
               "hs=" + std::to_string(HS) + ", 4 warps over the keys, no dropout, forward",
               C::kThreads, C::kSmemBytes);
  const dim3 grid(ceil_div(d.T, C::kRows), static_cast<unsigned>(d.B * d.nh));
  launch_kernel(kernel, grid, dim3(C::kThreads), C::kSmemBytes, s, a);
  check_launch("causal_attention", shape_of(d));
}

template <int HS, int NW, bool kDrop>
void launch_forward(const FwdArgs& a, const Dims& d, cudaStream_t s) {
  using C = FwdConfig<HS, NW>;
  const auto kernel =
      attention_forward_mma_kernel<HS, NW, kDrop, C::kKeys, forward_min_blocks<HS, NW, kDrop>()>;
  static LaunchCheck ready;  // one per instance (see cuda_launch.h)
  ready.ensure(reinterpret_cast<const void*>(kernel), "causal_attention",
               config_of(HS, NW, kDrop, "forward"), C::kThreads, C::kSmemBytes);
  const dim3 grid(ceil_div(d.T, C::kRows), static_cast<unsigned>(d.B * d.nh));
  // a programmatic dependent (the kernel waits before its first read): in the slide window the
  // tensor-core decode_linear after it loads its weights while it runs
  launch_programmatic(kernel, grid, dim3(C::kThreads), C::kSmemBytes, s, a);
  check_launch("causal_attention", shape_of(d));
}

template <int HS, int NW, bool kDrop>
void launch_backward(const BwdArgs& a, const Dims& d, cudaStream_t s) {
  using C = BwdConfig<HS, NW>;
  const unsigned blocks = ceil_div(d.T, C::kRows), bh = static_cast<unsigned>(d.B * d.nh);
  const char* op = "causal_attention_backward";
  if (a.dq_accum == nullptr) {  // two stages: key CTAs (z = 0) and query CTAs (z = 1)
    const auto kernel =
        attention_backward_mma_kernel<HS, NW, kDrop, false, backward_min_blocks<HS, NW, kDrop>()>;
    static LaunchCheck ready;  // one per instance (see cuda_launch.h)
    ready.ensure(reinterpret_cast<const void*>(kernel), op,
                 config_of(HS, NW, kDrop, "two-stage backward"), C::kThreads, C::kSmemBytes);
    launch_kernel(kernel, dim3(blocks, bh, 2), dim3(C::kThreads), C::kSmemBytes, s, a);
    check_launch(op, shape_of(d));
    return;
  }
  // atomic dQ: zero the fp32 buffer, key CTAs only, then scale and round into dq
  const auto kernel = attention_backward_mma_kernel<HS, NW, kDrop, true>;
  static LaunchCheck ready;  // one per instance (see cuda_launch.h)
  ready.ensure(reinterpret_cast<const void*>(kernel), op,
               config_of(HS, NW, kDrop, "atomic-dQ backward"), C::kThreads, C::kSmemAtomic);
  const int64_t n = d.B * d.nh * d.T * d.hs;
  cudaMemsetAsync(a.dq_accum, 0, n * sizeof(float), s);
  check_launch(op, shape_of(d) + " (zeroing dq_accum)");
  launch_kernel(kernel, dim3(blocks, bh, 1), dim3(C::kThreads), C::kSmemAtomic, s, a);
  check_launch(op, shape_of(d));
  const int64_t n8 = n / 8;
  constexpr int kConvertThreads = 256;
  launch_kernel(attention_dq_convert_kernel, dim3(ceil_div(n8, kConvertThreads)),
                dim3(kConvertThreads), 0, s, a.dq_accum, a.dq, a.nh, a.T, HS, a.scale, n8);
  check_launch(op, shape_of(d) + " (dq conversion)");
}

// The warpgroup-MMA kernels (kWgmma; opt-in): one warpgroup (64 rows) a CTA, hs=64 with
// 128-byte swizzled tiles (kLauncherSwizzle), the dropout-free forward then capped to 4 CTAs an
// SM (123 registers, as timed). LaunchCheck makes sure the device runs their sm_90a machine
// code: elsewhere their wgmma would trap.
constexpr int kWgmmaArch = 90;

template <int HS, bool kDrop>
void launch_forward_wgmma(const FwdArgs& a, const Dims& d, cudaStream_t s) {
  constexpr bool kSw = kLauncherSwizzle<HS>;
  using C = WgmmaFwdConfig<HS, 1, 64, kSw>;
  const auto kernel =
      attention_forward_wgmma_kernel<HS, 1, kDrop, 64, true, kSw, kSw && !kDrop ? 4 : 0>;
  static LaunchCheck ready;
  ready.ensure(reinterpret_cast<const void*>(kernel), "causal_attention",
               "hs=" + std::to_string(HS) + ", one warpgroup (wgmma), " +
                   (kDrop ? "dropout, " : "no dropout, ") + "forward",
               C::kThreads, C::kSmemBytes, kWgmmaArch);
  const dim3 grid(ceil_div(d.T, C::kRows), static_cast<unsigned>(d.B * d.nh));
  launch_programmatic(kernel, grid, dim3(C::kThreads), C::kSmemBytes, s, a);
  check_launch("causal_attention", shape_of(d));
}

// a.d_rows: the (B*nh, T) scratch for D, filled by the pre-pass first
template <int HS, bool kDrop>
void launch_backward_wgmma(const BwdArgs& a, const Dims& d, cudaStream_t s) {
  constexpr bool kSw = kLauncherSwizzle<HS>;
  using C = WgmmaBwdConfig<HS, 1, kSw>;
  const char* op = "causal_attention_backward";
  const auto kernel = attention_backward_wgmma_kernel<HS, 1, kDrop, 0, true, kSw>;
  static LaunchCheck ready;
  ready.ensure(reinterpret_cast<const void*>(kernel), op,
               "hs=" + std::to_string(HS) + ", one warpgroup (wgmma), " +
                   (kDrop ? "dropout, " : "no dropout, ") + "backward",
               C::kThreads, C::kSmemBytes, kWgmmaArch);
  const int64_t rows = d.B * d.nh * d.T;
  constexpr int kPrepassThreads = 256;  // 8 a row
  launch_kernel(attention_d_rows_kernel, dim3(ceil_div(rows * 8, kPrepassThreads)),
                dim3(kPrepassThreads), 0, s, a.dy, a.y, const_cast<float*>(a.d_rows), a.nh, a.T,
                HS, rows);
  check_launch(op, shape_of(d) + " (D pre-pass)");
  const dim3 grid(ceil_div(d.T, C::kRows), static_cast<unsigned>(d.B * d.nh), 2);
  launch_kernel(kernel, grid, dim3(C::kThreads), C::kSmemBytes, s, a);
  check_launch(op, shape_of(d));
}

template <bool kBackward, typename Args>
void dispatch_wgmma(const Args& a, const Dims& d, bool drop, cudaStream_t s) {
  auto run = [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    if constexpr (kBackward)
      drop ? launch_backward_wgmma<HS, true>(a, d, s) : launch_backward_wgmma<HS, false>(a, d, s);
    else
      drop ? launch_forward_wgmma<HS, true>(a, d, s) : launch_forward_wgmma<HS, false>(a, d, s);
  };
  switch (d.hs) {
    case 32: return run(std::integral_constant<int, 32>{});
    case 64: return run(std::integral_constant<int, 64>{});
    case 128: return run(std::integral_constant<int, 128>{});
  }
  throw std::invalid_argument(std::string("gptstack.cuda_ops.") +
                              (kBackward ? "causal_attention_backward" : "causal_attention") +
                              ": head size " + std::to_string(d.hs) +
                              " has no kernel (32, 64 or 128)");
}

// Runs Op::run<HS, NW, kDrop>(args...) for the instance the arguments select.
template <typename Op, int HS, int NW, typename... A> void by_drop(bool drop, const A&... args) {
  if (drop)
    Op::template run<HS, NW, true>(args...);
  else
    Op::template run<HS, NW, false>(args...);
}
template <typename Op, int HS, typename... A>
void by_warps(int warps, bool drop, const A&... args) {
  if (warps == 8)
    by_drop<Op, HS, 8>(drop, args...);
  else
    by_drop<Op, HS, 4>(drop, args...);
}
template <typename Op, typename... A>
void dispatch(const char* op, const Dims& d, int warps, bool drop, const A&... args) {
  switch (d.hs) {
    case 32: return by_warps<Op, 32>(warps, drop, args...);
    case 64: return by_warps<Op, 64>(warps, drop, args...);
    case 128: return by_warps<Op, 128>(warps, drop, args...);
    default:
      throw std::invalid_argument(std::string("gptstack.cuda_ops.") + op + ": head size " +
                                  std::to_string(d.hs) + " has no kernel (32, 64 or 128)");
  }
}
struct Forward {
  template <int HS, int NW, bool kDrop>
  static void run(const FwdArgs& a, const Dims& d, const cudaStream_t& s) {
    launch_forward<HS, NW, kDrop>(a, d, s);
  }
};
struct Backward {
  template <int HS, int NW, bool kDrop>
  static void run(const BwdArgs& a, const Dims& d, const cudaStream_t& s) {
    launch_backward<HS, NW, kDrop>(a, d, s);
  }
};

SimtArgs simt_args(const Dims& d, const CudaLaunch& l) {
  SimtArgs a{};
  a.nh = static_cast<int>(d.nh);
  a.T = static_cast<int>(d.T);
  a.hs = static_cast<int>(d.hs);
  a.scale = 1.0f / sqrtf(static_cast<float>(d.hs));
  a.threshold = l.threshold;
  a.drop_scale = l.drop_scale;
  a.seed = l.seed;
  return a;
}

}  // namespace

void forward_cuda_bf16(const Dims& d, View4<const bf16_t> q, View4<const bf16_t> k,
                       View4<const bf16_t> v, View4<bf16_t> y, float* lse, const CudaLaunch& l) {
  FwdArgs a{bits(q), bits(k), bits(v), bits(y), lse, static_cast<int>(d.nh),
            static_cast<int>(d.T), kLog2e / sqrtf(static_cast<float>(d.hs)), l.threshold,
            l.drop_scale, l.seed};
  const cudaStream_t s = as_stream(l.stream);
  if (l.warps == kWgmma) return dispatch_wgmma<false>(a, d, l.threshold != 0, s);
  if (split_forward(l.warps, l.threshold != 0)) {
    switch (d.hs) {
      case 32: return launch_forward_split<32>(a, d, s);
      case 64: return launch_forward_split<64>(a, d, s);
      case 128: return launch_forward_split<128>(a, d, s);
    }  // another head size: dispatch's error below
  }
  dispatch<Forward>("causal_attention", d, cta_warps(l.warps), l.threshold != 0, a, d, s);
}

void backward_cuda_bf16(const Dims& d, View4<const bf16_t> dy, View4<const bf16_t> q,
                        View4<const bf16_t> k, View4<const bf16_t> v, View4<const bf16_t> y,
                        const float* lse, View4<bf16_t> dq, View4<bf16_t> dk, View4<bf16_t> dv,
                        float* scratch, const CudaLaunch& l) {
  const float scale = 1.0f / sqrtf(static_cast<float>(d.hs));
  const bool wgmma = l.warps == kWgmma;
  BwdArgs a{bits(dy), bits(q), bits(k), bits(v), bits(y), lse, bits(dq), bits(dk), bits(dv),
            static_cast<int>(d.nh), static_cast<int>(d.T), scale, scale * kLog2e, l.threshold,
            l.drop_scale, l.seed, wgmma ? nullptr : scratch, wgmma ? scratch : nullptr};
  const cudaStream_t s = as_stream(l.stream);
  if (wgmma) {
    if (scratch == nullptr)
      throw std::invalid_argument(
          "gptstack.cuda_ops.causal_attention_backward: the wgmma backward needs a (B, nh, T) "
          "float32 scratch for D");
    return dispatch_wgmma<true>(a, d, l.threshold != 0, s);
  }
  dispatch<Backward>("causal_attention_backward", d, cta_warps(l.warps), l.threshold != 0, a,
                     d, s);
}

void forward_cuda_f32(const Dims& d, View4<const float> q, View4<const float> k,
                      View4<const float> v, View4<float> y, float* lse, const CudaLaunch& l) {
  SimtArgs a = simt_args(d, l);
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = y;
  a.lse = lse;
  const dim3 grid(ceil_div(d.T, kSimtWarps), static_cast<unsigned>(d.B * d.nh));
  launch_kernel(attention_forward_simt_kernel, grid, dim3(32 * kSimtWarps), 0,
                as_stream(l.stream), a);
  check_launch("causal_attention", shape_of(d));
}

void backward_cuda_f32(const Dims& d, View4<const float> dy, View4<const float> q,
                       View4<const float> k, View4<const float> v, View4<const float> y,
                       const float* lse, View4<float> dq, View4<float> dk, View4<float> dv,
                       const CudaLaunch& l) {
  SimtArgs a = simt_args(d, l);
  a.dy = dy;
  a.q = q;
  a.k = k;
  a.v = v;
  a.y = y;
  a.lse = const_cast<float*>(lse);  // read only in the backward kernel
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  const dim3 grid(ceil_div(d.T, kSimtWarps), static_cast<unsigned>(d.B * d.nh), 2);
  launch_kernel(attention_backward_simt_kernel, grid, dim3(32 * kSimtWarps), 0,
                as_stream(l.stream), a);
  check_launch("causal_attention_backward", shape_of(d));
}

}  // namespace gs::attn
