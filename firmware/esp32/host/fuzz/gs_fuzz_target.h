/* gs_fuzz_target.h: the fuzz target shared by the libFuzzer harness and the deterministic
 * mutation driver (gs_fuzz_driver.c). */
#ifndef GS_FUZZ_TARGET_H
#define GS_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* How often gs_open returned each status (index = gs_status), over both opens per input. */
extern unsigned long gs_fuzz_status_counts[16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* GS_FUZZ_TARGET_H */
