// decode_tail.cu: the launcher of decode_tail.cuh's kernel (the end of a decode step for one row
// a sequence: the last block after its attention and the LM head; decode.h's decode_tail): a
// thread-block cluster of C / 32 CTAs a row, as a programmatic dependent.
//
// Build on its own for -Xptxas -v:  nvcc -arch=sm_90a -O3 -Xptxas -v -c decode_tail.cu -I.
#include <cuda_bf16.h>

#include <string>

#include "cuda_common.cuh"
#include "cuda_launch.h"
#include "decode.h"
#include "decode_tail.cuh"

namespace gs {

bool decode_tail_cuda(void* logits, const void* y, const void* x, const void* const* weights,
                      int64_t B, int64_t C, int64_t V, double eps, DType dtype,
                      uintptr_t stream) {
  namespace dt = decode_tail;
  // from kDecodeMmaMinRows rows decode_linear takes its tensor-core kernel: other bits
  if (dtype != DType::bf16 || B < 1 || B >= kDecodeMmaMinRows || V < 1 || !weights[kTailLn2W] ||
      !weights[kTailLnfW])
    return false;
  if (!aligned16(y) || !aligned16(x) || !aligned16(weights[kTailProjW]) ||
      !aligned16(weights[kTailFcW]) || !aligned16(weights[kTailFc2W]) ||
      !aligned16(weights[kTailHeadW]))
    return false;  // cp.async rows, 16-byte row loads
  for (int i : {int(kTailLn2W), int(kTailLn2B), int(kTailLnfW), int(kTailLnfB)})
    if (weights[i] && !aligned16(weights[i])) return false;  // copy_layernorm_params' cp.async
  if (!clusters_here()) return false;  // thread-block clusters: sm_90 and newer
  const int optin = smem_optin_here();
  auto bits = [&](int i) { return static_cast<const uint16_t*>(weights[i]); };
  const dt::Args a{static_cast<uint16_t*>(logits), static_cast<const uint16_t*>(y),
                   static_cast<const uint16_t*>(x), bits(kTailProjW), bits(kTailProjB),
                   bits(kTailLn2W), bits(kTailLn2B), bits(kTailFcW), bits(kTailFcB),
                   bits(kTailFc2W), bits(kTailFc2B), bits(kTailLnfW), bits(kTailLnfB),
                   bits(kTailHeadW), int(V), float(eps)};
  const std::string config = "(B=" + std::to_string(B) + ", C=" + std::to_string(C) +
                             ", V=" + std::to_string(V) + ")";
  bool launched = false;
  dt::with_kernel_for(int(C), [&](auto kernel, int ctas, int64_t (*shared_bytes)(int)) {
    const int64_t smem = shared_bytes(int(V));
    if (smem > optin) return;  // the vocabulary's share does not fit a CTA
    static LaunchCheck check;  // one per instance (its one C)
    check.ensure(reinterpret_cast<const void*>(kernel.value), "decode_tail", config,
                 dt::kThreads, optin);
    launch_cluster_programmatic(kernel.value, dim3(unsigned(ctas), unsigned(B)), dt::kThreads,
                                size_t(smem), as_stream(stream), unsigned(ctas), a);
    launched = true;
  });
  if (launched) check_launch("decode_tail", config);
  return launched;
}

}  // namespace gs
