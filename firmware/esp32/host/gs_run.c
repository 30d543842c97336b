/* gs_run.c: `gs-run`, the host command line of the gptstack C engine.
 *
 *   gs-run model.gsm --prompt "ROMEO:" --tokens 100 --seed 1 --temperature 0.8 --top-k 40
 *   gs-run model.gsm --prompt "ROMEO:" --greedy --screen out.png     (simulated OLED as PNG)
 *   gs-run model.gsm --tokens 200 --stats --quiet                     (tokens/s on stderr)
 *
 * Maps the artifact (zero copy, like flash on the chip), allocates the one arena the engine
 * asks for, encodes the prompt (empty: the artifact's bos_token), feeds it, then samples, prints
 * and feeds one token at a time exactly as gptstack.quant.sampling.generate does. The prompt
 * text, then the generated text as it is decoded, go to stdout (and the simulated screen), as the
 * board shows them; errors and --stats go to stderr. Exit status: 0 success,
 * 2 a user error (arguments, file, artifact), 1 an I/O failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gs_engine.h"
#include "gs_mapfile.h"
#include "gs_run_args.h"
#include "gs_run_output.h"
#ifdef GS_HAVE_OLED
#include "gs_sim.h"
#endif

typedef struct {
    gs_run_options opt;
    gs_mapped_file file;
    gs_model model;
    void *arena;
    uint8_t *prompt;         /* prompt bytes */
    size_t n_prompt_bytes;
    uint32_t *prompt_ids;
    size_t n_prompt_ids;
    uint32_t *tokens;        /* generated ids */
    uint8_t *text;           /* every decoded byte, in order */
    size_t n_text;
    size_t *piece_end;       /* text offset after each token's piece; [tokens] after flush */
    uint8_t *piece;          /* one decoded piece: 3 held bytes + the longest token */
    size_t piece_bytes;
    FILE *dump;
    double prompt_s, gen_s;
    uint64_t gen_weight_bytes; /* artifact bytes the engine read while generating */
#ifdef GS_HAVE_OLED
    gs_sim_screen *screen;
#endif
} gs_run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int artifact_error(const gs_run *r, gs_status st)
{
    fprintf(stderr, "gs-run: %s: %s: %s\n", r->opt.model, gs_status_name(st), gs_run_hint(st));
    return 2;
}

static int out_of_memory(void)
{
    fprintf(stderr, "gs-run: out of memory\n");
    return 1;
}

/* The prompt's bytes: --prompt text or the whole --prompt-file. */
static int read_prompt(gs_run *r)
{
    const char *path = r->opt.prompt_file;
    FILE *f;
    long n;
    if (path == NULL) {
        r->n_prompt_bytes = strlen(r->opt.prompt);
        r->prompt = (uint8_t *)malloc(r->n_prompt_bytes + 1);
        if (r->prompt == NULL) return out_of_memory();
        memcpy(r->prompt, r->opt.prompt, r->n_prompt_bytes + 1);
        return 0;
    }
    f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "gs-run: cannot read --prompt-file %s: %s\n", path, strerror(errno));
        if (f != NULL) fclose(f);
        return 2;
    }
    r->n_prompt_bytes = (size_t)n;
    r->prompt = (uint8_t *)malloc(r->n_prompt_bytes + 1);
    if (r->prompt == NULL) {
        fclose(f);
        return out_of_memory();
    }
    if (fread(r->prompt, 1, r->n_prompt_bytes, f) != r->n_prompt_bytes) {
        fprintf(stderr, "gs-run: cannot read --prompt-file %s\n", path);
        fclose(f);
        return 2;
    }
    fclose(f);
    return 0;
}

/* Prompt ids: --ids as given, else the encoded prompt. */
static int prompt_ids(gs_run *r)
{
    gs_status st;
    if (r->opt.have_ids) {
        r->prompt_ids = (uint32_t *)malloc((r->opt.n_ids + 1) * sizeof(uint32_t));
        if (r->prompt_ids == NULL) return out_of_memory();
        memcpy(r->prompt_ids, r->opt.ids, r->opt.n_ids * sizeof(uint32_t));
        r->n_prompt_ids = r->opt.n_ids;
        return 0;
    }
    /* one slot per byte always suffices (gs_encode's merge scratch) */
    r->prompt_ids = (uint32_t *)malloc((r->n_prompt_bytes + 1) * sizeof(uint32_t));
    if (r->prompt_ids == NULL) return out_of_memory();
    st = gs_encode(&r->model, r->prompt, r->n_prompt_bytes, r->prompt_ids, r->n_prompt_bytes + 1,
                   &r->n_prompt_ids);
    if (st != GS_OK) {
        fprintf(stderr, "gs-run: cannot encode the prompt: %s: %s\n", gs_status_name(st),
                gs_run_hint(st));
        return 2;
    }
    return 0;
}

static int load(gs_run *r)
{
    gs_status st;
    size_t arena_bytes;
    if (gs_map_file(r->opt.model, &r->file) != 0) {
        fprintf(stderr, "gs-run: cannot read %s: %s: pass the .gsm file `gptstack export` wrote\n",
                r->opt.model, strerror(errno));
        return 2;
    }
    st = gs_open(&r->model, r->file.data, r->file.n_bytes);
    if (st != GS_OK) return artifact_error(r, st);
    arena_bytes = r->model.config.arena_bytes; /* FORMAT.md section 11: validated by gs_open */
    if (posix_memalign(&r->arena, 16, arena_bytes) != 0) return out_of_memory();
    st = gs_attach_arena(&r->model, r->arena, arena_bytes);
    if (st != GS_OK) return artifact_error(r, st);
    return 0;
}

/* Feed one id; append its logits to --dump-logits. */
static int feed(gs_run *r, uint32_t id)
{
    const float *logits;
    gs_status st = gs_forward(&r->model, id, &logits);
    size_t V = r->model.config.vocab_size;
    if (st != GS_OK) {
        fprintf(stderr, "gs-run: token %lu: %s: %s\n", (unsigned long)id, gs_status_name(st),
                gs_run_hint(st));
        return 2;
    }
    if (r->dump != NULL && fwrite(logits, sizeof(float), V, r->dump) != V) {
        fprintf(stderr, "gs-run: cannot write --dump-logits %s\n", r->opt.dump_logits);
        return 1;
    }
    return 0;
}

/* Show bytes on stdout (unless --json/--quiet) and the screen, as the board shows them. */
static void display(gs_run *r, const uint8_t *bytes, size_t n)
{
    if (!r->opt.json && !r->opt.quiet && n > 0) {
        fwrite(bytes, 1, n, stdout);
        fflush(stdout);
    }
#ifdef GS_HAVE_OLED
    if (r->screen != NULL) gs_sim_screen_write(r->screen, bytes, n);
#endif
}

/* Show a decoded piece and add it to the record of generated text. */
static void show(gs_run *r, const uint8_t *piece, size_t n)
{
    memcpy(r->text + r->n_text, piece, n);
    r->n_text += n;
    display(r, piece, n);
}

/* Section 8's generation loop: sample from the last logits, emit, feed. */
static int generate(gs_run *r)
{
    const float *logits = r->model.state.logits;
    gs_decoder dec;
    gs_rng rng;
    uint8_t *piece = r->piece;
    size_t n, i;
    int rc;
    double t0;
    uint64_t bytes0 = r->model.state.weight_bytes;
    gs_decoder_init(&dec);
    gs_rng_seed(&rng, r->opt.seed);
    t0 = now_s();
    for (i = 0; i < r->opt.tokens; i++) {
        uint32_t tok;
        gs_status st = gs_sample(&r->model, logits, r->opt.temperature, r->opt.top_k, &rng, &tok);
        if (st == GS_OK) st = gs_decode(&dec, &r->model, tok, piece, r->piece_bytes, &n);
        if (st != GS_OK) return artifact_error(r, st);
        r->tokens[i] = tok;
        show(r, piece, n);
        r->piece_end[i] = r->n_text;
        if (i + 1 < r->opt.tokens && (rc = feed(r, tok)) != 0) return rc;
    }
    gs_decode_flush(&dec, piece, r->piece_bytes, &n);
    show(r, piece, n);
    r->piece_end[r->opt.tokens] = r->n_text;
    r->gen_s = now_s() - t0;
    r->gen_weight_bytes = r->model.state.weight_bytes - bytes0;
    return 0;
}

static int run_prompt(gs_run *r)
{
    size_t i;
    int rc;
    double t0 = now_s();
    for (i = 0; i < r->n_prompt_ids; i++) {
        if ((rc = feed(r, r->prompt_ids[i])) != 0) return rc;
    }
    r->prompt_s = now_s() - t0;
    return 0;
}

/* Artifact bytes read per generated token (the slides' re-encodes included), rounded. */
static unsigned long long weight_bytes_per_token(const gs_run *r)
{
    if (r->opt.tokens == 0) return 0;
    return (r->gen_weight_bytes + r->opt.tokens / 2u) / r->opt.tokens;
}

static void print_json(const gs_run *r)
{
    size_t i, begin = 0;
    const gs_config *c = &r->model.config;
    printf("{\"status\":\"GS_OK\",\"vocab_size\":%lu,\"n_tokens\":%lu,\"arena_bytes\":%lu,",
           (unsigned long)c->vocab_size, (unsigned long)r->model.tokenizer.n_tokens,
           (unsigned long)c->arena_bytes);
    printf("\"prompt_ids\":");
    gs_json_ids(stdout, r->prompt_ids, r->n_prompt_ids);
    printf(",\"tokens\":");
    gs_json_ids(stdout, r->tokens, r->opt.encode_only ? 0 : r->opt.tokens);
    printf(",\"pieces_hex\":[");
    for (i = 0; !r->opt.encode_only && i <= r->opt.tokens; i++) { /* the last: the flush */
        if (i > 0) putchar(',');
        gs_json_hex(stdout, r->text + begin, r->piece_end[i] - begin);
        begin = r->piece_end[i];
    }
    printf("],\"text\":");
    gs_json_string(stdout, r->text, r->n_text);
    printf(",\"prompt_s\":%.6f,\"gen_s\":%.6f,\"tokens_per_s\":%.3f", r->prompt_s, r->gen_s,
           r->gen_s > 0 ? (double)r->opt.tokens / r->gen_s : 0.0);
    printf(",\"gen_weight_bytes\":%llu,\"weight_bytes_per_token\":%llu}\n",
           (unsigned long long)r->gen_weight_bytes, weight_bytes_per_token(r));
}

static int finish(gs_run *r)
{
    if (r->opt.stats) {
        fprintf(stderr, "gs-run: prompt %lu tokens in %.3f s (%.1f tokens/s); generated %lu tokens "
                "in %.3f s: %.2f tokens/s\n", (unsigned long)r->n_prompt_ids, r->prompt_s,
                r->prompt_s > 0 ? (double)r->n_prompt_ids / r->prompt_s : 0.0,
                (unsigned long)r->opt.tokens, r->gen_s,
                r->gen_s > 0 ? (double)r->opt.tokens / r->gen_s : 0.0);
        fprintf(stderr, "gs-run: weight bytes per token: %llu\n", weight_bytes_per_token(r));
    }
    if (r->opt.json) {
        print_json(r);
    } else if (r->opt.encode_only) {
        size_t i;
        for (i = 0; i < r->n_prompt_ids; i++) {
            printf(i == 0 ? "%lu" : " %lu", (unsigned long)r->prompt_ids[i]);
        }
        putchar('\n');
    } else if (!r->opt.quiet) {
        putchar('\n');
    }
#ifdef GS_HAVE_OLED
    if (r->screen != NULL && gs_sim_screen_save_png(r->screen, r->opt.screen, 4) != GS_SIM_OK) {
        fprintf(stderr, "gs-run: cannot write --screen %s: %s\n", r->opt.screen, strerror(errno));
        return 1;
    }
#endif
    if (fflush(stdout) != 0) return 1;
    return 0;
}

/* Everything that needs memory or files before the first token. */
static int prepare(gs_run *r)
{
    int rc;
    size_t n_tok = (size_t)r->opt.tokens, longest = 0;
    uint32_t id;
    if ((rc = load(r)) != 0 || (rc = read_prompt(r)) != 0 || (rc = prompt_ids(r)) != 0) return rc;
    for (id = 0; id < r->model.tokenizer.n_tokens; id++) {
        const uint8_t *bytes;
        size_t n;
        if (gs_token_bytes(&r->model, id, &bytes, &n) == GS_OK && n > longest) longest = n;
    }
    r->piece_bytes = longest + 3u; /* a token's bytes plus the 3 the decoder may hold */
    r->piece = (uint8_t *)malloc(r->piece_bytes);
    r->tokens = (uint32_t *)malloc((n_tok + 1) * sizeof(uint32_t));
    r->piece_end = (size_t *)malloc((n_tok + 1) * sizeof(size_t));
    r->text = (uint8_t *)malloc(n_tok * longest + 4u);
    if (r->piece == NULL || r->tokens == NULL || r->piece_end == NULL || r->text == NULL) {
        return out_of_memory();
    }
    if (r->opt.dump_logits != NULL && (r->dump = fopen(r->opt.dump_logits, "wb")) == NULL) {
        fprintf(stderr, "gs-run: cannot create --dump-logits %s: %s\n", r->opt.dump_logits,
                strerror(errno));
        return 2;
    }
    if (r->opt.screen != NULL) {
#ifdef GS_HAVE_OLED
        r->screen = (gs_sim_screen *)malloc(sizeof(gs_sim_screen));
        if (r->screen == NULL) return out_of_memory();
        gs_sim_screen_init(r->screen, OLED_SSD1306);
#else
        fprintf(stderr, "gs-run: --screen needs the OLED library (firmware/esp32/lib/oled and "
                "host/sim), which this build does not have\n");
        return 2;
#endif
    }
    return 0;
}

static int run(gs_run *r)
{
    int rc = prepare(r);
    if (rc != 0) return rc;
    if (r->opt.encode_only) return finish(r);
    if (r->n_prompt_ids == 0) { /* section 8: an empty prompt is [bos_token] */
        if (r->model.config.bos_token == GS_NO_TOKEN) {
            fprintf(stderr, "gs-run: %s has no bos_token, so the prompt cannot be empty: give "
                    "--prompt TEXT\n", r->opt.model);
            return 2;
        }
        r->prompt_ids[0] = r->model.config.bos_token;
        r->n_prompt_ids = 1;
    }
    /* the prompt text first, as the board shows it (ids given with --ids are not text) */
    display(r, r->prompt, r->opt.have_ids ? 0 : r->n_prompt_bytes);
    if ((rc = run_prompt(r)) != 0 || (rc = generate(r)) != 0) return rc;
    return finish(r);
}

int main(int argc, char **argv)
{
    static gs_run r; /* large (the --ids array): not on the stack */
    int rc = gs_run_parse_args(argc, argv, &r.opt);
    if (rc != 0) return rc == 1 ? 0 : rc;
    rc = run(&r);
    if (r.dump != NULL && fclose(r.dump) != 0 && rc == 0) rc = 1;
    free(r.prompt);
    free(r.prompt_ids);
    free(r.tokens);
    free(r.text);
    free(r.piece_end);
    free(r.piece);
    free(r.arena);
#ifdef GS_HAVE_OLED
    free(r.screen);
#endif
    gs_unmap_file(&r.file);
    return rc;
}
