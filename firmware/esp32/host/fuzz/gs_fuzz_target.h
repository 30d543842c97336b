/* gs_fuzz_target.h: the fuzz target shared by the libFuzzer harness and the deterministic
 * mutation driver (gs_fuzz_driver.c). */
#ifndef GS_FUZZ_TARGET_H
#define GS_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* How often gs_open returned each status (index = gs_status, GS_OK .. GS_ERR_UNSUPPORTED), over
 * both opens per input. */
#define GS_FUZZ_N_STATUS 16
extern unsigned long gs_fuzz_status_counts[GS_FUZZ_N_STATUS];

/* Little-endian u32 fields of the artifact (both sides of the harness edit headers and CRCs). */
static inline uint32_t gs_fuzz_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void gs_fuzz_wr_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* GS_FUZZ_TARGET_H */
