/* gs_status.c: status codes to names (FORMAT.md section 6). The engine never prints; callers
 * (board glue, host gs-run) turn the name into words for the user. */
#include "gs_engine.h"

const char *gs_status_name(gs_status status)
{
    switch (status) {
    case GS_OK: return "GS_OK";
    case GS_ERR_TRUNCATED: return "GS_ERR_TRUNCATED";
    case GS_ERR_MAGIC: return "GS_ERR_MAGIC";
    case GS_ERR_VERSION: return "GS_ERR_VERSION";
    case GS_ERR_HEADER: return "GS_ERR_HEADER";
    case GS_ERR_CRC: return "GS_ERR_CRC";
    case GS_ERR_CONFIG: return "GS_ERR_CONFIG";
    case GS_ERR_OFFSET: return "GS_ERR_OFFSET";
    case GS_ERR_TOKENIZER: return "GS_ERR_TOKENIZER";
    case GS_ERR_TENSOR: return "GS_ERR_TENSOR";
    case GS_ERR_NULL: return "GS_ERR_NULL";
    case GS_ERR_ARENA: return "GS_ERR_ARENA";
    case GS_ERR_TOKEN: return "GS_ERR_TOKEN";
    case GS_ERR_BUFFER: return "GS_ERR_BUFFER";
    case GS_ERR_UNKNOWN_CHAR: return "GS_ERR_UNKNOWN_CHAR";
    case GS_ERR_UNSUPPORTED: return "GS_ERR_UNSUPPORTED";
    }
    return "GS_ERR_?";
}
