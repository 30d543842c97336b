// decode.h: the two kernels of a fused one-token decode step (batch-1 generation), on raw
// pointers shared by decode.cpp (CPU reference + bindings) and decode.cu (CUDA).
//
// A batch-1 decode step of a small GPT is latency bound: ~170 tiny kernels per token in eager
// PyTorch, ~100 under torch.compile (measured on the H200, benchmarks/profiles/). With these two
// ops a transformer block is five launches:
//
//   qkv = decode_linear(x, c_attn, ln = ln_1)             LayerNorm + matvec + bias
//   y   = decode_attention(qkv, k_cache, v_cache, pos)    write k, v at pos; softmax(q K^T) V
//   x   = decode_linear(y, attn.c_proj, residual = x)     matvec + bias + residual add
//   h   = decode_linear(x, c_fc, ln = ln_2, gelu)         LayerNorm + matvec + bias + GELU
//   x   = decode_linear(h, mlp.c_proj, residual = x)
//
// decode_linear, for each of R rows:  out[r] = act(W LN?(x[r]) + b) + residual[r]
//   x (R, K), W (N, K) (nn.Linear's layout), b (N,), LayerNorm weight/bias (K,), residual and
//   out (R, N); all one dtype. LayerNorm (biased variance, eps) and everything after it are in
//   float (double for float64); out is rounded once.
// decode_attention, for each row r and head h (C = nh * hs, qkv = [q | k | v] as c_attn's three
//   C-blocks, caches (R, nh, T, hs), p = *pos, 0 <= p < T read on the device):
//   k_cache[r, h, p] = k; v_cache[r, h, p] = v; y[r, h] = sum_{j<=p} softmax_j(q.k_j/sqrt(hs)) v_j
//   The new key and value are read back from the cache, so they are rounded to its dtype first,
//   as the PyTorch decoders do. A p outside [0, T) writes nothing and sets y to NaN (the position
//   lives on the device, so the host cannot check it without a synchronization).
//
// decode_blocks: embedding and every block of the step above in one call, for each row b:
//   x = wte[token[b]] + wpe[p]; for each layer l: the five ops above with layer l's weights and
//   caches k_cache[l], v_cache[l] ((L, B, nh, T, hs)); out[b] = x after the last block. On CUDA
//   one launch, a thread-block cluster per row (decode_blocks.cu; slower than the ops above
//   launched one by one so far, so opt-in), the op-by-op result to the bit; on the CPU the ops
//   above in order. A token or p out of range gives NaN (no writes).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

// The CUDA attention kernel runs one 256-thread block per (row, head): head size at most 128.
constexpr int kDecodeMaxHeadSize = 128;
// decode_linear keeps the (normalized) input row in shared memory: K at most 12,288 floats.
constexpr int64_t kDecodeMaxK = 12288;
// The widest row decode_linear's one-row CUDA kernel holds in registers by default
// (set_linear_registers_max_k; bf16 rows up to 2,048 fit it, float32 up to 1,024): 0, off.
// Faster in a chain of launches (decode_linear.cuh has the numbers), but inside the graph
// decoder on the H100 (2026-12-06) the shakespeare-char cached step took 101 vs 87 us with it
// and `gptstack sample` lost 4 % there (1 % at esp32, whose cached step gained 83 -> 69 us);
// launched with the shared-row kernels' K floats of shared memory, as the chain bench had it,
// it still lost at shakespeare-char (7,397 tok/s, 7,561 up to K = 384, against 7,795 with all
// rows shared; benchmarks/profiles/sample-speed-*-792894b-registers-smem.json); why is not
// known yet (README, "the LayerNorm folded onto the weights").
constexpr int kLinearRegistersMaxK = 0;
// decode_linear on CUDA in bfloat16 with at least this many rows (the slide window's step) runs
// on tensor cores (decode_mma.cuh) when K is a multiple of 16 and at most kDecodeMmaMaxK (both
// operands' whole K extent in one CTA's shared memory); other calls take the one-row kernel.
constexpr int64_t kDecodeMmaMinRows = 16;
constexpr int64_t kDecodeMmaMaxK = 1744;
// decode_linear with split_k: on CUDA in bfloat16 (sm_90+), without a LayerNorm, for these K and
// at least kDecodeMmaMinRows rows, K is split over a thread-block cluster of 4 CTAs a tile
// (decode_split.cuh: each output the sum of 4 partial sums in a fixed order, not the one chain
// of the other kernels: other bits); elsewhere split_k changes nothing.
constexpr int kDecodeSplitWidths[] = {1024, 1536};

// window_attention, for each sequence b of T rows of x (B * T, C) (the slide window's step):
//   qkv = decode_linear(x[b], c_attn, ln = ln_1), then y[b] = causal attention of its heads
//   (qkv's three C-blocks, as causal_attention takes them), (B * T, C). On CUDA in bfloat16,
//   where the window is short (T <= kWindowAttentionMaxT, head size 32 or 64, the head's weight
//   rows and x fitting one CTA's shared memory) and has the rows of decode_linear's tensor-core
//   kernel (B * T >= kDecodeMmaMinRows), one launch (window_attention.cu): the bits of that
//   kernel followed by the attention forward. Elsewhere
//   window_attention_cuda returns false and the caller runs those two ops.
//   With attn.c_proj (wp, bp: (C, C), (C,)), x1 = decode_linear(y, c_proj, residual = x)
//   instead of y, in the same launch where the sequence's heads make a thread-block cluster
//   (sm_90+, nh <= kWindowAttentionProjMaxHeads): those two ops' bits.
//   With the window's ids (WindowIds), x = window_embed(window, token, wte, wpe) is computed
//   (and written) in the same launch: those two ops' bits.
constexpr int64_t kWindowAttentionMaxT = 64;
constexpr int kWindowAttentionHeadSizes[] = {32, 64};  // its kernel's instances
constexpr int64_t kWindowAttentionProjMaxHeads = 8;     // the portable cluster size
// window_mlp, for each row r of the slide window (R rows, C columns), the rest of a block after
// its attention y:
//   x1[r]  = decode_linear(y[r], attn.c_proj, residual = x[r])
//   h[r]   = decode_linear(x1[r], mlp.c_fc, ln = ln_2, gelu)          (4C columns)
//   out[r] = decode_linear(h[r], mlp.c_proj, residual = x1[r])
//   On CUDA (sm_90+) in bfloat16, for the widths its kernel is compiled for (kWindowMlpWidths)
//   and B * T >= kDecodeMmaMinRows, one launch with those three calls' bits: a thread-block
//   cluster of C / 16 CTAs per 32 rows, passing x1 and h through distributed shared memory
//   (window_mlp.cuh); elsewhere window_mlp_cuda returns false and the caller makes the calls.
constexpr int kWindowMlpWidths[] = {128, 256};

// decode_tail, for each row b (one a sequence: the slide window's last row) of the last block's
// attention output y and residual x (B, C), the rest of that block and the LM head:
//   x1 = decode_linear(y, attn.c_proj, residual = x)
//   h  = decode_linear(x1, mlp.c_fc, ln = ln_2, gelu)                    (4C columns)
//   x2 = decode_linear(h, mlp.c_proj, residual = x1)
//   logits[b] = decode_linear(x2, lm_head, ln = ln_f)                    (V columns, no bias)
//   with decode_linear's one-row kernel's bits. On CUDA (sm_90+) in bfloat16, for the widths its
//   kernel is compiled for (kDecodeTailWidths) and a vocabulary whose share fits a CTA's shared
//   memory, one launch: a thread-block cluster of C / 32 CTAs a row (decode_tail.cuh);
//   elsewhere decode_tail_cuda returns false and the caller makes the four calls.
constexpr int kDecodeTailWidths[] = {128, 256};
// decode_tail's weights, in this order (biases and ln_*_b may be null)
enum DecodeTailTensor {
  kTailProjW, kTailProjB, kTailLn2W, kTailLn2B, kTailFcW, kTailFcB, kTailFc2W, kTailFc2B,
  kTailLnfW, kTailLnfB, kTailHeadW, kDecodeTailTensors
};

// decode_blocks: the weights of layer l, in this order (biases and ln_*_b may be null)
enum DecodeLayerTensor {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFc2W, kFc2B,
  kDecodeLayerTensors
};
// The kernel takes every weight pointer by value (one kernel parameter block, so a CUDA graph
// captures them): at most this many layers.
constexpr int kDecodeMaxLayers = 32;

// n rounded up to a multiple of 4 (floats: shared regions that start on 16 bytes); constexpr, so
// the kernels use it too (--expt-relaxed-constexpr)
constexpr int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

// decode_blocks on CUDA: a cluster of `cs` CTAs per row, CTA r owning rows [r N / cs,
// (r + 1) N / cs) of each weight matrix, which it streams into shared memory a phase or two
// ahead (decode_blocks.cu). Its largest slice (elements: c_fc's or mlp.c_proj's) ...
constexpr int64_t decode_blocks_slice_elems(int64_t C, int64_t cs) {
  const int64_t fc = (4 * C + cs - 1) / cs * C, fc2 = (C + cs - 1) / cs * (4 * C);
  return fc > fc2 ? fc : fc2;
}
// ... and the shared memory of one CTA holding `buffers` slices (bytes): the slices, then the
// vectors of a step as floats (x, xn, qkv, y, h) and each attention half's q, scores and
// partial sums (16-byte aligned regions; 16-byte loads of elem_bytes elements).
constexpr int64_t decode_blocks_half_floats(int64_t hs, int64_t T, int64_t elem_bytes) {
  return round4(hs) + round4(T) +
         round4(256 / (hs / (16 / elem_bytes)) * hs);
}
constexpr int64_t decode_blocks_shared_bytes(int64_t C, int64_t hs, int64_t T,
                                             int64_t elem_bytes, int64_t cs, int64_t buffers) {
  return buffers * decode_blocks_slice_elems(C, cs) * elem_bytes +
         (4 * round4(C) + round4(3 * C) +
          round4(4 * C) + 2 * decode_blocks_half_floats(hs, T, elem_bytes)) * 4;
}
// its cluster size where the GPU places it (16: a non-portable size the H100/H200 allow), and
// the widest row it takes (LayerNorm parameters are held two per thread of 512)
constexpr int kDecodeBlocksCluster = 16;
constexpr int64_t kDecodeBlocksMaxC = 1024;

struct DecodeBlocksArgs {
  const void* w[kDecodeMaxLayers][kDecodeLayerTensors];
  const void* wte;  // (vocab, C)
  const void* wpe;  // (wpe_rows, C)
  void* k_cache;    // (n_layer, B, nh, T, hs)
  void* v_cache;
  void* out;        // (B, C)
  const int64_t* token;  // (B,)
  const int64_t* pos;    // one position
  int n_layer, B, C, nh, hs, T;
  int64_t vocab, wpe_rows;
  float eps;
};

void decode_blocks_cuda(const DecodeBlocksArgs& args, DType dtype, uintptr_t stream);
// decode_linear's one-row CUDA kernel holds its row in registers (decode_linear.cuh) up to this K
// where the row's operands allow it, and uses shared memory above it (0: always shared memory).
// Not thread-safe to change while launching: the A/B switch of benchmarks and tests.
int linear_registers_max_k();
void set_linear_registers_max_k(int max_k);
void decode_linear_cuda(void* out, const void* x, const void* w, const void* b, const void* ln_w,
                        const void* ln_b, const void* residual, int64_t R, int64_t N, int64_t K,
                        double eps, bool gelu, bool split_k, DType dtype, uintptr_t stream);
// window_attention's input embedded in its launch (decode_io.h's window_embed); x (the
// function's argument) is null then
struct WindowIds {
  const int64_t* window;  // (B, T)
  const int64_t* token;   // (B,)
  const void* wte;        // (vocab, C)
  const void* wpe;        // (>= T, C)
  int64_t vocab;
  void* x;                // (B, T, C): written, the embedded rows
};
bool window_attention_cuda(void* y, const void* x, const void* w, const void* b, const void* ln_w,
                           const void* ln_b, const void* wp, const void* bp, int64_t B, int64_t T,
                           int64_t C, int64_t nh, double eps, DType dtype, uintptr_t stream,
                           const WindowIds* ids = nullptr);
bool window_mlp_cuda(void* out, const void* y, const void* x, const void* wp, const void* bp,
                     const void* ln_w, const void* ln_b, const void* wf, const void* bf,
                     const void* wm, const void* bm, int64_t R, int64_t C, double eps, DType dtype,
                     uintptr_t stream);
bool decode_tail_cuda(void* logits, const void* y, const void* x, const void* const* weights,
                      int64_t B, int64_t C, int64_t V, double eps, DType dtype, uintptr_t stream);
void decode_attention_cuda(void* y, const void* qkv, void* k_cache, void* v_cache,
                           const int64_t* pos, int64_t R, int64_t nh, int64_t T, int64_t hs,
                           DType dtype, uintptr_t stream);

}  // namespace gs
