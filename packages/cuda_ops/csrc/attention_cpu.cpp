// attention_cpu.cpp: causal attention on the CPU, forward and backward (attention.h), and the
// reference the CUDA kernels are tested against.
//
// The same algorithm as the GPU, one row at a time: the forward streams keys in tiles of 64 with
// an online softmax (running max m, running sum l, output rescaled by exp(m_old - m_new); Milakov
// & Gimelshein 2018, Dao et al. 2022 Algorithm 1), so no T x T matrix exists; the backward
// rebuilds each weight from the saved lse, P_ij = exp(s_ij - lse_i), in two passes (dK/dV per
// key tile, then dQ per query tile; the formulas of Dao 2023, FlashAttention-2, Algorithm 2):
//   dV_j += P~_ij dY_i,  dS_ij = P_ij (dP~_ij - D_i),  dK_j += dS_ij q_i,  dQ_i += dS_ij k_j,
// with dP_ij = dY_i . v_j, D_i = dY_i . y_i, ~ = dropout mask applied (and scaled), and the
// softmax scale folded into dK, dQ at the end. Tasks are (b, h, tile of 16 rows), run by OpenMP
// (dynamic schedule: causal rows differ in cost). This file computes one row and one key at a
// time (dot products and row updates): the scalar path, for every dtype, and the reference.
// Where the CPU runs AVX2/FMA, float and bf16 take attention_cpu_avx2.cpp instead: the same
// tiles as small matrix products.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_cpu.h"
#include "cpu_simd.h"

namespace gs::attn {
namespace {

constexpr int64_t kKeyTile = 64;  // keys per online-softmax step (the CUDA kernels' tile)

// --- row primitives: acc . x and acc += a * x over hs elements ----------------------------------
template <typename Acc, typename E> Acc dot_scalar(const Acc* a, const E* x, int64_t n) {
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * static_cast<Acc>(load(x + i));
  return s;
}
template <typename Acc, typename E> void axpy_scalar(Acc* y, Acc a, const E* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * static_cast<Acc>(load(x + i));
}

// The row primitives of one dtype.
template <typename E> struct RowOps {
  using Acc = acc_t<E>;
  Acc dot(const Acc* a, const E* x, int64_t n) const { return dot_scalar(a, x, n); }
  void axpy(Acc* y, Acc a, const E* x, int64_t n) const { axpy_scalar(y, a, x, n); }
};

template <typename Acc, typename E> void to_acc(Acc* out, const E* x, int64_t n, Acc scale = 1) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Acc>(load(x + i)) * scale;
}
template <typename Acc, typename E> void from_acc(E* out, const Acc* x, int64_t n, Acc scale) {
  for (int64_t i = 0; i < n; ++i) store(out + i, x[i] * scale);
}

template <typename E>
void forward_tile(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v, View4<E> y,
                  acc_t<E>* lse, const DropoutSpec& drop, RowOps<E> ops, int64_t b, int64_t h,
                  int64_t tile) {
  using Acc = acc_t<E>;
  const int64_t hs = d.hs, bh = b * d.nh + h;
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(hs));
  std::vector<Acc> qa(hs), acc(hs), s(kKeyTile);
  bool keep[kKeyTile];
  for (int64_t i = tile * kRowTile; i < std::min(d.T, (tile + 1) * kRowTile); ++i) {
    to_acc(qa.data(), q.row(b, h, i), hs, scale);
    std::fill(acc.begin(), acc.end(), Acc(0));
    Acc m = -std::numeric_limits<Acc>::infinity(), l = 0;
    for (int64_t j0 = 0; j0 <= i; j0 += kKeyTile) {
      const int64_t n = std::min(kKeyTile, i + 1 - j0);  // keys j0 .. j0+n-1, all <= i
      Acc m_tile = m;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = ops.dot(qa.data(), k.row(b, h, j0 + j), hs);
        m_tile = std::max(m_tile, s[j]);
      }
      const Acc alpha = std::exp(m - m_tile);  // 0 on the first tile (m = -inf)
      l *= alpha;
      for (int64_t c = 0; c < hs; ++c) acc[c] *= alpha;
      m = m_tile;
      for (int64_t j = 0; j < n; ++j) keep[j] = true;
      if (drop.threshold)
        for (int64_t j = 0; j < n; j += 16)
          dropout_row16(drop, uint32_t(bh), uint32_t(i), uint32_t((j0 + j) >> 4), keep + j);
      for (int64_t j = 0; j < n; ++j) {
        const Acc p = std::exp(s[j] - m);
        l += p;  // the softmax normalizer counts dropped weights too
        if (keep[j]) ops.axpy(acc.data(), p, v.row(b, h, j0 + j), hs);
      }
    }
    from_acc(y.row(b, h, i), acc.data(), hs, static_cast<Acc>(drop.scale) / l);
    lse[bh * d.T + i] = m + std::log(l);
  }
}

// dK, dV for keys [16*tile, 16*tile + 16): every query i >= the tile's first key.
template <typename E>
void backward_kv_tile(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                      View4<const E> v, const acc_t<E>* lse, const acc_t<E>* D, View4<E> dk,
                      View4<E> dv, const DropoutSpec& drop, RowOps<E> ops, int64_t b, int64_t h,
                      int64_t tile) {
  using Acc = acc_t<E>;
  const int64_t hs = d.hs, bh = b * d.nh + h, j0 = tile * kRowTile;
  const int64_t nk = std::min(kRowTile, d.T - j0);
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(hs)), dscale = drop.scale;
  std::vector<Acc> ka(nk * hs), va(nk * hs), dka(nk * hs, Acc(0)), dva(nk * hs, Acc(0));
  for (int64_t j = 0; j < nk; ++j) {
    to_acc(&ka[j * hs], k.row(b, h, j0 + j), hs, scale);
    to_acc(&va[j * hs], v.row(b, h, j0 + j), hs);
  }
  bool keep[kRowTile];
  for (int64_t i = j0; i < d.T; ++i) {
    const int64_t n = std::min(nk, i + 1 - j0);  // keys j0 .. j0+n-1 are <= i
    for (int64_t j = 0; j < n; ++j) keep[j] = true;
    if (drop.threshold) dropout_row16(drop, uint32_t(bh), uint32_t(i), uint32_t(tile), keep);
    const E* qi = q.row(b, h, i);
    const E* dyi = dy.row(b, h, i);
    for (int64_t j = 0; j < n; ++j) {
      const Acc p = std::exp(ops.dot(&ka[j * hs], qi, hs) - lse[bh * d.T + i]);
      const Acc dp = keep[j] ? ops.dot(&va[j * hs], dyi, hs) * dscale : Acc(0);
      if (keep[j]) ops.axpy(&dva[j * hs], p * dscale, dyi, hs);
      ops.axpy(&dka[j * hs], p * (dp - D[bh * d.T + i]), qi, hs);
    }
  }
  for (int64_t j = 0; j < nk; ++j) {
    from_acc(dk.row(b, h, j0 + j), &dka[j * hs], hs, scale);
    from_acc(dv.row(b, h, j0 + j), &dva[j * hs], hs, Acc(1));
  }
}

// dQ for queries [16*tile, 16*tile + 16): every key j <= i.
template <typename E>
void backward_q_tile(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                     View4<const E> v, const acc_t<E>* lse, const acc_t<E>* D, View4<E> dq,
                     const DropoutSpec& drop, RowOps<E> ops, int64_t b, int64_t h,
                     int64_t tile) {
  using Acc = acc_t<E>;
  const int64_t hs = d.hs, bh = b * d.nh + h;
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(hs)), dscale = drop.scale;
  std::vector<Acc> qa(hs), dya(hs), dqa(hs);
  bool keep[kRowTile];
  for (int64_t i = tile * kRowTile; i < std::min(d.T, (tile + 1) * kRowTile); ++i) {
    to_acc(qa.data(), q.row(b, h, i), hs, scale);
    to_acc(dya.data(), dy.row(b, h, i), hs);
    std::fill(dqa.begin(), dqa.end(), Acc(0));
    const Acc lse_i = lse[bh * d.T + i], D_i = D[bh * d.T + i];
    for (int64_t j0 = 0; j0 <= i; j0 += kRowTile) {
      const int64_t n = std::min(kRowTile, i + 1 - j0);
      for (int64_t j = 0; j < n; ++j) keep[j] = true;
      if (drop.threshold) dropout_row16(drop, uint32_t(bh), uint32_t(i), uint32_t(j0 >> 4), keep);
      for (int64_t j = 0; j < n; ++j) {
        const E* kj = k.row(b, h, j0 + j);
        const Acc p = std::exp(ops.dot(qa.data(), kj, hs) - lse_i);
        const Acc dp = keep[j] ? ops.dot(dya.data(), v.row(b, h, j0 + j), hs) * dscale : Acc(0);
        ops.axpy(dqa.data(), p * (dp - D_i), kj, hs);
      }
    }
    from_acc(dq.row(b, h, i), dqa.data(), hs, scale);
  }
}

}  // namespace

template <typename E>
void forward_cpu(const Dims& d, View4<const E> q, View4<const E> k, View4<const E> v,
                 View4<E> y, acc_t<E>* lse, const DropoutSpec& drop, bool avx2, int threads) {
  (void)avx2;  // false, or a build without the AVX2 path: the rows below
#ifdef GS_HAVE_AVX2_PATH
  if constexpr (!std::is_same_v<E, double>)
    if (avx2) return forward_avx2(d, q, k, v, y, lse, drop, threads);
#endif
  const RowOps<E> ops;
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    forward_tile(d, q, k, v, y, lse, drop, ops, b, h, tile);
  });
}

template <typename E>
void backward_cpu(const Dims& d, View4<const E> dy, View4<const E> q, View4<const E> k,
                  View4<const E> v, View4<const E> y, const acc_t<E>* lse, View4<E> dq,
                  View4<E> dk, View4<E> dv, const DropoutSpec& drop, bool avx2, int threads) {
  using Acc = acc_t<E>;
  (void)avx2;
#ifdef GS_HAVE_AVX2_PATH
  if constexpr (!std::is_same_v<E, double>)
    if (avx2) return backward_avx2(d, dy, q, k, v, y, lse, dq, dk, dv, drop, threads);
#endif
  const RowOps<E> ops;
  // D_i = dY_i . y_i (Dao 2023, Algorithm 2 line 4): the row term of the softmax backward.
  std::vector<Acc> D(d.B * d.nh * d.T);
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    std::vector<Acc> dya(d.hs);
    for (int64_t i = tile * kRowTile; i < std::min(d.T, (tile + 1) * kRowTile); ++i) {
      to_acc(dya.data(), dy.row(b, h, i), d.hs);
      D[(b * d.nh + h) * d.T + i] = ops.dot(dya.data(), y.row(b, h, i), d.hs);
    }
  });
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    backward_kv_tile(d, dy, q, k, v, lse, D.data(), dk, dv, drop, ops, b, h, tile);
  });
  for_each_tile(d, threads, [&](int64_t b, int64_t h, int64_t tile) {
    backward_q_tile(d, dy, q, k, v, lse, D.data(), dq, drop, ops, b, h, tile);
  });
}

#define GS_ATTN_CPU_INSTANCE(E)                                                                  \
  template void forward_cpu<E>(const Dims&, View4<const E>, View4<const E>, View4<const E>,     \
                               View4<E>, acc_t<E>*, const DropoutSpec&, bool, int);             \
  template void backward_cpu<E>(const Dims&, View4<const E>, View4<const E>, View4<const E>,    \
                                View4<const E>, View4<const E>, const acc_t<E>*, View4<E>,      \
                                View4<E>, View4<E>, const DropoutSpec&, bool, int);
GS_ATTN_CPU_INSTANCE(float)
GS_ATTN_CPU_INSTANCE(double)
GS_ATTN_CPU_INSTANCE(bf16_t)
#undef GS_ATTN_CPU_INSTANCE

}  // namespace gs::attn
