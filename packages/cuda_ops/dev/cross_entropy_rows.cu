// dev/cross_entropy_rows.cu: csrc/cross_entropy.cu's kernels for rows wider than a warp's,
// side by side in one binary (llm.c dev/cuda style), at gpt2-124m's vocabulary in bf16: the
// whole (16384, 50304) logits of a B=16 step (out of place, as `gptstack bench ops` times the
// op) and one chunk of the fused LM-head loss (2560 rows, in place, as
// gptstack/cuda_ops/cross_entropy.py runs it). Variants: the launcher with the staged kernel
// (the default on sm_90+) and without it (the online kernel, the default before), and the
// staged kernel at 256 and 1024 threads a CTA instantiated by hand.
//
//   nvcc -arch=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -I packages/cuda_ops/csrc \
//       packages/cuda_ops/dev/cross_entropy_rows.cu -o /tmp/ce_rows && /tmp/ce_rows
//
// Times are medians of 15 x 20 calls by cudaEvent; bandwidth counts one read and one write of
// the logits (what the kernels must move); losses and dlogits are checked against the online
// kernel's.
#include "cross_entropy.cu"
#include "common.cuh"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace gs {
// cross_entropy.cpp's switch (not linked here)
static bool g_staged = true;
bool cross_entropy_staged_enabled() { return g_staged; }
void set_cross_entropy_staged(bool enabled) { g_staged = enabled; }
}  // namespace gs

namespace {
using T = __nv_bfloat16;

float bf16_to_float(T v) { return __bfloat162float(v); }

struct Problem {
  int64_t n;
  int V;
  T *z, *dz;
  int64_t* t;
  float *losses, *scale;
};

Problem make(int64_t n, int V, std::mt19937& rng) {
  Problem p{n, V};
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> target(0, V - 1);
  std::vector<T> z(size_t(n) * V);
  for (auto& v : z) v = __float2bfloat16(normal(rng));
  std::vector<int64_t> t(n);
  for (auto& v : t) v = rng() % 10 == 0 ? -1 : target(rng);  // a tenth ignored
  const float scale = 1.0f / float(n);
  CHECK(cudaMalloc(&p.z, z.size() * sizeof(T)));
  CHECK(cudaMalloc(&p.dz, z.size() * sizeof(T)));
  CHECK(cudaMalloc(&p.t, n * sizeof(int64_t)));
  CHECK(cudaMalloc(&p.losses, n * sizeof(float)));
  CHECK(cudaMalloc(&p.scale, sizeof(float)));
  CHECK(cudaMemcpy(p.z, z.data(), z.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p.t, t.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p.scale, &scale, sizeof(float), cudaMemcpyHostToDevice));
  return p;
}

void release(Problem& p) {
  cudaFree(p.z), cudaFree(p.dz), cudaFree(p.t), cudaFree(p.losses), cudaFree(p.scale);
}

// the launcher, with the staged kernel allowed or not
void launcher(const Problem& p, T* dz, bool staged) {
  gs::set_cross_entropy_staged(staged);
  gs::cross_entropy_cuda(p.losses, dz, p.z, p.t, p.scale, -1, {p.n, p.V}, gs::DType::bf16, 0);
}

// the staged kernel at another block size
template <int Threads> void staged_at(const Problem& p, T* dz) {
  const int smem = 2 * p.V * int(sizeof(T)) + 16;
  static gs::LaunchCheck check;
  auto kernel = gs::cross_entropy_staged_kernel<T, Threads>;
  check.ensure(reinterpret_cast<const void*>(kernel), "cross_entropy", "dev", Threads, smem);
  const unsigned blocks = unsigned(std::min<int64_t>(p.n, gs::sm_count_here()));
  kernel<<<blocks, Threads, smem>>>(p.losses, dz, p.z, p.t, p.scale, -1, p.V, p.n);
}

struct Output {
  std::vector<float> losses;
  std::vector<T> dz;
};

Output read(const Problem& p) {
  Output o{std::vector<float>(p.n), std::vector<T>(size_t(p.n) * p.V)};
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(o.losses.data(), p.losses, p.n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o.dz.data(), p.dz, o.dz.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return o;
}

// largest |loss difference| and |dlogit difference| against ref, and dlogits not bit-equal
void compare(const char* name, const Output& got, const Output& ref) {
  double dl = 0.0, dd = 0.0;
  size_t differ = 0;
  for (size_t i = 0; i < got.losses.size(); ++i)
    if (!(std::isnan(got.losses[i]) && std::isnan(ref.losses[i])))
      dl = std::max(dl, double(std::fabs(got.losses[i] - ref.losses[i])));
  for (size_t i = 0; i < got.dz.size(); ++i) {
    const float a = bf16_to_float(got.dz[i]), b = bf16_to_float(ref.dz[i]);
    dd = std::max(dd, double(std::fabs(a - b)));
    differ += a != b;
  }
  std::printf("  check %-28s max |dloss| %.3g, max |ddlogit| %.3g, %zu of %zu dlogits differ\n",
              name, dl, dd, differ, got.dz.size());
}

void row(const char* name, float us, const Problem& p, double floor_gbs, float base_us) {
  const double gbs = 2.0 * double(p.n) * p.V * sizeof(T) / (us * 1e3);
  std::printf("  %-34s %9.1f us  %7.0f GB/s  %5.1f %% of copy  %.2fx\n", name, us, gbs,
              100.0 * gbs / floor_gbs, base_us / us);
}

void run(int64_t n, int V, bool in_place, double floor_gbs, std::mt19937& rng) {
  Problem p = make(n, V, rng);
  std::printf("(%lld, %d) bf16, %s\n", (long long)n, V, in_place ? "in place" : "out of place");
  // checks, out of place so every variant sees the same logits
  launcher(p, p.dz, false);
  const Output ref = read(p);
  launcher(p, p.dz, true);
  compare("launcher (staged)", read(p), ref);
  staged_at<256>(p, p.dz);
  compare("staged, 256 threads", read(p), ref);
  staged_at<1024>(p, p.dz);
  compare("staged, 1024 threads", read(p), ref);
  T* dz = in_place ? p.z : p.dz;
  const float online = median_us([&] { launcher(p, dz, false); }, 20, 15);
  const float staged = median_us([&] { launcher(p, dz, true); }, 20, 15);
  const float t256 = median_us([&] { staged_at<256>(p, dz); }, 20, 15);
  const float t1024 = median_us([&] { staged_at<1024>(p, dz); }, 20, 15);
  row("online (the launcher before)", online, p, floor_gbs, online);
  row("staged, 512 threads (launcher)", staged, p, floor_gbs, online);
  row("staged, 256 threads", t256, p, floor_gbs, online);
  row("staged, 1024 threads", t1024, p, floor_gbs, online);
  release(p);
}
}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double floor_gbs = copy_bandwidth_gbs();
  std::printf("%s, %d SMs, copy floor %.0f GB/s\n", prop.name, prop.multiProcessorCount,
              floor_gbs);
  std::mt19937 rng(1);
  run(16384, 50304, false, floor_gbs, rng);
  run(2560, 50304, true, floor_gbs, rng);
  return 0;
}
