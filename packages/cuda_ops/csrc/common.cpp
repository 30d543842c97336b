// common.cpp: tensor views and checks, the CPU path switch, thread counts, CUDA device guard.
#include "common.h"
#include "cpu_simd.h"

#include <atomic>
#include <sstream>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef GPTSTACK_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gs {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << (shape.size() == 1 ? ",)" : ")");
  return s.str();
}

void fail(const std::string& op, const std::string& what) {
  throw std::invalid_argument("gptstack.cuda_ops." + op + ": " + what);
}

static DType dtype_of(const char* op, const char* name, nb::dlpack::dtype d) {
  using code = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
    if (d.code == static_cast<uint8_t>(code::Float) && d.bits == 32) return DType::f32;
    if (d.code == static_cast<uint8_t>(code::Float) && d.bits == 64) return DType::f64;
    if (d.code == static_cast<uint8_t>(code::Bfloat) && d.bits == 16) return DType::bf16;
    if (d.code == static_cast<uint8_t>(code::Int) && d.bits == 64) return DType::i64;
  }
  fail(op, std::string(name) + " has an unsupported dtype (code " + std::to_string(d.code) +
               ", " + std::to_string(d.bits) + " bits): use float32, bfloat16 or float64");
}

Tensor view(const char* op, const char* name, const nb::ndarray<>& a) {
  Tensor t;
  t.dtype = dtype_of(op, name, a.dtype());
  t.data = a.data();
  t.device_id = static_cast<int>(a.device_id());
  if (a.device_type() == nb::device::cuda::value) {
    t.cuda = true;
  } else if (a.device_type() != nb::device::cpu::value) {
    fail(op, std::string(name) + " is on an unsupported device (DLPack type " +
                 std::to_string(a.device_type()) + "): use a CPU or CUDA tensor");
  }
  t.shape.resize(a.ndim());
  int64_t expect = 1;  // C-contiguous strides, in elements; size-1 dims may have any stride
  for (int i = static_cast<int>(a.ndim()) - 1; i >= 0; --i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    if (t.shape[i] != 1 && a.stride(i) != expect)
      fail(op, std::string(name) + " with shape " + shape_str(t.shape) +
                   " is not contiguous: call .contiguous() first");
    expect *= t.shape[i];
  }
  if (t.numel() > 0 && t.data == nullptr) fail(op, std::string(name) + " has no data");
  return t;
}

void check_dtype(const char* op, const char* name, const Tensor& t,
                 std::initializer_list<DType> allowed) {
  std::string names;
  for (DType d : allowed) {
    if (d == t.dtype) return;
    names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  fail(op, std::string(name) + " is " + dtype_name(t.dtype) + ": expected " + names);
}

void check_shape(const char* op, const char* name, const Tensor& t,
                 const std::vector<int64_t>& want) {
  if (t.shape != want)
    fail(op, std::string(name) + " has shape " + shape_str(t.shape) + ", expected " +
                 shape_str(want));
}

void check_same_device(const char* op, const Tensor& ref, const char* name, const Tensor& t) {
  if (t.cuda != ref.cuda || (t.cuda && t.device_id != ref.device_id))
    fail(op, std::string(name) + " is on " + (t.cuda ? "cuda:" + std::to_string(t.device_id)
                                                     : std::string("cpu")) +
                 " but the first argument is on " +
                 (ref.cuda ? "cuda:" + std::to_string(ref.device_id) : std::string("cpu")) +
                 ": put every tensor on one device");
}

void check_arg(const char* op, const Tensor& ref, const char* name, const Tensor& t, DType dtype,
               const std::vector<int64_t>& shape) {
  check_dtype(op, name, t, {dtype});
  check_shape(op, name, t, shape);
  check_same_device(op, ref, name, t);
}

// --- CPU path --------------------------------------------------------------------------------
bool cpu_has_avx2() {
#if defined(GS_HAVE_AVX2_PATH)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

static std::atomic<int> g_forced_path{-1};  // -1: auto

CpuPath cpu_path() {
  int forced = g_forced_path.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<CpuPath>(forced);
  return cpu_has_avx2() ? CpuPath::avx2 : CpuPath::scalar;
}

const char* cpu_path_name(CpuPath p) { return p == CpuPath::avx2 ? "avx2_fma" : "scalar"; }

void set_cpu_path(const std::string& name) {
  if (name == "auto") {
    g_forced_path = -1;
  } else if (name == "scalar") {
    g_forced_path = static_cast<int>(CpuPath::scalar);
  } else if (name == "avx2" || name == "avx2_fma") {
    if (!cpu_has_avx2())
      fail("set_cpu_path", "the AVX2/FMA path is not available on this CPU or build");
    g_forced_path = static_cast<int>(CpuPath::avx2);
  } else {
    fail("set_cpu_path", "path '" + name + "' is unknown: use auto, scalar or avx2");
  }
}

static std::atomic<bool> g_programmatic_launch{true};

bool programmatic_launch_enabled() { return g_programmatic_launch.load(std::memory_order_relaxed); }
void set_programmatic_launch(bool enabled) { g_programmatic_launch = enabled; }

int resolve_threads(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

// --- CUDA ------------------------------------------------------------------------------------
CudaScope::CudaScope(const char* op, const Tensor& t) {
#ifdef GPTSTACK_WITH_CUDA
  if (t.dtype == DType::f64)
    fail(op, "float64 CUDA tensors are not supported (float64 is for CPU gradcheck): use "
             "float32 or bfloat16");
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != t.device_id) {
    err = cudaSetDevice(t.device_id);
    if (err == cudaSuccess) previous_ = current;
  }
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + ": cannot use cuda:" +
                             std::to_string(t.device_id) + ": " + cudaGetErrorString(err));
#else
  (void)t;
  fail(op, "got a CUDA tensor but this build of gptstack.cuda_ops has no CUDA kernels "
           "(nvcc was not found when it was built; see build_info())");
#endif
}

CudaScope::~CudaScope() {
#ifdef GPTSTACK_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

}  // namespace gs
