/* gs_fuzz_driver.c: `gs-fuzz`, a deterministic mutation fuzzer for the artifact loader that any C
 * compiler builds (the test suite runs it under GCC's ASan + UBSan; gs-fuzz-libfuzzer is the
 * coverage-guided harness for long runs).
 *
 *   gs-fuzz [--iterations N] [--seed S] [--max-seconds T] SEED.gsm [SEED2.gsm ...]
 *
 * Each iteration copies a seed artifact, applies 1-4 mutations aimed mostly at the structured
 * part of the file (header, tokenizer section, tensor table): bit flips, interesting byte and
 * u32 values, truncation, appended or deleted bytes, swapped words; half of the time it then
 * sets the header's file_bytes to the new size, and the target re-opens a CRC-fixed copy, so the
 * checks after the CRC (steps 8-13 of FORMAT.md section 6) see the mutations. It prints how often
 * each status came back, then "gs-fuzz: ok". Same seed, same inputs: a failure reproduces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gs_engine.h"
#include "gs_fuzz_target.h"
#include "gs_mapfile.h"

#define MAX_SEEDS 16

typedef struct {
    uint64_t s;
} rng64;

static uint64_t next(rng64 *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(rng64 *r, size_t n)
{
    return n == 0 ? 0 : (size_t)(next(r) % n);
}

/* Bytes before the payload (header + tokenizer + table), where mutations matter most. */
static size_t structure_end(const uint8_t *buf, size_t n)
{
    size_t end = n < 128 ? n : (size_t)gs_fuzz_rd_u32(buf + 64); /* payload_offset */
    return end > n || end == 0 ? (n < 4096 ? n : 4096) : end;
}

static uint32_t interesting_u32(rng64 *r, uint32_t old, size_t n)
{
    static const uint32_t values[] = {0, 1, 2, 3, 4, 15, 16, 17, 127, 128, 255, 256, 4096,
                                      0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu};
    switch (below(r, 4)) {
    case 0: return values[below(r, sizeof(values) / sizeof(values[0]))];
    case 1: return old + 1u;
    case 2: return old - 1u;
    default: return (uint32_t)n + (uint32_t)below(r, 9) - 4u;
    }
}

/* One mutation of buf[0..*n) (capacity cap). */
static void mutate(rng64 *r, uint8_t *buf, size_t *n, size_t cap)
{
    size_t head = structure_end(buf, *n);
    size_t at = below(r, 10) < 8 ? below(r, head) : below(r, *n);
    switch (below(r, 8)) {
    case 0: if (*n > 0) buf[at] ^= (uint8_t)(1u << below(r, 8)); break;
    case 1: if (*n > 0) buf[at] = (uint8_t)(below(r, 2) ? 0xFF : below(r, 256)); break;
    case 2:
    case 3:
        at &= ~(size_t)3;
        if (at + 4 <= *n) {
            gs_fuzz_wr_u32(buf + at, interesting_u32(r, gs_fuzz_rd_u32(buf + at), *n));
        }
        break;
    case 4: *n = below(r, 5) == 0 ? below(r, 160) : below(r, *n + 1); break;
    case 5: {
        size_t k = 1 + below(r, 64);
        if (*n + k <= cap) {
            memset(buf + *n, (int)below(r, 256), k);
            *n += k;
        }
        break;
    }
    case 6: { /* delete bytes in the middle */
        size_t k = 1 + below(r, 16);
        if (at + k <= *n) {
            memmove(buf + at, buf + at + k, *n - at - k);
            *n -= k;
        }
        break;
    }
    default: { /* swap two aligned words of the structured part */
        size_t a = below(r, head) & ~(size_t)3, b = below(r, head) & ~(size_t)3;
        if (a + 4 <= *n && b + 4 <= *n) {
            uint32_t t = gs_fuzz_rd_u32(buf + a);
            gs_fuzz_wr_u32(buf + a, gs_fuzz_rd_u32(buf + b));
            gs_fuzz_wr_u32(buf + b, t);
        }
        break;
    }
    }
}

int main(int argc, char **argv)
{
    gs_mapped_file seeds[MAX_SEEDS];
    size_t n_seeds = 0, cap = 0, i;
    unsigned long iterations = 2000, it, max_seconds = 0;
    rng64 r = {1};
    uint8_t *buf;
    time_t start = time(NULL);
    int a;
    for (a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--iterations") == 0 && a + 1 < argc) {
            iterations = strtoul(argv[++a], NULL, 10);
        } else if (strcmp(argv[a], "--seed") == 0 && a + 1 < argc) {
            r.s = strtoull(argv[++a], NULL, 10);
        } else if (strcmp(argv[a], "--max-seconds") == 0 && a + 1 < argc) {
            max_seconds = strtoul(argv[++a], NULL, 10);
        } else if (n_seeds < MAX_SEEDS && gs_map_file(argv[a], &seeds[n_seeds]) == 0) {
            if (seeds[n_seeds].n_bytes > cap) cap = seeds[n_seeds].n_bytes;
            n_seeds++;
        } else {
            fprintf(stderr, "gs-fuzz: cannot use argument %s\nusage: gs-fuzz [--iterations N] "
                    "[--seed S] [--max-seconds T] SEED.gsm ...\n", argv[a]);
            return 2;
        }
    }
    if (n_seeds == 0) {
        fprintf(stderr, "gs-fuzz: give at least one seed artifact\n");
        return 2;
    }
    cap += 1024;
    buf = (uint8_t *)malloc(cap);
    if (buf == NULL) return 1;
    for (it = 0; it < iterations; it++) {
        const gs_mapped_file *seed = &seeds[below(&r, n_seeds)];
        size_t n = seed->n_bytes, k, n_mut = 1 + below(&r, 4);
        uint8_t *input;
        memcpy(buf, seed->data, n);
        for (k = 0; k < n_mut; k++) mutate(&r, buf, &n, cap);
        /* half of the time, keep file_bytes in step with the new size */
        if (n >= 128 && below(&r, 2)) gs_fuzz_wr_u32(buf + 12, (uint32_t)n);
        /* an exact-size heap copy, so ASan sees any read past the end */
        input = (uint8_t *)malloc(n > 0 ? n : 1);
        if (input == NULL) return 1;
        memcpy(input, buf, n);
        LLVMFuzzerTestOneInput(input, n);
        free(input);
        if (max_seconds > 0 && (unsigned long)(time(NULL) - start) >= max_seconds) {
            it++;
            break;
        }
    }
    printf("gs-fuzz: %lu iterations\n", it);
    for (i = 0; i < GS_FUZZ_N_STATUS; i++) {
        if (gs_fuzz_status_counts[i] > 0) {
            printf("%s %lu\n", gs_status_name((gs_status)i), gs_fuzz_status_counts[i]);
        }
    }
    printf("gs-fuzz: ok\n");
    free(buf);
    for (i = 0; i < n_seeds; i++) gs_unmap_file(&seeds[i]);
    return 0;
}
