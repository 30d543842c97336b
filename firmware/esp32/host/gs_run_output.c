/* gs_run_output.c: hints and JSON writing for gs-run (host only). */
#include "gs_run_output.h"

const char *gs_run_hint(gs_status status)
{
    static const char reexport[] = "re-run `gptstack export`";
    switch (status) {
    case GS_OK: return "no error";
    case GS_ERR_TRUNCATED:
        return "the file is shorter than its header says: copy it again or re-run "
               "`gptstack export`";
    case GS_ERR_MAGIC:
        return "this is not a gptstack .gsm model: pass the file `gptstack export` wrote";
    case GS_ERR_VERSION:
        return "the artifact's format version is not the one this engine reads: re-run "
               "`gptstack export` with the gptstack version of this firmware";
    case GS_ERR_HEADER:
        return "a header field (header_bytes, reserved bytes, flags, trailing bytes or "
               "arena_bytes) is wrong: re-run `gptstack export`";
    case GS_ERR_CRC:
        return "the file is damaged (CRC-32 mismatch): copy it again or re-run `gptstack export`";
    case GS_ERR_CONFIG:
        return "the model config in the header breaks FORMAT.md section 2: re-run "
               "`gptstack export`";
    case GS_ERR_OFFSET:
    case GS_ERR_TOKENIZER:
    case GS_ERR_TENSOR:
        return reexport;
    case GS_ERR_NULL: return "internal error: a NULL argument reached the engine";
    case GS_ERR_ARENA: return "the working memory (arena) is too small or misaligned";
    case GS_ERR_TOKEN: return "a token id is outside the model's vocabulary: check --ids";
    case GS_ERR_BUFFER: return "the prompt is too long for the id buffer: shorten it";
    case GS_ERR_UNKNOWN_CHAR:
        return "the prompt has a character the char tokenizer does not know: use only "
               "characters of the training text";
    case GS_ERR_UNSUPPORTED:
        return "this tokenizer (GPT-4 pattern) cannot encode prompts on the device: pass --ids "
               "or an empty prompt";
    }
    return "unknown status";
}

/* Length of the valid UTF-8 character at s (n >= 1 bytes left), or 0 if none starts there. */
static size_t utf8_char_len(const uint8_t *s, size_t n)
{
    size_t len, k;
    uint8_t lo = 0x80, hi = 0xBF;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) len = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) len = 3;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) len = 4;
    else return 0;
    if (s[0] == 0xE0) lo = 0xA0;
    if (s[0] == 0xED) hi = 0x9F;
    if (s[0] == 0xF0) lo = 0x90;
    if (s[0] == 0xF4) hi = 0x8F;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (k = 2; k < len; k++) {
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    }
    return len;
}

void gs_json_string(FILE *out, const uint8_t *bytes, size_t n)
{
    size_t i = 0;
    fputc('"', out);
    while (i < n) {
        uint8_t b = bytes[i];
        size_t len = utf8_char_len(bytes + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", out);
            i++;
        } else if (b == '"' || b == '\\') {
            fputc('\\', out);
            fputc(b, out);
            i++;
        } else if (b == '\n') {
            fputs("\\n", out);
            i++;
        } else if (b < 0x20 || b == 0x7F) {
            fprintf(out, "\\u%04x", (unsigned)b);
            i++;
        } else {
            fwrite(bytes + i, 1, len, out);
            i += len;
        }
    }
    fputc('"', out);
}

void gs_json_hex(FILE *out, const uint8_t *bytes, size_t n)
{
    size_t i;
    fputc('"', out);
    for (i = 0; i < n; i++) fprintf(out, "%02x", (unsigned)bytes[i]);
    fputc('"', out);
}

void gs_json_ids(FILE *out, const uint32_t *ids, size_t n)
{
    size_t i;
    fputc('[', out);
    for (i = 0; i < n; i++) fprintf(out, i == 0 ? "%lu" : ",%lu", (unsigned long)ids[i]);
    fputc(']', out);
}
