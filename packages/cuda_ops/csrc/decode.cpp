// decode.cpp: the fused decode-step ops on the CPU (the reference the CUDA kernels are tested
// against, through the same torch comparisons), and the _C bindings of decode_linear and
// decode_attention. Formulas: decode.h. Scalar loops, OpenMP over output rows; float64 is
// computed in double (gradcheck-free ops, but tests use it as the exact reference).
#include "decode.h"

#include <nanobind/stl/optional.h>

#include <algorithm>
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
                   uintptr_t stream, int num_threads) {
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
                                    X.dtype, stream));
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

}  // namespace

void register_decode(nb::module_& m) {
  m.def("decode_linear", &decode_linear, "out"_a, "x"_a, "weight"_a, "bias"_a.none(),
        "ln_weight"_a.none(), "ln_bias"_a.none(), "residual"_a.none(), "eps"_a, "gelu"_a,
        "stream"_a = 0, "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "out = act(weight @ layernorm?(x) + bias) + residual, row by row (decode.h).");
  m.def("decode_attention", &decode_attention, "y"_a, "qkv"_a, "k_cache"_a, "v_cache"_a,
        "pos"_a, "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Write k, v at pos into the caches; y = one query's causal attention (decode.h).");
  // the CUDA kernels' limits, for callers that choose a path before calling (fused_step.py)
  m.attr("decode_max_head_size") = kDecodeMaxHeadSize;
  m.attr("decode_max_k") = kDecodeMaxK;
}

}  // namespace gs
