// bf16_check.h: what the emulator checks of the bf16 decode kernels share (decode_mma_check.cpp,
// window_attention_check.cpp, window_proj_fc_check.cpp): bf16 bits <-> float, fresh random
// inputs, the error against a double-precision reference in units of the bf16 tolerance, a
// launch whose emulator error (race, bounds, deadlock) becomes a message, decode_linear's
// tensor-core launch as decode.cu makes it, and main()'s loop over the cases.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../decode_mma.cuh"

namespace bf16_check {

inline uint16_t to_bf16(float f) { return emu::to_bf16(f); }
inline float from_bf16(uint16_t b) { return emu::bf16_bits_to_float(b); }

inline std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = to_bf16(d(rng));
  return v;
}

// The worst |got - ref| seen, in units of the tolerance: half an ulp of a bf16 output plus the
// fp32 accumulation of its sums, 1 % of |ref| + 0.01. A NaN makes it infinite.
struct Worst {
  double value = 0;
  void add(double got, double ref) {
    const double err = std::fabs(got - ref) / (1e-2 * std::fabs(ref) + 1e-2);
    if (!(err <= value)) value = std::isnan(err) ? INFINITY : err;
  }
};

// decode.h's decode_linear formula in double from bf16 inputs, (R, N): act(W LN?(x) + b) + res,
// the normalized row rounded to bf16 as the tensor-core kernel's mma input is (round_normalized;
// the one-row kernel keeps it float). b, ln_w, ln_b, res: null where absent.
inline std::vector<double> decode_linear_reference(const uint16_t* x, int R, int K,
                                                   const uint16_t* w, int N, const uint16_t* b,
                                                   const uint16_t* ln_w, const uint16_t* ln_b,
                                                   const uint16_t* res, bool gelu, double eps,
                                                   bool round_normalized = true) {
  std::vector<double> out(size_t(R) * N), row(K);
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) row[k] = from_bf16(x[size_t(r) * K + k]);
    if (ln_w) {
      double mean = 0, var = 0;
      for (double v : row) mean += v;
      mean /= K;
      for (double v : row) var += (v - mean) * (v - mean);
      const double rstd = 1.0 / std::sqrt(var / K + eps);
      for (int k = 0; k < K; ++k) {
        row[k] = (row[k] - mean) * rstd * from_bf16(ln_w[k]) + (ln_b ? from_bf16(ln_b[k]) : 0.0);
        if (round_normalized) row[k] = from_bf16(to_bf16(float(row[k])));
      }
    }
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += row[k] * from_bf16(w[size_t(n) * K + k]);
      if (b) acc += from_bf16(b[n]);
      if (gelu) {
        const double inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc);
        acc = 0.5 * acc * (1.0 + std::tanh(inner));
      }
      if (res) acc += from_bf16(res[size_t(r) * N + n]);
      out[size_t(r) * N + n] = acc;
    }
  }
  return out;
}

// kernel<<<grid, block, smem>>>(args) under the emulator, in clusters of cluster_x CTAs along x
// where cluster_x > 0 (emu::launch_cluster): "" or what went wrong
template <typename... P, typename... A>
std::string launch_clusters(unsigned cluster_x, void (*kernel)(P...), dim3 grid, dim3 block,
                            size_t smem, const A&... args) {
  try {
    if (cluster_x > 0)
      emu::launch_cluster(kernel, grid, block, smem, cluster_x, args...);
    else
      emu::launch(kernel, grid, block, smem, args...);
  } catch (const emu::Error& e) {
    return e.what();
  }
  return "";
}
template <typename... P, typename... A>
std::string launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, const A&... args) {
  return launch_clusters(0, kernel, grid, block, smem, args...);
}

// decode_linear's tensor-core launch as decode.cu makes it: NT 8-column tiles a warp, the
// fixed-width instance where K is one of kFixedWidths
inline std::string decode_linear_mma(const gs::mma_linear::Args& a, int nt) {
  namespace ml = gs::mma_linear;
  std::string error;
  auto run = [&](auto kernel, int cols, size_t smem) {
    error = launch(kernel.value, dim3((a.N + cols - 1) / cols, (a.R + ml::kRows - 1) / ml::kRows),
                   dim3(ml::kThreads), smem, a);
  };
  if (nt == 4)
    ml::with_kernel_for<4>(a.K, [&](auto k) { run(k, ml::cols<4>(), ml::shared_bytes<4>(a.K)); });
  else
    ml::with_kernel_for<2>(a.K, [&](auto k) { run(k, ml::cols<2>(), ml::shared_bytes<2>(a.K)); });
  return error;
}

// The integers of a case written "a:b:c..."
inline std::vector<int> fields(const std::string& s) {
  std::vector<int> v;
  std::istringstream in(s);
  for (std::string f; std::getline(in, f, ':');) v.push_back(std::stoi(f));
  return v;
}

// main(): the cases given as arguments (parse(fields)), or the default list, each run on fresh
// random inputs; exit status 1 if any is off
template <typename Case, typename Parse, typename Run>
int run_cases(int argc, char** argv, std::vector<Case> cases, Parse parse, Run run) {
  if (argc > 1) {
    cases.clear();
    for (int i = 1; i < argc; ++i) cases.push_back(parse(fields(argv[i])));
  }
  std::mt19937 rng(std::random_device{}());
  bool all = true;
  for (const Case& c : cases) all = run(c, rng) && all;
  return all ? 0 : 1;
}

}  // namespace bf16_check
