// decode.cpp: the fused decode-step ops on the CPU (the reference the CUDA kernels are tested
// against, through the same torch comparisons), and the _C bindings of decode_linear and
// decode_attention. Formulas: decode.h. Scalar loops, OpenMP over output rows; float64 is
// computed in double (gradcheck-free ops, but tests use it as the exact reference).
#include "decode.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common.h"
#include "gelu.h"

using namespace nb::literals;

namespace gs {
namespace {

template <typename A> A gelu_exact_tanh(A v) {
  const A k = A(kGeluSqrt2OverPi), c = A(kGeluCubic);
  return A(0.5) * v * (A(1) + std::tanh(k * (v + c * v * v * v)));
}

template <typename T>
void decode_linear_cpu(T* out, const T* x, const T* w, const T* b, const T* ln_w, const T* ln_b,
                       const T* residual, int64_t R, int64_t N, int64_t K, double eps, bool gelu,
                       int nt) {
  using A = acc_t<T>;
  std::vector<A> row(K);
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * K;
    for (int64_t k = 0; k < K; ++k) row[k] = load(xr + k);
    if (ln_w) {
      A mean = 0, var = 0;
      for (int64_t k = 0; k < K; ++k) mean += row[k];
      mean /= A(K);
      for (int64_t k = 0; k < K; ++k) var += (row[k] - mean) * (row[k] - mean);
      const A rstd = A(1) / std::sqrt(var / A(K) + A(eps));
      for (int64_t k = 0; k < K; ++k)
        row[k] = (row[k] - mean) * rstd * load(ln_w + k) + (ln_b ? load(ln_b + k) : A(0));
    }
#pragma omp parallel for num_threads(nt) schedule(static) if (N * K >= kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) {
      const T* wn = w + n * K;
      A acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += load(wn + k) * row[k];
      if (b) acc += load(b + n);
      if (gelu) acc = gelu_exact_tanh(acc);
      if (residual) acc += load(residual + r * N + n);
      store(out + r * N + n, acc);
    }
  }
}

template <typename T>
void decode_attention_cpu(T* y, const T* qkv, T* kc, T* vc, int64_t p, int64_t R, int64_t nh,
                          int64_t T_, int64_t hs) {
  using A = acc_t<T>;
  const int64_t C = nh * hs;
  const A scale = A(1) / std::sqrt(A(hs));
  std::vector<A> s(T_);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < nh; ++h) {
      T* yh = y + r * C + h * hs;
      if (p < 0 || p >= T_) {
        for (int64_t d = 0; d < hs; ++d) store(yh + d, std::numeric_limits<A>::quiet_NaN());
        continue;
      }
      const T* q = qkv + r * 3 * C + h * hs;
      T* kh = kc + (r * nh + h) * T_ * hs;  // (T, hs) of this row and head
      T* vh = vc + (r * nh + h) * T_ * hs;
      for (int64_t d = 0; d < hs; ++d) {
        kh[p * hs + d] = q[C + d];
        vh[p * hs + d] = q[2 * C + d];
      }
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t j = 0; j <= p; ++j) {
        A dot = 0;
        for (int64_t d = 0; d < hs; ++d) dot += load(q + d) * load(kh + j * hs + d);
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      A total = 0;
      for (int64_t j = 0; j <= p; ++j) total += (s[j] = std::exp(s[j] - m));
      for (int64_t d = 0; d < hs; ++d) {
        A acc = 0;
        for (int64_t j = 0; j <= p; ++j) acc += s[j] * load(vh + j * hs + d);
        store(yh + d, acc / total);
      }
    }
}

// decode_blocks on the CPU: the embedding, then decode_linear / decode_attention in the order
// of decode.h, one row at a time (a row whose token, or a position, is out of range gives NaN
// and writes nothing, as on the GPU)
template <typename T>
void decode_blocks_cpu(const DecodeBlocksArgs& a, int nt) {
  using A = acc_t<T>;
  const int64_t C = a.C, p = *a.pos;
  const int64_t layer_cache = int64_t(a.B) * a.nh * a.T * a.hs;  // one layer of a cache
  std::vector<T> x(C), qkv(3 * C), y(C), x2(C), h(4 * C);
  const T* wte = static_cast<const T*>(a.wte);
  const T* wpe = static_cast<const T*>(a.wpe);
  for (int64_t b = 0; b < a.B; ++b) {
    T* out = static_cast<T*>(a.out) + b * C;
    const int64_t tok = a.token[b];
    if (p < 0 || p >= a.T || p >= a.wpe_rows || tok < 0 || tok >= a.vocab) {
      for (int64_t c = 0; c < C; ++c) store(out + c, std::numeric_limits<A>::quiet_NaN());
      continue;
    }
    for (int64_t c = 0; c < C; ++c) store(&x[c], load(wte + tok * C + c) + load(wpe + p * C + c));
    for (int l = 0; l < a.n_layer; ++l) {
      auto w = [&](int i) { return static_cast<const T*>(a.w[l][i]); };
      const int64_t off = l * layer_cache + b * a.nh * a.T * a.hs;  // (nh, T, hs) of row b
      decode_linear_cpu<T>(qkv.data(), x.data(), w(kAttnW), w(kAttnB), w(kLn1W), w(kLn1B),
                           nullptr, 1, 3 * C, C, a.eps, false, nt);
      decode_attention_cpu<T>(y.data(), qkv.data(), static_cast<T*>(a.k_cache) + off,
                              static_cast<T*>(a.v_cache) + off, p, 1, a.nh, a.T, a.hs);
      decode_linear_cpu<T>(x2.data(), y.data(), w(kProjW), w(kProjB), nullptr, nullptr, x.data(),
                           1, C, C, a.eps, false, nt);
      decode_linear_cpu<T>(h.data(), x2.data(), w(kFcW), w(kFcB), w(kLn2W), w(kLn2B), nullptr, 1,
                           4 * C, C, a.eps, true, nt);
      decode_linear_cpu<T>(x.data(), h.data(), w(kFc2W), w(kFc2B), nullptr, nullptr, x2.data(),
                           1, C, 4 * C, a.eps, false, nt);
    }
    std::copy(x.begin(), x.end(), out);
  }
}

using OptArray = std::optional<nb::ndarray<>>;

// An optional argument: its view, checked to have x's dtype, this shape and x's device.
const void* optional_arg(const char* op, const Tensor& X, const char* name, const OptArray& a,
                         const std::vector<int64_t>& shape) {
  if (!a) return nullptr;
  Tensor t = view(op, name, *a);
  check_arg(op, X, name, t, X.dtype, shape);
  return t.data;
}

void decode_linear(nb::ndarray<> out, nb::ndarray<> x, nb::ndarray<> weight, OptArray bias,
                   OptArray ln_weight, OptArray ln_bias, OptArray residual, double eps, bool gelu,
                   bool split_k, uintptr_t stream, int num_threads) {
  const char* op = "decode_linear";
  (void)stream;
  Tensor X = view(op, "x", x), W = view(op, "weight", weight), Y = view(op, "out", out);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  if (X.ndim() != 2) fail(op, "x must be (R, K), got shape " + shape_str(X.shape));
  if (W.ndim() != 2) fail(op, "weight must be (N, K), got shape " + shape_str(W.shape));
  const int64_t R = X.size(0), K = X.size(1), N = W.size(0);
  if (K < 1 || N < 1) fail(op, "x and weight need K >= 1 columns and N >= 1 rows");
  check_arg(op, X, "weight", W, X.dtype, {N, K});
  check_arg(op, X, "out", Y, X.dtype, {R, N});
  const void* b = optional_arg(op, X, "bias", bias, {N});
  const void* lw = optional_arg(op, X, "ln_weight", ln_weight, {K});
  const void* lb = optional_arg(op, X, "ln_bias", ln_bias, {K});
  const void* res = optional_arg(op, X, "residual", residual, {R, N});
  if (lb && !lw) fail(op, "ln_bias without ln_weight: pass both, or ln_weight alone");
  if (X.cuda) {
    CudaScope scope(op, X);
    if (K > kDecodeMaxK)
      fail(op, "K = " + std::to_string(K) + " is above the CUDA kernel's limit of " +
                   std::to_string(kDecodeMaxK));
    GS_CUDA_CALL(decode_linear_cuda(Y.data, X.data, W.data, b, lw, lb, res, R, N, K, eps, gelu,
                                    split_k, X.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
    decode_linear_cpu<T>(Y.ptr<T>(), X.ptr<const T>(), W.ptr<const T>(),
                         static_cast<const T*>(b), static_cast<const T*>(lw),
                         static_cast<const T*>(lb), static_cast<const T*>(res), R, N, K, eps,
                         gelu, nt);
  });
}

void decode_attention(nb::ndarray<> y, nb::ndarray<> qkv, nb::ndarray<> k_cache,
                      nb::ndarray<> v_cache, nb::ndarray<> pos, uintptr_t stream) {
  const char* op = "decode_attention";
  (void)stream;
  Tensor Q = view(op, "qkv", qkv), Kc = view(op, "k_cache", k_cache),
         Vc = view(op, "v_cache", v_cache), Y = view(op, "y", y), P = view(op, "pos", pos);
  check_dtype(op, "qkv", Q, {DType::f32, DType::bf16, DType::f64});
  if (Kc.ndim() != 4) fail(op, "k_cache must be (R, nh, T, hs), got " + shape_str(Kc.shape));
  const int64_t R = Kc.size(0), nh = Kc.size(1), T_ = Kc.size(2), hs = Kc.size(3);
  if (R < 1 || nh < 1 || T_ < 1 || hs < 1) fail(op, "k_cache has an empty dimension");
  check_arg(op, Q, "qkv", Q, Q.dtype, {R, 3 * nh * hs});
  check_arg(op, Q, "k_cache", Kc, Q.dtype, {R, nh, T_, hs});
  check_arg(op, Q, "v_cache", Vc, Q.dtype, {R, nh, T_, hs});
  check_arg(op, Q, "y", Y, Q.dtype, {R, nh * hs});
  check_dtype(op, "pos", P, {DType::i64});
  if (P.numel() != 1) fail(op, "pos must hold one position, got shape " + shape_str(P.shape));
  check_same_device(op, Q, "pos", P);
  if (Q.cuda) {
    CudaScope scope(op, Q);
    if (hs > kDecodeMaxHeadSize)
      fail(op, "head size " + std::to_string(hs) + " is above the CUDA kernel's limit of " +
                   std::to_string(kDecodeMaxHeadSize));
    GS_CUDA_CALL(decode_attention_cuda(Y.data, Q.data, Kc.data, Vc.data, P.ptr<const int64_t>(),
                                       R, nh, T_, hs, Q.dtype, stream));
    return;
  }
  const int64_t p = *P.ptr<const int64_t>();
  dispatch_float(op, Q.dtype, [&](auto tag) {
    using T = decltype(tag);
    decode_attention_cpu<T>(Y.ptr<T>(), Q.ptr<const T>(), Kc.ptr<T>(), Vc.ptr<T>(), p, R, nh, T_,
                            hs);
  });
}

// true where the CUDA kernel ran; false: no fused kernel for this call (CPU, another dtype or
// shape), the caller runs decode_linear and causal_attention (then, with proj_weight,
// decode_linear of c_proj with x as the residual)
bool window_attention(nb::ndarray<> y, nb::ndarray<> x, nb::ndarray<> weight, OptArray bias,
                      nb::ndarray<> ln_weight, OptArray ln_bias, OptArray proj_weight,
                      OptArray proj_bias, int64_t nh, double eps, uintptr_t stream) {
  const char* op = "window_attention";
  (void)stream, (void)eps;
  Tensor X = view(op, "x", x), W = view(op, "weight", weight), Y = view(op, "y", y),
         LW = view(op, "ln_weight", ln_weight);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  if (X.ndim() != 3) fail(op, "x must be (B, T, C), got shape " + shape_str(X.shape));
  const int64_t B = X.size(0), T = X.size(1), C = X.size(2);
  if (nh < 1 || C % nh != 0)
    fail(op, "n_head = " + std::to_string(nh) + " does not divide C = " + std::to_string(C));
  check_arg(op, X, "weight", W, X.dtype, {3 * C, C});
  check_arg(op, X, "y", Y, X.dtype, {B, T, C});
  check_arg(op, X, "ln_weight", LW, X.dtype, {C});
  const void* b = optional_arg(op, X, "bias", bias, {3 * C});
  const void* lb = optional_arg(op, X, "ln_bias", ln_bias, {C});
  const void* wp = optional_arg(op, X, "proj_weight", proj_weight, {C, C});
  const void* bp = optional_arg(op, X, "proj_bias", proj_bias, {C});
  if (bp && !wp) fail(op, "proj_bias without proj_weight");
  bool launched = false;
  if (X.cuda) {
    CudaScope scope(op, X);
    GS_CUDA_CALL(launched = window_attention_cuda(Y.data, X.data, W.data, b, LW.data, lb, wp, bp,
                                                  B, T, C, nh, eps, X.dtype, stream));
  }
  return launched;
}

// true where the CUDA kernel ran (x written: window_embed's rows; y: window_attention of
// them); false: the caller runs window_embed, then window_attention. Arguments are checked by
// the Python op (gptstack.cuda_ops.decode.embedded_window_attention); here their kinds and
// shapes, as the kernel reads them.
bool embedded_window_attention(nb::ndarray<> y, nb::ndarray<> x, nb::ndarray<> window,
                               nb::ndarray<> token, nb::ndarray<> wte, nb::ndarray<> wpe,
                               nb::ndarray<> weight, OptArray bias, nb::ndarray<> ln_weight,
                               OptArray ln_bias, int64_t nh, double eps, uintptr_t stream) {
  const char* op = "embedded_window_attention";
  Tensor X = view(op, "x", x), Y = view(op, "y", y), Win = view(op, "window", window),
         Tok = view(op, "token", token), E = view(op, "wte", wte), P = view(op, "wpe", wpe),
         W = view(op, "weight", weight), LW = view(op, "ln_weight", ln_weight);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  check_dtype(op, "window", Win, {DType::i64});
  check_dtype(op, "token", Tok, {DType::i64});
  if (X.ndim() != 3 || Win.ndim() != 2)
    fail(op, "x must be (B, T, C) and window (B, T), got shapes " + shape_str(X.shape) + " and " +
                 shape_str(Win.shape));
  const int64_t B = X.size(0), T = X.size(1), C = X.size(2);
  if (Win.size(0) != B || Win.size(1) != T || Tok.numel() != B)
    fail(op, "window must be (B, T) and token hold B ids for x of shape " + shape_str(X.shape));
  if (E.ndim() != 2 || P.ndim() != 2 || P.size(0) < T)
    fail(op, "wte must be (vocab, C) and wpe (>= T, C)");
  if (nh < 1 || C % nh != 0)
    fail(op, "n_head = " + std::to_string(nh) + " does not divide C = " + std::to_string(C));
  check_arg(op, X, "y", Y, X.dtype, {B, T, C});
  check_arg(op, X, "wte", E, X.dtype, {E.size(0), C});
  check_arg(op, X, "wpe", P, X.dtype, {P.size(0), C});
  check_arg(op, X, "weight", W, X.dtype, {3 * C, C});
  check_arg(op, X, "ln_weight", LW, X.dtype, {C});
  check_same_device(op, X, "window", Win);
  check_same_device(op, X, "token", Tok);
  const void* b = optional_arg(op, X, "bias", bias, {3 * C});
  const void* lb = optional_arg(op, X, "ln_bias", ln_bias, {C});
  bool launched = false;
  if (X.cuda) {
    CudaScope scope(op, X);
    const WindowIds ids{Win.ptr<const int64_t>(), Tok.ptr<const int64_t>(), E.data, P.data,
                        E.size(0), X.data};
    GS_CUDA_CALL(launched = window_attention_cuda(Y.data, nullptr, W.data, b, LW.data, lb,
                                                  nullptr, nullptr, B, T, C, nh, eps, X.dtype,
                                                  stream, &ids));
  }
  return launched;
}

// true where the CUDA kernel ran; false: the caller makes the four decode_linear calls.
// weights: decode.h's DecodeTailTensor order (None for a missing bias)
bool decode_tail(nb::ndarray<> logits, nb::ndarray<> y, nb::ndarray<> x,
                 const std::vector<OptArray>& weights, double eps, uintptr_t stream) {
  const char* op = "decode_tail";
  Tensor Y = view(op, "y", y), X = view(op, "x", x), O = view(op, "logits", logits);
  check_dtype(op, "y", Y, {DType::f32, DType::bf16, DType::f64});
  if (Y.ndim() != 2) fail(op, "y must be (B, C), got shape " + shape_str(Y.shape));
  if (weights.size() != kDecodeTailTensors)
    fail(op, "weights must hold " + std::to_string(int(kDecodeTailTensors)) + " tensors");
  if (!weights[kTailHeadW] || !weights[kTailProjW] || !weights[kTailFcW] || !weights[kTailFc2W] ||
      !weights[kTailLn2W] || !weights[kTailLnfW])
    fail(op, "only the biases may be None");
  const int64_t B = Y.size(0), C = Y.size(1);
  const Tensor H = view(op, "head_weight", *weights[kTailHeadW]);
  const Tensor F = view(op, "fc_weight", *weights[kTailFcW]);
  if (H.ndim() != 2 || F.ndim() != 2) fail(op, "head_weight and fc_weight must be matrices");
  const int64_t V = H.size(0), N = F.size(0);
  check_arg(op, Y, "x", X, Y.dtype, {B, C});
  check_arg(op, Y, "logits", O, Y.dtype, {B, V});
  const std::vector<std::vector<int64_t>> shapes = {{C, C}, {C}, {C}, {C}, {N, C}, {N},
                                                    {C, N}, {C}, {C}, {C}, {V, C}};
  const char* names[] = {"proj_weight", "proj_bias", "ln2_weight", "ln2_bias", "fc_weight",
                         "fc_bias", "mlp_proj_weight", "mlp_proj_bias", "lnf_weight",
                         "lnf_bias", "head_weight"};
  const void* ptrs[kDecodeTailTensors];
  for (int i = 0; i < kDecodeTailTensors; ++i)
    ptrs[i] = optional_arg(op, Y, names[i], weights[i], shapes[i]);
  bool launched = false;
  if (Y.cuda && N == 4 * C) {
    CudaScope scope(op, Y);
    GS_CUDA_CALL(launched = decode_tail_cuda(O.data, Y.data, X.data, ptrs, B, C, V, eps,
                                             Y.dtype, stream));
  }
  return launched;
}

// true where the CUDA kernel ran; false: the caller makes the three decode_linear calls
bool window_mlp(nb::ndarray<> out, nb::ndarray<> y, nb::ndarray<> x, nb::ndarray<> proj_weight,
                OptArray proj_bias, nb::ndarray<> ln_weight, OptArray ln_bias,
                nb::ndarray<> fc_weight, OptArray fc_bias, nb::ndarray<> mlp_proj_weight,
                OptArray mlp_proj_bias, double eps, uintptr_t stream) {
  const char* op = "window_mlp";
  (void)stream, (void)eps;
  Tensor Y = view(op, "y", y), X = view(op, "x", x), O = view(op, "out", out),
         WP = view(op, "proj_weight", proj_weight), WF = view(op, "fc_weight", fc_weight),
         WM = view(op, "mlp_proj_weight", mlp_proj_weight), LW = view(op, "ln_weight", ln_weight);
  check_dtype(op, "y", Y, {DType::f32, DType::bf16, DType::f64});
  if (Y.ndim() != 2) fail(op, "y must be (R, C), got shape " + shape_str(Y.shape));
  if (WF.ndim() != 2) fail(op, "fc_weight must be (N, C), got shape " + shape_str(WF.shape));
  const int64_t R = Y.size(0), C = Y.size(1), N = WF.size(0);
  check_arg(op, Y, "x", X, Y.dtype, {R, C});
  check_arg(op, Y, "out", O, Y.dtype, {R, C});
  check_arg(op, Y, "proj_weight", WP, Y.dtype, {C, C});
  check_arg(op, Y, "ln_weight", LW, Y.dtype, {C});
  check_arg(op, Y, "fc_weight", WF, Y.dtype, {N, C});
  check_arg(op, Y, "mlp_proj_weight", WM, Y.dtype, {C, N});
  const void* bp = optional_arg(op, Y, "proj_bias", proj_bias, {C});
  const void* lb = optional_arg(op, Y, "ln_bias", ln_bias, {C});
  const void* bf = optional_arg(op, Y, "fc_bias", fc_bias, {N});
  const void* bm = optional_arg(op, Y, "mlp_proj_bias", mlp_proj_bias, {C});
  bool launched = false;
  if (Y.cuda && N == 4 * C) {
    CudaScope scope(op, Y);
    GS_CUDA_CALL(launched = window_mlp_cuda(O.data, Y.data, X.data, WP.data, bp, LW.data, lb,
                                            WF.data, bf, WM.data, bm, R, C, eps, Y.dtype,
                                            stream));
  }
  return launched;
}

void decode_blocks(nb::ndarray<> out, nb::ndarray<> token, nb::ndarray<> pos, nb::ndarray<> wte,
                   nb::ndarray<> wpe, const std::vector<OptArray>& layers, nb::ndarray<> k_cache,
                   nb::ndarray<> v_cache, double eps, uintptr_t stream, int num_threads) {
  const char* op = "decode_blocks";
  Tensor E = view(op, "wte", wte), P = view(op, "wpe", wpe), Kc = view(op, "k_cache", k_cache),
         Vc = view(op, "v_cache", v_cache), Y = view(op, "out", out),
         Tok = view(op, "token", token), Pos = view(op, "pos", pos);
  check_dtype(op, "wte", E, {DType::f32, DType::bf16, DType::f64});
  if (E.ndim() != 2) fail(op, "wte must be (vocab, C), got shape " + shape_str(E.shape));
  if (Kc.ndim() != 5)
    fail(op, "k_cache must be (n_layer, B, nh, T, hs), got shape " + shape_str(Kc.shape));
  const int64_t L = Kc.size(0), B = Kc.size(1), nh = Kc.size(2), T_ = Kc.size(3),
                hs = Kc.size(4), C = E.size(1);
  if (L < 1 || B < 1 || nh < 1 || T_ < 1 || hs < 1) fail(op, "k_cache has an empty dimension");
  if (nh * hs != C)
    fail(op, "the caches' heads x head size (" + std::to_string(nh) + " x " +
                 std::to_string(hs) + ") must equal wte's width " + std::to_string(C));
  if (L > kDecodeMaxLayers)
    fail(op, std::to_string(L) + " layers: at most " + std::to_string(kDecodeMaxLayers));
  if (static_cast<int64_t>(layers.size()) != L * kDecodeLayerTensors)
    fail(op, "layers must hold " + std::to_string(kDecodeLayerTensors) + " tensors per layer (" +
                 std::to_string(L * kDecodeLayerTensors) + " for " + std::to_string(L) +
                 " layers), got " + std::to_string(layers.size()));
  if (P.ndim() != 2) fail(op, "wpe must be (positions, C), got shape " + shape_str(P.shape));
  check_arg(op, E, "wpe", P, E.dtype, {P.size(0), C});
  check_arg(op, E, "k_cache", Kc, E.dtype, {L, B, nh, T_, hs});
  check_arg(op, E, "v_cache", Vc, E.dtype, {L, B, nh, T_, hs});
  check_arg(op, E, "out", Y, E.dtype, {B, C});
  check_dtype(op, "token", Tok, {DType::i64});
  if (Tok.numel() != B)
    fail(op, "token must hold one id per row (" + std::to_string(B) + "), got shape " +
                 shape_str(Tok.shape));
  check_same_device(op, E, "token", Tok);
  check_dtype(op, "pos", Pos, {DType::i64});
  if (Pos.numel() != 1) fail(op, "pos must hold one position, got shape " + shape_str(Pos.shape));
  check_same_device(op, E, "pos", Pos);

  DecodeBlocksArgs args{};
  static const char* names[kDecodeLayerTensors] = {
      "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
      "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
      "mlp.c_proj.weight", "mlp.c_proj.bias"};
  const std::vector<int64_t> shapes[kDecodeLayerTensors] = {
      {C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
  bool aligned = true;
  auto is_aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  for (int64_t l = 0; l < L; ++l)
    for (int i = 0; i < kDecodeLayerTensors; ++i) {
      const std::string name = "layer " + std::to_string(l) + " " + names[i];
      const OptArray& t = layers[l * kDecodeLayerTensors + i];
      const bool optional = i == kLn1B || i == kAttnB || i == kProjB || i == kLn2B ||
                            i == kFcB || i == kFc2B;
      if (!t) {
        if (!optional) fail(op, name + " is missing (None); only biases may be");
        continue;
      }
      Tensor W = view(op, name.c_str(), *t);
      check_arg(op, E, name.c_str(), W, E.dtype, shapes[i]);
      args.w[l][i] = W.data;
      if (W.ndim() == 2) aligned = aligned && is_aligned(W.data);
    }
  args.wte = E.data, args.wpe = P.data, args.k_cache = Kc.data, args.v_cache = Vc.data;
  args.out = Y.data, args.token = Tok.ptr<const int64_t>(), args.pos = Pos.ptr<const int64_t>();
  args.n_layer = static_cast<int>(L), args.B = static_cast<int>(B), args.C = static_cast<int>(C);
  args.nh = static_cast<int>(nh), args.hs = static_cast<int>(hs), args.T = static_cast<int>(T_);
  args.vocab = E.size(0), args.wpe_rows = P.size(0), args.eps = static_cast<float>(eps);
  if (E.cuda) {
    CudaScope scope(op, E);
    const int64_t width = E.dtype == DType::bf16 ? 8 : 4;  // elements per 16-byte load
    if (hs % width != 0 || hs > kDecodeMaxHeadSize)
      fail(op, "the CUDA kernel needs a head size that is a multiple of " +
                   std::to_string(width) + " and at most " +
                   std::to_string(kDecodeMaxHeadSize) + ", got " + std::to_string(hs));
    if (!aligned || !is_aligned(Kc.data) || !is_aligned(Vc.data))
      fail(op, "the CUDA kernel needs 16-byte aligned weight matrices and caches (a view at an "
               "offset is not); pass .clone()d tensors");
    GS_CUDA_CALL(decode_blocks_cuda(args, E.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, E.dtype, [&](auto tag) { decode_blocks_cpu<decltype(tag)>(args, nt); });
}

}  // namespace

static std::atomic<int> g_linear_registers_max_k{kLinearRegistersMaxK};
int linear_registers_max_k() { return g_linear_registers_max_k.load(std::memory_order_relaxed); }
void set_linear_registers_max_k(int max_k) {
  if (max_k < 0) fail("set_linear_registers_max_k", "max_k must be >= 0 (0: shared memory always)");
  g_linear_registers_max_k = max_k;
}

void register_decode(nb::module_& m) {
  m.def("decode_linear", &decode_linear, "out"_a, "x"_a, "weight"_a, "bias"_a.none(),
        "ln_weight"_a.none(), "ln_bias"_a.none(), "residual"_a.none(), "eps"_a, "gelu"_a,
        "split_k"_a = false, "stream"_a = 0, "num_threads"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "out = act(weight @ layernorm?(x) + bias) + residual, row by row (decode.h); split_k: K "
        "over a cluster of 4 CTAs where decode.h's kDecodeSplitWidths apply.");
  m.def("decode_attention", &decode_attention, "y"_a, "qkv"_a, "k_cache"_a, "v_cache"_a,
        "pos"_a, "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Write k, v at pos into the caches; y = one query's causal attention (decode.h).");
  m.def("window_attention", &window_attention, "y"_a, "x"_a, "weight"_a, "bias"_a.none(),
        "ln_weight"_a, "ln_bias"_a.none(), "proj_weight"_a.none(), "proj_bias"_a.none(),
        "n_head"_a, "eps"_a, "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "y = causal attention of the heads of decode_linear(x, ln = ln_weight) in one CUDA "
        "launch (decode.h), or with proj_weight x + decode_linear(y, proj_weight, proj_bias); "
        "returns False where no kernel runs this call.");
  m.def("embedded_window_attention", &embedded_window_attention, "y"_a, "x"_a, "window"_a,
        "token"_a, "wte"_a, "wpe"_a, "weight"_a, "bias"_a.none(), "ln_weight"_a,
        "ln_bias"_a.none(), "n_head"_a, "eps"_a, "stream"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "x = window_embed(window, token, wte, wpe), y = window_attention(x, ...) in one CUDA "
        "launch (decode.h); returns False where no kernel runs this call.");
  m.def("decode_tail", &decode_tail, "logits"_a, "y"_a, "x"_a, "weights"_a, "eps"_a,
        "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "The last block after its attention and the LM head for one row a sequence in one CUDA "
        "launch (decode.h); returns False where no kernel runs this call.");
  m.def("window_mlp", &window_mlp, "out"_a, "y"_a, "x"_a, "proj_weight"_a,
        "proj_bias"_a.none(), "ln_weight"_a, "ln_bias"_a.none(), "fc_weight"_a,
        "fc_bias"_a.none(), "mlp_proj_weight"_a, "mlp_proj_bias"_a.none(), "eps"_a,
        "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "out = x1 + mlp(ln_2(x1)) with x1 = x + attn.c_proj(y), in one CUDA launch (decode.h); "
        "returns False where no kernel runs this call.");
  m.def("decode_blocks", &decode_blocks, "out"_a, "token"_a, "pos"_a, "wte"_a, "wpe"_a,
        "layers"_a, "k_cache"_a, "v_cache"_a, "eps"_a, "stream"_a = 0, "num_threads"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "out = the residual stream after every block of a one-token step (decode.h).");
  m.def("decode_blocks_shared_bytes",
        [](int64_t C, int64_t hs, int64_t T, int64_t elem_bytes) {
          return decode_blocks_shared_bytes(C, hs, T, elem_bytes, kDecodeBlocksCluster, 1);
        },
        "C"_a, "hs"_a, "T"_a, "elem_bytes"_a,
        "Dynamic shared memory per CTA of the CUDA decode_blocks kernel with one weight slice.");
  m.def("set_linear_registers_max_k", &set_linear_registers_max_k, "max_k"_a,
        "The widest row decode_linear's one-row CUDA kernel holds in registers (LayerNorm "
        "folded); wider rows go through shared memory; 0: always. For A/B comparisons.");
  m.def("linear_registers_max_k", &linear_registers_max_k);
  m.attr("decode_blocks_max_c") = kDecodeBlocksMaxC;
  m.attr("decode_max_layers") = kDecodeMaxLayers;
  // the CUDA kernels' limits, for callers that choose a path before calling (fused_step.py)
  m.attr("decode_max_head_size") = kDecodeMaxHeadSize;
  m.attr("decode_max_k") = kDecodeMaxK;
  m.attr("decode_mma_min_rows") = kDecodeMmaMinRows;
  m.attr("decode_mma_max_k") = kDecodeMmaMaxK;
  auto ints = [](const auto& values) {
    nb::list list;
    for (int v : values) list.append(v);
    return nb::tuple(list);
  };
  m.attr("decode_split_widths") = ints(kDecodeSplitWidths);
  m.attr("window_attention_max_t") = kWindowAttentionMaxT;
  m.attr("window_attention_head_sizes") = ints(kWindowAttentionHeadSizes);
  m.attr("window_attention_proj_max_heads") = kWindowAttentionProjMaxHeads;
  m.attr("window_mlp_widths") = ints(kWindowMlpWidths);
  m.attr("decode_tail_widths") = ints(kDecodeTailWidths);
}

}  // namespace gs
