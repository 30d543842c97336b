// attention_cpu_avx2.cpp: causal attention on a CPU with AVX2/FMA, float and bf16 (attention.h;
// attention_cpu.cpp has the row-at-a-time path, the reference this one is tested against).
//
// The tasks and formulas of attention_cpu.cpp, with each task's work done as small matrix
// products instead of one dot product per (query, key): a dot product of hs = 32 is four
// multiply-adds and a horizontal sum, so that path spends most of its time summing across
// registers. A task owns 16 queries (forward, dQ) or 16 keys (dK, dV) and transposes their rows
// once, (hs x 16); the other side streams in chunks of 64 rows, so every score block comes out
// 16 wide, one register pair per row: scores, softmax weights (exp8) and their gradients are
// computed for 16 of the task's rows at once, and the products that follow read the block
// transposed (mul_add_atb) instead of transposing anything per chunk:
//   forward   S^T = K Q^T (keys x 16), online softmax per query (running max m, sum l),
//             acc += P V
//   dK, dV    S = Q K^T, dP = dY V^T (queries x 16), P = exp(S - lse), dV += P~^T dY,
//             dS = P (dP~ - D), dK += dS^T Q
//   dQ        S^T, dP^T = V dY^T (keys x 16), dS as above, dQ += dS K
// (~ = dropout mask applied and scaled; the masks are attention_cpu.h's dropout_row16, so both
// paths and the CUDA kernels drop the same weights). The softmax scale multiplies q wherever a
// score is computed, so each score is the same float in all three, and exp(s - lse) is exactly 1
// for a query's only key. Rows past the ends are zero, and the weights of keys after the query
// (causal) or past T are set to 0. It replaced an AVX2 version of the row path (vector dot
// products and row updates per (query, key)). Measured against PyTorch: `gptstack bench
// attention --device cpu` (packages/cuda_ops/README.md links the recorded runs).
#include "attention_cpu.h"
#include "cpu_simd.h"

#ifdef GS_HAVE_AVX2_PATH
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gs::attn {
namespace {

constexpr int kChunk = 64;  // keys (forward, dQ) or queries (dK, dV) per step
constexpr int kTile = static_cast<int>(kRowTile);  // the task's rows: one register pair

int round16(int64_t n) { return static_cast<int>((n + 15) / 16 * 16); }

// C (m x 16) = A (m x K) . B (K x 16), row-major; m a multiple of 4. Each 4 x 16 block keeps 8
// accumulators: per k, two loads of B and four broadcasts of A.
GS_AVX2 void mul_ab16(float* C, const float* A, int lda, const float* B, int m, int K) {
  for (int r = 0; r < m; r += 4) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < K; ++k) {
      const __m256 b0 = _mm256_loadu_ps(B + k * kTile), b1 = _mm256_loadu_ps(B + k * kTile + 8);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256 a = _mm256_broadcast_ss(A + (r + i) * lda + k);
        acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_ps(C + (r + i) * kTile, acc[i][0]);
      _mm256_storeu_ps(C + (r + i) * kTile + 8, acc[i][1]);
    }
  }
}

// Y (16 x N) += P^T . B: P (K x 16), B (K x N), Y row-major; N a multiple of 32. Each 2 x 32
// block keeps 8 accumulators: per k, four loads of B and two broadcasts from P's column.
GS_AVX2 void mul_add_atb(float* Y, const float* P, const float* B, int N, int K) {
  for (int r = 0; r < kTile; r += 2)
    for (int c = 0; c < N; c += 32) {
      __m256 acc[2][4];
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc[i][v] = _mm256_loadu_ps(Y + (r + i) * N + c + 8 * v);
      for (int k = 0; k < K; ++k) {
        __m256 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) b[v] = _mm256_loadu_ps(B + k * N + c + 8 * v);
#pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) {
          const __m256 p = _mm256_broadcast_ss(P + k * kTile + r + i);
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) acc[i][v] = _mm256_fmadd_ps(p, b[v], acc[i][v]);
        }
      }
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) _mm256_storeu_ps(Y + (r + i) * N + c + 8 * v, acc[i][v]);
    }
}

// rows t0 .. t0+n-1 of x (b, h) as floats times scale, rows of hs; rows n .. padded-1 zero
template <typename E>
GS_AVX2 void load_rows(float* out, View4<const E> x, int64_t b, int64_t h, int64_t t0, int64_t n,
                       int padded, int hs, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int r = 0; r < padded; ++r)
    for (int c = 0; c < hs; c += 8)
      _mm256_storeu_ps(out + r * hs + c,
                       r < n ? _mm256_mul_ps(avx2::load8(x.row(b, h, t0 + r) + c), s)
                             : _mm256_setzero_ps());
}

// the task's rows t0 .. t0+n-1 (n <= 16) transposed, times scale: out[c * 16 + r]; columns n ..
// 15 zero
template <typename E>
void load_transposed(float* out, View4<const E> x, int64_t b, int64_t h, int64_t t0, int64_t n,
                     int hs, float scale) {
  for (int r = 0; r < kTile; ++r) {
    const E* row = r < n ? x.row(b, h, t0 + r) : nullptr;
    for (int c = 0; c < hs; ++c) out[c * kTile + r] = row ? load(row + c) * scale : 0.0f;
  }
}

// out row = acc row * scale, as E
template <typename E> GS_AVX2 void store_row(E* out, const float* acc, int hs, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int c = 0; c < hs; c += 8)
    avx2::store8(out + c, _mm256_mul_ps(_mm256_loadu_ps(acc + c), s));
}

// The lanes of a register pair (lane r of pair half e is row 8 e + r) with lo <= row < hi.
struct Rows16 {
  __m256 lo, hi;
};
GS_AVX2 inline Rows16 rows_between(int lo, int hi) {
  const __m256i r0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i r1 = _mm256_add_epi32(r0, _mm256_set1_epi32(8));
  const __m256i l = _mm256_set1_epi32(lo - 1), h = _mm256_set1_epi32(hi);
  return {_mm256_castsi256_ps(
              _mm256_and_si256(_mm256_cmpgt_epi32(r0, l), _mm256_cmpgt_epi32(h, r0))),
          _mm256_castsi256_ps(
              _mm256_and_si256(_mm256_cmpgt_epi32(r1, l), _mm256_cmpgt_epi32(h, r1)))};
}

// The task's queries i0 + r (r < nr) that see key j0 + j (j < nk: a real key): j0 + j <= i0 + r.
GS_AVX2 inline Rows16 queries_seeing(int64_t j0, int j, int64_t nk, int64_t i0, int64_t nr) {
  return rows_between(int(j0 + j - i0), j < nk ? int(nr) : 0);
}

// Per-thread buffers of one task (floats; sizes for hs up to 128).
struct Scratch {
  std::vector<float> t1, t2, r1, r2, acc, acc2, s1, s2, keep;
  explicit Scratch(int hs)
      : t1(hs * kTile), t2(hs * kTile), r1(kChunk * hs), r2(kChunk * hs), acc(kTile * hs),
        acc2(kTile * hs), s1(kChunk * kTile), s2(kChunk * kTile), keep(kChunk * kTile) {}
};

// keep[j * 16 + r] = drop.scale, or 0 where the dropout stream drops (query i0 + r, key j0 + j):
// queries r < nr, keys j < nk (others 0)
void dropout_block(float* keep, const DropoutSpec& drop, int64_t bh, int64_t i0, int64_t nr,
                   int64_t j0, int64_t nk) {
  const float dscale = static_cast<float>(drop.scale);
  std::fill(keep, keep + kChunk * kTile, 0.0f);
  for (int r = 0; r < nr; ++r)
    for (int j = 0; j < nk && j0 + j <= i0 + r; j += 16) {
      bool flags[16];
      dropout_row16(drop, uint32_t(bh), uint32_t(i0 + r), uint32_t((j0 + j) >> 4), flags);
      for (int e = 0; e < 16 && j + e < nk; ++e) keep[(j + e) * kTile + r] = flags[e] ? dscale : 0;
    }
}

template <typename E>
GS_AVX2 void forward_task(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v,
                          View4<E> y, float* lse, const DropoutSpec& drop, int64_t b, int64_t h,
                          int64_t tile, Scratch& w) {
  const int hs = static_cast<int>(d.hs);
  const int64_t bh = b * d.nh + h, i0 = tile * kRowTile, nr = std::min(kRowTile, d.T - i0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float *qt = w.t1.data(), *kr = w.r1.data(), *vr = w.r2.data(), *acc = w.acc.data();
  float *St = w.s1.data(), *keep = w.keep.data();
  load_transposed(qt, q, b, h, i0, nr, hs, scale);
  std::fill(acc, acc + kTile * hs, 0.0f);
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 m[2] = {ninf, ninf}, l[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t j0 = 0; j0 < i0 + nr; j0 += kChunk) {
    const int64_t nk = std::min<int64_t>(kChunk, i0 + nr - j0);
    const int nkp = round16(nk);
    load_rows(kr, k, b, h, j0, nk, nkp, hs, 1.0f);
    load_rows(vr, v, b, h, j0, nk, nkp, hs, 1.0f);
    mul_ab16(St, kr, hs, qt, nkp, hs);  // St[j][r] = k_j . q_r scale
    auto seen = [&](int j) { return queries_seeing(j0, j, nk, i0, nr); };
    __m256 mt[2] = {m[0], m[1]};
    for (int j = 0; j < nk; ++j) {
      const Rows16 in = seen(j);
      mt[0] = _mm256_max_ps(mt[0], _mm256_blendv_ps(ninf, _mm256_loadu_ps(St + j * kTile), in.lo));
      mt[1] = _mm256_max_ps(mt[1], _mm256_blendv_ps(ninf, _mm256_loadu_ps(St + j * kTile + 8), in.hi));
    }
    float alpha[kTile];
    for (int e = 0; e < 2; ++e) {
      // the rescale of what the row summed so far: 0 on its first keys, 1 while it has none
      const __m256 none = _mm256_cmp_ps(mt[e], ninf, _CMP_EQ_OQ);
      const __m256 a = _mm256_blendv_ps(avx2::exp8(_mm256_sub_ps(m[e], mt[e])), one, none);
      _mm256_storeu_ps(alpha + 8 * e, a);
      l[e] = _mm256_mul_ps(l[e], a);
      m[e] = mt[e];
    }
    for (int j = 0; j < nkp; ++j) {
      const Rows16 in = seen(j);
      float* s = St + j * kTile;
      const __m256 p0 = _mm256_and_ps(avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(s), m[0])), in.lo);
      const __m256 p1 =
          _mm256_and_ps(avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + 8), m[1])), in.hi);
      l[0] = _mm256_add_ps(l[0], p0);  // the softmax normalizer counts dropped weights too
      l[1] = _mm256_add_ps(l[1], p1);
      _mm256_storeu_ps(s, p0);
      _mm256_storeu_ps(s + 8, p1);
    }
    if (drop.threshold) {  // drop.scale is applied with 1 / l at the end
      dropout_block(keep, drop, bh, i0, nr, j0, nk);
      for (int j = 0; j < nkp * kTile; ++j)
        if (keep[j] == 0.0f) St[j] = 0.0f;
    }
    for (int r = 0; r < kTile; ++r) {
      const __m256 a = _mm256_set1_ps(alpha[r]);
      for (int c = 0; c < hs; c += 8)
        _mm256_storeu_ps(acc + r * hs + c, _mm256_mul_ps(_mm256_loadu_ps(acc + r * hs + c), a));
    }
    mul_add_atb(acc, St, vr, hs, nkp);
  }
  float mr[kTile], lr[kTile];
  _mm256_storeu_ps(mr, m[0]);
  _mm256_storeu_ps(mr + 8, m[1]);
  _mm256_storeu_ps(lr, l[0]);
  _mm256_storeu_ps(lr + 8, l[1]);
  for (int r = 0; r < nr; ++r) {
    store_row(y.row(b, h, i0 + r), acc + r * hs, hs, static_cast<float>(drop.scale) / lr[r]);
    lse[bh * d.T + i0 + r] = mr[r] + std::log(lr[r]);
  }
}

// dK, dV of keys j0 .. j0+15 (j0 = 16 tile) over the queries i >= j0 that see them.
template <typename E>
GS_AVX2 void backward_kv_task(const Dims& d, View4<const E> dy, View4<const E> q,
                              View4<const E> k, View4<const E> v, const float* lse,
                              const float* D, View4<E> dk, View4<E> dv, const DropoutSpec& drop,
                              int64_t b, int64_t h, int64_t tile, Scratch& w) {
  const int hs = static_cast<int>(d.hs);
  const int64_t bh = b * d.nh + h, j0 = tile * kRowTile, nk = std::min(kRowTile, d.T - j0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float *kt = w.t1.data(), *vt = w.t2.data(), *qr = w.r1.data(), *dyr = w.r2.data();
  float *dka = w.acc.data(), *dva = w.acc2.data(), *S = w.s1.data(), *dP = w.s2.data();
  load_transposed(kt, k, b, h, j0, nk, hs, 1.0f);
  load_transposed(vt, v, b, h, j0, nk, hs, 1.0f);
  std::fill(dka, dka + kTile * hs, 0.0f);
  std::fill(dva, dva + kTile * hs, 0.0f);
  const __m256 dscale = _mm256_set1_ps(static_cast<float>(drop.scale));
  for (int64_t i0 = j0; i0 < d.T; i0 += kChunk) {
    const int64_t nq = std::min<int64_t>(kChunk, d.T - i0);
    const int nqp = round16(nq);
    load_rows(qr, q, b, h, i0, nq, nqp, hs, scale);
    load_rows(dyr, dy, b, h, i0, nq, nqp, hs, 1.0f);
    mul_ab16(S, qr, hs, kt, nqp, hs);    // S[c][j] = q_c scale . k_j
    mul_ab16(dP, dyr, hs, vt, nqp, hs);  // dP[c][j] = dy_c . v_j
    for (int c = 0; c < nqp; ++c) {
      const int64_t i = i0 + c;
      // query i sees keys j0 .. i (and none past nk or T)
      const Rows16 in = rows_between(0, c < nq ? int(std::min<int64_t>(nk, i - j0 + 1)) : 0);
      __m256 kf[2] = {dscale, dscale};
      if (drop.threshold && c < nq) {
        bool flags[kTile];
        float f[kTile];
        dropout_row16(drop, uint32_t(bh), uint32_t(i), uint32_t(tile), flags);
        for (int j = 0; j < kTile; ++j) f[j] = flags[j] ? static_cast<float>(drop.scale) : 0.0f;
        kf[0] = _mm256_loadu_ps(f);
        kf[1] = _mm256_loadu_ps(f + 8);
      }
      const __m256 lse_i = _mm256_set1_ps(c < nq ? lse[bh * d.T + i] : 0.0f);
      const __m256 D_i = _mm256_set1_ps(c < nq ? D[bh * d.T + i] : 0.0f);
      const __m256 mask[2] = {in.lo, in.hi};
      for (int e = 0; e < 2; ++e) {
        float *s = S + c * kTile + 8 * e, *dp = dP + c * kTile + 8 * e;
        const __m256 p =
            _mm256_and_ps(avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(s), lse_i)), mask[e]);
        _mm256_storeu_ps(s, _mm256_mul_ps(p, kf[e]));  // P~ for dV
        _mm256_storeu_ps(dp, _mm256_mul_ps(p, _mm256_fmsub_ps(_mm256_loadu_ps(dp), kf[e], D_i)));
      }
    }
    mul_add_atb(dva, S, dyr, hs, nqp);
    mul_add_atb(dka, dP, qr, hs, nqp);  // q already carries the scale
  }
  for (int j = 0; j < nk; ++j) {
    store_row(dk.row(b, h, j0 + j), dka + j * hs, hs, 1.0f);
    store_row(dv.row(b, h, j0 + j), dva + j * hs, hs, 1.0f);
  }
}

// dQ of queries i0 .. i0+15 (i0 = 16 tile) over the keys j <= i.
template <typename E>
GS_AVX2 void backward_q_task(const Dims& d, View4<const E> dy, View4<const E> q,
                             View4<const E> k, View4<const E> v, const float* lse, const float* D,
                             View4<E> dq, const DropoutSpec& drop, int64_t b, int64_t h,
                             int64_t tile, Scratch& w) {
  const int hs = static_cast<int>(d.hs);
  const int64_t bh = b * d.nh + h, i0 = tile * kRowTile, nr = std::min(kRowTile, d.T - i0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float *qt = w.t1.data(), *dyt = w.t2.data(), *kr = w.r1.data(), *vr = w.r2.data();
  float *dqa = w.acc.data(), *St = w.s1.data(), *dPt = w.s2.data(), *keep = w.keep.data();
  load_transposed(qt, q, b, h, i0, nr, hs, scale);
  load_transposed(dyt, dy, b, h, i0, nr, hs, 1.0f);
  std::fill(dqa, dqa + kTile * hs, 0.0f);
  float lse_r[kTile] = {}, D_r[kTile] = {};
  std::copy(lse + bh * d.T + i0, lse + bh * d.T + i0 + nr, lse_r);
  std::copy(D + bh * d.T + i0, D + bh * d.T + i0 + nr, D_r);
  const __m256 lse_v[2] = {_mm256_loadu_ps(lse_r), _mm256_loadu_ps(lse_r + 8)};
  const __m256 D_v[2] = {_mm256_loadu_ps(D_r), _mm256_loadu_ps(D_r + 8)};
  const __m256 dscale = _mm256_set1_ps(static_cast<float>(drop.scale));
  for (int64_t j0 = 0; j0 < i0 + nr; j0 += kChunk) {
    const int64_t nk = std::min<int64_t>(kChunk, i0 + nr - j0);
    const int nkp = round16(nk);
    load_rows(kr, k, b, h, j0, nk, nkp, hs, 1.0f);
    load_rows(vr, v, b, h, j0, nk, nkp, hs, 1.0f);
    mul_ab16(St, kr, hs, qt, nkp, hs);    // St[j][r] = k_j . q_r scale
    mul_ab16(dPt, vr, hs, dyt, nkp, hs);  // dPt[j][r] = v_j . dy_r
    if (drop.threshold) dropout_block(keep, drop, bh, i0, nr, j0, nk);
    for (int j = 0; j < nkp; ++j) {
      const Rows16 in = queries_seeing(j0, j, nk, i0, nr);
      const __m256 mask[2] = {in.lo, in.hi};
      for (int e = 0; e < 2; ++e) {
        float *s = St + j * kTile + 8 * e, *dp = dPt + j * kTile + 8 * e;
        const __m256 kf = drop.threshold ? _mm256_loadu_ps(keep + j * kTile + 8 * e) : dscale;
        const __m256 p =
            _mm256_and_ps(avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(s), lse_v[e])), mask[e]);
        _mm256_storeu_ps(s, _mm256_mul_ps(p, _mm256_fmsub_ps(_mm256_loadu_ps(dp), kf, D_v[e])));
      }
    }
    mul_add_atb(dqa, St, kr, hs, nkp);  // dQ += dS K, dS read transposed from St
  }
  for (int r = 0; r < nr; ++r) store_row(dq.row(b, h, i0 + r), dqa + r * hs, hs, scale);
}

// D_i = dY_i . y_i for queries i0 .. i0+15 (i0 = 16 tile), each summed in order of c with one
// fused multiply-add per element: the order in which mul_ab16 gives dP_ij = dY_i . v_j, so
// where y_i = v_j (one key, T = 1) dP - D is exactly 0, as is the gradient.
template <typename E>
GS_AVX2 void row_terms_task(const Dims& d, View4<const E> dy, View4<const E> y, float* D,
                            int64_t b, int64_t h, int64_t tile, Scratch& w) {
  const int hs = static_cast<int>(d.hs);
  const int64_t bh = b * d.nh + h, i0 = tile * kRowTile, nr = std::min(kRowTile, d.T - i0);
  float *dyt = w.t1.data(), *yt = w.t2.data();
  load_transposed(dyt, dy, b, h, i0, nr, hs, 1.0f);
  load_transposed(yt, y, b, h, i0, nr, hs, 1.0f);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  for (int c = 0; c < hs; ++c) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(dyt + c * kTile), _mm256_loadu_ps(yt + c * kTile), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(dyt + c * kTile + 8),
                         _mm256_loadu_ps(yt + c * kTile + 8), s1);
  }
  float out[kTile];
  _mm256_storeu_ps(out, s0);
  _mm256_storeu_ps(out + 8, s1);
  std::copy(out, out + nr, D + bh * d.T + i0);
}

}  // namespace

template <typename E>
void forward_avx2(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v,
                  View4<E> y, float* lse, const DropoutSpec& drop, int threads) {
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    thread_local Scratch w(128);
    forward_task(d, q, k, v, y, lse, drop, b, h, tile, w);
  });
}

template <typename E>
void backward_avx2(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                   View4<const E> v, View4<const E> y, const float* lse, View4<E> dq,
                   View4<E> dk, View4<E> dv, const DropoutSpec& drop, int threads) {
  std::vector<float> D(d.B * d.nh * d.T);
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    thread_local Scratch w(128);
    row_terms_task(d, dy, y, D.data(), b, h, tile, w);
  });
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    thread_local Scratch w(128);
    backward_kv_task(d, dy, q, k, v, lse, D.data(), dk, dv, drop, b, h, tile, w);
  });
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    thread_local Scratch w(128);
    backward_q_task(d, dy, q, k, v, lse, D.data(), dq, drop, b, h, tile, w);
  });
}

#define GS_ATTN_AVX2_INSTANCE(E)                                                                 \
  template void forward_avx2<E>(const Dims&, View4<const E>, View4<const E>, View4<const E>,    \
                                View4<E>, float*, const DropoutSpec&, int);                    \
  template void backward_avx2<E>(const Dims&, View4<const E>, View4<const E>, View4<const E>,   \
                                 View4<const E>, View4<const E>, const float*, View4<E>,        \
                                 View4<E>, View4<E>, const DropoutSpec&, int);
GS_ATTN_AVX2_INSTANCE(float)
GS_ATTN_AVX2_INSTANCE(bf16_t)
#undef GS_ATTN_AVX2_INSTANCE

}  // namespace gs::attn
#endif  // GS_HAVE_AVX2_PATH
