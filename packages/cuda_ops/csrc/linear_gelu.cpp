// linear_gelu.cpp: the MLP's GELU inside its matmuls, through cuBLASLt's epilogues (bindings).
//
//   forward   u = x W^T + b, h = gelu_tanh(u)   one matmul writing h and u (GELU_AUX_BIAS)
//   backward  du = (g W2) * gelu_tanh'(u)       one matmul (DGELU)
//   c_proj    y = h W2^T + b2 + r               one matmul adding the residual stream r as
//                                               it stores (beta = 1, C = r: one rounding)
// where W (F, C) is c_fc's weight and W2 (C, F) c_proj's, x and g (N, C), u, h, du (N, F).
// Row-major tensors are column-major transposes, so each product is computed as its transpose:
// u^T (F x N) = W (F x C) x^T (C x N), du^T = W2^T (F x C) g^T (C x N), with the bias along D's
// rows, which is what cuBLASLt's epilogue broadcasts. The bias gradient is not taken from the
// backward's epilogue (DGELU_BGRAD): on an H100 at gpt2-124m's (65536, 768) x (768, 3072) that
// matmul took 1,744 us against 776 for DGELU and a separate column sum
// (scripts/mlp_epilogue_bench.py, benchmarks/JOURNAL.md 2026-12-07).
// CUDA, bfloat16 only; each call returns false without launching anything where cuBLASLt
// cannot do it (the Python wrapper then runs the matmul and gelu.cu's kernel separately).
// cuBLASLt's GELU is the tanh form, as GPT-2's (the CUDA tests compare with it).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <optional>

#include "common.h"
#include "cublaslt.h"

using namespace nb::literals;

namespace gs {
namespace {

using OptArray = std::optional<nb::ndarray<>>;

// The switch `residual_epilogue` (tests, benchmarks/switches): off, linear_residual launches
// nothing and the caller adds the residual apart, as before the epilogue took it.
std::atomic<bool> g_residual_epilogue{true};

// d = op(a) op(b) for row-major 2-D a, b, d (op: transposed where asked; shapes checked by the
// caller), as cuBLASLt's column-major product: row-major arrays are column-major transposes, so
// d^T (cols x rows) = op(b)^T op(a)^T, b's memory is cuBLASLt's A and a's its B. A bias then
// runs along D's rows: one per column of d. The caller sets the epilogue.
LtMatmul row_major_product(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           void* d) {
  LtMatmul p;
  p.n = a.size(trans_a ? 1 : 0), p.k = a.size(trans_a ? 0 : 1), p.m = b.size(trans_b ? 0 : 1);
  p.trans_a = trans_b, p.a = b.data, p.lda = b.size(1);
  p.trans_b = trans_a, p.b = a.data, p.ldb = a.size(1);
  p.d = d, p.ldd = p.m;
  return p;
}

// y = x weight^T (+ bias) for x (N, K), weight (M, K), bias (M,): the arguments checked (bf16,
// one device), and the product as cuBLASLt sees it, y^T (M x N) = weight (M x K) x^T (K x N),
// with the bias along D's rows. The caller sets D and the epilogue.
struct Linear {
  Tensor x, w, b;
  int64_t n = 0, k = 0, m = 0;
  LtMatmul product(void* d) const {
    LtMatmul p = row_major_product(x, false, w, true, d);
    p.bias = b.data;
    return p;
  }
  // An (N, M) bf16 array beside y (its output, or one laid out as it), checked
  Tensor like_y(const char* op, const char* name, const nb::ndarray<>& a) const {
    Tensor t = view(op, name, a);
    check_arg(op, x, name, t, DType::bf16, {n, m});
    return t;
  }
};

Linear linear_args(const char* op, const char* x_name, const nb::ndarray<>& x,
                   const nb::ndarray<>& w, const OptArray& bias) {
  Linear l;
  l.x = view(op, x_name, x), l.w = view(op, "weight", w);
  check_dtype(op, x_name, l.x, {DType::bf16});
  if (l.x.ndim() != 2 || l.w.ndim() != 2 || l.w.size(1) != l.x.size(1))
    fail(op, std::string(x_name) + " must be (N, K) and weight (M, K), got " +
                 shape_str(l.x.shape) + " and " + shape_str(l.w.shape));
  l.n = l.x.size(0), l.k = l.x.size(1), l.m = l.w.size(0);
  check_arg(op, l.x, "weight", l.w, DType::bf16, {l.m, l.k});
  if (bias) {
    l.b = view(op, "bias", *bias);
    check_arg(op, l.x, "bias", l.b, DType::bf16, {l.m});
  }
  return l;
}

bool linear_gelu_forward(nb::ndarray<> h, nb::ndarray<> aux, nb::ndarray<> x, nb::ndarray<> w,
                         OptArray bias, uintptr_t workspace, size_t workspace_bytes,
                         uintptr_t stream) {
  const char* op = "linear_gelu_forward";
  const Linear l = linear_args(op, "x", x, w, bias);
  const Tensor H = l.like_y(op, "h", h), U = l.like_y(op, "aux", aux);
  if (!l.x.cuda) fail(op, "takes CUDA tensors (the CPU computes the matmul and GELU apart)");
  CudaScope scope(op, l.x);
  LtMatmul p = l.product(H.data);
  p.epilogue = bias ? LtEpilogue::gelu_aux_bias : LtEpilogue::gelu_aux;
  p.aux = U.data;
  return lt_matmul(op, p, reinterpret_cast<void*>(workspace), workspace_bytes, stream);
}

bool linear_gelu_backward(nb::ndarray<> du, nb::ndarray<> g, nb::ndarray<> w2, nb::ndarray<> aux,
                          uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
  const char* op = "linear_gelu_backward";
  Tensor G = view(op, "g", g), W2 = view(op, "weight2", w2);
  check_dtype(op, "g", G, {DType::bf16});
  if (G.ndim() != 2 || W2.ndim() != 2 || W2.size(0) != G.size(1))
    fail(op, "g must be (N, C) and weight2 (C, F), got " + shape_str(G.shape) + " and " +
                 shape_str(W2.shape));
  const int64_t N = G.size(0), C = G.size(1), F = W2.size(1);
  check_arg(op, G, "weight2", W2, DType::bf16, {C, F});
  Tensor U = view(op, "aux", aux), DU = view(op, "du", du);
  check_arg(op, G, "aux", U, DType::bf16, {N, F});
  check_arg(op, G, "du", DU, DType::bf16, {N, F});
  if (!G.cuda) fail(op, "takes CUDA tensors (the CPU computes the matmul and GELU apart)");
  CudaScope scope(op, G);
  LtMatmul p = row_major_product(G, false, W2, false, DU.data);  // du = g W2
  p.epilogue = LtEpilogue::dgelu;
  p.aux = U.data;
  return lt_matmul(op, p, reinterpret_cast<void*>(workspace), workspace_bytes, stream);
}

bool linear_residual(nb::ndarray<> out, nb::ndarray<> h, nb::ndarray<> w, OptArray bias,
                     nb::ndarray<> residual, uintptr_t workspace, size_t workspace_bytes,
                     uintptr_t stream) {
  const char* op = "linear_residual";
  const Linear l = linear_args(op, "h", h, w, bias);
  const Tensor O = l.like_y(op, "out", out), R = l.like_y(op, "residual", residual);
  if (O.data == R.data) fail(op, "out must not be the residual's memory");
  if (!l.x.cuda) fail(op, "takes CUDA tensors (the CPU computes the matmul and the add apart)");
  if (!g_residual_epilogue.load(std::memory_order_relaxed)) return false;
  CudaScope scope(op, l.x);
  LtMatmul p = l.product(O.data);
  p.epilogue = bias ? LtEpilogue::bias : LtEpilogue::none;
  p.c = R.data;
  return lt_matmul(op, p, reinterpret_cast<void*>(workspace), workspace_bytes, stream);
}

// d = op(a) op(b) (+ bias) (+ c) for row-major a, b, d (op: transposed where asked), one
// cuBLASLt product: the plain matmuls of benchmarks beside the fused ones above, with the same
// algorithm choice (heuristic or autotuned).
bool matmul(nb::ndarray<> d, nb::ndarray<> a, nb::ndarray<> b, bool trans_a, bool trans_b,
            OptArray bias, std::optional<nb::ndarray<>> c, uintptr_t workspace,
            size_t workspace_bytes, uintptr_t stream) {
  const char* op = "matmul";
  const Tensor A = view(op, "a", a), B = view(op, "b", b);
  check_dtype(op, "a", A, {DType::bf16});
  if (A.ndim() != 2 || B.ndim() != 2) fail(op, "a and b must be 2-D");
  const int64_t rows = A.size(trans_a ? 1 : 0), k = A.size(trans_a ? 0 : 1);
  const int64_t cols = B.size(trans_b ? 0 : 1);
  if (B.size(trans_b ? 1 : 0) != k)
    fail(op, "op(a) is " + shape_str({rows, k}) + " and op(b) " +
                 shape_str({B.size(trans_b ? 1 : 0), cols}) + ": inner sizes differ");
  check_arg(op, A, "b", B, DType::bf16, B.shape);
  const Tensor D = view(op, "d", d);
  check_arg(op, A, "d", D, DType::bf16, {rows, cols});
  LtMatmul p = row_major_product(A, trans_a, B, trans_b, D.data);
  p.epilogue = LtEpilogue::none;
  if (bias) {
    const Tensor bias_t = view(op, "bias", *bias);
    check_arg(op, A, "bias", bias_t, DType::bf16, {cols});
    p.bias = bias_t.data;
    p.epilogue = LtEpilogue::bias;
  }
  if (c) {
    const Tensor C = view(op, "c", *c);
    check_arg(op, A, "c", C, DType::bf16, {rows, cols});
    if (C.data == D.data) fail(op, "d must not be c's memory");
    p.c = C.data;
  }
  if (!A.cuda) fail(op, "takes CUDA tensors");
  CudaScope scope(op, A);
  return lt_matmul(op, p, reinterpret_cast<void*>(workspace), workspace_bytes, stream);
}

}  // namespace

void register_linear_gelu(nb::module_& m) {
  m.def("linear_gelu_forward", &linear_gelu_forward, "h"_a, "aux"_a, "x"_a, "weight"_a,
        "bias"_a.none(), "workspace"_a, "workspace_bytes"_a, "stream"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "aux = x @ weight.T + bias, h = gelu_tanh(aux) in one cuBLASLt matmul (CUDA, bfloat16). "
        "False, with nothing launched, where cuBLASLt cannot.");
  m.def("linear_gelu_backward", &linear_gelu_backward, "du"_a, "g"_a, "weight2"_a, "aux"_a,
        "workspace"_a, "workspace_bytes"_a, "stream"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "du = (g @ weight2) * gelu_tanh'(aux) in one cuBLASLt matmul (CUDA, bfloat16). False, "
        "with nothing launched, where cuBLASLt cannot.");
  m.def("linear_residual", &linear_residual, "out"_a, "h"_a, "weight"_a, "bias"_a.none(),
        "residual"_a, "workspace"_a, "workspace_bytes"_a, "stream"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "out = h @ weight.T + bias + residual in one cuBLASLt matmul, rounded once (CUDA, "
        "bfloat16). False, with nothing launched, where cuBLASLt cannot.");
  m.def("matmul", &matmul, "d"_a, "a"_a, "b"_a, "trans_a"_a, "trans_b"_a, "bias"_a.none(),
        "c"_a.none(), "workspace"_a, "workspace_bytes"_a, "stream"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "d = op(a) @ op(b) (+ bias) (+ c) in one cuBLASLt matmul, row-major bfloat16 arrays "
        "(op: transposed where trans_a / trans_b). False, with nothing launched, where "
        "cuBLASLt cannot.");
  m.def(
      "set_residual_epilogue", [](bool on) { g_residual_epilogue = on; }, "on"_a,
      "Whether linear_residual adds the residual in c_proj's matmul (default) or launches "
      "nothing, leaving the add to the caller (tests and benchmarks).");
  m.def("residual_epilogue", [] { return g_residual_epilogue.load(); });
  m.def("set_cublaslt_autotune", &set_cublaslt_autotune, "candidates"_a,
        "Time this many of cuBLASLt's candidate algorithms (up to 16) at each product's first "
        "call and keep the fastest; 0 (default): the heuristic's first.");
  m.def("cublaslt_autotune", &cublaslt_autotune);
  m.def("reset_cublaslt_choices", &reset_cublaslt_choices,
        "Forget every product's algorithm choice (the next call of each chooses again).");
  m.def(
      "cublaslt_choices",
      [] {
        nb::list out;
        for (const LtChoiceReport& r : cublaslt_choices()) {
          nb::dict d;
          d["m"] = r.m, d["n"] = r.n, d["k"] = r.k, d["epilogue"] = r.epilogue;
          d["candidates"] = r.candidates, d["rank"] = r.rank, d["tuned"] = r.tuned;
          d["times_us"] = r.times_us;
          out.append(d);
        }
        return out;
      },
      "The algorithm chosen for each cuBLASLt product so far: m, n, k, epilogue, candidates, "
      "rank (of the one used), tuned, times_us (of each candidate timed).");
  m.def("cublaslt_unavailable", &cublaslt_unavailable,
        "Why cuBLASLt's epilogues cannot be used here ('' when they can).");
}

}  // namespace gs
