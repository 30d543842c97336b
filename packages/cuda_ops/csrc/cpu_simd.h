// cpu_simd.h: the AVX2/FMA building blocks of the CPU fast paths (8 floats per register).
//
// The extension is compiled for baseline x86-64; only functions marked GS_AVX2 use AVX2/FMA
// instructions, and ops call them only when cpu_path() says the CPU has them (common.cpp), so
// one wheel runs everywhere. Off x86-64 (or with a compiler without target attributes) only the
// scalar paths exist, and build_info() says so.
#pragma once

#include "dtype.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define GS_HAVE_AVX2_PATH 1
#include <immintrin.h>
#define GS_AVX2 __attribute__((target("avx2,fma")))

namespace gs::avx2 {

GS_AVX2 static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
GS_AVX2 static inline __m256 load8(const bf16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

GS_AVX2 static inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
// float -> bfloat16, round to nearest even, NaN kept quiet (as float_to_bf16 in dtype.h)
GS_AVX2 static inline void store8(bf16_t* p, __m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
  r = _mm256_srli_epi32(r, 16);
  // pack 8 x u32 -> 8 x u16: packus works per 128-bit lane, so fix the order with a permute
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// e^x for float32 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
// (truncation error r^7/7! < 1.3e-7 relative), 2^n built in the exponent bits. Inputs are
// clamped to [-87.3, 88.7] so 2^n stays a normal float (e^x then saturates instead of
// overflowing to inf or flushing to 0, which every caller here tolerates).
GS_AVX2 static inline __m256 exp8(__m256 x) {
  const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f);  // ln 2 split for an exact n ln2
  const __m256 ln2_lo = _mm256_set1_ps(1.428606765330187e-06f);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

GS_AVX2 static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

GS_AVX2 static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace gs::avx2
#endif
