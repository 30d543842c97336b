/* gs_run_args.c: gs-run's argument parser (strict: unknown options and bad numbers are errors
 * that name the option, the value and the accepted range). */
#include "gs_run_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sampling defaults are gptstack.tools.defaults.SAMPLING's (test_gs_run.py parses this text
 * and compares), so `gs-run` and `gptstack firmware run` sample alike. */
static const char usage_text[] =
    "usage: gs-run MODEL.gsm [--prompt TEXT | --prompt-file PATH | --ids 1,2,3] [--tokens N]\n"
    "              [--seed S] [--temperature T] [--top-k K] [--greedy] [--screen OUT.png]\n"
    "              [--stats] [--quiet] [--json] [--dump-logits PATH] [--encode-only]\n"
    "Generates N tokens from the prompt with the gptstack C engine and prints the text.\n"
    "  --tokens N        tokens to generate, 0 .. 1000000 (default 64)\n"
    "  --seed S          PCG32 seed, 0 .. 2^64-1 (default 1)\n"
    "  --temperature T   softmax temperature, >= 0, 0 is greedy (default 0.8)\n"
    "  --top-k K         sample among the K most likely tokens, 0 = all (default 40)\n"
    "  --greedy          same as --temperature 0\n"
    "  --screen OUT.png  also draw the text on the simulated 128x64 OLED and save it\n"
    "  --stats           on stderr: prompt and generation speed (tokens/s) and the artifact\n"
    "                    bytes read per generated token (`weight bytes per token: N`)\n"
    "  --quiet           do not print the generated text\n"
    "  --json            print one JSON object: ids, text pieces, timings, weight bytes\n"
    "  --dump-logits P   write the float32 logits of every fed token to P (for tests)\n"
    "  --encode-only     only encode the prompt (with --json: its ids)\n";

/* One line: what is wrong, what is expected, where the options are listed. */
static int fail(const char *what, const char *value, const char *expected)
{
    fprintf(stderr, "gs-run: %s %s is invalid: expected %s (gs-run --help lists the options)\n",
            what, value, expected);
    return 2;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (*s == '\0' || *s == '-' || *s == '+') return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int parse_ids(const char *s, gs_run_options *opt)
{
    opt->n_ids = 0;
    opt->have_ids = 1;
    while (*s != '\0') {
        char buf[16];
        size_t n = strcspn(s, ",");
        uint64_t v;
        if (n == 0 || n >= sizeof(buf) || opt->n_ids == GS_RUN_MAX_IDS) return 0;
        memcpy(buf, s, n);
        buf[n] = '\0';
        if (!parse_u64(buf, 0xFFFFFFFFu, &v)) return 0;
        opt->ids[opt->n_ids++] = (uint32_t)v;
        s += n;
        if (*s == ',') s++;
    }
    return 1;
}

static void defaults(gs_run_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->prompt = "";
    opt->tokens = 64;
    opt->seed = 1;
    opt->temperature = 0.8f;
    opt->top_k = 40;
}

int gs_run_parse_args(int argc, char **argv, gs_run_options *opt)
{
    int a;
    defaults(opt);
    for (a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = a + 1 < argc ? argv[a + 1] : NULL;
        uint64_t v;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            return 1;
        }
        if (strcmp(arg, "--greedy") == 0) { opt->temperature = 0.0f; continue; }
        if (strcmp(arg, "--stats") == 0) { opt->stats = 1; continue; }
        if (strcmp(arg, "--json") == 0) { opt->json = 1; continue; }
        if (strcmp(arg, "--quiet") == 0) { opt->quiet = 1; continue; }
        if (strcmp(arg, "--encode-only") == 0) { opt->encode_only = 1; continue; }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (opt->model != NULL) return fail("argument", arg, "one MODEL.gsm path");
            opt->model = arg;
            continue;
        }
        if (val == NULL) return fail("option", arg, "a value after it");
        a++;
        if (strcmp(arg, "--prompt") == 0) {
            opt->prompt = val;
        } else if (strcmp(arg, "--prompt-file") == 0) {
            opt->prompt_file = val;
        } else if (strcmp(arg, "--ids") == 0) {
            if (!parse_ids(val, opt)) return fail("--ids", val, "comma-separated u32 ids");
        } else if (strcmp(arg, "--tokens") == 0) {
            if (!parse_u64(val, 1000000u, &v)) return fail("--tokens", val, "0 .. 1000000");
            opt->tokens = (uint32_t)v;
        } else if (strcmp(arg, "--seed") == 0) {
            if (!parse_u64(val, UINT64_MAX, &v)) return fail("--seed", val, "0 .. 2^64-1");
            opt->seed = v;
        } else if (strcmp(arg, "--top-k") == 0) {
            if (!parse_u64(val, 0xFFFFFFFFu, &v)) return fail("--top-k", val, "0 .. 2^32-1");
            opt->top_k = (uint32_t)v;
        } else if (strcmp(arg, "--temperature") == 0) {
            char *end;
            float t = strtof(val, &end);
            if (*val == '\0' || *end != '\0' || !(t >= 0.0f) || t - t != 0.0f) {
                return fail("--temperature", val, "a finite number >= 0 (0 = greedy)");
            }
            opt->temperature = t;
        } else if (strcmp(arg, "--screen") == 0) {
            opt->screen = val;
        } else if (strcmp(arg, "--dump-logits") == 0) {
            opt->dump_logits = val;
        } else {
            a--;
            return fail("option", arg, "one of gs-run's options");
        }
    }
    if (opt->model == NULL) return fail("arguments", "(none)", "a MODEL.gsm path");
    if ((opt->prompt_file != NULL) + (opt->have_ids != 0) + (opt->prompt[0] != '\0') > 1) {
        return fail("prompt", "(given twice)", "one of --prompt, --prompt-file, --ids");
    }
    return 0;
}
