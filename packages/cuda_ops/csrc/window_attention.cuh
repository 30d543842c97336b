// window_attention.cuh: a block's ln_1, c_attn and causal attention for a short slide window in
// one launch (bf16, tensor cores): y = attention(heads(LN(x) W^T + b)) for each sequence of
// T <= kMaxT rows, what decode_linear's tensor-core kernel (decode_mma.cuh) followed by the
// attention forward (attention_forward.cuh, one key tile) compute, to the bit.
//
// Why: the slide window's step (gptstack.model.fused_step.window) re-runs block_size rows
// through every block for each new token, a chain of dependent launches where each launch's own
// chain of reads and barriers is the time (~3 us each at esp32's 64 rows on the H100). Between
// c_attn and the attention the window's q, k and v made a round trip through L2 and a launch;
// here a CTA per (head, sequence) keeps its head's q, k, v in shared memory:
//   - its head's 3 x HS rows of c_attn (q, k and v rows) and the LayerNorm's parameters are
//     requested (cp.async) before pdl_wait, so they travel while the kernel before finishes;
//   - after the wait, the sequence's T rows of x (rows past T zero-filled), LayerNorm in place
//     (decode_mma.cuh's layernorm_rows: the same sums in the same order);
//   - the (kMaxT x 3HS) product on 8 warps (4 along the rows x 2 along the columns, each
//     16 x 3HS/2 by mma_rows_k: k ascending, as decode_linear's kernel), plus the bias, rounded
//     to bf16 into shared q, k, v tiles (rows past T zeroed, as the attention's loads are);
//   - T / 16 warps each take 16 queries against the one key tile, with the attention
//     forward's own tile functions (scores, mask, online softmax, P V, store).
// Only for windows that fit: T <= kMaxT (one key tile), head size 32 or 64, and the CTA's
// shared memory (x and the head's weight rows, whole C extent) within 227 KiB: esp32's window
// (T = 64, C = 256, 8 heads of 32) takes 101 KiB. There (H100, 2026-12-06): 5.04 vs 5.84 us a
// call against the two launches in a chain of dependent calls, 9,684 vs 9,369 tok/s for
// `gptstack sample` side by side (scripts/window_parts_bench.py, benchmarks/sample_speed.py).
//
// With attn.c_proj (Args::wp; the Proj instances) the launch also does the block's next
// matrix: x1 = x + y Wp^T + bp, what decode_linear's tensor-core kernel computes from y, to the
// bit, one launch fewer a block. The CTAs of a sequence (its n_head heads) form a thread-block
// cluster: each query warp pushes its 16 rows of its head's y (bf16, the values the plain
// kernel stores) into every CTA's shared memory by st.async, and the 4 warps that sit out the
// attention (T <= 64: 4 query warps) wait on their CTA's mbarrier for the whole y rows, then
// multiply them by c_proj's rows of the CTA's columns [h HS, (h + 1) HS) (prefetched before
// pdl_wait, as c_attn's; the residual's pairs loaded into registers right after it).
//
// With the window's ids (Args::window; the Embed instances) the launch also embeds them, what
// window_embed computes and the plain kernel reads as x: rows x[t] = wte[id] + wpe[t], ids =
// cat(window[1:], token) (decode_io.h), one launch fewer a slide step. The positions' wpe rows
// are requested before pdl_wait (nothing writes them); after it, the ids (the previous step's
// state), then their wte rows, added in fp32 and rounded to bf16 as window_embed does (a row of
// NaN for an id out of range); CTA h writes rows t = h (mod nh) of x for the block's residual.
//
// Built with GS_ATTN_EMULATE, the same device code runs on the CPU under the warp emulator
// (attention_emu/window_attention_check.cpp compares it with the kernels it replaces).
#pragma once

#include <cstdint>
#include <type_traits>

#include "attention_forward.cuh"
#include "cluster.cuh"
#include "decode_mma.cuh"

namespace gs::window_attn {

using namespace gs::attn;
namespace ml = gs::mma_linear;

constexpr int kMaxT = 64;  // rows of one sequence: the attention's one key tile
constexpr int kThreads = ml::kThreads;
constexpr int kWarps = ml::kWarps;
static_assert(kMaxT == 64 && kWarps == 8, "4 x 2 mma warps of 16 rows; 4 query warps");

struct Args {
  uint16_t* y;               // (B * T, C) bf16 bits: head h at columns [h HS, (h + 1) HS); with
                             // wp, x1 = x + y Wp^T + bp instead
  const uint16_t* x;         // (B * T, C)
  const uint16_t* w;         // (3C, C): c_attn's weight, q rows, then k rows, then v rows
  const uint16_t* b;         // (3C,) or null
  const uint16_t* ln_w;      // (C,)
  const uint16_t* ln_b;      // (C,) or null
  int T, C;
  float eps, scale_log2;     // scale_log2: log2(e) / sqrt(HS), as the attention forward's
  const uint16_t* wp = nullptr;  // (C, C): attn.c_proj, for the Proj instances
  const uint16_t* bp = nullptr;  // (C,) or null
  // the Embed instances: x is written, not read (B * T rows, C columns)
  const int64_t* window = nullptr;  // (B, T) ids
  const int64_t* token = nullptr;   // (B,): the id after them
  const uint16_t* wte = nullptr;    // (vocab, C)
  const uint16_t* wpe = nullptr;    // (>= T, C)
  int64_t vocab = 0;
  uint16_t* x_out = nullptr;        // (B * T, C)
};

// A value the kernel before wrote (cuda_common.cuh's load_produced; a plain read under the
// emulator)
__device__ __forceinline__ int64_t load_id_produced(const int64_t* p) {
#ifdef GS_ATTN_EMULATE
  return *p;
#else
  return load_produced(p);
#endif
}

// x_s's rows [0, T) = wte[id] + wpe[t] in bf16 (decode_io.cu's window_embed), wpe's rows already
// in x_s by this thread's own cp.async (copy_rows' mapping: warp w rows w, w + kWarps, ..., lane
// chunks lane + 32 j), which this waits for; rows r = h (mod nh) also to x_out. After pdl_wait.
__device__ __forceinline__ void embed_rows(uint16_t* x_s, int P, int C, const Args& a, int T,
                                           int64_t row0, int h, int nh, int warp, int lane) {
  constexpr int kRowsPerWarp = kMaxT / kWarps;
  const int chunks = C / 8, per_lane = (chunks + 31) / 32;
  const int64_t b = row0 / T;
  int64_t ids[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {  // every id's load out before the first is used
    const int t = warp + i * kWarps;
    ids[i] = t < T ? load_id_produced(t < T - 1 ? a.window + b * T + t + 1 : a.token + b) : 0;
  }
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    const int ch = lane + 32 * j;
    if (ch >= chunks) break;
    {
      uint4 e[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {  // the rows' wte chunks, all in flight at once
        const bool ok = warp + i * kWarps < T && ids[i] >= 0 && ids[i] < a.vocab;
        e[i] = ok ? *reinterpret_cast<const uint4*>(a.wte + ids[i] * C + ch * 8) : uint4{};
      }
      cp_async_wait<0>();  // this thread's wpe chunks
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int t = warp + i * kWarps;
        if (t >= T) continue;  // zeros, as the plain kernel's copy leaves them
        uint16_t* dst = x_s + t * P + ch * 8;
        float we[8], pe[8];
        ml::unpack8(e[i], we);
        ml::unpack8(lds(reinterpret_cast<const uint4*>(dst)), pe);
        const bool ok = ids[i] >= 0 && ids[i] < a.vocab;
        uint32_t o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          o[k] = ok ? pack_bf16(we[2 * k] + pe[2 * k], we[2 * k + 1] + pe[2 * k + 1])
                    : pack_bf16(NAN, NAN);
        const uint4 v{o[0], o[1], o[2], o[3]};
        sts(reinterpret_cast<uint4*>(dst), v);
        if (t % nh == h) *reinterpret_cast<uint4*>(a.x_out + (row0 + t) * C + ch * 8) = v;
      }
    }
  }
}

constexpr int kQueryWarps = kMaxT / 16;  // warps of the attention; the others, with Proj, c_proj's

constexpr int qkv_pitch(int HS) { return HS + 8; }  // elements; 16 padding bytes
// x rows, the head's 3HS weight rows (pitch C + 8), the LayerNorm's weight and bias (C each),
// the head's 3HS biases, then the q, k and v tiles (kMaxT rows each); with Proj then every
// head's y rows (kMaxT, pitch C + 8), c_proj's HS rows of the CTA's columns, their HS biases
// and an mbarrier. Every region starts on 16 bytes (C % 16 == 0, HS % 16 == 0).
constexpr int64_t proj_offset(int64_t HS, int64_t C) {  // bf16 elements
  return (kMaxT + 3 * HS) * ml::pitch(C) + 2 * C + 3 * HS + 3 * kMaxT * qkv_pitch(int(HS));
}
constexpr int64_t shared_bytes(int64_t HS, bool proj, int64_t C) {
  return (proj_offset(HS, C) + (proj ? (kMaxT + HS) * ml::pitch(C) + HS + 4 : 0)) * 2;
}

// grid (nh, B), kThreads threads; with Proj in clusters of (nh, 1, 1). KC: C as a
// compile-time constant, or 0 for any C.
template <int HS, int KC = 0, bool Proj = false, bool Embed = false>
__global__ void __launch_bounds__(kThreads) window_attention_kernel(const Args a) {
  static_assert(!(Proj && Embed), "one of the two extensions at a time");
  constexpr int kCols = 3 * HS;    // the head's q, k and v columns of c_attn
  constexpr int NT = kCols / 16;   // 8-column mma tiles a warp: two warps across kCols
  constexpr int PA = qkv_pitch(HS);
  GS_DYNAMIC_SHARED(smem);
  const int C = KC ? KC : a.C, P = static_cast<int>(ml::pitch(C)), T = a.T;
  uint16_t* x_s = reinterpret_cast<uint16_t*>(smem);  // [kMaxT][P]
  uint16_t* w_s = x_s + kMaxT * P;                    // [kCols][P]
  uint16_t* lnw_s = w_s + kCols * P;                  // [C]
  uint16_t* lnb_s = lnw_s + C;                        // [C]
  uint16_t* b_s = lnb_s + C;                          // [kCols]
  uint16_t* q_s = b_s + kCols;                        // [kMaxT][PA], then k_s, v_s
  // Proj: every head's y rows, c_proj's rows and biases of this CTA's columns, the mbarrier the
  // cluster's y stores complete on
  [[maybe_unused]] uint16_t* yall_s = reinterpret_cast<uint16_t*>(smem) + proj_offset(HS, C);
  [[maybe_unused]] uint16_t* wp_s = yall_s + kMaxT * P;  // [HS][P]
  [[maybe_unused]] uint16_t* bp_s = wp_s + HS * P;       // [HS]
  [[maybe_unused]] uint64_t* const bar = reinterpret_cast<uint64_t*>(bp_s + HS);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.x;
  const int64_t row0 = int64_t(blockIdx.y) * T;  // the sequence's first row of x and y
  [[maybe_unused]] const int nh = static_cast<int>(gridDim.x);
  [[maybe_unused]] const int query_warps = (T + 15) / 16;  // each pushes its 16 rows of y

#ifdef GS_CLUSTERS
  if constexpr (Proj) {  // published by a cluster barrier waited for before the first store
    if (tid == 0) {
      mbar_init_expect(bar, unsigned(nh * query_warps * 16 * HS * 2));
      fence_mbarrier_init();
    }
    cluster_arrive_relaxed();
  }
#endif
  pdl_launch_dependents();
  // the weights do not depend on the kernel before: on their way before waiting for it
#pragma unroll
  for (int part = 0; part < 3; ++part)  // q, k, v rows of head h
    ml::copy_rows<HS>(w_s + part * HS * P, a.w + (int64_t(part) * C + h * HS) * C, HS, C, P,
                      warp, lane);
  if constexpr (Proj) ml::copy_rows<HS>(wp_s, a.wp + int64_t(h) * HS * C, HS, C, P, warp, lane);
  ml::copy_layernorm_params(lnw_s, lnb_s, a.ln_w, a.ln_b, C, tid);
  cp_async_commit();
  for (int c = tid; c < kCols; c += kThreads)
    sts(b_s + c, a.b ? a.b[(c / HS) * C + h * HS + c % HS] : uint16_t(0));
  if constexpr (Proj)
    for (int c = tid; c < HS; c += kThreads) sts(bp_s + c, a.bp ? a.bp[h * HS + c] : uint16_t(0));
  if constexpr (Embed) {  // the positions' rows: nothing the kernel before writes
    ml::copy_rows<kMaxT>(x_s, a.wpe, T, C, P, warp, lane);
    cp_async_commit();
  }
  pdl_wait();  // x (Embed: the window's ids) is the previous kernels' output
  if constexpr (Embed) {
    embed_rows(x_s, P, C, a, T, row0, h, static_cast<int>(gridDim.x), warp, lane);
  } else {
    ml::copy_rows<kMaxT>(x_s, a.x + row0 * C, T, C, P, warp, lane);
    cp_async_commit();
  }
  // Proj: c_proj's warp pw (rows 16 pw..) loads x's pairs at its outputs now, into registers:
  // the residual (res[nt][hh]: row g + 8 hh, columns 8 nt + 2 t + {0, 1} of the CTA's HS)
  const int pw = warp - kQueryWarps;
  uint32_t res[HS / 8][2] = {};
  if (Proj && pw >= 0 && 16 * pw < T) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = 16 * pw + g + 8 * hh;
      if (row >= T) continue;
#pragma unroll
      for (int nt = 0; nt < HS / 8; ++nt)
        res[nt][hh] = ml::load_pair_produced(a.x + (row0 + row) * C + h * HS + nt * 8 + 2 * t);
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  ml::layernorm_rows<kMaxT / kWarps>(x_s, P, C, lnw_s, lnb_s, a.eps, warp, lane);
  __syncthreads();

  {  // q, k, v = LN(x) W_h^T + b_h: warp (wm, wn) takes rows 16 wm.., columns 8 NT wn..
    const int wm = warp / 2, wn = warp % 2;
    float acc[NT][4] = {};
    ml::mma_rows_k<NT>(acc, x_s + wm * 16 * P, w_s + wn * 8 * NT * P, C, P, lane);
    // decode_linear's epilogue (no GELU, no residual) into the shared q, k, v tiles
    ml::each_acc_pair<NT>(lane, [&](int nt, int hh, int r, int c) {
      const int row = wm * 16 + r, col = wn * 8 * NT + c;
      const int part = col / HS, d = col % HS;  // col, col + 1 in one part: HS is even
      const uint32_t bits =
          row < T ? pack_bf16(ml::linear_epilogue(acc[nt][2 * hh], lds(b_s + col), false, 0.0f),
                              ml::linear_epilogue(acc[nt][2 * hh + 1], lds(b_s + col + 1), false,
                                                  0.0f))
                  : 0u;
      sts(reinterpret_cast<uint32_t*>(q_s + (part * kMaxT + row) * PA + d), bits);
    });
  }
  __syncthreads();

  if (Proj && warp >= kQueryWarps) {
#ifdef GS_CLUSTERS
    // x1 = x + y Wp^T + bp for rows 16 pw.. and the CTA's HS columns, once every head's y rows
    // are here (every warp waits: the CTA outlives the stores into it)
    mbar_wait(bar, 0);
    if (16 * pw >= T) return;
    float acc[HS / 8][4] = {};
    ml::mma_rows_k<HS / 8>(acc, yall_s + 16 * pw * P, wp_s, C, P, lane);
    ml::each_acc_pair<HS / 8>(lane, [&](int nt, int hh, int r, int c) {
      const int row = 16 * pw + r;
      if (row >= T) return;
      *reinterpret_cast<uint32_t*>(a.y + (row0 + row) * C + h * HS + c) = pack_bf16(
          ml::linear_epilogue(acc[nt][2 * hh], lds(bp_s + c), false, bf16_lo(res[nt][hh])),
          ml::linear_epilogue(acc[nt][2 * hh + 1], lds(bp_s + c + 1), false,
                              bf16_hi(res[nt][hh])));
    });
#endif
    return;
  }

  // the attention forward's steps for one tile of kMaxT keys (attention_forward.cuh)
  const int wq0 = 16 * warp;  // this warp's first query
  if (wq0 >= T) return;
  const uint16_t* k_s = q_s + kMaxT * PA;
  const uint16_t* v_s = k_s + kMaxT * PA;
  uint32_t qf[HS / 16][4];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
    ldmatrix_x4(qf[kk], q_s + (wq0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * PA + kk * 16 +
                            (lane >> 4) * 8);
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8
  float s[kMaxT / 8][4] = {};
  tile_scores<HS, kMaxT, PA>(s, qf, k_s, 0, wq0, lane);
  mask_tile<kMaxT>(s, 0, wq0, T, lane);
  online_softmax<HS, kMaxT>(s, m, l, o, a.scale_log2);
  accumulate_pv<HS, kMaxT, PA>(o, s, v_s, 0, wq0, lane);
  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
  // staged through this warp's own q rows (in registers since the ldmatrix above)
  if constexpr (!Proj) {
    store_tile_bf16<HS>(o, 1.0f / l[0], 1.0f / l[1], q_s + wq0 * PA, PA,
                        a.y + (row0 + wq0) * C + h * HS, C, T - wq0, lane);
  } else {
#ifdef GS_CLUSTERS
    // the 16 rows into every CTA of the cluster, at this head's columns of its y rows:
    // consecutive lanes send one 16-byte chunk to consecutive CTAs
    stage_tile_bf16<HS>(o, 1.0f / l[0], 1.0f / l[1], q_s + wq0 * PA, PA, lane);
    cluster_wait();  // every CTA's mbarrier is initialized
    constexpr int kChunks = HS / 8;  // of a row
    for (int i = lane; i < nh * 16 * kChunks; i += 32) {
      const int to = i % nh, chunk = i / nh, r = chunk / kChunks, ch = chunk % kChunks;
      const uint4 v = lds(reinterpret_cast<const uint4*>(q_s + (wq0 + r) * PA + ch * 8));
      st_async_u4(yall_s + (wq0 + r) * P + h * HS + ch * 8, to, v, bar);
    }
#endif
  }
}

// f(kernel) with the instance that runs head size HS and width C: the fixed-width one at esp32's
// C = 256 (head size 32), else the generic one. kernel is a std::integral_constant holding the
// kernel's address (a type per instance, as decode_mma.cuh's with_kernel_for).
template <int HS, bool Proj = false, bool Embed = false, typename F>
void with_kernel_for(int C, F&& f) {
  if constexpr (HS == 32) {
    // named as a variable first: GCC does not instantiate a function template whose address
    // appears only as a template argument (the emulator's build)
    constexpr auto fixed = &window_attention_kernel<32, 256, Proj, Embed>;
    if (C == 256) return f(std::integral_constant<void (*)(Args), fixed>{});
  }
  constexpr auto generic = &window_attention_kernel<HS, 0, Proj, Embed>;
  return f(std::integral_constant<void (*)(Args), generic>{});
}

}  // namespace gs::window_attn
