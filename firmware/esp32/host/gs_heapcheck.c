/* gs_heapcheck.c: `gs-heapcheck MODEL.gsm [TOKENS]`, proof that the engine never allocates.
 *
 * This program defines malloc, calloc, realloc, free, posix_memalign, aligned_alloc and
 * memalign itself (forwarding to glibc's __libc_* functions), so every allocation in the
 * process goes through a counter. The artifact is mapped and the arena allocated first; then,
 * with counting on, it runs gs_open, gs_attach_arena, gs_encode, TOKENS x (gs_forward,
 * gs_sample, gs_decode) past block_size (so the window slides) and gs_decode_flush. No stdio
 * inside the window (printf may allocate). Prints the count; exit status 0 only when it is 0.
 * `--control` as third argument also calls malloc and free inside the window (the count must
 * then be 2): the test suite's proof that the counter counts.
 * Plain builds only: a sanitizer runtime interposes the same functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_engine.h"
#include "gs_mapfile.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);

static volatile int counting;
static volatile unsigned long allocations;

static void count(void)
{
    if (counting) allocations++;
}

void *malloc(size_t n) { count(); return __libc_malloc(n); }
void *calloc(size_t n, size_t size) { count(); return __libc_calloc(n, size); }
void *realloc(void *p, size_t n) { count(); return __libc_realloc(p, n); }
void free(void *p) { if (p != NULL) count(); __libc_free(p); }
void *memalign(size_t align, size_t n);
void *memalign(size_t align, size_t n) { count(); return __libc_memalign(align, n); }
void *aligned_alloc(size_t align, size_t n);
void *aligned_alloc(size_t align, size_t n) { count(); return __libc_memalign(align, n); }
int posix_memalign(void **p, size_t align, size_t n)
{
    count();
    *p = __libc_memalign(align, n);
    return *p == NULL ? 12 /* ENOMEM */ : 0;
}

/* The engine calls under test; returns the first failing status. */
static gs_status exercise(const gs_mapped_file *file, void *arena, size_t arena_bytes,
                          unsigned long tokens)
{
    static gs_model m;
    static uint32_t ids[64];
    static uint8_t text[32], piece[4096];
    const uint8_t *bytes;
    const float *logits = NULL;
    size_t n_text = 0, n_ids = 0, n, i, k;
    uint32_t tok = 0;
    gs_decoder dec;
    gs_rng rng;
    gs_status st = gs_open(&m, file->data, file->n_bytes);
    if (st == GS_OK) st = gs_attach_arena(&m, arena, arena_bytes);
    for (i = 0; st == GS_OK && i < 2; i++) { /* prompt: the bytes of tokens 0 and 1 */
        if (gs_token_bytes(&m, (uint32_t)i % m.tokenizer.n_tokens, &bytes, &n) != GS_OK) break;
        for (k = 0; k < n && n_text < sizeof(text); k++) text[n_text++] = bytes[k];
    }
    if (st == GS_OK) st = gs_encode(&m, text, n_text, ids, 64, &n_ids);
    gs_rng_seed(&rng, 7);
    gs_decoder_init(&dec);
    for (i = 0; st == GS_OK && i < n_ids; i++) st = gs_forward(&m, ids[i], &logits);
    for (i = 0; st == GS_OK && i < tokens; i++) {
        st = gs_forward(&m, tok, &logits);
        if (st == GS_OK) st = gs_sample(&m, logits, i % 2 ? 0.0f : 0.8f, 40, &rng, &tok);
        if (st == GS_OK) st = gs_decode(&dec, &m, tok, piece, sizeof(piece), &n);
    }
    if (st == GS_OK) st = gs_decode_flush(&dec, piece, sizeof(piece), &n);
    return st;
}

int main(int argc, char **argv)
{
    gs_mapped_file file;
    gs_model probe;
    void *arena = NULL;
    size_t arena_bytes;
    unsigned long tokens = argc > 2 ? strtoul(argv[2], NULL, 10) : 80;
    int control = argc > 3 && strcmp(argv[3], "--control") == 0;
    gs_status st;
    if (argc < 2 || gs_map_file(argv[1], &file) != 0) {
        fprintf(stderr, "usage: gs-heapcheck MODEL.gsm [TOKENS]\n");
        return 2;
    }
    st = gs_open(&probe, file.data, file.n_bytes); /* for the arena size, outside the window */
    if (st != GS_OK) {
        fprintf(stderr, "gs-heapcheck: %s: %s\n", argv[1], gs_status_name(st));
        return 2;
    }
    arena_bytes = probe.config.arena_bytes;
    if (posix_memalign(&arena, 16, arena_bytes) != 0) return 1;
    allocations = 0;
    counting = 1;
    st = exercise(&file, arena, arena_bytes, tokens);
    if (control) free(malloc(16));
    counting = 0;
    printf("gs-heapcheck: %s, %lu tokens, %lu allocations\n", gs_status_name(st), tokens,
           allocations);
    free(arena);
    gs_unmap_file(&file);
    return st == GS_OK && allocations == 0 ? 0 : 1;
}
