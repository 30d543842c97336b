// gelu.cpp: GELU (tanh form) on the CPU, and the _C bindings of gelu_forward/gelu_backward.
//
// Versions (the CUDA kernels in gelu.cu are checked against the same torch reference):
//   scalar  the textbook formula with std::tanh, one element at a time: the CPU reference
//   avx2    8 lanes, x * sigmoid(2u) with the polynomial exp of cpu_simd.h, FMA throughout
// Both split the elements across OpenMP threads (static schedule) above kParallelMinElements.
// float64 always takes the scalar path in double (it exists for gradcheck).
#include "gelu.h"

#include <cmath>

#include "common.h"
#include "cpu_simd.h"

using namespace nb::literals;

namespace gs {
namespace {

template <typename T> void gelu_forward_scalar(T* out, const T* x, int64_t n, int nt) {
  using A = acc_t<T>;
  const A k = A(kGeluSqrt2OverPi), c = A(kGeluCubic);
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    A v = load(x + i);
    A u = k * (v + c * v * v * v);
    store(out + i, A(0.5) * v * (A(1) + std::tanh(u)));
  }
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u',
// u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <typename T>
void gelu_backward_scalar(T* dx, const T* dout, const T* x, int64_t n, int nt) {
  using A = acc_t<T>;
  const A k = A(kGeluSqrt2OverPi), c = A(kGeluCubic);
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    A v = load(x + i);
    A t = std::tanh(k * (v + c * v * v * v));
    A du = k * (A(1) + A(3) * c * v * v);
    A grad = A(0.5) * (A(1) + t) + A(0.5) * v * (A(1) - t * t) * du;
    store(dx + i, load(dout + i) * grad);
  }
}

#ifdef GS_HAVE_AVX2_PATH
// s = sigmoid(2u) for 8 lanes; also returns u' through du when asked
GS_AVX2 static inline __m256 gelu_sigmoid8(__m256 v, __m256* du) {
  const __m256 k = _mm256_set1_ps(float(kGeluSqrt2OverPi));
  const __m256 c = _mm256_set1_ps(float(kGeluCubic));
  __m256 v2 = _mm256_mul_ps(v, v);
  __m256 u = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(c, v2), v, v));
  if (du) *du = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_set1_ps(3.0f * float(kGeluCubic)), v2,
                                                 _mm256_set1_ps(1.0f)));
  __m256 e = avx2::exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
  return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

template <typename T> GS_AVX2 void gelu_forward_avx2(T* out, const T* x, int64_t n, int nt) {
  const int64_t nv = n / 8 * 8;
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < nv; i += 8) {
    __m256 v = avx2::load8(x + i);
    avx2::store8(out + i, _mm256_mul_ps(v, gelu_sigmoid8(v, nullptr)));
  }
  gelu_forward_scalar(out + nv, x + nv, n - nv, 1);
}

// with s = sigmoid(2u): gelu = x s, d gelu/dx = s + 2 x s (1 - s) u'
template <typename T>
GS_AVX2 void gelu_backward_avx2(T* dx, const T* dout, const T* x, int64_t n, int nt) {
  const int64_t nv = n / 8 * 8;
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < nv; i += 8) {
    __m256 v = avx2::load8(x + i), du;
    __m256 s = gelu_sigmoid8(v, &du);
    __m256 one_minus_s = _mm256_sub_ps(_mm256_set1_ps(1.0f), s);
    __m256 two_x_du = _mm256_mul_ps(_mm256_add_ps(v, v), du);
    __m256 grad = _mm256_fmadd_ps(_mm256_mul_ps(two_x_du, s), one_minus_s, s);
    avx2::store8(dx + i, _mm256_mul_ps(avx2::load8(dout + i), grad));
  }
  gelu_backward_scalar(dx + nv, dout + nv, x + nv, n - nv, 1);
}
#endif

void gelu_forward(nb::ndarray<> out, nb::ndarray<> x, uintptr_t stream, int num_threads) {
  const char* op = "gelu_forward";
  (void)stream;  // unused in a CPU-only build
  Tensor X = view(op, "x", x), Y = view(op, "out", out);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  check_dtype(op, "out", Y, {X.dtype});
  check_same_device(op, X, "out", Y);
  check_shape(op, "out", Y, X.shape);
  if (X.cuda) {
    CudaScope scope(op, X);
    GS_CUDA_CALL(gelu_forward_cuda(Y.data, X.data, X.numel(), X.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
#ifdef GS_HAVE_AVX2_PATH
    if constexpr (!std::is_same_v<T, double>) {
      if (cpu_path() == CpuPath::avx2)
        return gelu_forward_avx2(Y.ptr<T>(), X.ptr<const T>(), X.numel(), nt);
    }
#endif
    gelu_forward_scalar(Y.ptr<T>(), X.ptr<const T>(), X.numel(), nt);
  });
}

void gelu_backward(nb::ndarray<> dx, nb::ndarray<> dout, nb::ndarray<> x, uintptr_t stream,
                   int num_threads) {
  const char* op = "gelu_backward";
  (void)stream;
  Tensor X = view(op, "x", x), DY = view(op, "dout", dout), DX = view(op, "dx", dx);
  check_dtype(op, "x", X, {DType::f32, DType::bf16, DType::f64});
  check_dtype(op, "dout", DY, {X.dtype});
  check_dtype(op, "dx", DX, {X.dtype});
  check_same_device(op, X, "dout", DY);
  check_same_device(op, X, "dx", DX);
  check_shape(op, "dout", DY, X.shape);
  check_shape(op, "dx", DX, X.shape);
  if (X.cuda) {
    CudaScope scope(op, X);
    GS_CUDA_CALL(gelu_backward_cuda(DX.data, DY.data, X.data, X.numel(), X.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
#ifdef GS_HAVE_AVX2_PATH
    if constexpr (!std::is_same_v<T, double>) {
      if (cpu_path() == CpuPath::avx2)
        return gelu_backward_avx2(DX.ptr<T>(), DY.ptr<const T>(), X.ptr<const T>(), X.numel(),
                                  nt);
    }
#endif
    gelu_backward_scalar(DX.ptr<T>(), DY.ptr<const T>(), X.ptr<const T>(), X.numel(), nt);
  });
}

}  // namespace

void register_gelu(nb::module_& m) {
  m.def("gelu_forward", &gelu_forward, "out"_a, "x"_a, "stream"_a = 0, "num_threads"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "out = gelu_tanh(x), elementwise; out and x alike (float32, bfloat16, float64 on CPU).");
  m.def("gelu_backward", &gelu_backward, "dx"_a, "dout"_a, "x"_a, "stream"_a = 0,
        "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "dx = dout * gelu_tanh'(x), elementwise.");
}

}  // namespace gs
