// window_attention.cu: the launcher of window_attention.cuh's kernel (a block's ln_1, c_attn
// and causal attention for a short slide window in one launch; decode.h's window_attention).
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c window_attention.cu -I.
#include <cuda_bf16.h>

#include <string>

#include "cuda_common.cuh"
#include "cuda_launch.h"
#include "decode.h"
#include "window_attention.cuh"

namespace gs {

static_assert(kWindowAttentionMaxT == window_attn::kMaxT, "decode.h's limit is the kernel's tile");
static_assert(sizeof(kWindowAttentionHeadSizes) == 2 * sizeof(int) &&
                  kWindowAttentionHeadSizes[0] == 32 && kWindowAttentionHeadSizes[1] == 64,
              "decode.h's head sizes are the instances launched below");

bool window_attention_cuda(void* y, const void* x, const void* w, const void* b, const void* ln_w,
                           const void* ln_b, const void* wp, const void* bp, int64_t B, int64_t T,
                           int64_t C, int64_t nh, double eps, DType dtype, uintptr_t stream,
                           const WindowIds* ids) {
  namespace wa = window_attn;
  // fewer rows than decode_linear's tensor-core kernel takes: the two ops are the one-row
  // kernel's bits, not this kernel's
  if (dtype != DType::bf16 || !ln_w || B < 1 || T < 1 || T > kWindowAttentionMaxT ||
      B * T < kDecodeMmaMinRows || nh < 1 || C % nh != 0 || C % 16 != 0)
    return false;
  const int64_t hs = C / nh;
  if (hs != 32 && hs != 64) return false;  // kWindowAttentionHeadSizes
  if (!aligned16(x) || !aligned16(w) || !aligned16(y)) return false;  // cp.async, 16-byte stores
  if (ids && (wp || !aligned16(ids->wte) || !aligned16(ids->wpe) || !aligned16(ids->x)))
    return false;
  const bool proj = wp != nullptr;
  // with c_proj a cluster of the sequence's nh CTAs: sm_90 and newer, a portable size
  if (proj && (nh > kWindowAttentionProjMaxHeads || !aligned16(wp) || !clusters_here()))
    return false;
  const int optin = smem_optin_here();
  const int64_t smem = wa::shared_bytes(hs, proj, C);
  if (smem > optin) return false;  // x and the head's weight rows do not fit one CTA
  auto bits = [](const void* p) { return static_cast<const uint16_t*>(p); };
  wa::Args a{static_cast<uint16_t*>(y), bits(x), bits(w), bits(b), bits(ln_w), bits(ln_b),
             int(T), int(C), float(eps), attn::kLog2e / sqrtf(static_cast<float>(hs)), bits(wp),
             bits(bp)};
  if (ids) {
    a.window = ids->window, a.token = ids->token, a.vocab = ids->vocab;
    a.wte = bits(ids->wte), a.wpe = bits(ids->wpe), a.x_out = static_cast<uint16_t*>(ids->x);
  }
  const std::string config = "(B=" + std::to_string(B) + ", T=" + std::to_string(T) +
                             ", C=" + std::to_string(C) + ", nh=" + std::to_string(nh) +
                             (proj ? ", c_proj" : "") + (ids ? ", embedded" : "") + ")";
  auto launch = [&](auto kernel) {
    // each instance's limit raised once, to the most this GPU allows (any C of its range)
    static LaunchCheck check;
    check.ensure(reinterpret_cast<const void*>(kernel.value), "window_attention", config,
                 wa::kThreads, optin);
    const dim3 grid{unsigned(nh), unsigned(B)};
    if (proj)
      launch_cluster_programmatic(kernel.value, grid, wa::kThreads, size_t(smem),
                                  as_stream(stream), unsigned(nh), a);
    else
      launch_programmatic(kernel.value, grid, wa::kThreads, int(smem), as_stream(stream), a);
  };
  auto with_head_size = [&](auto head_size) {  // the instance: plain, with c_proj, or embedded
    constexpr int HS = decltype(head_size)::value;
    if (proj)
      wa::with_kernel_for<HS, true>(int(C), launch);
    else if (ids)
      wa::with_kernel_for<HS, false, true>(int(C), launch);
    else
      wa::with_kernel_for<HS>(int(C), launch);
  };
  if (hs == 32)
    with_head_size(std::integral_constant<int, 32>{});
  else
    with_head_size(std::integral_constant<int, 64>{});
  check_launch("window_attention", config);
  return true;
}

}  // namespace gs
