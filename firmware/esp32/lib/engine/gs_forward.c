/* gs_forward.c: tokens through the model (FORMAT.md section 7: embed, block x L, ln_f, tied
 * LM head) with the int8 KV cache, and the sliding context window of section 8.
 *
 * Work is done a tile at a time: n consecutive positions go through each step together, so a
 * linear layer reads each weight row once for all n of them (gs_linear_rows). A fed token is a
 * tile of one position in the arena's token buffers; a window slide re-encodes its T/2 kept
 * positions in tiles of gs_slide_tile_positions, laid over the K/V rows the slide discards
 * (section 11). Every position gets exactly the operations it would get alone, so the logits do
 * not depend on the tiling. */
#include "gs_internal.h"

/* n positions' buffers. Per position p: x (C, residual stream), act (4C int8, the quantized
 * input of the next linear, scale act_scale[p]) and three float vectors at stride `stride`:
 * qkv (3C), att (C, attention output) and hidden (4C, the MLP's hidden, and the c_proj outputs).
 * In a slide tile the three share one 4C block per position (qkv [0, 3C), att [3C, 4C),
 * hidden [0, 4C)): each is written only after what it overlaps is no longer needed. */
typedef struct {
    float *x, *qkv, *att, *hidden, *act_scale;
    int8_t *act;
    size_t stride;
    uint32_t n;
} gs_tile;

static float *at(float *v, const gs_tile *t, uint32_t p)
{
    return v + p * t->stride;
}

/* Rows of the position-major K/V cache (T, L, C): (position, layer) -> row. */
static size_t kv_row(const gs_config *c, uint32_t pos, uint32_t l)
{
    return (size_t)pos * c->n_layer + l;
}

/* A matrix's bytes in the artifact: weights, row scales, bias. */
static uint64_t matrix_bytes(const gs_qmatrix *w, const uint8_t *bias)
{
    return (uint64_t)w->rows * w->cols + 4u * (uint64_t)w->rows * (bias != NULL ? 2u : 1u);
}

/* The tile's linear: y_p = linear(act_p, w) for every position, counted once. */
static void linear(gs_model *m, const gs_tile *t, float *y, const gs_qmatrix *w,
                   const uint8_t *bias)
{
    gs_linear_rows(y, t->stride, t->act, 4u * (size_t)m->config.n_embd, t->act_scale, t->n, w,
                   bias);
    m->state.weight_bytes += matrix_bytes(w, bias);
}

/* act_p, act_scale[p] = quantize_vector(v_p[n_in]) for every position. */
static void quantize(const gs_model *m, const gs_tile *t, float *v, uint32_t n_in)
{
    uint32_t p;
    for (p = 0; p < t->n; p++) {
        t->act_scale[p] = gs_quantize_vector(t->act + p * 4u * (size_t)m->config.n_embd,
                                             at(v, t, p), n_in);
    }
}

/* act_p = quantize_vector(layernorm(x_p, w, b)) for every position (xn: C floats of scratch). */
static void norm_quantize(gs_model *m, const gs_tile *t, const uint8_t *w, const uint8_t *b)
{
    const uint32_t C = m->config.n_embd;
    float *xn = m->state.xn;
    uint32_t p;
    for (p = 0; p < t->n; p++) {
        gs_layernorm(xn, t->x + (size_t)p * C, w, b, C, m->config.layernorm_eps);
        t->act_scale[p] = gs_quantize_vector(t->act + p * 4u * (size_t)C, xn, C);
        m->state.weight_bytes += 4u * (uint64_t)C * (b != NULL ? 2u : 1u);
    }
}

/* x_p = x_p + y_p[0 .. C) for every position (the residual add). */
static void residual(const gs_model *m, const gs_tile *t, float *y)
{
    const uint32_t C = m->config.n_embd;
    uint32_t p, i;
    for (p = 0; p < t->n; p++) {
        float *x = t->x + (size_t)p * C;
        const float *yp = at(y, t, p);
        for (i = 0; i < C; i++) x[i] = x[i] + yp[i];
    }
}

/* x_p = embed(tokens[p], pos0 + p):
 * x_i = ((f32)wte[tok, i] * swte[tok]) + ((f32)wpe[pos, i] * swpe[pos]). */
static void embed(gs_model *m, const gs_tile *t, const uint32_t *tokens, uint32_t pos0)
{
    const gs_qmatrix *wte = &m->weights.wte, *wpe = &m->weights.wpe;
    const uint32_t C = m->config.n_embd;
    uint32_t p, i;
    for (p = 0; p < t->n; p++) {
        const int8_t *te = wte->q + (size_t)tokens[p] * C;
        const int8_t *pe = wpe->q + (size_t)(pos0 + p) * C;
        const float ste = gs_f32_at(wte->scale, tokens[p]), spe = gs_f32_at(wpe->scale, pos0 + p);
        float *x = t->x + (size_t)p * C;
        for (i = 0; i < C; i++) x[i] = ((float)te[i] * ste) + ((float)pe[i] * spe);
        m->state.weight_bytes += 2u * ((uint64_t)C + 4u);
    }
}

/* Steps 3-5 of `attention` for head h of the query at position pos over the cached rows 0..pos
 * of layer l: scores, softmax, weighted sum of V into att[h*hs .. (h+1)*hs). query and att: C
 * floats each, of which head h's slice is used. */
static void attend_head(const gs_model *m, uint32_t l, uint32_t pos, uint32_t h,
                        const float *query, float *att)
{
    const gs_config *c = &m->config;
    const gs_state *s = &m->state;
    const uint32_t hs = c->head_size;
    const size_t row_bytes = c->n_embd;
    const float *q = query + (size_t)h * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    float *out = att + (size_t)h * hs;
    float mx, sum;
    uint32_t t, i;
    /* Every sum starts from its first term and runs in index order (FORMAT.md section 7), the
     * order the numpy reference reproduces; starting from 0.0f would differ in a zero's sign. */
    for (t = 0; t <= pos; t++) { /* 3. score_t = (q . kq_t) * ks_t * (1 / sqrt(hs)) */
        const size_t row = kv_row(c, t, l);
        const int8_t *k = s->k_cache + row * row_bytes + (size_t)h * hs;
        float dot = q[0] * (float)k[0];
        for (i = 1; i < hs; i++) dot += q[i] * (float)k[i];
        s->scores[t] = (dot * s->k_scale[row]) * scale;
    }
    mx = s->scores[0]; /* 4. softmax with the max subtracted */
    for (t = 1; t <= pos; t++) {
        if (s->scores[t] > mx) mx = s->scores[t];
    }
    for (t = 0; t <= pos; t++) s->scores[t] = gs_exp(s->scores[t] - mx);
    sum = s->scores[0];
    for (t = 1; t <= pos; t++) sum += s->scores[t];
    for (t = 0; t <= pos; t++) s->scores[t] = s->scores[t] / sum;
    for (t = 0; t <= pos; t++) { /* 5. out_i = sum_t (w_t * vs_t) * vq_t[i], t ascending */
        const size_t row = kv_row(c, t, l);
        const int8_t *v = s->v_cache + row * row_bytes + (size_t)h * hs;
        const float coef = s->scores[t] * s->v_scale[row];
        if (t == 0) {
            for (i = 0; i < hs; i++) out[i] = coef * (float)v[i];
        } else {
            for (i = 0; i < hs; i++) out[i] += coef * (float)v[i];
        }
    }
}

/* x = x + attention(layernorm(x, ln_1)) of layer l for the tile's positions pos0 .. pos0+n-1. */
static void attention(gs_model *m, const gs_tile *t, const gs_layer *w, uint32_t l, uint32_t pos0)
{
    const gs_config *c = &m->config;
    gs_state *s = &m->state;
    const uint32_t C = c->n_embd;
    uint32_t p, h;
    norm_quantize(m, t, w->ln_1_w, w->ln_1_b);
    linear(m, t, t->qkv, &w->c_attn, w->c_attn_b); /* 1. qkv (3C) */
    for (p = 0; p < t->n; p++) { /* 2. cache rows: K and V quantized over the whole row of C */
        const size_t row = kv_row(c, pos0 + p, l);
        float *qkv = at(t->qkv, t, p);
        s->k_scale[row] = gs_quantize_vector(s->k_cache + row * C, qkv + C, C);
        s->v_scale[row] = gs_quantize_vector(s->v_cache + row * C, qkv + 2u * (size_t)C, C);
    }
    /* each position attends to the rows up to its own: those of the earlier positions of this
     * tile were cached just above, those before the tile by earlier calls */
    for (p = 0; p < t->n; p++) {
        for (h = 0; h < c->n_head; h++) attend_head(m, l, pos0 + p, h, at(t->qkv, t, p),
                                                    at(t->att, t, p));
    }
    quantize(m, t, t->att, C);
    linear(m, t, t->hidden, &w->attn_c_proj, w->attn_c_proj_b); /* 6. (C) */
    residual(m, t, t->hidden);
}

/* x = x + linear(gelu(linear(layernorm(x, ln_2), c_fc)), mlp.c_proj) for the tile. */
static void mlp(gs_model *m, const gs_tile *t, const gs_layer *w)
{
    const uint32_t C = m->config.n_embd;
    uint32_t p;
    norm_quantize(m, t, w->ln_2_w, w->ln_2_b);
    linear(m, t, t->hidden, &w->c_fc, w->c_fc_b); /* (4C) */
    for (p = 0; p < t->n; p++) gs_gelu(at(t->hidden, t, p), 4u * C);
    quantize(m, t, t->hidden, 4u * C);
    linear(m, t, t->hidden, &w->mlp_c_proj, w->mlp_c_proj_b); /* (C) */
    residual(m, t, t->hidden);
}

/* tokens[0 .. n) at positions pos0 .. pos0+n-1 (< T) through every block, caching their K/V
 * rows. */
static void run_tile(gs_model *m, const gs_tile *t, const uint32_t *tokens, uint32_t pos0)
{
    uint32_t l;
    embed(m, t, tokens, pos0);
    for (l = 0; l < m->config.n_layer; l++) {
        gs_layer w;
        gs_layer_view(m, l, &w);
        attention(m, t, &w, l, pos0);
        mlp(m, t, &w);
    }
}

/* The tile of one position in the arena's token buffers (section 11). */
static gs_tile token_tile(const gs_model *m, float *scale)
{
    const gs_state *s = &m->state;
    gs_tile t;
    t.x = s->x;
    t.qkv = s->qkv;
    t.att = s->att_out;
    t.hidden = s->hidden;
    t.act = s->act_q;
    t.act_scale = scale;
    t.stride = 4u * (size_t)m->config.n_embd;
    t.n = 1;
    return t;
}

/* Section 11: during a slide the K/V rows of positions T/2 .. T-1 hold nothing (the next T/2
 * tokens rewrite them before anything reads them), so a tile of P positions lives there: the
 * K rows take the float blocks (P x 4C floats = 16PC <= (T/2)LC bytes for P <= LT/32), the V
 * rows x, act and act_scale (8PC + 4P bytes). Both start 4-byte aligned ((T/2)LC, 4 | C). */
static gs_tile slide_tile(const gs_model *m, uint32_t P)
{
    const gs_config *c = &m->config;
    const size_t C = c->n_embd, kept = (size_t)(c->block_size / 2u) * c->n_layer * C;
    gs_tile t;
    t.qkv = t.hidden = (float *)(void *)(m->state.k_cache + kept);
    t.att = t.qkv + 3u * C;
    t.x = (float *)(void *)(m->state.v_cache + kept);
    t.act = (int8_t *)(void *)(t.x + P * C);
    t.act_scale = (float *)(void *)(t.act + P * 4u * C);
    t.stride = 4u * C;
    t.n = P;
    return t;
}

/* Section 8: the window is full, keep its last T/2 ids at positions 0 .. T/2-1, re-encoded a
 * tile at a time. */
static void slide(gs_model *m)
{
    const uint32_t half = m->config.block_size / 2u, P = gs_slide_tile_positions(&m->config);
    float token_scale;
    gs_tile t = P > 0 ? slide_tile(m, P) : token_tile(m, &token_scale);
    const uint32_t capacity = t.n;
    uint32_t i, done;
    for (i = 0; i < half; i++) m->state.window[i] = m->state.window[half + i];
    if (m->on_slide != NULL) m->on_slide(m->on_slide_ctx, 0, half);
    for (done = 0; done < half; done += t.n) {
        t.n = half - done < capacity ? half - done : capacity;
        run_tile(m, &t, m->state.window + done, done);
        if (m->on_slide != NULL) m->on_slide(m->on_slide_ctx, done + t.n, half);
    }
    m->state.pos = half;
}

gs_status gs_forward(gs_model *model, uint32_t token, const float **logits)
{
    gs_state *s;
    float scale;
    gs_tile t;
    if (model == NULL || logits == NULL) return GS_ERR_NULL;
    s = &model->state;
    if (s->x == NULL) return GS_ERR_ARENA;
    if (token >= model->config.vocab_size) return GS_ERR_TOKEN;
    if (s->pos == model->config.block_size) slide(model);
    t = token_tile(model, &scale);
    run_tile(model, &t, &token, s->pos);
    s->window[s->pos] = token;
    s->pos++;
    norm_quantize(model, &t, model->weights.ln_f_w, model->weights.ln_f_b);
    linear(model, &t, s->logits, &model->weights.wte, NULL); /* tied head, (V) */
    *logits = s->logits;
    return GS_OK;
}

void gs_on_slide(gs_model *model, gs_slide_fn fn, void *ctx)
{
    if (model == NULL) return;
    model->on_slide = fn;
    model->on_slide_ctx = ctx;
}
