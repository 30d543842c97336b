// decode_io_args.h: the decoder state's arguments checked and viewed as a DecodeState, for the
// bindings that take one (decode_advance in decode_io.cpp, sample_tokens in sampling.cpp).
#pragma once

#include "common.h"
#include "decode_io.h"

namespace gs {

// window (B, T), out (B, n) with 0 <= column < n, token B ids, pos one: int64, contiguous, on
// ref's device, B = `rows` (the rows of ref, named ref_name in the message). Raises ValueError
// naming the argument.
DecodeState decode_state_arg(const char* op, const Tensor& ref, const char* ref_name,
                             int64_t rows, nb::ndarray<> out, int64_t column, nb::ndarray<> token,
                             nb::ndarray<> window, nb::ndarray<> pos, bool slide);

}  // namespace gs
