// qkv_grad.cpp: qkv_grad (qkv_grad.h) on the CPU, and its _C binding.
//
// One version: each OpenMP thread copies whole chunks of rows and sums their columns into the
// chunk's row of `partials`, a plain loop the compiler vectorizes (a copy and an add: nothing
// for hand-written AVX2 to win); then one pass adds the chunks in order. float64 sums in double
// (for gradcheck), the others in float.
#include "qkv_grad.h"

#include <algorithm>

#include "common.h"

using namespace nb::literals;

namespace gs {
namespace {

template <typename T>
void qkv_grad_cpu(T* dqkv, acc_t<T>* dbias, acc_t<T>* partials, const T* const src[3], int64_t N,
                  int64_t C, int64_t chunks, int nt) {
  using A = acc_t<T>;
  const int64_t C3 = 3 * C, R = chunks > 0 ? (N + chunks - 1) / chunks : 0;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C3 >= kParallelMinElements)
  for (int64_t j = 0; j < chunks; ++j) {
    A* acc = partials + j * C3;
    std::fill(acc, acc + C3, A(0));
    for (int64_t r = j * R; r < std::min(N, (j + 1) * R); ++r) {
      for (int p = 0; p < 3; ++p) {
        const T* in = src[p] + r * C;
        T* out = dqkv + r * C3 + p * C;
        A* a = acc + p * C;
        for (int64_t c = 0; c < C; ++c) {
          out[c] = in[c];
          a[c] += load(in + c);
        }
      }
    }
  }
  for (int64_t col = 0; col < C3; ++col) {
    A s = 0;
    for (int64_t j = 0; j < chunks; ++j) s += partials[j * C3 + col];
    dbias[col] = s;
  }
}

void qkv_grad(nb::ndarray<> dqkv, nb::ndarray<> dbias, nb::ndarray<> partials, nb::ndarray<> dq,
              nb::ndarray<> dk, nb::ndarray<> dv, uintptr_t stream, int num_threads) {
  const char* op = "qkv_grad";
  (void)stream;  // unused in a CPU-only build
  Tensor Q = view(op, "dq", dq), K = view(op, "dk", dk), V = view(op, "dv", dv);
  Tensor O = view(op, "dqkv", dqkv), B = view(op, "dbias", dbias);
  Tensor P = view(op, "partials", partials);
  check_dtype(op, "dq", Q, {DType::f32, DType::bf16, DType::f64});
  if (Q.ndim() != 2) fail(op, "dq must be 2-D (rows, C), got " + shape_str(Q.shape));
  const int64_t N = Q.size(0), C = Q.size(1);
  const DType acc = Q.dtype == DType::f64 ? DType::f64 : DType::f32;
  check_arg(op, Q, "dk", K, Q.dtype, {N, C});
  check_arg(op, Q, "dv", V, Q.dtype, {N, C});
  check_arg(op, Q, "dqkv", O, Q.dtype, {N, 3 * C});
  check_arg(op, Q, "dbias", B, acc, {3 * C});
  if (P.ndim() != 2 || P.size(1) != 3 * C || (N > 0 && P.size(0) < 1))
    fail(op, "partials must be (chunks >= 1, 3C = " + std::to_string(3 * C) + "), got " +
                 shape_str(P.shape));
  check_dtype(op, "partials", P, {acc});
  check_same_device(op, Q, "partials", P);
  const int64_t chunks = P.size(0);
  if (chunks > 65535) fail(op, "at most 65535 chunks of rows, got " + std::to_string(chunks));
  if (Q.cuda) {
    CudaScope scope(op, Q);
    GS_CUDA_CALL(qkv_grad_cuda(O.data, B.ptr<float>(), P.ptr<float>(), Q.data, K.data, V.data, N,
                               C, chunks, Q.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, Q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src[3] = {Q.ptr<const T>(), K.ptr<const T>(), V.ptr<const T>()};
    qkv_grad_cpu(O.ptr<T>(), B.ptr<acc_t<T>>(), P.ptr<acc_t<T>>(), src, N, C, chunks, nt);
  });
}

}  // namespace

void register_qkv_grad(nb::module_& m) {
  m.def("qkv_grad", &qkv_grad, "dqkv"_a, "dbias"_a, "partials"_a, "dq"_a, "dk"_a, "dv"_a,
        "stream"_a = 0, "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "dqkv = [dq | dk | dv] (rows, 3C) and dbias = its column sums (float32; float64 for "
        "float64), summed by the chunks of rows of partials (chunks, 3C), then the chunks in "
        "order.");
}

}  // namespace gs
