// layernorm.cpp: LayerNorm (+ fused residual add) forward/backward on the CPU, and the _C
// bindings layernorm_forward / layernorm_backward. Formulas: layernorm.h.
//
// Versions (the CUDA kernels in layernorm.cu are checked against the same torch reference):
//   scalar  row by row: two-pass mean and variance (no E[x^2] - E[x]^2 cancellation), then
//           normalize; backward in two passes per row. The CPU reference.
//   avx2    the same passes, 8 lanes with FMA, scalar tails for C % 8.
// Rows are split across OpenMP threads (static schedule, so results do not depend on timing);
// in backward each thread sums its own dweight/dbias partials, added in thread order after.
#include "layernorm.h"

#include <nanobind/stl/optional.h>

#include <cmath>
#include <optional>
#include <vector>

#include "common.h"
#include "cpu_simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace nb::literals;

namespace gs {
namespace {

template <typename T, typename R> struct Fwd {
  T* out;
  T* sum_out;  // null without a residual
  acc_t<T>* mean;
  acc_t<T>* rstd;
  const T* x;
  const R* residual;  // null: plain LayerNorm
  const T* weight;
  const T* bias;  // null: no bias
  int64_t N, C;
  double eps;
};

template <typename T> struct Bwd {
  T* dx;
  acc_t<T>* dparams;  // this thread's partial (2C): dweight then dbias
  const T* dout;
  const T* dsum;  // null: no gradient from the residual stream
  const T* src;   // the normalized input: x, or s with a residual
  const T* weight;
  const acc_t<T>* mean;
  const acc_t<T>* rstd;
  int64_t C;
};

// --- scalar reference ------------------------------------------------------------------------
template <typename T, typename R> void forward_row_scalar(const Fwd<T, R>& a, int64_t i) {
  using A = acc_t<T>;
  const int64_t C = a.C;
  const T* src = a.x + i * C;
  if (a.residual) {
    T* s = a.sum_out + i * C;
    for (int64_t j = 0; j < C; ++j) store(s + j, load(src + j) + A(load(a.residual + i * C + j)));
    src = s;  // normalize the stored (rounded) sum, which backward reads back
  }
  A m = 0;
  for (int64_t j = 0; j < C; ++j) m += load(src + j);
  m /= A(C);
  A v = 0;
  for (int64_t j = 0; j < C; ++j) {
    A d = load(src + j) - m;
    v += d * d;
  }
  A rs = A(1) / std::sqrt(v / A(C) + A(a.eps));
  T* y = a.out + i * C;
  for (int64_t j = 0; j < C; ++j) {
    A b = a.bias ? A(load(a.bias + j)) : A(0);
    store(y + j, (load(src + j) - m) * rs * load(a.weight + j) + b);
  }
  a.mean[i] = m;
  a.rstd[i] = rs;
}

template <typename T> void backward_row_scalar(const Bwd<T>& a, int64_t i) {
  using A = acc_t<T>;
  const int64_t C = a.C;
  const T *dy = a.dout + i * C, *s = a.src + i * C;
  const A m = a.mean[i], rs = a.rstd[i];
  A c1 = 0, c2 = 0;
  for (int64_t j = 0; j < C; ++j) {
    A g = A(load(dy + j)) * load(a.weight + j);
    c1 += g;
    c2 += g * (load(s + j) - m) * rs;
  }
  c1 /= A(C);
  c2 /= A(C);
  for (int64_t j = 0; j < C; ++j) {
    A xh = (load(s + j) - m) * rs, d = load(dy + j);
    A v = rs * (d * load(a.weight + j) - c1 - xh * c2);
    if (a.dsum) v += load(a.dsum + i * C + j);
    store(a.dx + i * C + j, v);
    a.dparams[j] += d * xh;
    a.dparams[C + j] += d;
  }
}

// --- AVX2/FMA --------------------------------------------------------------------------------
#ifdef GS_HAVE_AVX2_PATH
template <typename T, typename R> GS_AVX2 void forward_row_avx2(const Fwd<T, R>& a, int64_t i) {
  const int64_t C = a.C, Cv = C / 8 * 8;
  const T* src = a.x + i * C;
  if (a.residual) {
    T* s = a.sum_out + i * C;
    const R* r = a.residual + i * C;
    for (int64_t j = 0; j < Cv; j += 8)
      avx2::store8(s + j, _mm256_add_ps(avx2::load8(src + j), avx2::load8(r + j)));
    for (int64_t j = Cv; j < C; ++j) store(s + j, load(src + j) + load(r + j));
    src = s;
  }
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < Cv; j += 8) acc = _mm256_add_ps(acc, avx2::load8(src + j));
  float sum = avx2::hsum8(acc);
  for (int64_t j = Cv; j < C; ++j) sum += load(src + j);
  const float m = sum / float(C);
  const __m256 mv = _mm256_set1_ps(m);
  acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < Cv; j += 8) {
    __m256 d = _mm256_sub_ps(avx2::load8(src + j), mv);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  float var = avx2::hsum8(acc);
  for (int64_t j = Cv; j < C; ++j) var += (load(src + j) - m) * (load(src + j) - m);
  const float rs = 1.0f / std::sqrt(var / float(C) + float(a.eps));
  const __m256 rsv = _mm256_set1_ps(rs);
  T* y = a.out + i * C;
  for (int64_t j = 0; j < Cv; j += 8) {
    __m256 xh = _mm256_mul_ps(_mm256_sub_ps(avx2::load8(src + j), mv), rsv);
    __m256 b = a.bias ? avx2::load8(a.bias + j) : _mm256_setzero_ps();
    avx2::store8(y + j, _mm256_fmadd_ps(xh, avx2::load8(a.weight + j), b));
  }
  for (int64_t j = Cv; j < C; ++j) {
    float b = a.bias ? load(a.bias + j) : 0.0f;
    store(y + j, (load(src + j) - m) * rs * load(a.weight + j) + b);
  }
  a.mean[i] = m;
  a.rstd[i] = rs;
}

template <typename T> GS_AVX2 void backward_row_avx2(const Bwd<T>& a, int64_t i) {
  const int64_t C = a.C, Cv = C / 8 * 8;
  const T *dy = a.dout + i * C, *s = a.src + i * C;
  const float m = a.mean[i], rs = a.rstd[i];
  const __m256 mv = _mm256_set1_ps(m), rsv = _mm256_set1_ps(rs);
  __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
  for (int64_t j = 0; j < Cv; j += 8) {
    __m256 g = _mm256_mul_ps(avx2::load8(dy + j), avx2::load8(a.weight + j));
    __m256 xh = _mm256_mul_ps(_mm256_sub_ps(avx2::load8(s + j), mv), rsv);
    acc1 = _mm256_add_ps(acc1, g);
    acc2 = _mm256_fmadd_ps(g, xh, acc2);
  }
  float c1 = avx2::hsum8(acc1), c2 = avx2::hsum8(acc2);
  for (int64_t j = Cv; j < C; ++j) {
    float g = load(dy + j) * load(a.weight + j);
    c1 += g;
    c2 += g * (load(s + j) - m) * rs;
  }
  c1 /= float(C);
  c2 /= float(C);
  const __m256 c1v = _mm256_set1_ps(c1), c2v = _mm256_set1_ps(c2);
  for (int64_t j = 0; j < Cv; j += 8) {
    __m256 d = avx2::load8(dy + j);
    __m256 xh = _mm256_mul_ps(_mm256_sub_ps(avx2::load8(s + j), mv), rsv);
    __m256 g = _mm256_mul_ps(d, avx2::load8(a.weight + j));
    __m256 v = _mm256_mul_ps(rsv, _mm256_sub_ps(_mm256_sub_ps(g, c1v), _mm256_mul_ps(xh, c2v)));
    if (a.dsum) v = _mm256_add_ps(v, avx2::load8(a.dsum + i * C + j));
    avx2::store8(a.dx + i * C + j, v);
    float* dw = a.dparams + j;
    float* db = a.dparams + C + j;
    _mm256_storeu_ps(dw, _mm256_fmadd_ps(d, xh, _mm256_loadu_ps(dw)));
    _mm256_storeu_ps(db, _mm256_add_ps(d, _mm256_loadu_ps(db)));
  }
  for (int64_t j = Cv; j < C; ++j) {
    float xh = (load(s + j) - m) * rs, d = load(dy + j);
    float v = rs * (d * load(a.weight + j) - c1 - xh * c2);
    if (a.dsum) v += load(a.dsum + i * C + j);
    store(a.dx + i * C + j, v);
    a.dparams[j] += d * xh;
    a.dparams[C + j] += d;
  }
}
#endif

// --- row loops -------------------------------------------------------------------------------
template <typename T, typename R> void forward_cpu(const Fwd<T, R>& a, int nt) {
  bool avx2 = false;
#ifdef GS_HAVE_AVX2_PATH
  if constexpr (!std::is_same_v<T, double> && !std::is_same_v<R, double>)
    avx2 = cpu_path() == CpuPath::avx2;
#endif
#pragma omp parallel for num_threads(nt) schedule(static) if (a.N * a.C >= kParallelMinElements)
  for (int64_t i = 0; i < a.N; ++i) {
#ifdef GS_HAVE_AVX2_PATH
    if constexpr (!std::is_same_v<T, double> && !std::is_same_v<R, double>) {
      if (avx2) {
        forward_row_avx2(a, i);
        continue;
      }
    }
#endif
    (void)avx2;
    forward_row_scalar(a, i);
  }
}

template <typename T>
void backward_cpu(Bwd<T> a, int64_t N, T* dweight, T* dbias, int nt) {
  using A = acc_t<T>;
  const int64_t C = a.C;
  if (N * C < kParallelMinElements) nt = 1;
  std::vector<A> partial(size_t(nt) * 2 * C, A(0));
  bool avx2 = false;
#ifdef GS_HAVE_AVX2_PATH
  if constexpr (!std::is_same_v<T, double>) avx2 = cpu_path() == CpuPath::avx2;
#endif
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    Bwd<T> mine = a;
    mine.dparams = partial.data() + size_t(tid) * 2 * C;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
#ifdef GS_HAVE_AVX2_PATH
      if constexpr (!std::is_same_v<T, double>) {
        if (avx2) {
          backward_row_avx2(mine, i);
          continue;
        }
      }
#endif
      (void)avx2;
      backward_row_scalar(mine, i);
    }
  }
  for (int64_t j = 0; j < C; ++j) {
    A w = 0, b = 0;
    for (int t = 0; t < nt; ++t) {
      w += partial[size_t(t) * 2 * C + j];
      b += partial[size_t(t) * 2 * C + C + j];
    }
    store(dweight + j, w);
    store(dbias + j, b);
  }
}

// --- bindings --------------------------------------------------------------------------------
using OptArray = std::optional<nb::ndarray<>>;

void layernorm_forward(nb::ndarray<> out, OptArray sum_out, nb::ndarray<> mean, nb::ndarray<> rstd,
                       nb::ndarray<> x, OptArray residual, nb::ndarray<> weight, OptArray bias,
                       double eps, uintptr_t stream, int num_threads) {
  const char* op = "layernorm_forward";
  (void)stream;
  Tensor X = view(op, "x", x);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  if (X.ndim() != 2) fail(op, "x must be (N, C), got shape " + shape_str(X.shape));
  const int64_t N = X.size(0), C = X.size(1);
  if (C < 1) fail(op, "x has C = 0 columns");
  const DType stat = X.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor Y = view(op, "out", out), M = view(op, "mean", mean), RS = view(op, "rstd", rstd),
         W = view(op, "weight", weight);
  Tensor S, Rz, Bz;
  check_arg(op, X, "out", Y, X.dtype, X.shape);
  check_arg(op, X, "mean", M, stat, {N});
  check_arg(op, X, "rstd", RS, stat, {N});
  check_arg(op, X, "weight", W, X.dtype, {C});
  if (residual.has_value() != sum_out.has_value())
    fail(op, "residual and sum_out come together (both given or both None)");
  if (residual) {
    S = view(op, "sum_out", *sum_out);
    Rz = view(op, "residual", *residual);
    check_arg(op, X, "sum_out", S, X.dtype, X.shape);
    check_dtype(op, "residual", Rz, {DType::f32, DType::bf16, DType::f64});
    if ((Rz.dtype == DType::f64) != (X.dtype == DType::f64))
      fail(op, "residual is float64 but x is not (or x is and residual is not)");
    check_shape(op, "residual", Rz, X.shape);
    check_same_device(op, X, "residual", Rz);
  }
  if (bias) {
    Bz = view(op, "bias", *bias);
    check_arg(op, X, "bias", Bz, X.dtype, {C});
  }
  if (X.cuda) {
    CudaScope scope(op, X);
    if (C > kLnCudaMaxC)
      fail(op, "C = " + std::to_string(C) + " is above the CUDA kernel's limit of " +
                   std::to_string(kLnCudaMaxC));
    GS_CUDA_CALL(layernorm_forward_cuda(Y.data, residual ? S.data : nullptr, M.ptr<float>(),
                                        RS.ptr<float>(), X.data, residual ? Rz.data : nullptr,
                                        residual ? Rz.dtype : X.dtype, W.data,
                                        bias ? Bz.data : nullptr, {N, C}, float(eps), X.dtype,
                                        stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, X.dtype, [&](auto xtag) {
    using T = decltype(xtag);
    dispatch_float(op, residual ? Rz.dtype : X.dtype, [&](auto rtag) {
      using R = decltype(rtag);
      if constexpr (std::is_same_v<T, double> == std::is_same_v<R, double>) {
        Fwd<T, R> a{Y.ptr<T>(), residual ? S.ptr<T>() : nullptr, M.ptr<acc_t<T>>(),
                    RS.ptr<acc_t<T>>(), X.ptr<const T>(),
                    residual ? Rz.ptr<const R>() : nullptr, W.ptr<const T>(),
                    bias ? Bz.ptr<const T>() : nullptr, N, C, eps};
        forward_cpu(a, nt);
      }
    });
  });
}

void layernorm_backward(nb::ndarray<> dx, nb::ndarray<> dweight, nb::ndarray<> dbias,
                        OptArray workspace, nb::ndarray<> dout, OptArray dsum, nb::ndarray<> src,
                        nb::ndarray<> weight, nb::ndarray<> mean, nb::ndarray<> rstd,
                        uintptr_t stream, int num_threads) {
  const char* op = "layernorm_backward";
  (void)stream;
  Tensor X = view(op, "src", src);
  check_dtype(op, "src", X, {DType::f32, DType::bf16, DType::f64});
  if (X.ndim() != 2) fail(op, "src must be (N, C), got shape " + shape_str(X.shape));
  const int64_t N = X.size(0), C = X.size(1);
  if (C < 1) fail(op, "src has C = 0 columns");
  const DType stat = X.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor DX = view(op, "dx", dx), DW = view(op, "dweight", dweight), DB = view(op, "dbias", dbias),
         DY = view(op, "dout", dout), W = view(op, "weight", weight), M = view(op, "mean", mean),
         RS = view(op, "rstd", rstd), DS, WS;
  check_arg(op, X, "dx", DX, X.dtype, X.shape);
  check_arg(op, X, "dout", DY, X.dtype, X.shape);
  check_arg(op, X, "dweight", DW, X.dtype, {C});
  check_arg(op, X, "dbias", DB, X.dtype, {C});
  check_arg(op, X, "weight", W, X.dtype, {C});
  check_arg(op, X, "mean", M, stat, {N});
  check_arg(op, X, "rstd", RS, stat, {N});
  if (dsum) {
    DS = view(op, "dsum", *dsum);
    check_arg(op, X, "dsum", DS, X.dtype, X.shape);
  }
  if (X.cuda) {
    CudaScope scope(op, X);
    if (C > kLnCudaMaxC)
      fail(op, "C = " + std::to_string(C) + " is above the CUDA kernel's limit of " +
                   std::to_string(kLnCudaMaxC));
    if (!workspace) fail(op, "CUDA needs a float32 workspace of workspace_floats(N, C)");
    WS = view(op, "workspace", *workspace);
    check_arg(op, X, "workspace", WS, DType::f32, {ln_bwd_workspace_floats(N, C)});
    GS_CUDA_CALL(layernorm_backward_cuda(DX.data, DW.data, DB.data, WS.ptr<float>(), DY.data,
                                         dsum ? DS.data : nullptr, X.data, W.data,
                                         M.ptr<float>(), RS.ptr<float>(), {N, C}, X.dtype,
                                         stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
    Bwd<T> a{DX.ptr<T>(), nullptr, DY.ptr<const T>(), dsum ? DS.ptr<const T>() : nullptr,
             X.ptr<const T>(), W.ptr<const T>(), M.ptr<const acc_t<T>>(),
             RS.ptr<const acc_t<T>>(), C};
    backward_cpu(a, N, DW.ptr<T>(), DB.ptr<T>(), nt);
  });
}

}  // namespace

void register_layernorm(nb::module_& m) {
  m.def("layernorm_forward", &layernorm_forward, "out"_a, "sum_out"_a.none(), "mean"_a, "rstd"_a,
        "x"_a, "residual"_a.none(), "weight"_a, "bias"_a.none(), "eps"_a, "stream"_a = 0,
        "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "LayerNorm over the last dim of x (N, C) [of s = x + residual, written to sum_out]: "
        "out, mean (N,), rstd (N,).");
  m.def("layernorm_backward", &layernorm_backward, "dx"_a, "dweight"_a, "dbias"_a,
        "workspace"_a.none(), "dout"_a, "dsum"_a.none(), "src"_a, "weight"_a, "mean"_a,
        "rstd"_a, "stream"_a = 0, "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Gradients of LayerNorm: dx (+ dsum, the residual stream's gradient), dweight, dbias "
        "(overwritten). src is what was normalized (x, or s = x + residual).");
  m.def("layernorm_workspace_floats", &ln_bwd_workspace_floats, "N"_a, "C"_a,
        "float32 elements of the workspace the CUDA backward needs for (N, C).");
}

}  // namespace gs
