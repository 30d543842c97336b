/* gs_internal.h: helpers shared by the engine's C files; not part of the public API.
 *
 * Little-endian field readers (the artifact may sit at any address, and byte reads keep the
 * code free of alignment and strict-aliasing assumptions), the float math the engine uses, and
 * the int8 kernels of FORMAT.md section 7 (gs_kernels.c). */
#ifndef GS_INTERNAL_H
#define GS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gs_engine.h"
#include "gs_math.h"

/* Only freestanding headers are required: a freestanding build (xtensa size check, no libc
 * headers) declares the two libm functions itself, which C99 7.1.4 allows. Both are correctly
 * rounded by IEEE-754 (sqrt) or exact (rint), so every C library gives the same bits; exp and
 * tanh, which no standard pins down, are the engine's own (gs_math.c). */
#if defined(__STDC_HOSTED__) && __STDC_HOSTED__
#include <math.h>
#else
float sqrtf(float x);
float rintf(float x);
#endif

static inline uint32_t gs_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* The i-th u32 of a little-endian array. */
static inline uint32_t gs_u32_at(const uint8_t *array, size_t i)
{
    return gs_rd_u32(array + 4 * i);
}

/* The i-th f32 of a little-endian array (union punning is defined in C99, TC3 6.5.2.3). */
static inline float gs_f32_at(const uint8_t *array, size_t i)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = gs_rd_u32(array + 4 * i);
    return v.f;
}

/* Round n up to a multiple of GS_ALIGN (FORMAT.md section 1). */
static inline uint64_t gs_align16(uint64_t n)
{
    return (n + (GS_ALIGN - 1u)) / GS_ALIGN * GS_ALIGN;
}

/* UTF-8 lead byte b (Unicode Table 3-7, FORMAT.md section 10): the length (2-4) of the
 * well-formed character it starts and the range [*lo, *hi] of that character's second byte
 * (narrower after E0, ED, F0 and F4: no overlongs, surrogates or code points past U+10FFFF;
 * every later byte is 80-BF). 0 if b cannot start a multi-byte character (ASCII, a continuation
 * byte, C0, C1, F5-FF). Shared by prompt encoding (gs_encode.c) and streaming decode. */
static inline uint32_t gs_utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80u;
    *hi = 0xBFu;
    if (b >= 0xC2u && b <= 0xDFu) return 2;
    if (b >= 0xE0u && b <= 0xEFu) {
        if (b == 0xE0u) *lo = 0xA0u;
        if (b == 0xEDu) *hi = 0x9Fu;
        return 3;
    }
    if (b >= 0xF0u && b <= 0xF4u) {
        if (b == 0xF0u) *lo = 0x90u;
        if (b == 0xF4u) *hi = 0x8Fu;
        return 4;
    }
    return 0;
}

/* ---- tokenizer section (gs_tokenizer.c) ---- */

/* Step 10 of FORMAT.md section 6: parse and check the section at data + offset. */
gs_status gs_tokenizer_parse(gs_tokenizer *tok, const uint8_t *section, uint32_t n_bytes,
                             uint32_t vocab_size);

/* Bytes of token id (< n_tokens, unchecked). */
const uint8_t *gs_tok_bytes(const gs_tokenizer *tok, uint32_t id, uint32_t *n_bytes);

/* The ordinary id whose bytes are exactly key[0..n), or GS_NO_TOKEN (binary search of
 * sorted_ids). */
uint32_t gs_tok_lookup(const gs_tokenizer *tok, const uint8_t *key, size_t n);

/* ---- tensor table (gs_tensors.c) ---- */

/* Steps 11 and 12: the table's entries against section 4, then their offsets in the payload. */
gs_status gs_tensors_check(const gs_model *model, const uint8_t *table, uint32_t n_tensors,
                           uint64_t payload_offset, uint64_t payload_bytes);

/* Views of the whole-model tensors once the table is valid (model->data set). */
void gs_tensors_bind(gs_model *model, const uint8_t *table);

/* ---- int8 arithmetic, FORMAT.md section 7 (gs_kernels.c) ---- */

/* (q, s) = quantize_vector(x[n]); returns s. */
float gs_quantize_vector(int8_t *q, const float *x, uint32_t n);

/* linear for n positions: y[p * y_stride + r] (r < R) from the quantized inputs
 * q[p * q_stride + k] (k < K) with scales q_scale[p], W (R, K), bias f32[R] or NULL. */
void gs_linear_rows(float *y, size_t y_stride, const int8_t *q, size_t q_stride,
                    const float *q_scale, uint32_t n, const gs_qmatrix *w, const uint8_t *bias);

/* y[n] = layernorm(x[n], w, b or NULL, eps). y may alias x. */
void gs_layernorm(float *y, const float *x, const uint8_t *w, const uint8_t *b, uint32_t n,
                  float eps);

/* x[n] = gelu(x[n]), tanh form. */
void gs_gelu(float *x, uint32_t n);

#endif /* GS_INTERNAL_H */
