/* gs_engine.h: the public API of the gptstack C engine (portable C99, no heap, no stdio).
 *
 * Runs a .gsm artifact (packages/quant/FORMAT.md) in place: gs_open validates the file and points
 * into it, the caller hands in one arena of config.arena_bytes (gs_attach_arena), then
 * gs_encode -> gs_forward -> gs_sample -> gs_decode per token. Every fallible call returns a
 * gs_status; the engine never allocates, prints or exits. See README.md in this folder.
 *
 *   gs_model m; gs_open(&m, data, n);               // data: mmap'd / flash-mapped artifact
 *   gs_attach_arena(&m, arena, m.config.arena_bytes); // arena: 16-byte aligned
 *   gs_forward(&m, token, &logits); gs_sample(&m, logits, 0.8f, 40, &rng, &next);
 */
#ifndef GS_ENGINE_H
#define GS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "gs_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Load errors follow FORMAT.md section 6 (steps 1-13); the rest are run time. */
typedef enum {
    GS_OK = 0,
    GS_ERR_TRUNCATED = 1,    /* fewer bytes than the header or than file_bytes (steps 1, 5) */
    GS_ERR_MAGIC = 2,        /* not "GSMF" (step 2) */
    GS_ERR_VERSION = 3,      /* format version != GS_VERSION (step 3) */
    GS_ERR_HEADER = 4,       /* header_bytes, reserved, flags, trailing bytes, arena (4, 6, 13) */
    GS_ERR_CRC = 5,          /* CRC-32 mismatch (step 7) */
    GS_ERR_CONFIG = 6,       /* model config rules of section 2, bos_token (step 8) */
    GS_ERR_OFFSET = 7,       /* section or tensor offsets/sizes (steps 9, 12) */
    GS_ERR_TOKENIZER = 8,    /* tokenizer section rules of section 3 (step 10) */
    GS_ERR_TENSOR = 9,       /* tensor table names, order, dtypes, shapes, nbytes (step 11) */
    GS_ERR_NULL = 10,        /* a NULL argument */
    GS_ERR_ARENA = 11,       /* arena missing, too small or not 16-byte aligned */
    GS_ERR_TOKEN = 12,       /* token id >= V */
    GS_ERR_BUFFER = 13,      /* an output buffer too small */
    GS_ERR_UNKNOWN_CHAR = 14, /* char tokenizer: a prompt character not in the vocabulary */
    GS_ERR_UNSUPPORTED = 15  /* prompt encoding with PATTERN_GPT4 (section 10) */
} gs_status;

/* "GS_OK", "GS_ERR_CRC", ...; "GS_ERR_?" for a value outside the enum. */
const char *gs_status_name(gs_status status);

/* Model hyper-parameters, copied from the header (FORMAT.md section 2). */
typedef struct {
    uint32_t vocab_size;  /* V: rows of wte, may be padded past the tokenizer's Vt */
    uint32_t block_size;  /* T: context length, even */
    uint32_t n_layer;     /* L */
    uint32_t n_head;      /* nh */
    uint32_t n_embd;      /* C, a multiple of 4 */
    uint32_t head_size;   /* hs = C / nh */
    uint32_t flags;       /* GS_FLAG_BIAS or 0 */
    float layernorm_eps;
    uint32_t arena_bytes; /* what gs_attach_arena needs (section 11) */
    uint32_t bos_token;   /* fed first for an empty prompt; GS_NO_TOKEN if none */
} gs_config;

/* The tokenizer section (FORMAT.md section 3), read in place. u32 arrays are little-endian bytes
 * in the file (no alignment assumed of the caller's pointer), read through gs_tokenizer.c. */
typedef struct {
    uint32_t kind;                /* GS_TOK_KIND_CHAR or GS_TOK_KIND_BPE */
    uint32_t pattern;             /* GS_PATTERN_* */
    uint32_t n_tokens;            /* Vt */
    uint32_t n_pairs;
    uint32_t n_special;
    uint32_t blob_bytes;
    const uint8_t *token_offsets; /* u32 (Vt + 1) */
    const uint8_t *blob;          /* u8 (blob_bytes) */
    const uint8_t *byte_to_token; /* u32 (256) */
    const uint8_t *sorted_ids;    /* u32 (Vt - n_special), ordinary ids by their bytes */
    const uint8_t *pairs;         /* u32 (n_pairs, 3): (left, right, merged), sorted */
    const uint8_t *special_ids;   /* u32 (n_special), ascending */
} gs_tokenizer;

/* An int8 matrix with one f32 scale per row: W[r, k] = q[r * cols + k] * scale[r]. */
typedef struct {
    const int8_t *q;        /* (rows, cols), row-major: one output row of nn.Linear contiguous */
    const uint8_t *scale;   /* f32 (rows), little-endian */
    uint32_t rows;
    uint32_t cols;
} gs_qmatrix;

/* One transformer block's tensors, views into the file (gs_layer_view). f32 vectors are
 * little-endian bytes; a bias pointer is NULL when the artifact has no FLAG_BIAS. */
typedef struct {
    const uint8_t *ln_1_w, *ln_1_b;       /* f32 (C) */
    gs_qmatrix c_attn;                    /* (3C, C) */
    const uint8_t *c_attn_b;              /* f32 (3C) */
    gs_qmatrix attn_c_proj;               /* (C, C) */
    const uint8_t *attn_c_proj_b;         /* f32 (C) */
    const uint8_t *ln_2_w, *ln_2_b;       /* f32 (C) */
    gs_qmatrix c_fc;                      /* (4C, C) */
    const uint8_t *c_fc_b;                /* f32 (4C) */
    gs_qmatrix mlp_c_proj;                /* (C, 4C) */
    const uint8_t *mlp_c_proj_b;          /* f32 (C) */
} gs_layer;

/* The weights: read-only views into the artifact, never copied (the tied LM head is wte). */
typedef struct {
    gs_qmatrix wte;                 /* (V, C), also the LM head */
    gs_qmatrix wpe;                 /* (T, C) */
    const uint8_t *ln_f_w, *ln_f_b; /* f32 (C); ln_f_b NULL without FLAG_BIAS */
    const uint8_t *tensor_table;    /* the validated table: per-layer views come from it */
} gs_weights;

/* Everything that changes while running, carved from the caller's arena in FORMAT.md section
 * 11's order. */
typedef struct {
    float *x;              /* (C) residual stream */
    float *xn;             /* (C) normalized input of a sub-layer, then its output */
    float *qkv;            /* (3C) */
    float *att_out;        /* (C) attention output before c_proj */
    float *hidden;         /* (4C) MLP hidden */
    float *scores;         /* (T) one head's attention scores */
    float *logits;         /* (V) */
    int8_t *act_q;         /* (4C) the quantized input of the current linear layer */
    int8_t *k_cache;       /* (T, L, C) position-major: a slide's discarded rows are one block */
    int8_t *v_cache;       /* (T, L, C) */
    float *k_scale;        /* (T, L) one scale per cached row */
    float *v_scale;        /* (T, L) */
    uint32_t *window;      /* (T) the ids at positions 0 .. pos-1 */
    uint32_t *candidates;  /* (V) sampling order */
    uint32_t pos;          /* cached positions = where the next token goes (before a slide) */
    uint64_t weight_bytes; /* artifact bytes gs_forward has read since gs_attach_arena: every
                              pass over a tensor counts (a host measure of flash traffic) */
} gs_state;

/* Called by gs_forward while a window slide re-encodes the kept positions (FORMAT.md sections 8
 * and 11): first with done = 0, then after each tile, last with done == total (T/2). A board
 * uses it to show progress and to yield; it must not call the engine. */
typedef void (*gs_slide_fn)(void *ctx, uint32_t done, uint32_t total);

/* The owner: one opened artifact plus its run state. */
typedef struct {
    gs_config config;
    gs_tokenizer tokenizer;
    gs_weights weights;
    gs_state state;          /* all NULL until gs_attach_arena */
    const uint8_t *data;     /* the artifact, read in place */
    uint32_t data_bytes;
    gs_slide_fn on_slide;    /* NULL: none (gs_on_slide) */
    void *on_slide_ctx;
} gs_model;

/* ---- loading (gs_load.c, gs_tokenizer.c, gs_tensors.c) ---- */

/* Validate `data` (n_bytes long) in FORMAT.md section 6's order and point `model` into it.
 * `data` must outlive the model. The state is left detached: call gs_attach_arena next.
 * Returns the first failing step's status, GS_ERR_NULL for a NULL argument. */
gs_status gs_open(gs_model *model, const void *data, size_t n_bytes);

/* Read the header alone (the first GS_HEADER_BYTES of an artifact, n_bytes of them given):
 * FORMAT.md section 6 steps 1-4 and 8, so a board knows how many bytes to map before it maps
 * them. *file_bytes gets the header's file_bytes; *config (may be NULL) its model config, with
 * arena_bytes as the header states it (gs_open checks it against section 11). GS_ERR_TRUNCATED
 * (fewer than GS_HEADER_BYTES), GS_ERR_MAGIC, GS_ERR_VERSION, GS_ERR_HEADER, GS_ERR_CONFIG. */
gs_status gs_peek_header(const void *header, size_t n_bytes, uint32_t *file_bytes,
                         gs_config *config);

/* Views of layer l's tensors (l < n_layer) into `layer`. The model must be open. */
void gs_layer_view(const gs_model *model, uint32_t l, gs_layer *layer);

/* CRC-32 (IEEE, zlib.crc32) of n bytes: FORMAT.md section 5. */
uint32_t gs_crc32(const uint8_t *data, size_t n);

/* ---- arena and state (gs_arena.c) ---- */

/* FORMAT.md section 11: arena bytes for this config (64-bit so a huge config cannot wrap). The
 * window slide's re-encode tiles need nothing more: they live in the K/V rows the slide
 * discards (gs_slide_tile_positions). */
uint64_t gs_arena_bytes(const gs_config *config);

/* FORMAT.md section 11: positions a window slide re-encodes per tile, in the K/V rows the slide
 * discards: min(T/2, L*T/32); 0 when not even one fits (the slide then runs one position at a
 * time in the token buffers). */
uint32_t gs_slide_tile_positions(const gs_config *config);

/* Carve `arena` (16-byte aligned, at least config.arena_bytes) into the state and reset it.
 * GS_ERR_ARENA if too small or misaligned. The arena must outlive the model. */
gs_status gs_attach_arena(gs_model *model, void *arena, size_t arena_bytes);

/* Forget every fed token (pos = 0); the arena stays attached. */
gs_status gs_reset(gs_model *model);

/* ---- forward pass (gs_forward.c, arithmetic in gs_kernels.c) ---- */

/* Feed `token` at the next position (sliding the window first when it is full, FORMAT.md
 * section 8) and point *logits at the V logits it predicts (inside the arena, valid until the
 * next call). GS_ERR_TOKEN if token >= V, GS_ERR_ARENA if no arena is attached. */
gs_status gs_forward(gs_model *model, uint32_t token, const float **logits);

/* Have gs_forward call fn(ctx, done, total) during window slides (NULL: stop). */
void gs_on_slide(gs_model *model, gs_slide_fn fn, void *ctx);

/* ---- sampling (gs_sample.c) ---- */

/* PCG32 state (FORMAT.md section 9). */
typedef struct {
    uint64_t state;
    uint64_t inc;
} gs_rng;

void gs_rng_seed(gs_rng *rng, uint64_t seed);
uint32_t gs_rng_next(gs_rng *rng);
float gs_rng_uniform(gs_rng *rng); /* [0, 1), 24 bits */

/* Pick the next id in [0, Vt) from `logits` (V floats): greedy when temperature <= 0 (no RNG
 * draw, rng may be NULL), else top-k (top_k 0 or >= Vt: all) with one uniform draw. Uses the
 * arena's candidates buffer. */
gs_status gs_sample(gs_model *model, const float *logits, float temperature, uint32_t top_k,
                    gs_rng *rng, uint32_t *token);

/* ---- prompt encoding and streaming decode (gs_encode.c, gs_decode.c) ---- */

/* The bytes of token `id` (< Vt); GS_ERR_TOKEN otherwise. */
gs_status gs_token_bytes(const gs_model *model, uint32_t id, const uint8_t **bytes,
                         size_t *n_bytes);

/* Encode `text` (n_bytes of UTF-8) into ids as tiktoken's encode_ordinary would (FORMAT.md
 * section 10). ids has room for max_ids; while merging a pre-tokenized chunk the engine uses one
 * slot per byte of that chunk as scratch, so max_ids >= n_bytes always suffices.
 * GS_ERR_BUFFER when out of room, GS_ERR_UNKNOWN_CHAR (char tokenizer), GS_ERR_UNSUPPORTED
 * (PATTERN_GPT4). */
gs_status gs_encode(const gs_model *model, const uint8_t *text, size_t n_bytes, uint32_t *ids,
                    size_t max_ids, size_t *n_ids);

/* Streaming decoder: holds back at most 3 bytes of an incomplete UTF-8 character. */
typedef struct {
    uint8_t held[3];
    uint8_t n_held;
} gs_decoder;

void gs_decoder_init(gs_decoder *decoder);

/* Append token `id`'s bytes (none for a padding id in [Vt, V)) and write to `out` the longest
 * prefix that ends on a character boundary. `out` needs room for 3 + the token's bytes;
 * GS_ERR_BUFFER (nothing consumed) otherwise. */
gs_status gs_decode(gs_decoder *decoder, const gs_model *model, uint32_t id, uint8_t *out,
                    size_t max_out, size_t *n_out);

/* Write whatever is held (at most 3 bytes) and empty the decoder. */
gs_status gs_decode_flush(gs_decoder *decoder, uint8_t *out, size_t max_out, size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif /* GS_ENGINE_H */
