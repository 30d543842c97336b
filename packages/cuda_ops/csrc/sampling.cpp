// sampling.cpp: sample_tokens on the CPU (the reference of the CUDA kernel: the same Philox
// stream and formulas, sampling.h; scalar, OpenMP over rows) and its _C binding.
#include "sampling.h"

#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "common.h"
#include "decode_io_args.h"

using namespace nb::literals;

namespace gs {
namespace {

// One row: the k-th largest z by nth_element, then the race in index order (the lowest index
// keeps a tie, as the CUDA kernel's reduction does).
template <typename T>
int64_t sample_row(const T* row, int64_t r, int64_t V, float temperature, int64_t top_k,
                   uint64_t seed, uint64_t draw, std::vector<float>& z,
                   std::vector<float>& sorted) {
  z.resize(V);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < V; ++i) {
    z[i] = static_cast<float>(load(row + i)) / temperature;
    m = std::max(m, z[i]);
  }
  float kth = -std::numeric_limits<float>::infinity();
  if (top_k > 0 && top_k < V) {
    sorted.assign(z.begin(), z.end());
    for (float& v : sorted)  // NaN has no place in an ordering
      if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    kth = sorted[top_k - 1];
  }
  float best = -2.0f;
  int64_t index = 0;
  for (int64_t i = 0; i < V; ++i) {
    float score = -1.0f;
    if (!(z[i] < kth)) {
      const float e = std::exp(z[i] - m);
      if (e > 0.0f) {
        const Philox4 bits = sample_bits(seed, draw, uint32_t(r), uint32_t(i / 4));
        score = e / -std::log(sample_uniform(bits.w[i % 4]));
      }
    }
    if (score > best) best = score, index = i;
  }
  return index;
}

// Rows in parallel (OpenMP, each thread with its own buffers), then the draw counter advances.
template <typename T>
void sample_tokens_cpu(int64_t* tokens, const T* logits, int64_t* state, int64_t R, int64_t V,
                       int64_t stride, float temperature, int64_t top_k, int nt) {
  const uint64_t seed = uint64_t(state[0]), draw = uint64_t(state[1]);
#pragma omp parallel num_threads(nt) if (R * V >= kParallelMinElements)
  {
    std::vector<float> z, sorted;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r)
      tokens[r] = sample_row(logits + r * stride, r, V, temperature, top_k, seed, draw, z, sorted);
  }
  state[1] = int64_t(draw + 1);
}

void sample_tokens(nb::ndarray<> tokens, nb::ndarray<> logits, nb::ndarray<> state,
                   double temperature, int64_t top_k, int64_t vocab_limit, uintptr_t stream,
                   int num_threads, std::optional<nb::ndarray<>> out, int64_t column,
                   std::optional<nb::ndarray<>> token, std::optional<nb::ndarray<>> window,
                   std::optional<nb::ndarray<>> pos, bool slide) {
  const char* op = "sample_tokens";
  (void)stream;
  Tensor L = view(op, "logits", logits), Y = view(op, "tokens", tokens),
         S = view(op, "state", state);
  check_dtype(op, "logits", L, {DType::f32, DType::bf16, DType::f64});
  if (L.ndim() != 2) fail(op, "logits must be (R, V), got shape " + shape_str(L.shape));
  const int64_t R = L.size(0), stride = L.size(1);
  check_dtype(op, "tokens", Y, {DType::i64});
  check_shape(op, "tokens", Y, {R});
  check_same_device(op, L, "tokens", Y);
  check_dtype(op, "state", S, {DType::i64});
  check_shape(op, "state", S, {3});
  check_same_device(op, L, "state", S);
  if (vocab_limit < 1 || vocab_limit > stride)
    fail(op, "vocab_limit " + std::to_string(vocab_limit) + " is outside [1, " +
                 std::to_string(stride) + "] (the logits' columns)");
  if (vocab_limit > std::numeric_limits<int32_t>::max() || R > std::numeric_limits<int32_t>::max())
    fail(op, "logits of shape " + shape_str(L.shape) + " are too large");
  if (!(temperature > 0.0) || !std::isfinite(temperature))
    fail(op, "temperature must be a finite number > 0 (greedy decoding is an argmax)");
  if (top_k < 0) fail(op, "top_k must be >= 0 (0: no limit)");
  // the decoder's state to update with the tokens (decode_io.h): all of it, or none
  std::optional<DecodeState> advance;
  if (out || token || window || pos) {
    if (!(out && token && window && pos))
      fail(op, "out, token, window and pos come together (the decoder's state), or not at all");
    advance = decode_state_arg(op, L, "the logits", R, *out, column, *token, *window, *pos, slide);
  }
  if (L.cuda) {
    CudaScope scope(op, L);
    GS_CUDA_CALL(sample_tokens_cuda(Y.ptr<int64_t>(), L.data, S.ptr<int64_t>(), R, vocab_limit,
                                    stride, temperature, top_k, advance ? &*advance : nullptr,
                                    L.dtype, stream));
    return;
  }
  const int nt = resolve_threads(num_threads);
  dispatch_float(op, L.dtype, [&](auto tag) {
    using T = decltype(tag);
    sample_tokens_cpu<T>(Y.ptr<int64_t>(), L.ptr<const T>(), S.ptr<int64_t>(), R, vocab_limit,
                         stride, static_cast<float>(temperature), top_k, nt);
  });
  if (advance) decode_advance_cpu(*advance, Y.ptr<const int64_t>());
}

}  // namespace

void register_sampling(nb::module_& m) {
  m.def("sample_tokens", &sample_tokens, "tokens"_a, "logits"_a, "state"_a, "temperature"_a,
        "top_k"_a, "vocab_limit"_a, "stream"_a = 0, "num_threads"_a = 0, "out"_a = nb::none(),
        "column"_a = 0, "token"_a = nb::none(), "window"_a = nb::none(), "pos"_a = nb::none(),
        "slide"_a = false, nb::call_guard<nb::gil_scoped_release>(),
        "One token per row: temperature, top-k, exponential race on Philox (sampling.h); "
        "advances state's draw. Given out, token, window and pos, updates them as "
        "decode_advance does.");
}

}  // namespace gs
