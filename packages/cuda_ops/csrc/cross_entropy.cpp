// cross_entropy.cpp: softmax cross-entropy with its gradient on the CPU, and the _C binding
// cross_entropy. Formulas: cross_entropy.h.
//
// Versions (the CUDA kernel in cross_entropy.cu is checked against the same torch reference):
//   scalar  per row: max, sum of exp(z - max) in the accumulation type, loss, then dz. The CPU
//           reference.
//   avx2    the same three passes, 8 lanes, the polynomial exp of cpu_simd.h.
// Rows are split across OpenMP threads (one row is V = up to 50304 logits: plenty of work).
#include "cross_entropy.h"

#include <nanobind/stl/optional.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>

#include "common.h"
#include "cpu_simd.h"

using namespace nb::literals;

namespace gs {
namespace {

template <typename T> struct Rows {
  acc_t<T>* losses;
  T* dlogits;  // null: loss only
  const T* logits;
  const int64_t* targets;
  acc_t<T> scale;
  int64_t ignore_index, V;
};

template <typename T> void row_scalar(const Rows<T>& a, int64_t i) {
  using A = acc_t<T>;
  const int64_t V = a.V, t = a.targets[i];
  const T* z = a.logits + i * V;
  T* dz = a.dlogits ? a.dlogits + i * V : nullptr;
  if (t == a.ignore_index) {
    a.losses[i] = 0.0f;
    if (dz)
      for (int64_t j = 0; j < V; ++j) store(dz + j, A(0));
    return;
  }
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < V; ++j) m = std::max<A>(m, load(z + j));
  A s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(A(load(z + j)) - m);
  const A lse = m + std::log(s);
  a.losses[i] = lse - A(load(z + t));
  if (dz) {
    const A scale = a.scale;
    for (int64_t j = 0; j < V; ++j) {
      A p = std::exp(A(load(z + j)) - lse);
      store(dz + j, (p - (j == t ? A(1) : A(0))) * scale);
    }
  }
}

#ifdef GS_HAVE_AVX2_PATH
template <typename T> GS_AVX2 void row_avx2(const Rows<T>& a, int64_t i) {
  const int64_t V = a.V, Vv = V / 8 * 8, t = a.targets[i];
  const T* z = a.logits + i * V;
  T* dz = a.dlogits ? a.dlogits + i * V : nullptr;
  if (t == a.ignore_index) {
    a.losses[i] = 0.0f;
    if (dz)
      for (int64_t j = 0; j < V; ++j) store(dz + j, 0.0f);
    return;
  }
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < Vv; j += 8) mv = _mm256_max_ps(mv, avx2::load8(z + j));
  float m = avx2::hmax8(mv);
  for (int64_t j = Vv; j < V; ++j) m = std::max(m, load(z + j));
  mv = _mm256_set1_ps(m);
  __m256 sv = _mm256_setzero_ps();
  for (int64_t j = 0; j < Vv; j += 8)
    sv = _mm256_add_ps(sv, avx2::exp8(_mm256_sub_ps(avx2::load8(z + j), mv)));
  float s = avx2::hsum8(sv);
  for (int64_t j = Vv; j < V; ++j) s += std::exp(load(z + j) - m);
  const float lse = m + std::log(s);
  // z_t is read before the (possibly in-place) gradient pass overwrites it
  const float zt = load(z + t);
  a.losses[i] = lse - zt;
  if (dz) {
    const __m256 lv = _mm256_set1_ps(lse), scale = _mm256_set1_ps(a.scale);
    for (int64_t j = 0; j < Vv; j += 8)
      avx2::store8(dz + j,
                   _mm256_mul_ps(avx2::exp8(_mm256_sub_ps(avx2::load8(z + j), lv)), scale));
    for (int64_t j = Vv; j < V; ++j) store(dz + j, std::exp(load(z + j) - lse) * a.scale);
    // the one-hot element again, from z_t in float32: (p_t - 1) computed before rounding, so
    // a confident p_t = 0.999 in bfloat16 keeps its -0.001 instead of rounding p_t to 1 first
    store(dz + t, (std::exp(zt - lse) - 1.0f) * a.scale);
  }
}
#endif

template <typename T> void rows_cpu(const Rows<T>& a, int64_t n, int nt) {
  bool avx2 = false;
#ifdef GS_HAVE_AVX2_PATH
  if constexpr (!std::is_same_v<T, double>) avx2 = cpu_path() == CpuPath::avx2;
#endif
#pragma omp parallel for num_threads(nt) schedule(static) if (n * a.V >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
#ifdef GS_HAVE_AVX2_PATH
    if constexpr (!std::is_same_v<T, double>) {
      if (avx2) {
        row_avx2(a, i);
        continue;
      }
    }
#endif
    (void)avx2;
    row_scalar(a, i);
  }
}

using OptArray = std::optional<nb::ndarray<>>;

void cross_entropy(nb::ndarray<> losses, OptArray dlogits, nb::ndarray<> logits,
                   nb::ndarray<> targets, OptArray grad_scale, int64_t ignore_index,
                   uintptr_t stream, int num_threads) {
  const char* op = "cross_entropy";
  (void)stream;
  Tensor Z = view(op, "logits", logits);
  check_dtype(op, "logits", Z, {DType::f32, DType::bf16, DType::f64});
  if (Z.ndim() != 2) fail(op, "logits must be (n, V), got shape " + shape_str(Z.shape));
  const int64_t n = Z.size(0), V = Z.size(1);
  if (V < 1) fail(op, "logits has V = 0 columns");
  const DType acc = Z.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor L = view(op, "losses", losses), Tg = view(op, "targets", targets), DZ, GS;
  check_arg(op, Z, "losses", L, acc, {n});
  check_arg(op, Z, "targets", Tg, DType::i64, {n});
  if (dlogits.has_value() != grad_scale.has_value())
    fail(op, "dlogits and grad_scale come together (both given or both None)");
  if (dlogits) {
    DZ = view(op, "dlogits", *dlogits);
    GS = view(op, "grad_scale", *grad_scale);
    check_arg(op, Z, "dlogits", DZ, Z.dtype, Z.shape);
    check_arg(op, Z, "grad_scale", GS, acc, {1});
  }
  if (Z.cuda) {
    CudaScope scope(op, Z);
    if (V > INT32_MAX || n > INT32_MAX)
      fail(op, "logits " + shape_str(Z.shape) + " is too large for the CUDA kernel (2^31 - 1)");
    GS_CUDA_CALL(cross_entropy_cuda(L.ptr<float>(), dlogits ? DZ.data : nullptr, Z.data,
                                    Tg.ptr<const int64_t>(),
                                    dlogits ? GS.ptr<const float>() : nullptr, ignore_index,
                                    {n, V}, Z.dtype, stream));
    return;
  }
  const int64_t* t = Tg.ptr<const int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= V))
      fail(op, "target " + std::to_string(t[i]) + " at row " + std::to_string(i) +
                   " is outside [0, " + std::to_string(V) + ") and is not ignore_index " +
                   std::to_string(ignore_index));
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, Z.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A scale = dlogits ? *GS.ptr<const A>() : A(0);
    Rows<T> a{L.ptr<A>(), dlogits ? DZ.ptr<T>() : nullptr, Z.ptr<const T>(), t, scale,
              ignore_index, V};
    rows_cpu(a, n, nt);
  });
}

}  // namespace

static std::atomic<bool> g_cross_entropy_staged{true};
bool cross_entropy_staged_enabled() { return g_cross_entropy_staged.load(std::memory_order_relaxed); }
void set_cross_entropy_staged(bool enabled) { g_cross_entropy_staged = enabled; }

void register_cross_entropy(nb::module_& m) {
  m.def("cross_entropy", &cross_entropy, "losses"_a, "dlogits"_a.none(), "logits"_a,
        "targets"_a, "grad_scale"_a.none(), "ignore_index"_a = -1, "stream"_a = 0,
        "num_threads"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Per-row softmax cross-entropy of logits (n, V) against targets (n,) into losses (n,); "
        "with dlogits (may be logits itself) also (softmax - onehot) * grad_scale[0].");
  m.def("set_cross_entropy_staged", &set_cross_entropy_staged, "enabled"_a,
        "CUDA: run rows that fit twice in shared memory through the staged kernel (sm_90+; "
        "default True) or always through the online kernel (cross_entropy.cu).");
  m.def("cross_entropy_staged", &cross_entropy_staged_enabled);
}

}  // namespace gs
