/* gs_run_output.h: what gs-run writes: error hints for each gs_status, JSON strings and arrays,
 * the logits dump. */
#ifndef GS_RUN_OUTPUT_H
#define GS_RUN_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_engine.h"

/* What the user should do about a status (one line, no trailing newline). */
const char *gs_run_hint(gs_status status);

/* A JSON string of bytes: UTF-8 passed through, escapes for quotes, backslash and controls, and
 * U+FFFD for each byte that is not part of a valid UTF-8 character. */
void gs_json_string(FILE *out, const uint8_t *bytes, size_t n);

/* A JSON string of lowercase hex digits, two per byte. */
void gs_json_hex(FILE *out, const uint8_t *bytes, size_t n);

/* A JSON array of ids. */
void gs_json_ids(FILE *out, const uint32_t *ids, size_t n);

#endif /* GS_RUN_OUTPUT_H */
