/* gs_tokenizer.c: the tokenizer section of FORMAT.md section 3, read in place. Parses and checks
 * it (step 10 of section 6) and answers the two look-ups encoding needs: a token's bytes and the
 * ordinary id of a byte string (binary search of sorted_ids).
 *
 * The checks make the derived tables exactly what gptstack.quant derives from the tokens'
 * bytes (byte_to_token, sorted_ids, the complete sorted pairs list), without any scratch memory:
 * sorted_ids strictly increasing + every entry ordinary + the right count = the ordinary ids in
 * order; pairs strictly sorted, each a true split, and as many as the splits counted = all of
 * them. */
#include "gs_internal.h"

#define HEAD_BYTES 32u /* kind, pattern, n_tokens, n_pairs, n_special, blob_bytes, reserved[2] */

/* memcmp order with a proper prefix first: <0, 0, >0 (the order of sorted_ids). */
static int bytes_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    size_t i, n = na < nb ? na : nb;
    for (i = 0; i < n; i++) {
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    }
    return na < nb ? -1 : (na > nb ? 1 : 0);
}

const uint8_t *gs_tok_bytes(const gs_tokenizer *tok, uint32_t id, uint32_t *n_bytes)
{
    uint32_t begin = gs_u32_at(tok->token_offsets, id);
    *n_bytes = gs_u32_at(tok->token_offsets, (size_t)id + 1u) - begin;
    return tok->blob + begin;
}

uint32_t gs_tok_lookup(const gs_tokenizer *tok, const uint8_t *key, size_t n)
{
    uint32_t lo = 0, hi = tok->n_tokens - tok->n_special; /* search [lo, hi) */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2u;
        uint32_t id = gs_u32_at(tok->sorted_ids, mid);
        uint32_t len;
        const uint8_t *bytes = gs_tok_bytes(tok, id, &len);
        int c = bytes_cmp(bytes, len, key, n);
        if (c == 0) return id;
        if (c < 0) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return GS_NO_TOKEN;
}

static int is_special(const gs_tokenizer *tok, uint32_t id)
{
    uint32_t lo = 0, hi = tok->n_special;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2u;
        uint32_t s = gs_u32_at(tok->special_ids, mid);
        if (s == id) return 1;
        if (s < id) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return 0;
}

static int is_ordinary(const gs_tokenizer *tok, uint32_t id)
{
    return id < tok->n_tokens && !is_special(tok, id);
}

/* token_offsets: [0] = 0, every token at least one byte, [Vt] = blob_bytes. */
static gs_status check_offsets(const gs_tokenizer *tok)
{
    uint32_t i;
    if (gs_u32_at(tok->token_offsets, 0) != 0) return GS_ERR_TOKENIZER;
    for (i = 0; i < tok->n_tokens; i++) {
        if (gs_u32_at(tok->token_offsets, i + 1u) <= gs_u32_at(tok->token_offsets, i)) {
            return GS_ERR_TOKENIZER;
        }
    }
    if (gs_u32_at(tok->token_offsets, tok->n_tokens) != tok->blob_bytes) return GS_ERR_TOKENIZER;
    return GS_OK;
}

static gs_status check_specials(const gs_tokenizer *tok)
{
    uint32_t i;
    for (i = 0; i < tok->n_special; i++) {
        uint32_t id = gs_u32_at(tok->special_ids, i);
        if (id >= tok->n_tokens) return GS_ERR_TOKENIZER;
        if (i > 0 && id <= gs_u32_at(tok->special_ids, i - 1u)) return GS_ERR_TOKENIZER;
    }
    return GS_OK;
}

/* BPE: the ordinary one-byte token of every byte value; char: all NO_TOKEN. */
static gs_status check_byte_to_token(const gs_tokenizer *tok)
{
    uint32_t b;
    for (b = 0; b < 256u; b++) {
        uint32_t id = gs_u32_at(tok->byte_to_token, b);
        uint32_t len;
        const uint8_t *bytes;
        if (tok->kind == GS_TOK_KIND_CHAR) {
            if (id != GS_NO_TOKEN) return GS_ERR_TOKENIZER;
            continue;
        }
        if (!is_ordinary(tok, id)) return GS_ERR_TOKENIZER;
        bytes = gs_tok_bytes(tok, id, &len);
        if (len != 1u || bytes[0] != b) return GS_ERR_TOKENIZER;
    }
    return GS_OK;
}

static gs_status check_sorted_ids(const gs_tokenizer *tok)
{
    uint32_t i, n = tok->n_tokens - tok->n_special;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (i = 0; i < n; i++) {
        uint32_t id = gs_u32_at(tok->sorted_ids, i), len;
        const uint8_t *bytes;
        if (!is_ordinary(tok, id)) return GS_ERR_TOKENIZER;
        bytes = gs_tok_bytes(tok, id, &len);
        if (prev != NULL && bytes_cmp(prev, prev_len, bytes, len) >= 0) return GS_ERR_TOKENIZER;
        prev = bytes;
        prev_len = len;
    }
    return GS_OK;
}

/* bytes(left) + bytes(right) == bytes(merged) */
static int is_split(const gs_tokenizer *tok, uint32_t left, uint32_t right, uint32_t merged)
{
    uint32_t nl, nr, nm;
    const uint8_t *l = gs_tok_bytes(tok, left, &nl);
    const uint8_t *r = gs_tok_bytes(tok, right, &nr);
    const uint8_t *m = gs_tok_bytes(tok, merged, &nm);
    return (uint64_t)nl + nr == nm && bytes_cmp(l, nl, m, nl) == 0 &&
           bytes_cmp(r, nr, m + nl, nr) == 0;
}

/* How many (m, cut) splits of ordinary BPE tokens into two ordinary tokens exist. */
static uint64_t count_splits(const gs_tokenizer *tok)
{
    uint32_t i, n = tok->n_tokens - tok->n_special;
    uint64_t count = 0;
    if (tok->kind != GS_TOK_KIND_BPE) return 0; /* section 3: empty for char */
    for (i = 0; i < n; i++) {
        uint32_t len, cut;
        const uint8_t *bytes = gs_tok_bytes(tok, gs_u32_at(tok->sorted_ids, i), &len);
        for (cut = 1; cut < len; cut++) {
            if (gs_tok_lookup(tok, bytes, cut) != GS_NO_TOKEN &&
                gs_tok_lookup(tok, bytes + cut, len - cut) != GS_NO_TOKEN) {
                count++;
            }
        }
    }
    return count;
}

static gs_status check_pairs(const gs_tokenizer *tok)
{
    uint32_t i;
    for (i = 0; i < tok->n_pairs; i++) {
        uint32_t left = gs_u32_at(tok->pairs, 3u * (size_t)i);
        uint32_t right = gs_u32_at(tok->pairs, 3u * (size_t)i + 1u);
        uint32_t merged = gs_u32_at(tok->pairs, 3u * (size_t)i + 2u);
        if (!is_ordinary(tok, left) || !is_ordinary(tok, right) || !is_ordinary(tok, merged)) {
            return GS_ERR_TOKENIZER;
        }
        if (i > 0) { /* strictly sorted by (left, right): no duplicates */
            uint32_t pl = gs_u32_at(tok->pairs, 3u * (size_t)i - 3u);
            uint32_t pr = gs_u32_at(tok->pairs, 3u * (size_t)i - 2u);
            if (left < pl || (left == pl && right <= pr)) return GS_ERR_TOKENIZER;
        }
        if (!is_split(tok, left, right, merged)) return GS_ERR_TOKENIZER;
    }
    if (count_splits(tok) != tok->n_pairs) return GS_ERR_TOKENIZER;
    return GS_OK;
}

/* Zero padding after the blob, up to a multiple of 4 from the section start. */
static gs_status check_padding(const uint8_t *from, const uint8_t *to)
{
    for (; from < to; from++) {
        if (*from != 0) return GS_ERR_TOKENIZER;
    }
    return GS_OK;
}

/* Section layout from the counts (all checked against n_bytes first). */
static gs_status lay_out(gs_tokenizer *tok, const uint8_t *s, uint32_t n_bytes)
{
    uint64_t n_ordinary = (uint64_t)tok->n_tokens - tok->n_special;
    uint64_t blob_at = HEAD_BYTES + 4u * ((uint64_t)tok->n_tokens + 1u);
    uint64_t tables_at = (blob_at + tok->blob_bytes + 3u) / 4u * 4u;
    uint64_t sorted_at = tables_at + 4u * 256u;
    uint64_t pairs_at = sorted_at + 4u * n_ordinary;
    uint64_t special_at = pairs_at + 12u * (uint64_t)tok->n_pairs;
    if (special_at + 4u * (uint64_t)tok->n_special != n_bytes) return GS_ERR_TOKENIZER;
    tok->token_offsets = s + HEAD_BYTES;
    tok->blob = s + blob_at;
    tok->byte_to_token = s + tables_at;
    tok->sorted_ids = s + sorted_at;
    tok->pairs = s + pairs_at;
    tok->special_ids = s + special_at;
    return check_padding(tok->blob + tok->blob_bytes, tok->byte_to_token);
}

/* kind, pattern and their combination, reserved words, counts. */
static gs_status check_head(const gs_tokenizer *tok, const uint8_t *s, uint32_t vocab_size)
{
    if (tok->kind != GS_TOK_KIND_CHAR && tok->kind != GS_TOK_KIND_BPE) return GS_ERR_TOKENIZER;
    if (tok->kind == GS_TOK_KIND_CHAR && tok->pattern != GS_PATTERN_NONE) return GS_ERR_TOKENIZER;
    if (tok->kind == GS_TOK_KIND_BPE && tok->pattern != GS_PATTERN_GPT2 &&
        tok->pattern != GS_PATTERN_GPT4) {
        return GS_ERR_TOKENIZER;
    }
    if (gs_u32_at(s, 6) != 0 || gs_u32_at(s, 7) != 0) return GS_ERR_TOKENIZER;
    if (tok->n_tokens < 1u || tok->n_tokens > vocab_size) return GS_ERR_TOKENIZER;
    if (tok->n_special > tok->n_tokens) return GS_ERR_TOKENIZER;
    return GS_OK;
}

gs_status gs_tokenizer_parse(gs_tokenizer *tok, const uint8_t *s, uint32_t n_bytes,
                             uint32_t vocab_size)
{
    gs_status st;
    if (n_bytes < HEAD_BYTES) return GS_ERR_TOKENIZER;
    tok->kind = gs_u32_at(s, 0);
    tok->pattern = gs_u32_at(s, 1);
    tok->n_tokens = gs_u32_at(s, 2);
    tok->n_pairs = gs_u32_at(s, 3);
    tok->n_special = gs_u32_at(s, 4);
    tok->blob_bytes = gs_u32_at(s, 5);
    st = check_head(tok, s, vocab_size);
    if (st == GS_OK) st = lay_out(tok, s, n_bytes);
    if (st == GS_OK) st = check_offsets(tok);
    if (st == GS_OK) st = check_specials(tok);
    if (st == GS_OK) st = check_byte_to_token(tok);
    if (st == GS_OK) st = check_sorted_ids(tok);
    if (st == GS_OK) st = check_pairs(tok);
    return st;
}
