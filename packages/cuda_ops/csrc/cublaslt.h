// cublaslt.h: the few cuBLASLt calls gptstack makes, for matmuls with a fused epilogue.
//
// cuBLASLt is loaded at run time (dlopen of libcublasLt.so.<major>, the copy PyTorch has
// already loaded), not linked: the extension then imports, and its CPU ops run, where no
// cuBLAS exists, and the build needs no cuBLAS headers (the CUDA toolkit of a build host may
// ship without them). The declarations below are cuBLASLt's documented ABI (cublasLt.h, the
// same values since CUDA 11.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gs {

// cublasLtEpilogue_t values used here
enum class LtEpilogue : int32_t {
  none = 1,             // D = A B (+ C)
  bias = 4,             // D = A B + bias (+ C)
  gelu_aux = 160,       // D = gelu(A B), aux = A B
  gelu_aux_bias = 164,  // D = gelu(A B + bias), aux = A B + bias
  dgelu = 192,          // D = (A B) * gelu'(aux)
};

// One column-major product D (m x n, leading dimension ldd) = op(A) (m x k) op(B) (k x n),
// all bfloat16, float32 accumulation, with an epilogue. `bias`: m elements (bias,
// gelu_aux_bias); `aux` the m x n GELU input (ld = ldd) it writes (gelu_aux*) or reads (dgelu);
// `c`: an m x n addend laid out as D (beta = 1: D = op(A) op(B) + bias + C, rounded once), or
// none.
struct LtMatmul {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  LtEpilogue epilogue = LtEpilogue::gelu_aux;
  void* bias = nullptr;
  void* aux = nullptr;
  const void* c = nullptr;
};

// Why cuBLASLt cannot be used in this process ("" when it can): not built with CUDA, or the
// library or one of its functions not found.
std::string cublaslt_unavailable();

// Runs `p` on `stream` with `workspace` (bytes). Returns false, having launched nothing, when
// cuBLASLt is unavailable or has no algorithm for this product (the caller then computes it
// another way); throws std::runtime_error when a call that should work fails.
bool lt_matmul(const char* op, const LtMatmul& p, void* workspace, size_t workspace_bytes,
               uintptr_t stream);

// How many of the heuristic's candidates (up to 16) the first call of each product times before
// keeping the fastest (outside a CUDA graph capture; a capture takes the first): 0 or 1 takes
// the heuristic's first guess untimed (the default).
void set_cublaslt_autotune(int candidates);
int cublaslt_autotune();
// Forgets every product's choice: the next call of each chooses again (benchmarks compare the
// heuristic's choice with the timed one of the same product).
void reset_cublaslt_choices();

// What was chosen for each product so far (benchmarks and tests).
struct LtChoiceReport {
  int64_t m, n, k;
  int epilogue, candidates, rank;
  bool tuned;
  std::vector<float> times_us;
};
std::vector<LtChoiceReport> cublaslt_choices();

}  // namespace gs
