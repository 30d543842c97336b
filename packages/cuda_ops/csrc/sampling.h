// sampling.h: one next token per row of logits, drawn on the device, for the graph decoder.
//
//   z_i = logits[r, i] / temperature                    (in float, for i < V: the vocab limit)
//   keep_i = !(z_i < z_(k))                             z_(k): the k-th largest z (top-k; ties
//                                                       at it are kept); every i without top-k
//   token[r] = argmax_i  keep_i ? exp(z_i - max z) / E_i : -1,   E_i = -log(u_i) ~ Exp(1)
//
// This is sampling.py's exponential race (argmax p_i / E_i picks i with probability p_i; the
// softmax's sum is one factor for every i, so it is left out) in one launch per step, instead
// of the ~10 of torch.topk, softmax, exponential_ and argmax (~25 us a token on the H200,
// benchmarks/profiles/). Lowest index wins a tie, as torch.argmax.
//
// The random stream: u_i of row r at draw d from seed s is
//   bits = philox4x32_10(counter = (i / 4, r, d low, d high), key = (s low, s high)).w[i % 4]
//   u_i  = ((bits >> 8) + 0.5) * 2^-24             (24 bits: exact in float, never 0 or 1)
// state is an int64[3] tensor {seed, draw, ticket} on the logits' device: each call uses the
// current draw and adds one to it on the device (the last row to finish does, counted by the
// ticket), so a CUDA graph replays a fresh draw every step. Same seed, same tokens: on the CPU
// and the GPU alike, up to float rounding in exp/log on near-ties.
#pragma once

#include <cstdint>

#include "decode_io.h"
#include "dtype.h"
#include "philox.h"

namespace gs {

GS_HD float sample_uniform(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// The Philox call of elements 4c .. 4c+3 of row r at draw `draw` with `seed`.
GS_HD Philox4 sample_bits(uint64_t seed, uint64_t draw, uint32_t row, uint32_t c) {
  return philox4x32_10(c, row, static_cast<uint32_t>(draw), static_cast<uint32_t>(draw >> 32),
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// logits (R, stride) with the first V columns sampled; tokens (R,) int64; top_k 0 = no limit.
// advance (or null): the graph decoder's state, updated with the tokens as decode_advance does
// (decode_io.h), by the block that finishes last: one launch where there were two.
void sample_tokens_cuda(int64_t* tokens, const void* logits, int64_t* state, int64_t R,
                        int64_t V, int64_t stride, double temperature, int64_t top_k,
                        const DecodeState* advance, DType dtype, uintptr_t stream);

}  // namespace gs
