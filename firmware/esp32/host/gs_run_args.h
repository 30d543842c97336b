/* gs_run_args.h: command-line options of gs-run (see gs_run.c for the usage text). */
#ifndef GS_RUN_ARGS_H
#define GS_RUN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#define GS_RUN_MAX_IDS 4096 /* --ids list length */

typedef struct {
    const char *model;        /* the .gsm path */
    const char *prompt;       /* --prompt TEXT (may be empty) */
    const char *prompt_file;  /* --prompt-file PATH: prompt bytes from a file (any bytes) */
    uint32_t ids[GS_RUN_MAX_IDS]; /* --ids 1,2,3: feed these ids instead of encoding a prompt */
    size_t n_ids;
    int have_ids;
    uint32_t tokens;          /* --tokens N: tokens to generate */
    uint64_t seed;            /* --seed S */
    float temperature;        /* --temperature T; --greedy sets 0 */
    uint32_t top_k;           /* --top-k K, 0 = all */
    const char *screen;       /* --screen OUT.png */
    const char *dump_logits;  /* --dump-logits PATH: float32 logits of every fed token */
    int stats;                /* --stats: tokens/s and weight bytes per token on stderr */
    int json;                 /* --json: one JSON object on stdout instead of the text */
    int encode_only;          /* --encode-only: print the prompt ids, generate nothing */
    int quiet;                /* --quiet: no text on stdout (for --bench runs) */
} gs_run_options;

/* Parse argv into opt. Returns 0 on success; otherwise prints the problem in one line to stderr
 * and returns 2 (the exit status). --help prints the usage to stdout and returns 1. */
int gs_run_parse_args(int argc, char **argv, gs_run_options *opt);

#endif /* GS_RUN_ARGS_H */
