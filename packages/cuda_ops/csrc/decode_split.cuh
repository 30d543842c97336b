// decode_split.cuh: decode_linear's tensor-core kernel (decode_mma.cuh) with its K extent split
// over a thread-block cluster of kSplit CTAs, for a wide product on few rows (bf16, sm_90+):
// out = act(x W^T + b) + residual, no LayerNorm (its statistics need the whole row).
//
// Why: at esp32's slide window (64 rows) mlp.c_proj (K = 1,024, N = 256) is 8 CTAs of a
// 32 x 64 tile, each a 64-step mma chain over 2M multiply-adds (the SM's tensor rate, ~1 us)
// after copying 64 KiB of x from L2: 3.4 us a call in a chain, where c_proj (K = 256) takes 2.5.
// Here kSplit = 4 CTAs share a tile, CTA s taking k in [s K/4, (s + 1) K/4): a 16-step chain on
// 16 KiB of x each, 32 CTAs in all. Each mma warp's 16 x 32 fp32 partial goes to the CTA that
// owns that warp tile (warp w's to rank w % kSplit) by st.async onto its mbarrier (2 KiB a
// warp); the owner adds the kSplit partials in rank order, then decode_linear's epilogue (bias,
// GELU, residual), and stores.
// Bits: each output is ((p0 + p1) + p2) + p3 of the ranks' partial sums, k ascending within
// each: deterministic, but not the unsplit kernel's one chain over k (a different rounding), so
// decode_linear takes this path only when asked (split_k).
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/decode_split_check.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cluster.cuh"
#include "decode.h"
#include "decode_mma.cuh"

namespace gs::split_linear {

using namespace gs::attn;
namespace ml = gs::mma_linear;

constexpr int kSplit = 4;                 // CTAs a tile: one owner per mma warp tile
constexpr int kNT = 4;                    // 8-column mma tiles a warp: a 32 x 64 CTA tile
constexpr int kCols = ml::cols<kNT>();    // 64
constexpr int kRows = ml::kRows;          // 32
constexpr int kThreads = ml::kThreads;
constexpr int kMmaWarps = ml::kMmaWarps;  // 4: 2 x 2 of 16 x 32
static_assert(kMmaWarps % kSplit == 0, "every rank owns the same number of warp tiles");
// The widths K compiled for (esp32's and shakespeare-char's mlp.c_proj; decode.h's
// kDecodeSplitWidths); others are not split
constexpr auto& kWidths = kDecodeSplitWidths;
// A warp's partial: kNT uint4 a lane (acc[nt][0..3]), laid out [nt][lane] so that a warp's
// 16-byte accesses fall in distinct banks
constexpr int kPartialBytes = kNT * 32 * 16;

// x's and W's k slices (pitch Kp + 8), the CTA's 64 biases, then kMmaWarps x kSplit partial
// slots (tile w, sender rank s) and the mbarrier
template <int K> struct Layout {
  static constexpr int Kp = K / kSplit, P = Kp + 8;
  static constexpr int64_t x = 0;                             // bf16 elements
  static constexpr int64_t w = x + kRows * P;
  static constexpr int64_t b = w + kCols * P;
  static constexpr int64_t parts = (b + kCols) * 2;            // bytes from here on
  static constexpr int64_t bar = parts + int64_t(kMmaWarps) * kSplit * kPartialBytes;
  static constexpr int64_t bytes = bar + 8;
  static_assert(K % (16 * kSplit) == 0 && parts % 16 == 0, "16-byte regions, whole mma steps");
};

// grid (kSplit * ceil(N / 64), ceil(R / 32)) in clusters of (kSplit, 1, 1); kThreads threads
template <int K>
__global__ void __launch_bounds__(kThreads) decode_linear_split_kernel(const ml::Args a) {
#ifdef GS_CLUSTERS
  using L = Layout<K>;
  constexpr int Kp = L::Kp, P = L::P;
  GS_DYNAMIC_SHARED(smem);
  uint16_t* const x_s = reinterpret_cast<uint16_t*>(smem) + L::x;
  uint16_t* const w_s = reinterpret_cast<uint16_t*>(smem) + L::w;
  uint16_t* const b_s = reinterpret_cast<uint16_t*>(smem) + L::b;
  uint4* const parts = reinterpret_cast<uint4*>(smem + L::parts);  // [tile][sender][nt][lane]
  uint64_t* const bar = reinterpret_cast<uint64_t*>(smem + L::bar);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int rank = cluster_rank();  // = blockIdx.x % kSplit: the cluster spans x
  const int r0 = blockIdx.y * kRows, n0 = (blockIdx.x / kSplit) * kCols, k0 = rank * Kp;
  const int wm = warp / 2, wn = warp % 2;  // of the mma warps
  const bool owner = warp < kMmaWarps && warp % kSplit == rank;

  // the mbarrier the other ranks' partials complete on, published by a cluster barrier waited
  // for only before this CTA's first store
  if (tid == 0) {
    mbar_init_expect(bar, (kMmaWarps / kSplit) * (kSplit - 1) * kPartialBytes);
    fence_mbarrier_init();
  }
  cluster_arrive_relaxed();
  pdl_launch_dependents();
  // the weights' k slice is on its way before waiting for the kernel before
  ml::copy_rows<kCols>(w_s, a.w + int64_t(n0) * K + k0, a.N - n0, Kp, P, warp, lane, K);
  cp_async_commit();
  for (int c = tid; c < kCols; c += kThreads)
    sts(b_s + c, a.b && n0 + c < a.N ? a.b[n0 + c] : uint16_t(0));
  pdl_wait();  // x and the residual are the previous kernel's output
  ml::copy_rows<kRows>(x_s, a.x + int64_t(r0) * K + k0, a.R - r0, Kp, P, warp, lane, K);
  cp_async_commit();
  // an owner's residual pairs go out now, into registers (decode_mma.cuh's res layout)
  uint32_t res[kNT][2] = {};
  if (owner && a.residual) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = r0 + wm * 16 + g + 8 * hh;
      if (row >= a.R) continue;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int col = n0 + wn * 8 * kNT + nt * 8 + 2 * t;
        if (col < a.N)  // N even (the launcher's condition): col + 1 < N too
          res[nt][hh] = ml::load_pair_produced(a.residual + int64_t(row) * a.N + col);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  if (warp >= kMmaWarps) return;  // the owners' waits keep the CTA alive for the stores into it

  float acc[kNT][4] = {};
  ml::mma_rows_k<kNT>(acc, x_s + wm * 16 * P, w_s + wn * 8 * kNT * P, Kp, P, lane);
  auto slot = [&](int tile, int sender, int nt) {
    return parts + ((tile * kSplit + sender) * kNT + nt) * 32 + lane;
  };
  if (!owner) {  // this warp tile's partial to its owner
    cluster_wait();  // every CTA's mbarrier is initialized
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      st_async_u4(slot(warp, rank, nt), warp % kSplit,
                  uint4{__float_as_uint(acc[nt][0]), __float_as_uint(acc[nt][1]),
                        __float_as_uint(acc[nt][2]), __float_as_uint(acc[nt][3])},
                  bar);
    return;
  }
  mbar_wait(bar, 0);  // every other rank's partial of this warp tile has arrived
  float sum[kNT][4];  // the ranks' partials added in rank order
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sum[nt][e] = 0.0f;
    for (int s = 0; s < kSplit; ++s) {
      float p[4] = {acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]};
      if (s != rank) {
        const uint4 v = lds(slot(warp, s, nt));
        p[0] = __uint_as_float(v.x), p[1] = __uint_as_float(v.y);
        p[2] = __uint_as_float(v.z), p[3] = __uint_as_float(v.w);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[nt][e] = s == 0 ? p[e] : sum[nt][e] + p[e];
    }
  }
  ml::each_acc_pair<kNT>(lane, [&](int nt, int hh, int r, int c) {
    const int row = r0 + wm * 16 + r;
    const int cl = wn * 8 * kNT + c, col = n0 + cl;  // in the CTA, in out
    if (row >= a.R || col >= a.N) return;
    *reinterpret_cast<uint32_t*>(a.out + int64_t(row) * a.N + col) = pack_bf16(
        ml::linear_epilogue(sum[nt][2 * hh], lds(b_s + cl), a.gelu, bf16_lo(res[nt][hh])),
        ml::linear_epilogue(sum[nt][2 * hh + 1], lds(b_s + cl + 1), a.gelu,
                            bf16_hi(res[nt][hh])));
  });
#endif
}

// f(kernel, shared bytes) with the instance for width K, as a std::integral_constant holding
// the kernel's address (decode_mma.cuh's with_kernel_for); false where K is not compiled for
template <typename F> bool with_kernel_for(int K, F&& f) {
  return ml::with_width<kWidths>(K, [&](auto width) {
    constexpr int KC = decltype(width)::value;
    constexpr auto kernel = &decode_linear_split_kernel<KC>;  // see window_attention.cuh
    f(std::integral_constant<void (*)(ml::Args), kernel>{}, Layout<KC>::bytes);
  });
}

}  // namespace gs::split_linear
