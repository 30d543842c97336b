// module.cpp: the gptstack.cuda_ops._C extension. Registers every op listed in ops.def and
// reports what this build contains (build_info). The Python package wraps these functions
// (argument checks, torch.library registration); call them through gptstack.cuda_ops.
#include <nanobind/stl/string.h>

#include <string>

#include "common.h"
#include "cpu_simd.h"

#ifdef GPTSTACK_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace gs {
#define GS_OP(name) void register_##name(nb::module_& m);
#include "ops.def"
#undef GS_OP
}  // namespace gs

static nb::list split(const std::string& text) {
  nb::list out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.append(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

static nb::dict build_info() {
  nb::dict d;
  d["version"] = GS_VERSION;
  nb::list cpu_paths;
#ifdef GS_HAVE_AVX2_PATH
  cpu_paths.append("avx2_fma");
#endif
  cpu_paths.append("scalar");
  d["cpu_paths"] = cpu_paths;
  d["cpu_has_avx2_fma"] = gs::cpu_has_avx2();
  d["cpu_path"] = gs::cpu_path_name(gs::cpu_path());
  std::string omp = GS_OPENMP_VERSION;
  d["openmp"] = omp.empty() ? nb::none() : nb::cast(omp);
  d["cxx_compiler"] = GS_CXX_COMPILER;
  d["nanobind"] = GS_NANOBIND_VERSION;
#ifdef GPTSTACK_WITH_CUDA
  d["cuda"] = true;
  d["cuda_archs"] = split(GS_CUDA_ARCHS);
  d["cuda_compiler"] = GS_CUDA_COMPILER;
  d["cuda_runtime"] = CUDART_VERSION;  // linked statically: the version it was built with
  int driver = 0;
  // 0 when no driver is loaded (a build host without a GPU)
  d["cuda_driver"] = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? nb::cast(driver) : nb::none();
#else
  d["cuda"] = false;
  d["cuda_archs"] = nb::list();
  d["cuda_compiler"] = nb::none();
  d["cuda_runtime"] = nb::none();
  d["cuda_driver"] = nb::none();
#endif
  nb::list ops;
#define GS_OP(name) ops.append(#name);
#include "ops.def"
#undef GS_OP
  d["ops"] = ops;
  return d;
}

NB_MODULE(_C, m) {
  m.doc() =
      "gptstack.cuda_ops._C: CPU (AVX2/FMA + OpenMP, scalar) and CUDA kernels on DLPack "
      "arrays. Private: use the wrappers in gptstack.cuda_ops.";
  m.def("build_info", &build_info,
        "What this build contains: CPU paths, OpenMP, compilers, CUDA archs, ops.");
  m.def("set_cpu_path", &gs::set_cpu_path, "name"_a,
        "Force the CPU path of every op: 'auto' (default), 'scalar' or 'avx2'.");
  m.def("cpu_path", [] { return std::string(gs::cpu_path_name(gs::cpu_path())); },
        "The CPU path ops take now ('avx2_fma' or 'scalar').");
  m.def("set_programmatic_launch", &gs::set_programmatic_launch, "enabled"_a,
        "Programmatic dependent launch of the decode kernels on sm_90+ (default on); off "
        "for A/B comparisons.");
  m.def("programmatic_launch", &gs::programmatic_launch_enabled);
#define GS_OP(name) gs::register_##name(m);
#include "ops.def"
#undef GS_OP
}
