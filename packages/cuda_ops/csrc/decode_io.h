// decode_io.h: what goes into and comes out of a step of the graph decoder
// (gptstack/model/graph_decoding.py), as kernels. Around its fused decode kernels (decode.h) a
// step ran seven small PyTorch kernels: the embedding (two index_selects and an add), then once
// the token is drawn an index_copy into the window, two copies and pos += 1. In a CUDA graph of
// a launch-bound step each is a launch and breaks the chain of programmatic launches. With these
// two ops a cached step has one launch before its blocks and one after its sampler:
//
// decode_embed, for each row b of B:  x[b] = wte[token[b]] + wpe[p]   (p = *pos, on the device)
// window_embed, for each row b and t < T:  x[b, t] = wte[id(b, t)] + wpe[t], where
//   id(b, t) = window[b, t + 1] for t < T - 1 and token[b] for t = T - 1: the slide window's ids
//   cat(window[:, 1:], token), embedded without being made
// decode_advance, once new[b] is drawn:
//   step:   window[b, p] = token[b] (skipped for a p outside [0, T)); then p += 1
//   slide:  window[b] = (window[b, 1], ..., window[b, T - 1], token[b])
//   both:   out[b, column] = new[b]; token[b] = new[b]
// The embedding adds in float and rounds once, as PyTorch's add of two bfloat16 rows does; a
// token or position out of range gives a row of NaN (no host check: both live on the device).
// token is (B,) or (B, 1), window (B, T), out (B, n) row-major (a column is strided), all int64.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace gs {

// decode_advance on CUDA shifts a window row through shared memory (T int64 in one block)
constexpr int64_t kDecodeIoMaxT = 6144;

// The graph decoder's state that decode_advance updates: window (B, T), token (B,), pos (one
// element), out (B, out_cols) whose column `column` takes the new tokens; a slide or a step.
// sample_tokens takes one too, to update it in the same launch (sampling.h).
struct DecodeState {
  int64_t* window;
  int64_t* token;
  int64_t* pos;
  int64_t* out;
  int64_t B, T, out_cols, column;
  bool slide;
};
void decode_advance_cpu(const DecodeState& s, const int64_t* new_tokens);

void decode_embed_cuda(void* x, const int64_t* token, const int64_t* pos, const void* wte,
                       const void* wpe, int64_t B, int64_t C, int64_t vocab, int64_t positions,
                       DType dtype, uintptr_t stream);
void window_embed_cuda(void* x, const int64_t* window, const int64_t* token, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, int64_t vocab,
                       DType dtype, uintptr_t stream);
void decode_advance_cuda(const DecodeState& s, const int64_t* new_tokens, uintptr_t stream);

}  // namespace gs
