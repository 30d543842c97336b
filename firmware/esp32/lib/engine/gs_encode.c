/* gs_encode.c: prompt text -> ids, FORMAT.md section 10; the same ids as tiktoken's
 * encode_ordinary for ASCII text.
 *
 * Char tokenizer: one id per UTF-8 code point (binary search of sorted_ids).
 * BPE + PATTERN_GPT2: split into chunks with GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * evaluated by hand with the classes of section 10 (ASCII letters and every byte >= 0x80 are L,
 * ASCII digits N, \t \n \v \f \r and space \s, the rest punctuation); then a chunk that is one
 * ordinary token is emitted whole, otherwise its bytes are merged by tiktoken's rule (lowest
 * merged id first, leftmost on ties) with the pairs table. */
#include "gs_internal.h"

enum { CL_LETTER, CL_DIGIT, CL_SPACE, CL_PUNCT };

/* Section 10's classes. A byte >= 0x80 (a UTF-8 lead or continuation byte, or an invalid one)
 * is a letter, so multi-byte code points never split and need no decoding here. */
static int byte_class(uint8_t b)
{
    if (b >= 0x80u) return CL_LETTER;
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return CL_LETTER;
    if (b >= '0' && b <= '9') return CL_DIGIT;
    if (b == ' ' || (b >= '\t' && b <= '\r')) return CL_SPACE;
    return CL_PUNCT;
}

static size_t run_of(const uint8_t *t, size_t n, size_t i, int cls)
{
    while (i < n && byte_class(t[i]) == cls) i++;
    return i;
}

/* Length of the contraction ('s 't 're 've 'm 'll 'd, lower case as in GPT-2) at i, or 0. */
static size_t contraction(const uint8_t *t, size_t n, size_t i)
{
    uint8_t a, b;
    if (t[i] != '\'' || i + 1u >= n) return 0;
    a = t[i + 1u];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2u >= n) return 0;
    b = t[i + 2u];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* End of the chunk that starts at i (< n): the first alternative of the pattern that matches. */
static size_t chunk_end(const uint8_t *t, size_t n, size_t i)
{
    size_t len = contraction(t, n, i), end;
    int cls = byte_class(t[i]);
    if (len != 0) return i + len;
    if (t[i] == ' ' && i + 1u < n && byte_class(t[i + 1u]) != CL_SPACE) {
        return run_of(t, n, i + 1u, byte_class(t[i + 1u])); /* " ?\p{L}+" and its N, P twins */
    }
    if (cls != CL_SPACE) return run_of(t, n, i, cls);
    end = run_of(t, n, i, CL_SPACE);
    /* "\s+(?!\S)": at the end of text the whole run; before a non-space it backs off one
     * byte (that space may then start " ?\p{L}+"); a single space falls through to "\s+" */
    if (end == n || end - i == 1u) return end;
    return end - 1u;
}

/* Merge the chunk's tokens in ids[0..*n) in place by the pairs table until no pair merges. */
static void merge_pairs(const gs_tokenizer *tok, uint32_t *ids, size_t *n)
{
    for (;;) {
        size_t i, best_at = 0;
        uint32_t best = GS_NO_TOKEN;
        for (i = 0; i + 1u < *n; i++) {
            uint32_t lo = 0, hi = tok->n_pairs; /* binary search (left, right) */
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2u;
                uint32_t l = gs_u32_at(tok->pairs, 3u * (size_t)mid);
                uint32_t r = gs_u32_at(tok->pairs, 3u * (size_t)mid + 1u);
                if (l == ids[i] && r == ids[i + 1u]) {
                    uint32_t merged = gs_u32_at(tok->pairs, 3u * (size_t)mid + 2u);
                    if (merged < best) { /* strict: the leftmost wins ties */
                        best = merged;
                        best_at = i;
                    }
                    break;
                }
                if (l < ids[i] || (l == ids[i] && r < ids[i + 1u])) {
                    lo = mid + 1u;
                } else {
                    hi = mid;
                }
            }
        }
        if (best == GS_NO_TOKEN) return;
        ids[best_at] = best;
        for (i = best_at + 1u; i + 1u < *n; i++) ids[i] = ids[i + 1u];
        (*n)--;
    }
}

static gs_status encode_gpt2(const gs_tokenizer *tok, const uint8_t *t, size_t n, uint32_t *ids,
                             size_t max_ids, size_t *n_ids)
{
    size_t i = 0, out = 0;
    while (i < n) {
        size_t end = chunk_end(t, n, i), k, m = end - i;
        uint32_t whole = gs_tok_lookup(tok, t + i, m);
        if (whole != GS_NO_TOKEN) {
            if (out >= max_ids) return GS_ERR_BUFFER;
            ids[out++] = whole;
        } else {
            if (max_ids - out < m) return GS_ERR_BUFFER; /* scratch: one slot per byte */
            for (k = 0; k < m; k++) ids[out + k] = gs_u32_at(tok->byte_to_token, t[i + k]);
            merge_pairs(tok, ids + out, &m);
            out += m;
        }
        i = end;
    }
    *n_ids = out;
    return GS_OK;
}

/* Bytes of the UTF-8 code point at t[i]: 2-4 for a well-formed sequence (no overlongs, no
 * surrogates, <= U+10FFFF), else 1 (an invalid byte is looked up alone, and fails). */
static size_t utf8_len(const uint8_t *t, size_t n, size_t i)
{
    uint8_t lo, hi; /* allowed range of the second byte */
    size_t len = gs_utf8_lead(t[i], &lo, &hi), k;
    if (len == 0 || n - i < len) return 1; /* ASCII, or not a well-formed character */
    if (t[i + 1u] < lo || t[i + 1u] > hi) return 1;
    for (k = 2; k < len; k++) {
        if (t[i + k] < 0x80u || t[i + k] > 0xBFu) return 1;
    }
    return len;
}

static gs_status encode_char(const gs_tokenizer *tok, const uint8_t *t, size_t n, uint32_t *ids,
                             size_t max_ids, size_t *n_ids)
{
    size_t i = 0, out = 0;
    while (i < n) {
        size_t len = utf8_len(t, n, i);
        uint32_t id = gs_tok_lookup(tok, t + i, len);
        if (id == GS_NO_TOKEN) return GS_ERR_UNKNOWN_CHAR;
        if (out >= max_ids) return GS_ERR_BUFFER;
        ids[out++] = id;
        i += len;
    }
    *n_ids = out;
    return GS_OK;
}

gs_status gs_encode(const gs_model *model, const uint8_t *text, size_t n_bytes, uint32_t *ids,
                    size_t max_ids, size_t *n_ids)
{
    const gs_tokenizer *tok;
    if (model == NULL || n_ids == NULL || (text == NULL && n_bytes > 0)) return GS_ERR_NULL;
    if (ids == NULL && max_ids > 0) return GS_ERR_NULL;
    if (model->data == NULL) return GS_ERR_NULL;
    tok = &model->tokenizer;
    *n_ids = 0;
    if (tok->kind == GS_TOK_KIND_CHAR) return encode_char(tok, text, n_bytes, ids, max_ids, n_ids);
    if (tok->pattern != GS_PATTERN_GPT2) return GS_ERR_UNSUPPORTED;
    return encode_gpt2(tok, text, n_bytes, ids, max_ids, n_ids);
}
