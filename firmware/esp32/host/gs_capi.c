/* gs_capi.c: a few accessors so Python's ctypes can drive the engine without mirroring its
 * structs (host shared library libgs_engine.so only; the engine itself is unchanged).
 * host/tests/gs_engine_ctypes.py is the Python side. */
#include "gs_engine.h"
#include "gs_math.h"

/* Bytes to allocate for each opaque object. */
size_t gs_capi_model_bytes(void) { return sizeof(gs_model); }
size_t gs_capi_decoder_bytes(void) { return sizeof(gs_decoder); }
size_t gs_capi_rng_bytes(void) { return sizeof(gs_rng); }

/* Config and tokenizer fields, in this order: V, T, L, nh, C, hs, flags, arena_bytes,
 * bos_token, Vt, kind, pattern, n_pairs, n_special. Returns how many were written (14). */
size_t gs_capi_config(const gs_model *m, uint32_t *out, size_t max_out)
{
    uint32_t v[14];
    size_t i, n = sizeof(v) / sizeof(v[0]);
    v[0] = m->config.vocab_size;
    v[1] = m->config.block_size;
    v[2] = m->config.n_layer;
    v[3] = m->config.n_head;
    v[4] = m->config.n_embd;
    v[5] = m->config.head_size;
    v[6] = m->config.flags;
    v[7] = m->config.arena_bytes;
    v[8] = m->config.bos_token;
    v[9] = m->tokenizer.n_tokens;
    v[10] = m->tokenizer.kind;
    v[11] = m->tokenizer.pattern;
    v[12] = m->tokenizer.n_pairs;
    v[13] = m->tokenizer.n_special;
    for (i = 0; i < n && i < max_out; i++) out[i] = v[i];
    return n;
}

float gs_capi_layernorm_eps(const gs_model *m) { return m->config.layernorm_eps; }

/* Cached positions (where the next token goes before a slide). */
uint32_t gs_capi_pos(const gs_model *m) { return m->state.pos; }

/* The ids in the window, positions 0 .. pos-1 (out needs T entries). */
uint32_t gs_capi_window(const gs_model *m, uint32_t *out)
{
    uint32_t i;
    for (i = 0; i < m->state.pos; i++) out[i] = m->state.window[i];
    return m->state.pos;
}

/* FORMAT.md section 11's formula for a config given by its four sizes (compared with
 * gptstack.quant.format.arena_bytes in the tests). */
uint64_t gs_capi_arena_formula(uint32_t V, uint32_t T, uint32_t L, uint32_t C)
{
    static const gs_config zero_config;
    gs_config c = zero_config;
    c.vocab_size = V;
    c.block_size = T;
    c.n_layer = L;
    c.n_embd = C;
    return gs_arena_bytes(&c);
}

/* Section 11's slide tile for a config given by its sizes (against
 * gptstack.quant.format.slide_tile_positions). */
uint32_t gs_capi_slide_tile_formula(uint32_t T, uint32_t L)
{
    static const gs_config zero_config;
    gs_config c = zero_config;
    c.block_size = T;
    c.n_layer = L;
    return gs_slide_tile_positions(&c);
}

/* The engine's count of artifact bytes read by gs_forward since gs_attach_arena. */
uint64_t gs_capi_weight_bytes(const gs_model *m) { return m->state.weight_bytes; }

/* gs_peek_header with the config spread into out (needs 10): file_bytes, V, T, L, nh, C, hs,
 * flags, arena_bytes, bos_token. Returns the status; out is untouched unless GS_OK. */
int gs_capi_peek_header(const void *header, size_t n_bytes, uint32_t *out)
{
    gs_config c;
    uint32_t file_bytes;
    gs_status st = gs_peek_header(header, n_bytes, &file_bytes, &c);
    if (st != GS_OK) return (int)st;
    out[0] = file_bytes;
    out[1] = c.vocab_size;
    out[2] = c.block_size;
    out[3] = c.n_layer;
    out[4] = c.n_head;
    out[5] = c.n_embd;
    out[6] = c.head_size;
    out[7] = c.flags;
    out[8] = c.arena_bytes;
    out[9] = c.bos_token;
    return (int)GS_OK;
}

/* y[i] = gs_exp(x[i]) and gs_tanh(x[i]) over arrays: the engine's own exp and tanh (FORMAT.md
 * section 7) for a bit-for-bit comparison with gptstack.quant.fmath on millions of inputs. */
void gs_capi_exp(const float *x, float *y, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) y[i] = gs_exp(x[i]);
}

void gs_capi_tanh(const float *x, float *y, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) y[i] = gs_tanh(x[i]);
}
