// cublaslt.cpp: cuBLASLt loaded at run time, one matmul with an epilogue (cublaslt.h).
//
// Per product shape the algorithm comes from cublasLtMatmulAlgoGetHeuristic once and is kept
// (keyed by device and everything the heuristic sees); the descriptors are made per call,
// since the pointers they carry change. Host-only code: no kernels of our own here.
#include "cublaslt.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#ifdef GPTSTACK_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gs {

#ifdef GPTSTACK_WITH_CUDA
namespace {

// --- the ABI subset (cublasLt.h, cublas_api.h, library_types.h) -------------------------------
using Status = int;  // cublasStatus_t; 0 = CUBLAS_STATUS_SUCCESS
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
  uint64_t data[8];
};
struct Heuristic {  // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves;
  int reserved[4];
};
constexpr int kComputeF32 = 68;     // CUBLAS_COMPUTE_32F
constexpr int kRealF32 = 0;         // CUDA_R_32F
constexpr int kRealBF16 = 14;       // CUDA_R_16BF
constexpr int kOpN = 0, kOpT = 1;   // CUBLAS_OP_N / _T
enum DescAttr : int {               // cublasLtMatmulDescAttributes_t
  kTransA = 3,
  kTransB = 4,
  kEpilogue = 7,
  kBiasPointer = 8,
  kAuxPointer = 11,
  kAuxLd = 12,
  kAuxDataType = 22,
  kBiasDataType = 26,
};
constexpr int kPrefMaxWorkspace = 1;  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES

struct Api {
  Status (*create)(Handle*);
  Status (*desc_create)(Desc*, int, int);
  Status (*desc_destroy)(Desc);
  Status (*desc_set)(Desc, int, const void*, size_t);
  Status (*layout_create)(Layout*, int, uint64_t, uint64_t, int64_t);
  Status (*layout_destroy)(Layout);
  Status (*pref_create)(Pref*);
  Status (*pref_destroy)(Pref);
  Status (*pref_set)(Pref, int, const void*, size_t);
  Status (*heuristic)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, Heuristic*, int*);
  Status (*matmul)(Handle, Desc, const void*, const void*, Layout, const void*, Layout,
                   const void*, const void*, Layout, void*, Layout, const Algo*, void*, size_t,
                   void*);
};

struct Loaded {
  Api api{};
  std::string missing;  // why it is unusable; empty when loaded
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    // cuBLAS's major version is CUDA's (11, 12, 13): the toolkit's this was built with first,
    // and the copy torch has loaded (from its nvidia wheels, off the search path) before any
    // other, so that both use one library
    const int majors[] = {CUDART_VERSION / 1000, 13, 12};
    void* lib = nullptr;
    std::string name;
    for (int flags : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW})
      for (int major : majors) {
        if (lib) break;
        name = "libcublasLt.so." + std::to_string(major);
        lib = dlopen(name.c_str(), flags);
      }
    if (!lib) {
      r.missing = "libcublasLt.so." + std::to_string(majors[0]) +
                  " cannot be loaded (import torch with CUDA first, or install cuBLAS)";
      return r;
    }
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!fn && r.missing.empty()) r.missing = name + " has no " + symbol;
    };
    get(r.api.create, "cublasLtCreate");
    get(r.api.desc_create, "cublasLtMatmulDescCreate");
    get(r.api.desc_destroy, "cublasLtMatmulDescDestroy");
    get(r.api.desc_set, "cublasLtMatmulDescSetAttribute");
    get(r.api.layout_create, "cublasLtMatrixLayoutCreate");
    get(r.api.layout_destroy, "cublasLtMatrixLayoutDestroy");
    get(r.api.pref_create, "cublasLtMatmulPreferenceCreate");
    get(r.api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    get(r.api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    get(r.api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    get(r.api.matmul, "cublasLtMatmul");
    return r;
  }();
  return l;
}

void check(const char* op, const char* what, Status s) {
  if (s != 0)
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + ": " + what +
                             " failed with cublasStatus_t " + std::to_string(s));
}

// The descriptors of one call, destroyed on scope exit (also when a check throws).
struct Descriptors {
  const Api& api;
  Desc desc = nullptr;
  Layout a = nullptr, b = nullptr, d = nullptr;
  explicit Descriptors(const Api& x) : api(x) {}
  ~Descriptors() {
    if (d) api.layout_destroy(d);
    if (b) api.layout_destroy(b);
    if (a) api.layout_destroy(a);
    if (desc) api.desc_destroy(desc);
  }
};

using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t,
                       int, bool, bool, size_t>;
constexpr int kMaxCandidates = 16;  // heuristic results kept per product

// The algorithm of one product: the heuristic's candidates (best estimate first) and, once
// timed, each one's time and the fastest.
struct Choice {
  std::vector<Heuristic> candidates;  // empty: no kernel has this epilogue for these operands
  int rank = 0;                       // the candidate used
  bool tuned = false;
  std::vector<float> times_us;
};
struct Cache {
  std::mutex mutex;
  std::map<int, Handle> handles;  // one per device
  std::map<Key, Choice> choices;
};
Cache& cache() {
  static Cache c;
  return c;
}
std::atomic<int> g_autotune{0};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The product `p` with the algorithm `algo`; its status (0: launched)
Status run_matmul(const Api& api, Handle handle, const Descriptors& ds, const LtMatmul& p,
                  const Algo& algo, void* workspace, size_t workspace_bytes, uintptr_t stream) {
  // D = op(A) op(B) (+ C, laid out as D); without p.c, C (= D) is unread
  const float alpha = 1.0f, beta = p.c ? 1.0f : 0.0f;
  const void* c = p.c ? p.c : p.d;
  return api.matmul(handle, ds.desc, &alpha, p.a, ds.a, p.b, ds.b, &beta, c, ds.d, p.d, ds.d,
                    &algo, workspace, workspace_bytes, reinterpret_cast<void*>(stream));
}

bool capturing(uintptr_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

// Times the first `n` candidates of `choice` (the product's outputs are written each time;
// its inputs only read) and keeps the fastest: the heuristic's first guess is not always it.
// The candidates take turns, round after round, each round starting one candidate later, and
// each one's time is the median of its rounds: timed one after another, the first candidate
// paid for the clocks ramping up and the choice could be a slower kernel (on an H100 at
// gpt2-124m's c_fc, the "fastest" of 8 ran 654 us a call in a graph against the first's 643;
// benchmarks/JOURNAL.md, 2026-12-07). Another candidate replaces the first only when it is
// kMargin faster than it. Each candidate runs the product ~17 times on its real operands, so
// its C must never be its D (an accumulating d += a b would add itself in each time: the
// callers refuse that aliasing; a loss that accumulated dweight so went wrong in the CUDA
// tests of cafecff, since reverted).
void time_candidates(const Api& api, Handle handle, const Descriptors& ds, const LtMatmul& p,
                     void* workspace, size_t workspace_bytes, uintptr_t stream, int n,
                     Choice& choice) {
  constexpr int kWarmup = 3, kRounds = 7, kRepeats = 2;
  constexpr float kMargin = 0.98f;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  const int count = std::min<int>(n, static_cast<int>(choice.candidates.size()));
  std::vector<cudaEvent_t> events;
  events.reserve(2 * count * kRounds);
  auto release = [&] {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  };
  for (int i = 0; i < 2 * count * kRounds; ++i) {
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) return release();
    events.push_back(e);
  }
  std::vector<bool> usable(count);
  auto run = [&](int i) {
    return run_matmul(api, handle, ds, p, choice.candidates[i].algo, workspace, workspace_bytes,
                      stream) == 0;
  };
  for (int i = 0; i < count; ++i) {  // each kernel loaded and run once, the first a few times
    usable[i] = choice.candidates[i].workspace_size <= workspace_bytes;
    for (int w = 0; usable[i] && w < (i == 0 ? kWarmup : 1); ++w) usable[i] = run(i);
  }
  for (int r = 0; r < kRounds; ++r)
    for (int j = 0; j < count; ++j) {
      const int i = (j + r) % count;
      if (!usable[i]) continue;
      cudaEvent_t* e = &events[2 * (r * count + i)];
      cudaEventRecord(e[0], s);
      for (int k = 0; k < kRepeats; ++k) usable[i] = usable[i] && run(i);
      cudaEventRecord(e[1], s);
    }
  const bool synced = cudaStreamSynchronize(s) == cudaSuccess;
  choice.times_us.assign(count, std::numeric_limits<float>::infinity());
  for (int i = 0; synced && i < count; ++i) {
    if (!usable[i]) continue;
    std::vector<float> rounds;
    for (int r = 0; r < kRounds; ++r) {
      float ms = 0;
      const cudaEvent_t* e = &events[2 * (r * count + i)];
      if (cudaEventElapsedTime(&ms, e[0], e[1]) == cudaSuccess) rounds.push_back(ms);
    }
    if (rounds.empty()) continue;
    std::nth_element(rounds.begin(), rounds.begin() + rounds.size() / 2, rounds.end());
    choice.times_us[i] = 1000.0f * rounds[rounds.size() / 2] / kRepeats;
  }
  release();
  const auto best = std::min_element(choice.times_us.begin(), choice.times_us.end());
  if (std::isfinite(*best) && !(*best >= kMargin * choice.times_us[0]))
    choice.rank = static_cast<int>(best - choice.times_us.begin());
  choice.tuned = true;
}

}  // namespace

void set_cublaslt_autotune(int candidates) { g_autotune = std::max(0, candidates); }
int cublaslt_autotune() { return g_autotune.load(); }

void reset_cublaslt_choices() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.choices.clear();
}

std::vector<LtChoiceReport> cublaslt_choices() {
  std::vector<LtChoiceReport> out;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (const auto& [key, choice] : c.choices) {
    LtChoiceReport r;
    r.m = std::get<1>(key), r.n = std::get<2>(key), r.k = std::get<3>(key);
    r.epilogue = std::get<9>(key);
    r.candidates = static_cast<int>(choice.candidates.size());
    r.rank = choice.rank;
    r.tuned = choice.tuned;
    r.times_us = choice.times_us;
    out.push_back(r);
  }
  return out;
}

std::string cublaslt_unavailable() { return loaded().missing; }

bool lt_matmul(const char* op, const LtMatmul& p, void* workspace, size_t workspace_bytes,
               uintptr_t stream) {
  const Loaded& lib = loaded();
  if (!lib.missing.empty()) return false;
  const bool with_bias = p.bias != nullptr, with_aux = p.aux != nullptr;
  const bool with_c = p.c != nullptr;
  // 16-byte operands and leading dimensions a multiple of 8 elements: what the tensor-core
  // kernels with these epilogues take (cublasLt.h, EPILOGUE_AUX_LD); anything else goes back
  // to the caller's other path
  for (const void* ptr : {p.a, p.b, static_cast<const void*>(p.d), static_cast<const void*>(p.bias),
                          static_cast<const void*>(p.aux), p.c,
                          static_cast<const void*>(workspace)})
    if (ptr && !aligned16(ptr)) return false;
  if (p.lda % 8 || p.ldb % 8 || p.ldd % 8 || p.m == 0 || p.n == 0 || p.k == 0) return false;

  const Api& api = lib.api;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    throw std::runtime_error(std::string("gptstack.cuda_ops.") + op + ": no current CUDA device");
  const int type = kRealBF16;
  Descriptors ds(api);
  check(op, "cublasLtMatmulDescCreate", api.desc_create(&ds.desc, kComputeF32, kRealF32));
  const int32_t ta = p.trans_a ? kOpT : kOpN, tb = p.trans_b ? kOpT : kOpN;
  const int32_t epilogue = static_cast<int32_t>(p.epilogue);
  check(op, "set TRANSA", api.desc_set(ds.desc, kTransA, &ta, sizeof ta));
  check(op, "set TRANSB", api.desc_set(ds.desc, kTransB, &tb, sizeof tb));
  check(op, "set EPILOGUE", api.desc_set(ds.desc, kEpilogue, &epilogue, sizeof epilogue));
  if (with_bias) {
    const int32_t bias_type = type;
    check(op, "set BIAS_POINTER", api.desc_set(ds.desc, kBiasPointer, &p.bias, sizeof p.bias));
    check(op, "set BIAS_DATA_TYPE",
          api.desc_set(ds.desc, kBiasDataType, &bias_type, sizeof bias_type));
  }
  if (with_aux) {
    const int64_t ld = p.ldd;
    const int32_t aux_type = type;
    check(op, "set EPILOGUE_AUX_POINTER", api.desc_set(ds.desc, kAuxPointer, &p.aux, sizeof p.aux));
    check(op, "set EPILOGUE_AUX_LD", api.desc_set(ds.desc, kAuxLd, &ld, sizeof ld));
    check(op, "set EPILOGUE_AUX_DATA_TYPE",
          api.desc_set(ds.desc, kAuxDataType, &aux_type, sizeof aux_type));
  }
  // stored shapes: op(A) is m x k, so A is k x m when transposed
  check(op, "layout A",
        api.layout_create(&ds.a, type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda));
  check(op, "layout B",
        api.layout_create(&ds.b, type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb));
  check(op, "layout D", api.layout_create(&ds.d, type, p.m, p.n, p.ldd));

  Handle handle = nullptr;
  Algo algo{};
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    Handle& h = c.handles[device];
    if (!h) {
      // creating the handle may allocate device memory, which a graph capture forbids: the
      // first product of a process inside a capture is left to the caller's other path
      if (capturing(stream)) return false;
      check(op, "cublasLtCreate", api.create(&h));
    }
    handle = h;
    const Key key{device, p.m, p.n, p.k, p.trans_a, p.trans_b, p.lda, p.ldb, p.ldd, epilogue,
                  with_bias, with_c, workspace_bytes};
    auto found = c.choices.find(key);
    if (found == c.choices.end()) {
      Pref pref = nullptr;
      check(op, "cublasLtMatmulPreferenceCreate", api.pref_create(&pref));
      const uint64_t max_ws = workspace_bytes;
      Status s = api.pref_set(pref, kPrefMaxWorkspace, &max_ws, sizeof max_ws);
      std::vector<Heuristic> results(kMaxCandidates);
      int count = 0;
      if (s == 0)
        s = api.heuristic(handle, ds.desc, ds.a, ds.b, ds.d, ds.d, pref, kMaxCandidates,
                          results.data(), &count);
      api.pref_destroy(pref);
      // NOT_SUPPORTED (15): no kernel has this epilogue for these operands
      if (s != 0 && s != 15) check(op, "cublasLtMatmulAlgoGetHeuristic", s);
      Choice choice;
      for (int i = 0; s == 0 && i < count; ++i)
        if (results[i].state == 0) choice.candidates.push_back(results[i]);
      found = c.choices.emplace(key, std::move(choice)).first;
    }
    Choice& choice = found->second;
    if (choice.candidates.empty()) return false;
    const int tune = g_autotune.load(std::memory_order_relaxed);
    if (!choice.tuned && tune > 1 && choice.candidates.size() > 1 && !capturing(stream))
      time_candidates(api, handle, ds, p, workspace, workspace_bytes, stream, tune, choice);
    algo = choice.candidates[choice.rank].algo;
  }
  check(op, "cublasLtMatmul",
        run_matmul(api, handle, ds, p, algo, workspace, workspace_bytes, stream));
  return true;
}

#else  // a CPU-only build

std::string cublaslt_unavailable() {
  return "this build of gptstack.cuda_ops has no CUDA kernels (nvcc was not found)";
}

bool lt_matmul(const char*, const LtMatmul&, void*, size_t, uintptr_t) { return false; }
void set_cublaslt_autotune(int) {}
int cublaslt_autotune() { return 0; }
void reset_cublaslt_choices() {}
std::vector<LtChoiceReport> cublaslt_choices() { return {}; }

#endif

}  // namespace gs
