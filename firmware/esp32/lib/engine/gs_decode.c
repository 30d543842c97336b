/* gs_decode.c: ids -> bytes for a terminal or the OLED, FORMAT.md section 10 "streaming decode".
 * A BPE token may end inside a multi-byte UTF-8 character; the decoder holds back such a
 * trailing incomplete sequence (at most 3 bytes that are a valid prefix of one character) until
 * the next token completes it, and passes every other byte through unchanged, so the pieces
 * concatenate to exactly the token bytes. */
#include "gs_internal.h"

void gs_decoder_init(gs_decoder *decoder)
{
    if (decoder != NULL) decoder->n_held = 0;
}

gs_status gs_token_bytes(const gs_model *model, uint32_t id, const uint8_t **bytes,
                         size_t *n_bytes)
{
    uint32_t n;
    if (model == NULL || bytes == NULL || n_bytes == NULL) return GS_ERR_NULL;
    if (model->data == NULL) return GS_ERR_NULL;
    if (id >= model->tokenizer.n_tokens) return GS_ERR_TOKEN;
    *bytes = gs_tok_bytes(&model->tokenizer, id, &n);
    *n_bytes = n;
    return GS_OK;
}

/* Does s[0..n) (n >= 1) form a proper prefix of one valid UTF-8 character? Second-byte ranges
 * exclude overlongs (E0, F0), surrogates (ED) and code points past U+10FFFF (F4). */
static int incomplete_prefix(const uint8_t *s, uint32_t n)
{
    uint8_t lo, hi;
    uint32_t len = gs_utf8_lead(s[0], &lo, &hi), k;
    if (len == 0 || n >= len) return 0;
    for (k = 1; k < n; k++) {
        uint8_t b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80u || b > 0xBFu)) return 0;
    }
    return 1;
}

/* How many trailing bytes of s[0..n) to hold: the incomplete character that starts within the
 * last 3 bytes, if any. */
static uint32_t held_tail(const uint8_t *s, size_t n)
{
    uint32_t k;
    for (k = 1; k <= 3u && k <= n; k++) {
        uint8_t b = s[n - k];
        if (b < 0x80u || b >= 0xC0u) { /* not a continuation byte: the only possible start */
            return incomplete_prefix(s + n - k, k) ? k : 0u;
        }
    }
    return 0;
}

gs_status gs_decode(gs_decoder *decoder, const gs_model *model, uint32_t id, uint8_t *out,
                    size_t max_out, size_t *n_out)
{
    const uint8_t *bytes = NULL;
    uint32_t n_tok = 0, keep, i;
    size_t total, emit;
    if (decoder == NULL || model == NULL || n_out == NULL) return GS_ERR_NULL;
    if (model->data == NULL) return GS_ERR_NULL;
    if (id >= model->config.vocab_size) return GS_ERR_TOKEN;
    if (id < model->tokenizer.n_tokens) bytes = gs_tok_bytes(&model->tokenizer, id, &n_tok);
    total = (size_t)decoder->n_held + n_tok; /* padding ids [Vt, V) have no bytes */
    if (total > max_out || (out == NULL && total > 0)) return GS_ERR_BUFFER;
    for (i = 0; i < decoder->n_held; i++) out[i] = decoder->held[i];
    for (i = 0; i < n_tok; i++) out[decoder->n_held + i] = bytes[i];
    keep = held_tail(out, total);
    emit = total - keep;
    for (i = 0; i < keep; i++) decoder->held[i] = out[emit + i];
    decoder->n_held = (uint8_t)keep;
    *n_out = emit;
    return GS_OK;
}

gs_status gs_decode_flush(gs_decoder *decoder, uint8_t *out, size_t max_out, size_t *n_out)
{
    uint32_t i;
    if (decoder == NULL || n_out == NULL) return GS_ERR_NULL;
    if (decoder->n_held > max_out || (out == NULL && decoder->n_held > 0)) return GS_ERR_BUFFER;
    for (i = 0; i < decoder->n_held; i++) out[i] = decoder->held[i];
    *n_out = decoder->n_held;
    decoder->n_held = 0;
    return GS_OK;
}
