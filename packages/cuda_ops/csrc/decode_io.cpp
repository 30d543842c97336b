// decode_io.cpp: the graph decoder's embedding and state updates on the CPU (the reference the
// CUDA kernels are tested against), and the _C bindings of decode_embed, window_embed and
// decode_advance. Formulas: decode_io.h.
#include "decode_io.h"

#include <limits>
#include <string>

#include "common.h"
#include "decode_io_args.h"

using namespace nb::literals;

namespace gs {
namespace {

// x (C,) = wte[id] + wpe[p], or NaN where the row does not exist
template <typename T>
void embed_row_cpu(T* x, const T* wte, const T* wpe, int64_t id, int64_t p, bool valid,
                   int64_t C) {
  using A = acc_t<T>;
  for (int64_t c = 0; c < C; ++c)
    store(x + c, valid ? load(wte + id * C + c) + load(wpe + p * C + c)
                       : std::numeric_limits<A>::quiet_NaN());
}

// The embedding tables: wte (vocab, C) and wpe (positions, C) of one float dtype and device.
struct Tables {
  Tensor wte, wpe;
  int64_t vocab, positions, C;
};
Tables tables(const char* op, nb::ndarray<> wte, nb::ndarray<> wpe) {
  Tables t{view(op, "wte", wte), view(op, "wpe", wpe), 0, 0, 0};
  check_dtype(op, "wte", t.wte, {DType::f32, DType::bf16, DType::f64});
  if (t.wte.ndim() != 2) fail(op, "wte must be (vocab, C), got shape " + shape_str(t.wte.shape));
  if (t.wpe.ndim() != 2)
    fail(op, "wpe must be (positions, C), got shape " + shape_str(t.wpe.shape));
  t.vocab = t.wte.size(0), t.positions = t.wpe.size(0), t.C = t.wte.size(1);
  check_arg(op, t.wte, "wpe", t.wpe, t.wte.dtype, {t.positions, t.C});
  if (t.wte.cuda && t.wte.dtype == DType::f64)
    fail(op, "the CUDA kernels take float32 or bfloat16 tables, not float64");
  return t;
}

// An int64 tensor on ref's device holding `count` elements (any shape: (B,) or (B, 1))
Tensor ids(const char* op, const Tensor& ref, const char* name, nb::ndarray<> a, int64_t count) {
  Tensor t = view(op, name, a);
  check_dtype(op, name, t, {DType::i64});
  if (t.numel() != count)
    fail(op, std::string(name) + " must hold " + std::to_string(count) + " element(s), got shape " +
                 shape_str(t.shape));
  check_same_device(op, ref, name, t);
  return t;
}

void decode_embed(nb::ndarray<> x, nb::ndarray<> token, nb::ndarray<> pos, nb::ndarray<> wte,
                  nb::ndarray<> wpe, uintptr_t stream) {
  const char* op = "decode_embed";
  Tables tb = tables(op, wte, wpe);
  Tensor X = view(op, "x", x);
  if (X.ndim() != 2) fail(op, "x must be (B, C), got shape " + shape_str(X.shape));
  const int64_t B = X.size(0), C = tb.C;
  check_arg(op, tb.wte, "x", X, tb.wte.dtype, {B, C});
  Tensor Tok = ids(op, tb.wte, "token", token, B), P = ids(op, tb.wte, "pos", pos, 1);
  if (X.cuda) {
    CudaScope scope(op, X);
    GS_CUDA_CALL(decode_embed_cuda(X.data, Tok.ptr<const int64_t>(), P.ptr<const int64_t>(),
                                   tb.wte.data, tb.wpe.data, B, C, tb.vocab, tb.positions,
                                   X.dtype, stream));
    return;
  }
  const int64_t p = *P.ptr<const int64_t>();
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t id = Tok.ptr<const int64_t>()[b];
      embed_row_cpu<T>(X.ptr<T>() + b * C, tb.wte.ptr<const T>(), tb.wpe.ptr<const T>(), id, p,
                       id >= 0 && id < tb.vocab && p >= 0 && p < tb.positions, C);
    }
  });
}

void window_embed(nb::ndarray<> x, nb::ndarray<> window, nb::ndarray<> token, nb::ndarray<> wte,
                  nb::ndarray<> wpe, uintptr_t stream) {
  const char* op = "window_embed";
  Tables tb = tables(op, wte, wpe);
  Tensor X = view(op, "x", x), Win = view(op, "window", window);
  check_dtype(op, "window", Win, {DType::i64});
  if (Win.ndim() != 2) fail(op, "window must be (B, T), got shape " + shape_str(Win.shape));
  const int64_t B = Win.size(0), T_ = Win.size(1), C = tb.C;
  check_same_device(op, tb.wte, "window", Win);
  if (T_ > tb.positions)
    fail(op, "the window holds " + std::to_string(T_) + " ids but wpe only " +
                 std::to_string(tb.positions) + " positions");
  check_arg(op, tb.wte, "x", X, tb.wte.dtype, {B, T_, C});
  Tensor Tok = ids(op, tb.wte, "token", token, B);
  if (X.cuda) {
    CudaScope scope(op, X);
    GS_CUDA_CALL(window_embed_cuda(X.data, Win.ptr<const int64_t>(), Tok.ptr<const int64_t>(),
                                   tb.wte.data, tb.wpe.data, B, T_, C, tb.vocab, X.dtype,
                                   stream));
    return;
  }
  const int64_t *w = Win.ptr<const int64_t>(), *tok = Tok.ptr<const int64_t>();
  dispatch_float(op, X.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T_; ++t) {
        const int64_t id = t < T_ - 1 ? w[b * T_ + t + 1] : tok[b];
        embed_row_cpu<T>(X.ptr<T>() + (b * T_ + t) * C, tb.wte.ptr<const T>(),
                         tb.wpe.ptr<const T>(), id, t, id >= 0 && id < tb.vocab, C);
      }
  });
}

void decode_advance(nb::ndarray<> new_tokens, nb::ndarray<> out, int64_t column,
                    nb::ndarray<> token, nb::ndarray<> window, nb::ndarray<> pos, bool slide,
                    uintptr_t stream) {
  const char* op = "decode_advance";
  Tensor New = view(op, "new_tokens", new_tokens);
  check_dtype(op, "new_tokens", New, {DType::i64});
  const DecodeState s =
      decode_state_arg(op, New, "new_tokens", New.numel(), out, column, token, window, pos, slide);
  if (New.cuda) {
    CudaScope scope(op, New);
    GS_CUDA_CALL(decode_advance_cuda(s, New.ptr<const int64_t>(), stream));
    return;
  }
  decode_advance_cpu(s, New.ptr<const int64_t>());
}

}  // namespace

DecodeState decode_state_arg(const char* op, const Tensor& ref, const char* ref_name,
                             int64_t rows, nb::ndarray<> out, int64_t column, nb::ndarray<> token,
                             nb::ndarray<> window, nb::ndarray<> pos, bool slide) {
  Tensor Win = view(op, "window", window), O = view(op, "out", out);
  check_dtype(op, "window", Win, {DType::i64});
  if (Win.ndim() != 2) fail(op, "window must be (B, T), got shape " + shape_str(Win.shape));
  const int64_t B = Win.size(0), T_ = Win.size(1);
  if (B != rows)
    fail(op, "the window has " + std::to_string(B) + " rows, " + ref_name + " " +
                 std::to_string(rows));
  check_same_device(op, ref, "window", Win);
  check_dtype(op, "out", O, {DType::i64});
  if (O.ndim() != 2 || O.size(0) != B)
    fail(op, "out must be (" + std::to_string(B) + ", n) for a window of " + std::to_string(B) +
                 " rows, got shape " + shape_str(O.shape));
  check_same_device(op, Win, "out", O);
  if (column < 0 || column >= O.size(1))
    fail(op, "column " + std::to_string(column) + " is outside out's " +
                 std::to_string(O.size(1)) + " columns");
  Tensor Tok = ids(op, Win, "token", token, B), P = ids(op, Win, "pos", pos, 1);
  if (Win.cuda && slide && T_ > kDecodeIoMaxT)
    fail(op, "a window of " + std::to_string(T_) + " ids is above the CUDA kernel's " +
                 std::to_string(kDecodeIoMaxT));
  return DecodeState{Win.ptr<int64_t>(), Tok.ptr<int64_t>(), P.ptr<int64_t>(), O.ptr<int64_t>(),
                     B, T_, O.size(1), column, slide};
}

void decode_advance_cpu(const DecodeState& s, const int64_t* new_tokens) {
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t* row = s.window + b * s.T;
    if (s.slide) {
      for (int64_t t = 0; t + 1 < s.T; ++t) row[t] = row[t + 1];
      if (s.T > 0) row[s.T - 1] = s.token[b];
    } else if (*s.pos >= 0 && *s.pos < s.T) {
      row[*s.pos] = s.token[b];
    }
    s.out[b * s.out_cols + s.column] = new_tokens[b];
    s.token[b] = new_tokens[b];
  }
  if (!s.slide) *s.pos += 1;
}

void register_decode_io(nb::module_& m) {
  m.def("decode_embed", &decode_embed, "x"_a, "token"_a, "pos"_a, "wte"_a, "wpe"_a,
        "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "x (B, C) = wte[token] + wpe[pos] (decode_io.h).");
  m.def("window_embed", &window_embed, "x"_a, "window"_a, "token"_a, "wte"_a, "wpe"_a,
        "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "x (B, T, C): the embedding of cat(window[:, 1:], token) at positions 0..T-1.");
  m.def("decode_advance", &decode_advance, "new_tokens"_a, "out"_a, "column"_a, "token"_a,
        "window"_a, "pos"_a, "slide"_a, "stream"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "The graph decoder's state after a token is drawn (decode_io.h).");
  m.attr("decode_io_max_t") = kDecodeIoMaxT;
}

}  // namespace gs
