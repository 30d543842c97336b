// common.h: what every op's binding file shares. Tensor views from nb::ndarray (DLPack) with
// their checks, the dtype enum, the CPU path switch, CUDA stream/device plumbing on the host side.
//
// Errors: a bad argument throws std::invalid_argument (Python ValueError) naming op, argument
// and value; a CUDA failure throws std::runtime_error (RuntimeError) naming op, shapes and the
// CUDA error (cuda_check.h). Nothing here exits or prints. The Python wrappers check user input
// first with friendlier words; these checks are the second line, so that a direct call to _C
// can never read out of bounds.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtype.h"

namespace nb = nanobind;

namespace gs {

// A checked, C-contiguous view of one array argument.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  bool cuda = false;
  int device_id = 0;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t size(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  int ndim() const { return static_cast<int>(shape.size()); }
  template <typename T> T* ptr() const { return static_cast<T*>(data); }
};

std::string shape_str(const std::vector<int64_t>& shape);
[[noreturn]] void fail(const std::string& op, const std::string& what);

// View `a` (argument `name` of `op`): C-contiguous, float32/float64/bfloat16/int64, CPU or CUDA.
Tensor view(const char* op, const char* name, const nb::ndarray<>& a);

// Checks shared by the ops; each throws std::invalid_argument with op and argument names.
void check_dtype(const char* op, const char* name, const Tensor& t,
                 std::initializer_list<DType> allowed);
void check_shape(const char* op, const char* name, const Tensor& t,
                 const std::vector<int64_t>& want);
void check_same_device(const char* op, const Tensor& ref, const char* name, const Tensor& t);
// The three at once: t has this dtype and shape, on ref's device.
void check_arg(const char* op, const Tensor& ref, const char* name, const Tensor& t, DType dtype,
               const std::vector<int64_t>& shape);

// Call f(T{}) with T the C++ element type of d (float, double, bf16_t): one body per dtype.
template <typename F> void dispatch_float(const char* op, DType d, F&& f) {
  switch (d) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::bf16: f(bf16_t{}); return;
    default: fail(op, std::string("no kernel for dtype ") + dtype_name(d));
  }
}

// Rows/elements below which a CPU loop stays on one thread (waking OpenMP threads costs more).
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

// CPU paths: AVX2+FMA (chosen at run time when the CPU has it) or the portable scalar loop.
enum class CpuPath { scalar, avx2 };
CpuPath cpu_path();                // the path ops take now
bool cpu_has_avx2();               // compiled in and supported by this CPU
void set_cpu_path(const std::string& name);  // "auto" | "scalar" | "avx2" (tests, bench)
const char* cpu_path_name(CpuPath p);

// Programmatic dependent launch of the decode kernels on sm_90+ (cuda_launch.h), on by default;
// off is the A/B switch of tests and benchmarks.
bool programmatic_launch_enabled();
void set_programmatic_launch(bool enabled);

// OpenMP threads for one call: the caller's count (torch.get_num_threads()), 1 without OpenMP.
int resolve_threads(int requested);

// For the scope of one CUDA call: throws if this build has no CUDA kernels, makes `t`'s
// device current and restores the previous one on exit. The stream itself comes from the
// caller as an integer (torch.cuda.current_stream(device).cuda_stream).
// Wraps the call of a CUDA launcher in a binding: compiled away in a CPU-only build (where
// CudaScope has already thrown), so the binding code reads the same in both builds.
#ifdef GPTSTACK_WITH_CUDA
#define GS_CUDA_CALL(call) call
#else
#define GS_CUDA_CALL(call) ((void)0)
#endif

class CudaScope {
 public:
  // also rejects float64, which the CUDA kernels do not take
  CudaScope(const char* op, const Tensor& t);
  ~CudaScope();
  CudaScope(const CudaScope&) = delete;
  CudaScope& operator=(const CudaScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace gs
