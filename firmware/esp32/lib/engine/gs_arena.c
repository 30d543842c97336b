/* gs_arena.c: the one block of working memory, FORMAT.md section 11. The caller owns it (a
 * static buffer or one heap_caps_malloc on the chip, an aligned allocation on the host); the
 * engine only carves it, in the table's order, each buffer on a 16-byte boundary. The formula
 * is the same as gptstack.quant.format.arena_bytes and the loader checks the header against it
 * (step 13). A window slide borrows the K/V rows of positions T/2 .. T-1 for its re-encode tiles
 * (section 11, gs_slide_tile_positions below; carved in gs_forward.c), so they add nothing. */
#include "gs_internal.h"

/* The buffers of section 11, bytes before alignment; order = arena order. */
enum {
    B_X, B_XN, B_QKV, B_ATT_OUT, B_HIDDEN, B_SCORES, B_LOGITS, B_ACT_Q,
    B_K_CACHE, B_V_CACHE, B_K_SCALE, B_V_SCALE, B_WINDOW, B_CANDIDATES, B_COUNT
};

static void buffer_sizes(const gs_config *c, uint64_t bytes[B_COUNT])
{
    uint64_t V = c->vocab_size, T = c->block_size, L = c->n_layer, C = c->n_embd;
    bytes[B_X] = 4u * C;
    bytes[B_XN] = 4u * C;
    bytes[B_QKV] = 12u * C;
    bytes[B_ATT_OUT] = 4u * C;
    bytes[B_HIDDEN] = 16u * C;
    bytes[B_SCORES] = 4u * T;
    bytes[B_LOGITS] = 4u * V;
    bytes[B_ACT_Q] = 4u * C; /* int8 input of the widest linear: mlp.c_proj reads 4C */
    bytes[B_K_CACHE] = L * T * C;
    bytes[B_V_CACHE] = L * T * C;
    bytes[B_K_SCALE] = 4u * L * T;
    bytes[B_V_SCALE] = 4u * L * T;
    bytes[B_WINDOW] = 4u * T;
    bytes[B_CANDIDATES] = 4u * V;
}

uint64_t gs_arena_bytes(const gs_config *config)
{
    uint64_t bytes[B_COUNT], total = 0;
    int i;
    if (config == NULL) return 0;
    buffer_sizes(config, bytes);
    for (i = 0; i < B_COUNT; i++) total += gs_align16(bytes[i]);
    return total;
}

uint32_t gs_slide_tile_positions(const gs_config *config)
{
    uint64_t half, fits;
    if (config == NULL) return 0;
    half = config->block_size / 2u;
    fits = (uint64_t)config->n_layer * config->block_size / 32u; /* 16C bytes each in (T/2)LC */
    return (uint32_t)(fits < half ? fits : half);
}

gs_status gs_attach_arena(gs_model *model, void *arena, size_t arena_bytes)
{
    uint64_t bytes[B_COUNT];
    void *at[B_COUNT];
    uint8_t *cursor = (uint8_t *)arena;
    gs_state *s;
    int i;
    if (model == NULL || arena == NULL) return GS_ERR_NULL;
    if (model->data == NULL) return GS_ERR_NULL; /* not opened */
    if ((uintptr_t)arena % GS_ALIGN != 0) return GS_ERR_ARENA;
    if ((uint64_t)arena_bytes < (uint64_t)model->config.arena_bytes) return GS_ERR_ARENA;
    buffer_sizes(&model->config, bytes);
    for (i = 0; i < B_COUNT; i++) {
        at[i] = cursor;
        cursor += (size_t)gs_align16(bytes[i]); /* fits: the sum is config.arena_bytes (u32) */
    }
    s = &model->state;
    s->x = (float *)at[B_X];
    s->xn = (float *)at[B_XN];
    s->qkv = (float *)at[B_QKV];
    s->att_out = (float *)at[B_ATT_OUT];
    s->hidden = (float *)at[B_HIDDEN];
    s->scores = (float *)at[B_SCORES];
    s->logits = (float *)at[B_LOGITS];
    s->act_q = (int8_t *)at[B_ACT_Q];
    s->k_cache = (int8_t *)at[B_K_CACHE];
    s->v_cache = (int8_t *)at[B_V_CACHE];
    s->k_scale = (float *)at[B_K_SCALE];
    s->v_scale = (float *)at[B_V_SCALE];
    s->window = (uint32_t *)at[B_WINDOW];
    s->candidates = (uint32_t *)at[B_CANDIDATES];
    s->pos = 0;
    s->weight_bytes = 0;
    return GS_OK;
}

gs_status gs_reset(gs_model *model)
{
    if (model == NULL) return GS_ERR_NULL;
    if (model->state.x == NULL) return GS_ERR_ARENA;
    model->state.pos = 0;
    return GS_OK;
}
