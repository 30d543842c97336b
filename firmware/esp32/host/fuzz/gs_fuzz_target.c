/* gs_fuzz_target.c: fuzz target for the artifact loader (gs_open, gs_peek_header) and, when a
 * mutated file still loads, the run-time API on it.
 *
 * Each input is opened twice: as given (most mutations stop at the CRC, step 7) and as a copy
 * whose CRC field is recomputed, so that mutations reach steps 8-13 and the engine itself. A
 * loaded model gets an arena, a few tokens through gs_forward (past block_size once, so the
 * window slides), greedy and top-k sampling, prompt encoding of bytes taken from the input, and
 * streaming decode. Sanitizers (ASan + UBSan) turn any out-of-bounds access or undefined
 * behaviour into a crash.
 *
 *   libFuzzer: gs-fuzz-libfuzzer CORPUS_DIR -max_total_time=600   (GS_VARIANT=fuzz, clang)
 *   bounded:   gs-fuzz --iterations 3000 SEED.gsm ...              (any compiler, see driver) */
#include "gs_fuzz_target.h"

#include <stdlib.h>
#include <string.h>

#include "gs_engine.h"

unsigned long gs_fuzz_status_counts[GS_FUZZ_N_STATUS];

/* Models whose arena or weights would make one input slow are only opened, not run. */
#define MAX_ARENA_BYTES (4u << 20)
#define MAX_RUN_FILE_BYTES (4u << 20)

static void exercise(gs_model *m, const uint8_t *data, size_t size)
{
    void *arena;
    const float *logits = NULL;
    uint32_t ids[256], tok = 0, i, n_feed;
    size_t n_ids = 0, n_text = size < 200 ? size : 200, n;
    uint8_t piece[4096];
    gs_decoder dec;
    gs_rng rng;
    if (m->config.arena_bytes > MAX_ARENA_BYTES || size > MAX_RUN_FILE_BYTES) return;
    if (posix_memalign(&arena, 16, m->config.arena_bytes + 16u) != 0) return;
    if (gs_attach_arena(m, arena, m->config.arena_bytes) == GS_OK) {
        /* prompt encoding of the input's last bytes (any bytes, any status) */
        (void)gs_encode(m, data + size - n_text, n_text, ids, sizeof(ids) / sizeof(ids[0]), &n_ids);
        n_feed = m->config.block_size + 2u < 40u ? m->config.block_size + 2u : 40u;
        gs_rng_seed(&rng, size);
        gs_decoder_init(&dec);
        for (i = 0; i < n_feed; i++) {
            uint32_t in = i < n_ids ? ids[i] : tok;
            if (gs_forward(m, in % m->config.vocab_size, &logits) != GS_OK) break;
            (void)gs_sample(m, logits, i % 2u ? 0.0f : 0.9f, i % 3u, &rng, &tok);
            if (gs_decode(&dec, m, tok, piece, sizeof(piece), &n) != GS_OK) break;
        }
        (void)gs_decode_flush(&dec, piece, sizeof(piece), &n);
        (void)gs_forward(m, m->config.vocab_size, &logits); /* GS_ERR_TOKEN */
    }
    free(arena);
}

/* gs_peek_header reads the header alone; whatever gs_open loads, it must accept with the same
 * file size and config (a disagreement aborts: the fuzzer reports it as a crash). */
static void check_peek(const gs_model *m, const uint8_t *data, size_t size)
{
    gs_config c;
    uint32_t file_bytes = 0;
    if (gs_peek_header(data, size, &file_bytes, &c) != GS_OK || file_bytes != size ||
        c.vocab_size != m->config.vocab_size || c.block_size != m->config.block_size ||
        c.n_layer != m->config.n_layer || c.n_embd != m->config.n_embd ||
        c.arena_bytes != m->config.arena_bytes) {
        abort();
    }
}

static void open_and_run(const uint8_t *data, size_t size)
{
    gs_model m;
    uint32_t file_bytes;
    gs_status st = gs_open(&m, data, size);
    gs_fuzz_status_counts[(unsigned)st % GS_FUZZ_N_STATUS]++;
    (void)gs_peek_header(data, size, &file_bytes, NULL); /* any bytes: a status, never a crash */
    if (st == GS_OK) {
        check_peek(&m, data, size);
        exercise(&m, data, size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy;
    uint32_t file_bytes;
    open_and_run(data, size);
    if (size < GS_HEADER_BYTES) return 0;
    file_bytes = gs_fuzz_rd_u32(data + 12);
    if (file_bytes != size) return 0; /* the CRC sits at file_bytes - 4 only when they agree */
    copy = (uint8_t *)malloc(size);
    if (copy == NULL) return 0;
    memcpy(copy, data, size);
    gs_fuzz_wr_u32(copy + size - 4u, gs_crc32(copy, size - 4u));
    open_and_run(copy, size);
    free(copy);
    return 0;
}
