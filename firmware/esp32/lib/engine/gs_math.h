/* gs_math.h: the engine's own float32 exp and tanh (FORMAT.md section 7 `exp`, `tanh`).
 *
 * Why not expf/tanhf: glibc, newlib (the ESP32's C library) and numpy round differently in the
 * last bit, and one ulp in a softmax weight or a GELU output sometimes moves an activation
 * across an int8 rounding boundary, so the chip would not reproduce the reference. These use
 * IEEE-754 + - * /, rintf and an exact power-of-two scale only, in the order FORMAT.md writes
 * (build with -ffp-contract=off), so they give the same bits on every IEEE machine; the numpy
 * twin is gptstack.quant.fmath (same bits on all 2^32 inputs, compared once exhaustively;
 * host/tests/test_engine_math.py keeps checking millions). Errors against the exact functions:
 * exp below 1 ulp, tanh below 1.46 ulp (every float32 input of [-87, 0] and [0, 10]). */
#ifndef GS_MATH_H
#define GS_MATH_H

/* e^x for x <= 0: x < -87 and -inf give +0, NaN gives NaN, x > 0 is taken as 0. */
float gs_exp(float x);

/* tanh(u): odd polynomial for |u| < 0.625, else 1 - 2e / (1 + e) with e = gs_exp(-2|u|);
 * then u's sign bit (copysign: tanh(-0) = -0, +-inf gives +-1); NaN gives NaN. */
float gs_tanh(float u);

#endif /* GS_MATH_H */
