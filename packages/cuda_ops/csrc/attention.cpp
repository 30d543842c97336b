// attention.cpp: the _C bindings of causal attention (attention_forward, attention_backward),
// dispatching to the CPU code (attention_cpu.cpp) or the CUDA launchers (attention_cuda.cu).
//
// Unlike the elementwise ops, q/k/v, y, dy and the gradients are strided views: any (B, nh, T,
// hs) layout with unit stride along hs (the model's q/k/v are transposed views of c_attn's
// (B, T, 3C) output; y and the gradients are allocated as (B, T, nh, hs)). The bf16 CUDA
// kernels copy rows with 16-byte cp.async, so there every row must start 16-byte aligned: data
// pointer and the B/nh/T strides a multiple of 8 elements. lse is contiguous (B, nh, T),
// float32 (float64 for float64 inputs). These checks are the second line after the Python
// wrapper's (attention.py), so a direct _C call cannot read out of bounds.
#include <nanobind/stl/optional.h>

#include <atomic>
#include <cmath>
#include <optional>

#include "attention.h"
#include "common.h"

using namespace nb::literals;

namespace gs {
namespace {

using attn::Dims;
using attn::View4;

struct Rows {  // one (B, nh, T, hs) argument
  const char* name;
  void* data;
  DType dtype;
  bool cuda;
  int device;
  int64_t shape[4], sb, sh, st;
  template <typename T> View4<T> as() const { return {static_cast<T*>(data), sb, sh, st}; }
};

DType float_dtype(const char* op, const char* name, nb::dlpack::dtype d) {
  using code = nb::dlpack::dtype_code;
  if (d.lanes == 1 && d.code == static_cast<uint8_t>(code::Float) && d.bits == 32)
    return DType::f32;
  if (d.lanes == 1 && d.code == static_cast<uint8_t>(code::Float) && d.bits == 64)
    return DType::f64;
  if (d.lanes == 1 && d.code == static_cast<uint8_t>(code::Bfloat) && d.bits == 16)
    return DType::bf16;
  fail(op, std::string(name) + " has an unsupported dtype: use float32, bfloat16 or float64");
}

Rows rows(const char* op, const char* name, const nb::ndarray<>& a) {
  Rows r{name, a.data(), float_dtype(op, name, a.dtype()), false, 0, {}, 0, 0, 0};
  if (a.device_type() == nb::device::cuda::value)
    r.cuda = true;
  else if (a.device_type() != nb::device::cpu::value)
    fail(op, std::string(name) + " is on an unsupported device: use a CPU or CUDA tensor");
  r.device = static_cast<int>(a.device_id());
  if (a.ndim() != 4) fail(op, std::string(name) + " must be 4-D (B, nh, T, hs)");
  for (int i = 0; i < 4; ++i) r.shape[i] = static_cast<int64_t>(a.shape(i));
  if (a.stride(3) != 1 && r.shape[3] != 1)
    fail(op, std::string(name) + " must have unit stride along hs: call .contiguous() first");
  r.sb = a.stride(0);
  r.sh = a.stride(1);
  r.st = a.stride(2);
  if (r.sb < 0 || r.sh < 0 || r.st < 0) fail(op, std::string(name) + " has negative strides");
  if (r.cuda && r.dtype == DType::bf16) {  // strides of size-1 dimensions are never used
    auto ok = [&](int64_t stride, int dim) { return r.shape[dim] == 1 || stride % 8 == 0; };
    const bool aligned = reinterpret_cast<uintptr_t>(r.data) % 16 == 0 && ok(r.sb, 0) &&
                         ok(r.sh, 1) && ok(r.st, 2);
    if (!aligned)
      fail(op, std::string(name) + " rows are not 16-byte aligned (data pointer and B/nh/T "
                                   "strides a multiple of 8 elements): call .contiguous() first");
  }
  return r;
}

void same(const char* op, const Rows& ref, const Rows& t) {
  for (int i = 0; i < 4; ++i)
    if (t.shape[i] != ref.shape[i])
      fail(op, std::string(t.name) + " has another shape than " + ref.name);
  if (t.dtype != ref.dtype) fail(op, std::string(t.name) + " has another dtype than " + ref.name);
  if (t.cuda != ref.cuda || t.device != ref.device)
    fail(op, std::string(t.name) + " is on another device than " + ref.name);
}

Dims dims_of(const char* op, const Rows& q) {
  const Dims d{q.shape[0], q.shape[1], q.shape[2], q.shape[3]};
  if (d.B < 1 || d.nh < 1 || d.T < 1) fail(op, "q has an empty dimension");
  if (!attn::supported_head_size(d.hs))
    fail(op, "head size " + std::to_string(d.hs) + " has no kernel: use 32, 64 or 128");
  if (q.cuda && d.B * d.nh > 65535) fail(op, "B * nh is above 65535 (the CUDA grid's y limit)");
  if (d.T > (int64_t(1) << 30)) fail(op, "T is above 2^30");
  return d;
}

// lse: contiguous (B, nh, T) in the accumulation dtype, on q's device.
void* lse_of(const char* op, const nb::ndarray<>& a, const Rows& q, const Dims& d) {
  Tensor l = view(op, "lse", a);
  check_shape(op, "lse", l, {d.B, d.nh, d.T});
  check_dtype(op, "lse", l, {q.dtype == DType::f64 ? DType::f64 : DType::f32});
  if (l.cuda != q.cuda || l.device_id != q.device) fail(op, "lse is on another device than q");
  return l.data;
}

// Dropout threshold/scale (attention_philox.h) and the seed: on the CPU its value, on CUDA a
// device pointer the kernels read (so a replayed CUDA graph draws a fresh seed each time).
struct Drop {
  attn::DropoutSpec spec;
  const int64_t* device_seed = nullptr;
};
Drop drop_of(const char* op, double p, const std::optional<nb::ndarray<>>& seed, const Rows& q) {
  Drop d;
  if (!(p >= 0.0 && p < 1.0)) fail(op, "dropout_p must be in [0, 1)");
  d.spec.threshold = attn::dropout_threshold(p);
  if (d.spec.threshold == 0) return d;
  if (!seed) fail(op, "dropout_p > 0 needs a seed tensor");
  const nb::ndarray<>& s = *seed;
  const bool on_q = (s.device_type() == nb::device::cuda::value) == q.cuda &&
                    (!q.cuda || static_cast<int>(s.device_id()) == q.device);
  if (!(s.dtype() == nb::dtype<int64_t>()) || s.size() != 1 || !on_q)
    fail(op, "seed must be one int64 on q's device");
  d.spec.scale = 65536.0 / (65536.0 - d.spec.threshold);
  const int64_t* p64 = static_cast<const int64_t*>(s.data());
  if (q.cuda) {
    d.device_seed = p64;
  } else {
    d.spec.key0 = static_cast<uint32_t>(static_cast<uint64_t>(*p64));
    d.spec.key1 = static_cast<uint32_t>(static_cast<uint64_t>(*p64) >> 32);
  }
  return d;
}

#ifdef GPTSTACK_WITH_CUDA
attn::CudaLaunch launch_of(const Drop& d, int warps, uintptr_t stream) {
  attn::CudaLaunch l;
  l.threshold = d.spec.threshold;
  l.drop_scale = static_cast<float>(d.spec.scale);
  l.seed = d.device_seed;
  l.warps = warps;
  l.stream = stream;
  return l;
}
#endif

bool use_avx2() { return cpu_path() == CpuPath::avx2; }

void attention_forward(nb::ndarray<> y, nb::ndarray<> lse, nb::ndarray<> q, nb::ndarray<> k,
                       nb::ndarray<> v, std::optional<nb::ndarray<>> seed, double dropout_p,
                       int warps, uintptr_t stream, int num_threads) {
  const char* op = "attention_forward";
  (void)stream;
  (void)warps;
  const Rows Q = rows(op, "q", q), K = rows(op, "k", k), V = rows(op, "v", v),
             Y = rows(op, "y", y);
  same(op, Q, K);
  same(op, Q, V);
  same(op, Q, Y);
  const Dims d = dims_of(op, Q);
  void* L = lse_of(op, lse, Q, d);
  const Drop drop = drop_of(op, dropout_p, seed, Q);
  if (Q.cuda) {
    Tensor scope_t;
    scope_t.dtype = Q.dtype;
    scope_t.cuda = true;
    scope_t.device_id = Q.device;
    CudaScope scope(op, scope_t);
    if (Q.dtype == DType::bf16)
      GS_CUDA_CALL(attn::forward_cuda_bf16(d, Q.as<const bf16_t>(), K.as<const bf16_t>(),
                                           V.as<const bf16_t>(), Y.as<bf16_t>(),
                                           static_cast<float*>(L),
                                           launch_of(drop, warps, stream)));
    else
      GS_CUDA_CALL(attn::forward_cuda_f32(d, Q.as<const float>(), K.as<const float>(),
                                          V.as<const float>(), Y.as<float>(),
                                          static_cast<float*>(L),
                                          launch_of(drop, warps, stream)));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, Q.dtype, [&](auto tag) {
    using E = decltype(tag);
    attn::forward_cpu<E>(d, Q.as<const E>(), K.as<const E>(), V.as<const E>(), Y.as<E>(),
                         static_cast<acc_t<E>*>(L), drop.spec, use_avx2(), nt);
  });
}

void attention_backward(nb::ndarray<> dq, nb::ndarray<> dk, nb::ndarray<> dv, nb::ndarray<> dy,
                        nb::ndarray<> q, nb::ndarray<> k, nb::ndarray<> v, nb::ndarray<> y,
                        nb::ndarray<> lse, std::optional<nb::ndarray<>> seed, double dropout_p,
                        std::optional<nb::ndarray<>> scratch, int warps, uintptr_t stream,
                        int num_threads) {
  const char* op = "attention_backward";
  (void)stream;
  (void)warps;
  const Rows Q = rows(op, "q", q), K = rows(op, "k", k), V = rows(op, "v", v),
             Y = rows(op, "y", y), DY = rows(op, "dy", dy), DQ = rows(op, "dq", dq),
             DK = rows(op, "dk", dk), DV = rows(op, "dv", dv);
  for (const Rows* t : {&K, &V, &Y, &DY, &DQ, &DK, &DV}) same(op, Q, *t);
  const Dims d = dims_of(op, Q);
  const void* L = lse_of(op, lse, Q, d);
  const Drop drop = drop_of(op, dropout_p, seed, Q);
  // contiguous float32: (B, nh, T) for the wgmma backward's D, (B, nh, T, hs) for atomic dQ
  float* acc = nullptr;
  if (scratch) {
    Tensor A = view(op, "scratch", *scratch);
    if (warps == attn::kWgmma)
      check_shape(op, "scratch", A, {d.B, d.nh, d.T});
    else
      check_shape(op, "scratch", A, {d.B, d.nh, d.T, d.hs});
    check_dtype(op, "scratch", A, {DType::f32});
    if (!A.cuda || A.device_id != Q.device || Q.dtype != DType::bf16)
      fail(op, "scratch is for bfloat16 CUDA tensors only, on q's device");
    acc = A.ptr<float>();
  }
  (void)acc;
  if (Q.cuda) {
    Tensor scope_t;
    scope_t.dtype = Q.dtype;
    scope_t.cuda = true;
    scope_t.device_id = Q.device;
    CudaScope scope(op, scope_t);
    if (Q.dtype == DType::bf16)
      GS_CUDA_CALL(attn::backward_cuda_bf16(
          d, DY.as<const bf16_t>(), Q.as<const bf16_t>(), K.as<const bf16_t>(),
          V.as<const bf16_t>(), Y.as<const bf16_t>(), static_cast<const float*>(L),
          DQ.as<bf16_t>(), DK.as<bf16_t>(), DV.as<bf16_t>(), acc,
          launch_of(drop, warps, stream)));
    else
      GS_CUDA_CALL(attn::backward_cuda_f32(
          d, DY.as<const float>(), Q.as<const float>(), K.as<const float>(), V.as<const float>(),
          Y.as<const float>(), static_cast<const float*>(L), DQ.as<float>(), DK.as<float>(),
          DV.as<float>(), launch_of(drop, warps, stream)));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, Q.dtype, [&](auto tag) {
    using E = decltype(tag);
    attn::backward_cpu<E>(d, DY.as<const E>(), Q.as<const E>(), K.as<const E>(),
                          V.as<const E>(), Y.as<const E>(), static_cast<const acc_t<E>*>(L),
                          DQ.as<E>(), DK.as<E>(), DV.as<E>(), drop.spec, use_avx2(), nt);
  });
}

}  // namespace

// The switch read by attention.py: bf16 CUDA calls in the default variant go to the wgmma
// kernels (kWgmma) where the device is an sm_90 GPU. Off by default until they win.
static std::atomic<bool> g_attention_wgmma{false};
bool attention_wgmma_enabled() { return g_attention_wgmma.load(std::memory_order_relaxed); }
void set_attention_wgmma(bool enabled) { g_attention_wgmma = enabled; }

void register_attention(nb::module_& m) {
  m.def("attention_forward", &attention_forward, "y"_a, "lse"_a, "q"_a, "k"_a, "v"_a,
        "seed"_a.none(), "dropout_p"_a = 0.0, "warps"_a = 0, "stream"_a = 0, "num_threads"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "Causal attention: y = softmax(q k^T / sqrt(hs), j <= i) v (dropout p on the weights), "
        "lse = its log-normalizer. q, k, v, y: (B, nh, T, hs) with unit hs stride; lse: "
        "(B, nh, T). seed: one int64 on q's device, needed when dropout_p > 0. warps: CUDA "
        "bf16 CTA size, 4 or 8 (0: the default, 4), or 1: the split-keys kernel, 2: the "
        "warpgroup-MMA (wgmma) kernel.");
  m.def("attention_backward", &attention_backward, "dq"_a, "dk"_a, "dv"_a, "dy"_a, "q"_a, "k"_a,
        "v"_a, "y"_a, "lse"_a, "seed"_a.none(), "dropout_p"_a = 0.0,
        "scratch"_a.none() = nb::none(), "warps"_a = 0, "stream"_a = 0, "num_threads"_a = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "Gradients of attention_forward: dq, dk, dv (overwritten) from dy, the inputs, y and "
        "lse, with the forward's dropout_p and seed. warps as attention_forward's (2: the "
        "wgmma backward, which needs scratch). scratch (bf16 on CUDA only), float32: (B, nh, T) "
        "for the wgmma backward's D = dy . y; (B, nh, T, hs) selects the atomic-dQ backward.");
  m.def("set_attention_wgmma", &set_attention_wgmma, "enabled"_a,
        "CUDA bf16 on sm_90 GPUs: causal_attention's default variant runs the warpgroup-MMA "
        "kernels (attention_forward_wgmma.cuh, attention_backward_wgmma.cuh; default False).");
  m.def("attention_wgmma", &attention_wgmma_enabled);
}

}  // namespace gs
