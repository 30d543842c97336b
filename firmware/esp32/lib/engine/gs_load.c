/* gs_load.c: gs_open, the artifact loader. Validates a .gsm file in place in the order of
 * packages/quant/FORMAT.md section 6 (steps 1-13, first failure wins, one gs_status per step)
 * and points the model into it; nothing is copied. The tokenizer section (step 10) is checked in
 * gs_tokenizer.c and the tensor table (steps 11, 12) in gs_tensors.c.
 *
 * Every size sum is done in 64 bits, so no field value (all u32) can wrap a check, on a 32-bit
 * chip included. */
#include "gs_internal.h"

/* Header field offsets, FORMAT.md section 2. */
enum {
    H_MAGIC = 0,
    H_VERSION = 4,
    H_HEADER_BYTES = 8,
    H_FILE_BYTES = 12,
    H_VOCAB_SIZE = 16,
    H_BLOCK_SIZE = 20,
    H_N_LAYER = 24,
    H_N_HEAD = 28,
    H_N_EMBD = 32,
    H_FLAGS = 36,
    H_LAYERNORM_EPS = 40,
    H_ARENA_BYTES = 44,
    H_TOKENIZER_OFFSET = 48,
    H_TOKENIZER_BYTES = 52,
    H_TENSOR_TABLE_OFFSET = 56,
    H_N_TENSORS = 60,
    H_PAYLOAD_OFFSET = 64,
    H_PAYLOAD_BYTES = 68,
    H_BOS_TOKEN = 72,
    H_RESERVED = 76 /* u8[52] up to HEADER_BYTES */
};

#define CRC_BYTES 4u

static uint32_t header_u32(const uint8_t *p, uint32_t field)
{
    return gs_rd_u32(p + field);
}

/* Steps 2-4: magic, version, header_bytes / reserved / flags. */
static gs_status check_header(const uint8_t *p)
{
    static const char magic[4] = GS_MAGIC;
    uint32_t i;
    for (i = 0; i < 4; i++) {
        if (p[H_MAGIC + i] != (uint8_t)magic[i]) return GS_ERR_MAGIC;
    }
    if (header_u32(p, H_VERSION) != GS_VERSION) return GS_ERR_VERSION;
    if (header_u32(p, H_HEADER_BYTES) != GS_HEADER_BYTES) return GS_ERR_HEADER;
    for (i = H_RESERVED; i < GS_HEADER_BYTES; i++) {
        if (p[i] != 0) return GS_ERR_HEADER;
    }
    if ((header_u32(p, H_FLAGS) & ~GS_FLAG_BIAS) != 0) return GS_ERR_HEADER;
    return GS_OK;
}

/* Step 8: the config rules of section 2. bos_token is checked against V here (the tokenizer
 * section is not validated yet) and against Vt after step 10, see open_checked. */
static gs_status read_config(gs_config *c, const uint8_t *p)
{
    float eps;
    c->vocab_size = header_u32(p, H_VOCAB_SIZE);
    c->block_size = header_u32(p, H_BLOCK_SIZE);
    c->n_layer = header_u32(p, H_N_LAYER);
    c->n_head = header_u32(p, H_N_HEAD);
    c->n_embd = header_u32(p, H_N_EMBD);
    c->flags = header_u32(p, H_FLAGS);
    c->layernorm_eps = eps = gs_f32_at(p, H_LAYERNORM_EPS / 4);
    c->arena_bytes = header_u32(p, H_ARENA_BYTES);
    c->bos_token = header_u32(p, H_BOS_TOKEN);
    if (c->vocab_size < 1) return GS_ERR_CONFIG;
    if (c->block_size < 2 || c->block_size % 2 != 0) return GS_ERR_CONFIG;
    if (c->n_layer < 1) return GS_ERR_CONFIG;
    if (c->n_embd < 1 || c->n_embd % 4 != 0) return GS_ERR_CONFIG;
    if (c->n_head < 1 || c->n_embd % c->n_head != 0) return GS_ERR_CONFIG;
    /* finite and > 0; NaN fails the first comparison, +inf the second */
    if (!(eps > 0.0f) || eps - eps != 0.0f) return GS_ERR_CONFIG;
    if (c->bos_token != GS_NO_TOKEN && c->bos_token >= c->vocab_size) return GS_ERR_CONFIG;
    c->head_size = c->n_embd / c->n_head;
    return GS_OK;
}

/* Step 9: sections in order, aligned, without gaps beyond alignment, inside the file. */
static gs_status check_sections(const uint8_t *p, uint32_t file_bytes)
{
    uint64_t tok_off = header_u32(p, H_TOKENIZER_OFFSET);
    uint64_t tok_bytes = header_u32(p, H_TOKENIZER_BYTES);
    uint64_t table_off = header_u32(p, H_TENSOR_TABLE_OFFSET);
    uint64_t n_tensors = header_u32(p, H_N_TENSORS);
    uint64_t payload_off = header_u32(p, H_PAYLOAD_OFFSET);
    uint64_t payload_bytes = header_u32(p, H_PAYLOAD_BYTES);
    if (tok_off != GS_HEADER_BYTES) return GS_ERR_OFFSET;
    if (table_off != gs_align16(tok_off + tok_bytes)) return GS_ERR_OFFSET;
    if (payload_off != gs_align16(table_off + GS_TENSOR_ENTRY_BYTES * n_tensors)) {
        return GS_ERR_OFFSET;
    }
    if (payload_bytes % GS_ALIGN != 0) return GS_ERR_OFFSET;
    if ((uint64_t)file_bytes != payload_off + payload_bytes + CRC_BYTES) return GS_ERR_OFFSET;
    return GS_OK;
}

/* Steps 1-7: sizes, header fields and the CRC, before any other field is trusted. */
static gs_status check_envelope(const uint8_t *p, size_t n_bytes)
{
    gs_status st;
    uint32_t file_bytes;
    if (n_bytes < GS_HEADER_BYTES) return GS_ERR_TRUNCATED;               /* step 1 */
    st = check_header(p);                                                  /* steps 2-4 */
    if (st != GS_OK) return st;
    file_bytes = header_u32(p, H_FILE_BYTES);
    if ((uint64_t)file_bytes > (uint64_t)n_bytes) return GS_ERR_TRUNCATED; /* step 5 */
    if ((uint64_t)file_bytes < (uint64_t)n_bytes) return GS_ERR_HEADER;   /* step 6 */
    /* step 7: file_bytes == n_bytes >= 128 here, so the CRC field is inside the data */
    if (gs_crc32(p, file_bytes - CRC_BYTES) != gs_rd_u32(p + file_bytes - CRC_BYTES)) {
        return GS_ERR_CRC;
    }
    return GS_OK;
}

/* Steps 8-13 once the envelope is sound. */
static gs_status open_checked(gs_model *model, const uint8_t *p)
{
    gs_status st = read_config(&model->config, p);                         /* step 8 */
    if (st != GS_OK) return st;
    st = check_sections(p, header_u32(p, H_FILE_BYTES));                    /* step 9 */
    if (st != GS_OK) return st;
    st = gs_tokenizer_parse(&model->tokenizer, p + GS_HEADER_BYTES,        /* step 10 */
                            header_u32(p, H_TOKENIZER_BYTES), model->config.vocab_size);
    if (st != GS_OK) return st;
    /* bos_token < Vt needs the tokenizer: checked as part of step 10, as gptstack.quant does */
    if (model->config.bos_token != GS_NO_TOKEN &&
        model->config.bos_token >= model->tokenizer.n_tokens) {
        return GS_ERR_TOKENIZER;
    }
    st = gs_tensors_check(model, p + header_u32(p, H_TENSOR_TABLE_OFFSET),  /* steps 11-12 */
                          header_u32(p, H_N_TENSORS), header_u32(p, H_PAYLOAD_OFFSET),
                          header_u32(p, H_PAYLOAD_BYTES));
    if (st != GS_OK) return st;
    if (gs_arena_bytes(&model->config) != (uint64_t)model->config.arena_bytes) {  /* step 13 */
        return GS_ERR_HEADER;
    }
    return GS_OK;
}

gs_status gs_peek_header(const void *header, size_t n_bytes, uint32_t *file_bytes,
                         gs_config *config)
{
    const uint8_t *p = (const uint8_t *)header;
    gs_config c;
    gs_status st;
    if (header == NULL || file_bytes == NULL) return GS_ERR_NULL;
    if (n_bytes < GS_HEADER_BYTES) return GS_ERR_TRUNCATED;                /* step 1 */
    st = check_header(p);                                                   /* steps 2-4 */
    if (st == GS_OK) st = read_config(&c, p);                               /* step 8 */
    if (st != GS_OK) return st;
    *file_bytes = header_u32(p, H_FILE_BYTES);
    if (config != NULL) *config = c;
    return GS_OK;
}

gs_status gs_open(gs_model *model, const void *data, size_t n_bytes)
{
    static const gs_model closed_model; /* all zero: no arena, no data */
    const uint8_t *p = (const uint8_t *)data;
    gs_status st;
    if (model == NULL) return GS_ERR_NULL;
    *model = closed_model;
    if (data == NULL) return GS_ERR_NULL;
    st = check_envelope(p, n_bytes);                                       /* steps 1-7 */
    if (st == GS_OK) st = open_checked(model, p);
    if (st != GS_OK) {
        *model = closed_model; /* a failed open leaves nothing half-usable */
        return st;
    }
    model->data = p;
    model->data_bytes = header_u32(p, H_FILE_BYTES);
    gs_tensors_bind(model, p + header_u32(p, H_TENSOR_TABLE_OFFSET));
    return GS_OK;
}
