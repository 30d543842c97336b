// attention_cuda.cu: launchers of the causal attention kernels (attention.h). bf16 goes to the
// tensor-core kernels, one template instance per (head size, warps per CTA, dropout on/off, and
// for the backward its mode: two-stage, or atomic dQ when the caller passes the fp32 scratch);
// float32 to the SIMT kernels. Each launcher runs on the caller's stream, never allocates or
// synchronizes (CUDA-graph capturable; the atomic mode's zeroing is a cudaMemsetAsync on that
// stream), and checks its launch (cuda_common.cuh). The backward's CTA size defaults to 4 warps.
#include <atomic>
#include <string>

#include "attention.h"
#include "attention_backward.cuh"
#include "attention_forward.cuh"
#include "attention_simt.cuh"
#include "cuda_common.cuh"

namespace gs::attn {
namespace {

std::string shape_of(const Dims& d) {
  return "(B=" + std::to_string(d.B) + ", nh=" + std::to_string(d.nh) + ", T=" +
         std::to_string(d.T) + ", hs=" + std::to_string(d.hs) + ")";
}

// Kernels with more than 48 KiB of dynamic shared memory must say so, once per device (the
// attribute is per device; a bit per device index, up to 64 devices).
template <typename Kernel> void allow_smem(Kernel kernel, int bytes, const char* op) {
  if (bytes <= 48 * 1024) return;
  static std::atomic<unsigned long long> done{0};
  int dev = 0;
  cudaGetDevice(&dev);
  const unsigned long long bit = 1ull << (dev & 63);
  if (done.load(std::memory_order_relaxed) & bit) return;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  check_launch(op, "(setting " + std::to_string(bytes) + " bytes of shared memory)");
  done.fetch_or(bit, std::memory_order_relaxed);
}

template <typename E> View4<const uint16_t> bits(View4<const E> v) {
  return {reinterpret_cast<const uint16_t*>(v.p), v.sb, v.sh, v.st};
}
template <typename E> View4<uint16_t> bits(View4<E> v) {
  return {reinterpret_cast<uint16_t*>(v.p), v.sb, v.sh, v.st};
}

// The forward's CTA size when the caller leaves it open (0): 8 warps (128 queries share each
// K/V tile, halving their L2 traffic) once T is long enough to give every SM several CTAs, 4
// below, so that short sequences still fill the GPU. Not yet measured on the H200:
// scripts/attention_bench.py times both sizes (and both backward sizes) at the preset shapes.
int default_forward_warps(int requested, const Dims& d) {
  if (requested == 4 || requested == 8) return requested;
  return d.T >= 512 ? 8 : 4;
}

template <int HS, int NW, bool kDrop>
void launch_forward(const FwdArgs& a, const Dims& d, cudaStream_t s) {
  using C = FwdConfig<HS, NW>;
  auto kernel = attention_forward_mma_kernel<HS, NW, kDrop>;
  allow_smem(kernel, C::kSmemBytes, "causal_attention");
  const dim3 grid(ceil_div(d.T, C::kRows), static_cast<unsigned>(d.B * d.nh));
  kernel<<<grid, C::kThreads, C::kSmemBytes, s>>>(a);
  check_launch("causal_attention", shape_of(d));
}

template <int HS, int NW, bool kDrop>
void launch_backward(const BwdArgs& a, const Dims& d, cudaStream_t s) {
  using C = BwdConfig<HS, NW>;
  const unsigned blocks = ceil_div(d.T, C::kRows), bh = static_cast<unsigned>(d.B * d.nh);
  const char* op = "causal_attention_backward";
  if (a.dq_accum == nullptr) {  // two stages: key CTAs (z = 0) and query CTAs (z = 1)
    auto kernel = attention_backward_mma_kernel<HS, NW, kDrop, false>;
    allow_smem(kernel, C::kSmemBytes, op);
    kernel<<<dim3(blocks, bh, 2), C::kThreads, C::kSmemBytes, s>>>(a);
    check_launch(op, shape_of(d));
    return;
  }
  // atomic dQ: zero the fp32 buffer, key CTAs only, then scale and round into dq
  const int64_t n = d.B * d.nh * d.T * d.hs;
  cudaMemsetAsync(a.dq_accum, 0, n * sizeof(float), s);
  check_launch(op, shape_of(d) + " (zeroing dq_accum)");
  auto kernel = attention_backward_mma_kernel<HS, NW, kDrop, true>;
  allow_smem(kernel, C::kSmemAtomic, op);
  kernel<<<dim3(blocks, bh, 1), C::kThreads, C::kSmemAtomic, s>>>(a);
  check_launch(op, shape_of(d));
  const int64_t n8 = n / 8;
  constexpr int kConvertThreads = 256;
  attention_dq_convert_kernel<<<ceil_div(n8, kConvertThreads), kConvertThreads, 0, s>>>(
      a.dq_accum, a.dq, a.nh, a.T, HS, a.scale, n8);
  check_launch(op, shape_of(d) + " (dq conversion)");
}

// Runs Op::run<HS, NW, kDrop>(args...) for the instance the arguments select.
template <typename Op, int HS, int NW, typename... A> void by_drop(bool drop, const A&... args) {
  if (drop)
    Op::template run<HS, NW, true>(args...);
  else
    Op::template run<HS, NW, false>(args...);
}
template <typename Op, int HS, typename... A>
void by_warps(int warps, bool drop, const A&... args) {
  if (warps == 8)
    by_drop<Op, HS, 8>(drop, args...);
  else
    by_drop<Op, HS, 4>(drop, args...);
}
template <typename Op, typename... A>
void dispatch(const char* op, const Dims& d, int warps, bool drop, const A&... args) {
  switch (d.hs) {
    case 32: return by_warps<Op, 32>(warps, drop, args...);
    case 64: return by_warps<Op, 64>(warps, drop, args...);
    case 128: return by_warps<Op, 128>(warps, drop, args...);
    default:
      throw std::invalid_argument(std::string("gptstack.cuda_ops.") + op + ": head size " +
                                  std::to_string(d.hs) + " has no kernel (32, 64 or 128)");
  }
}
struct Forward {
  template <int HS, int NW, bool kDrop>
  static void run(const FwdArgs& a, const Dims& d, const cudaStream_t& s) {
    launch_forward<HS, NW, kDrop>(a, d, s);
  }
};
struct Backward {
  template <int HS, int NW, bool kDrop>
  static void run(const BwdArgs& a, const Dims& d, const cudaStream_t& s) {
    launch_backward<HS, NW, kDrop>(a, d, s);
  }
};

SimtArgs simt_args(const Dims& d, const CudaLaunch& l) {
  SimtArgs a{};
  a.nh = static_cast<int>(d.nh);
  a.T = static_cast<int>(d.T);
  a.hs = static_cast<int>(d.hs);
  a.scale = 1.0f / sqrtf(static_cast<float>(d.hs));
  a.threshold = l.threshold;
  a.drop_scale = l.drop_scale;
  a.seed = l.seed;
  return a;
}

}  // namespace

void forward_cuda_bf16(const Dims& d, View4<const bf16_t> q, View4<const bf16_t> k,
                       View4<const bf16_t> v, View4<bf16_t> y, float* lse, const CudaLaunch& l) {
  FwdArgs a{bits(q), bits(k), bits(v), bits(y), lse, static_cast<int>(d.nh),
            static_cast<int>(d.T), kLog2e / sqrtf(static_cast<float>(d.hs)), l.threshold,
            l.drop_scale, l.seed};
  const cudaStream_t s = as_stream(l.stream);
  dispatch<Forward>("causal_attention", d, default_forward_warps(l.warps, d),
                    l.threshold != 0, a, d, s);
}

void backward_cuda_bf16(const Dims& d, View4<const bf16_t> dy, View4<const bf16_t> q,
                        View4<const bf16_t> k, View4<const bf16_t> v, View4<const bf16_t> y,
                        const float* lse, View4<bf16_t> dq, View4<bf16_t> dk, View4<bf16_t> dv,
                        float* dq_accum, const CudaLaunch& l) {
  const float scale = 1.0f / sqrtf(static_cast<float>(d.hs));
  BwdArgs a{bits(dy), bits(q), bits(k), bits(v), bits(y), lse, bits(dq), bits(dk), bits(dv),
            static_cast<int>(d.nh), static_cast<int>(d.T), scale, scale * kLog2e, l.threshold,
            l.drop_scale, l.seed, dq_accum};
  const cudaStream_t s = as_stream(l.stream);
  dispatch<Backward>("causal_attention_backward", d, l.warps == 8 ? 8 : 4, l.threshold != 0, a,
                     d, s);
}

void forward_cuda_f32(const Dims& d, View4<const float> q, View4<const float> k,
                      View4<const float> v, View4<float> y, float* lse, const CudaLaunch& l) {
  SimtArgs a = simt_args(d, l);
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = y;
  a.lse = lse;
  const dim3 grid(ceil_div(d.T, kSimtWarps), static_cast<unsigned>(d.B * d.nh));
  attention_forward_simt_kernel<<<grid, 32 * kSimtWarps, 0, as_stream(l.stream)>>>(a);
  check_launch("causal_attention", shape_of(d));
}

void backward_cuda_f32(const Dims& d, View4<const float> dy, View4<const float> q,
                       View4<const float> k, View4<const float> v, View4<const float> y,
                       const float* lse, View4<float> dq, View4<float> dk, View4<float> dv,
                       const CudaLaunch& l) {
  SimtArgs a = simt_args(d, l);
  a.dy = dy;
  a.q = q;
  a.k = k;
  a.v = v;
  a.y = y;
  a.lse = const_cast<float*>(lse);  // read only in the backward kernel
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  const dim3 grid(ceil_div(d.T, kSimtWarps), static_cast<unsigned>(d.B * d.nh), 2);
  attention_backward_simt_kernel<<<grid, 32 * kSimtWarps, 0, as_stream(l.stream)>>>(a);
  check_launch("causal_attention_backward", shape_of(d));
}

}  // namespace gs::attn
