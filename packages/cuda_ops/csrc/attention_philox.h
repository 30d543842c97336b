// attention_philox.h: the dropout random stream of causal attention, one definition for the CPU,
// the CUDA kernels and the warp emulator (plain C++ that nvcc also compiles for the device).
//
// Generator: Philox4x32-10 (philox.h). Counter-based: the random bits of an attention weight
// are a pure function of (seed, head, query i, key j), so the forward and both backward stages
// regenerate the same mask without storing it, in any tile order.
//
// Element (bh = b*nh + h, query i, key j) takes 16 bits of one Philox call:
//   counter = ( (j >> 4) * 4 + ((j & 7) >> 1),  (i >> 4) * 8 + (i & 7),  bh,  0 )
//   word    = ((j >> 3) & 1) * 2 + ((i >> 3) & 1),   half = j & 1 (0: low 16 bits)
// i.e. one call covers rows {r, r+8} x keys {2c, 2c+1, 2c+8, 2c+9} of a 16 x 16 block, exactly the
// 8 scores one thread holds in an mma.m16n8k16 accumulator pair (attention_mma.cuh), so the
// forward kernel spends one call per 8 weights. The key is the 64-bit seed (low word, high word).
// The weight is kept iff its 16 bits >= threshold = round(p * 65536): the drop probability is p
// rounded to a multiple of 2^-16, and kept weights are scaled by 65536 / (65536 - threshold).
// This stream is not PyTorch's: the same seed gives other masks than F.dropout.
#pragma once

#include <cstdint>

#include "philox.h"

namespace gs::attn {

// Dropout settings of one call: threshold 0 means no dropout.
struct DropoutSpec {
  uint32_t threshold = 0;  // drop iff 16 random bits < threshold (1 .. 65535)
  double scale = 1.0;      // 65536 / (65536 - threshold), applied to kept weights
  uint32_t key0 = 0, key1 = 0;  // the seed's low and high 32 bits (CPU side; CUDA reads a pointer)
};

// The threshold for drop probability p in [0, 1): round(p * 65536), at most 65535.
inline uint32_t dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;
  double t = p * 65536.0 + 0.5;
  return t >= 65535.0 ? 65535u : static_cast<uint32_t>(t);
}

// Counter words of element (bh, i, j) and where its 16 bits sit (the mapping above).
GS_HD void dropout_counter(uint32_t bh, uint32_t i, uint32_t j, uint32_t* c0, uint32_t* c1,
                           uint32_t* c2, int* word, int* half) {
  *c0 = (j >> 4) * 4u + ((j & 7u) >> 1);
  *c1 = (i >> 4) * 8u + (i & 7u);
  *c2 = bh;
  *word = static_cast<int>(((j >> 3) & 1u) * 2u + ((i >> 3) & 1u));
  *half = static_cast<int>(j & 1u);
}

// The 16 random bits of element (bh, i, j): the reference the kernels' batched calls match.
GS_HD uint32_t dropout_bits(uint32_t key0, uint32_t key1, uint32_t bh, uint32_t i, uint32_t j) {
  uint32_t c0, c1, c2;
  int word, half;
  dropout_counter(bh, i, j, &c0, &c1, &c2, &word, &half);
  Philox4 r = philox4x32_10(c0, c1, c2, 0u, key0, key1);
  return (r.w[word] >> (16 * half)) & 0xFFFFu;
}

}  // namespace gs::attn
