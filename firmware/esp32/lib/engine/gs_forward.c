/* gs_forward.c: one token through the model (FORMAT.md section 7: embed, block x L, ln_f, tied
 * LM head) with the int8 KV cache, and the sliding context window of section 8. */
#include "gs_internal.h"

/* x = embed(tok, pos): ((f32)wte[tok, i] * swte[tok]) + ((f32)wpe[pos, i] * swpe[pos]). */
static void embed(const gs_model *m, uint32_t token, uint32_t pos)
{
    const gs_qmatrix *wte = &m->weights.wte, *wpe = &m->weights.wpe;
    const uint32_t C = m->config.n_embd;
    const int8_t *te = wte->q + (size_t)token * C;
    const int8_t *pe = wpe->q + (size_t)pos * C;
    const float ste = gs_f32_at(wte->scale, token), spe = gs_f32_at(wpe->scale, pos);
    float *x = m->state.x;
    uint32_t i;
    for (i = 0; i < C; i++) x[i] = ((float)te[i] * ste) + ((float)pe[i] * spe);
}

/* Steps 3-5 of `attention` for head h at position pos over cached rows 0..pos of layer l:
 * scores, softmax, weighted sum of V into att_out[h*hs .. (h+1)*hs). */
static void attend_head(const gs_model *m, uint32_t l, uint32_t pos, uint32_t h)
{
    const gs_config *c = &m->config;
    const gs_state *s = &m->state;
    const uint32_t C = c->n_embd, hs = c->head_size;
    const size_t layer_rows = (size_t)l * c->block_size;
    const float *q = s->qkv + (size_t)h * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    float *out = s->att_out + (size_t)h * hs;
    float mx, sum;
    uint32_t t, i;
    /* Every sum starts from its first term and runs in index order (FORMAT.md section 7), the
     * order the numpy reference reproduces; starting from 0.0f would differ in a zero's sign. */
    for (t = 0; t <= pos; t++) { /* 3. score_t = (q . kq_t) * ks_t * (1 / sqrt(hs)) */
        const int8_t *k = s->k_cache + (layer_rows + t) * C + (size_t)h * hs;
        float dot = q[0] * (float)k[0];
        for (i = 1; i < hs; i++) dot += q[i] * (float)k[i];
        s->scores[t] = (dot * s->k_scale[layer_rows + t]) * scale;
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
        const int8_t *v = s->v_cache + (layer_rows + t) * C + (size_t)h * hs;
        const float coef = s->scores[t] * s->v_scale[layer_rows + t];
        if (t == 0) {
            for (i = 0; i < hs; i++) out[i] = coef * (float)v[i];
        } else {
            for (i = 0; i < hs; i++) out[i] += coef * (float)v[i];
        }
    }
}

/* x = x + attention(layernorm(x, ln_1)) at position pos of layer l. */
static void attention(const gs_model *m, const gs_layer *w, uint32_t l, uint32_t pos)
{
    const gs_config *c = &m->config;
    const gs_state *s = &m->state;
    const uint32_t C = c->n_embd;
    const size_t row = (size_t)l * c->block_size + pos;
    uint32_t h, i;
    gs_layernorm(s->xn, s->x, w->ln_1_w, w->ln_1_b, C, c->layernorm_eps);
    gs_linear(s->qkv, s->xn, &w->c_attn, w->c_attn_b, s->act_q); /* 1. qkv (3C) */
    /* 2. cache row pos: K and V quantized over the whole row of C, one scale each */
    s->k_scale[row] = gs_quantize_vector(s->k_cache + row * C, s->qkv + C, C);
    s->v_scale[row] = gs_quantize_vector(s->v_cache + row * C, s->qkv + 2u * (size_t)C, C);
    for (h = 0; h < c->n_head; h++) attend_head(m, l, pos, h);
    gs_linear(s->xn, s->att_out, &w->attn_c_proj, w->attn_c_proj_b, s->act_q); /* 6. (C) */
    for (i = 0; i < C; i++) s->x[i] = s->x[i] + s->xn[i];
}

/* x = x + linear(gelu(linear(layernorm(x, ln_2), c_fc)), mlp.c_proj). */
static void mlp(const gs_model *m, const gs_layer *w)
{
    const gs_state *s = &m->state;
    const uint32_t C = m->config.n_embd;
    uint32_t i;
    gs_layernorm(s->xn, s->x, w->ln_2_w, w->ln_2_b, C, m->config.layernorm_eps);
    gs_linear(s->hidden, s->xn, &w->c_fc, w->c_fc_b, s->act_q); /* (4C) */
    gs_gelu(s->hidden, 4u * C);
    gs_linear(s->xn, s->hidden, &w->mlp_c_proj, w->mlp_c_proj_b, s->act_q); /* (C) */
    for (i = 0; i < C; i++) s->x[i] = s->x[i] + s->xn[i];
}

/* Run token at position pos (< T), caching its K/V rows; logits only when asked (a re-fed
 * window id after a slide needs none). */
static void forward_at(gs_model *m, uint32_t token, uint32_t pos, int want_logits)
{
    const gs_state *s = &m->state;
    uint32_t l;
    embed(m, token, pos);
    for (l = 0; l < m->config.n_layer; l++) {
        gs_layer w;
        gs_layer_view(m, l, &w);
        attention(m, &w, l, pos);
        mlp(m, &w);
    }
    m->state.window[pos] = token;
    if (!want_logits) return;
    gs_layernorm(s->xn, s->x, m->weights.ln_f_w, m->weights.ln_f_b, m->config.n_embd,
                 m->config.layernorm_eps);
    gs_linear(s->logits, s->xn, &m->weights.wte, NULL, s->act_q); /* tied head, (V) */
}

/* Section 8: the window is full, keep its last T/2 ids at positions 0 .. T/2-1. */
static void slide(gs_model *m)
{
    const uint32_t half = m->config.block_size / 2u;
    uint32_t i;
    for (i = 0; i < half; i++) m->state.window[i] = m->state.window[half + i];
    for (i = 0; i < half; i++) forward_at(m, m->state.window[i], i, 0);
    m->state.pos = half;
}

gs_status gs_forward(gs_model *model, uint32_t token, const float **logits)
{
    if (model == NULL || logits == NULL) return GS_ERR_NULL;
    if (model->state.x == NULL) return GS_ERR_ARENA;
    if (token >= model->config.vocab_size) return GS_ERR_TOKEN;
    if (model->state.pos == model->config.block_size) slide(model);
    forward_at(model, token, model->state.pos, 1);
    model->state.pos++;
    *logits = model->state.logits;
    return GS_OK;
}
