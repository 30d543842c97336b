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
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

// decode_linear's CUDA blocks (and the decode program's): 4 warps, one output each at a time.
constexpr int kDecodeLinearWarps = 4;
// The CUDA attention kernel runs one 256-thread block per (row, head): head size at most 128.
constexpr int kDecodeMaxHeadSize = 128;
// decode_linear keeps the (normalized) input row in shared memory: K at most 12,288 floats.
constexpr int64_t kDecodeMaxK = 12288;

// The decode program (decode_plan.cpp builds it): a whole batch-1 decode step -- embedding,
// every block's five ops, ln_f + LM head -- as one persistent kernel. Its blocks run the ops in
// order, each op's outputs spread over the grid, with a grid-wide barrier between ops, instead
// of one kernel launch per op (~4 us each on the H200 even with programmatic launch, most of a
// shakespeare-char step's 129 us). The arithmetic is decode_linear's and decode_attention's
// (the same device functions), so a step gives the same bits as the op-by-op step.
struct DecodeOp {
  enum Kind : int32_t { kEmbedding = 0, kLinear = 1, kAttention = 2 };
  int32_t kind = kLinear;
  int32_t vector = 0;  // 16-byte loads (aligned rows)
  int32_t N = 0;       // linear: outputs; attention: heads; embedding: channels
  int32_t K = 0;       // linear: inputs; attention: head size; embedding: vocabulary rows
  int32_t T = 0;       // attention: cache length; embedding: position rows
  int32_t gelu = 0;
  float eps = 1e-5f;
  const void* x = nullptr;  // linear: input row; attention: qkv; embedding: wte
  void* out = nullptr;      // linear: output row; attention: y; embedding: x
  const void* w = nullptr;  // linear: weight (N, K); embedding: wpe
  const void* b = nullptr;
  const void* ln_w = nullptr;
  const void* ln_b = nullptr;
  const void* residual = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int64_t* pos = nullptr;
  const int64_t* token = nullptr;
};

// The ops into device memory, and a zeroed barrier (2 unsigned); freed by decode_program_free.
DecodeOp* decode_program_upload(const DecodeOp* ops, int n_ops, unsigned** barrier);
void decode_program_free(DecodeOp* ops, unsigned* barrier);
// How many blocks of the program kernel fit on the current device at once (its grid's limit).
int decode_program_max_blocks(DType dtype, int64_t smem_bytes);
void decode_program_cuda(const DecodeOp* ops, int n_ops, unsigned* barrier, int blocks,
                         int64_t smem_bytes, DType dtype, uintptr_t stream);

void decode_linear_cuda(void* out, const void* x, const void* w, const void* b, const void* ln_w,
                        const void* ln_b, const void* residual, int64_t R, int64_t N, int64_t K,
                        double eps, bool gelu, DType dtype, uintptr_t stream);
void decode_attention_cuda(void* y, const void* qkv, void* k_cache, void* v_cache,
                           const int64_t* pos, int64_t R, int64_t nh, int64_t T, int64_t hs,
                           DType dtype, uintptr_t stream);

}  // namespace gs
