/* gs_screen_main.c - `gs-screen`: render text as the OLED would show it.
 *
 *     gs-screen [--scale N] [--chunk N] [--sh1106] OUT.png < text.txt
 *
 * Reads UTF-8 text from stdin, feeds it to the console in pieces of --chunk bytes (default 3:
 * token-sized, so multi-byte characters get split the way a streaming decoder may split them),
 * sends every change through the simulated SSD1306 and writes the panel's view as a PNG,
 * --scale pixels per OLED pixel (default 4), through a simulated SSD1306 or, with --sh1106, an
 * SH1106 (the 1.3" modules). Exit status 0, 1 on a simulator protocol error,
 * 2 on bad arguments or an I/O error.
 */
#include "gs_sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: gs-screen [--scale 1..%d] [--chunk N] [--sh1106] OUT.png < text\n",
            GS_SIM_MAX_SCALE);
    return 2;
}

static int parse_int(const char *text, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(text, &end, 10);

    if (*text == '\0' || *end != '\0' || v < lo || v > hi) {
        return 0;
    }
    *out = v;
    return 1;
}

int main(int argc, char **argv)
{
    static gs_sim_screen screen;
    uint8_t buf[4096];
    const char *out = NULL;
    long scale = 4, chunk = 3;
    size_t got, i, take;
    int a, status;
    uint8_t controller = OLED_SSD1306;

    for (a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--scale") == 0 && a + 1 < argc) {
            if (!parse_int(argv[++a], 1, GS_SIM_MAX_SCALE, &scale)) {
                return usage();
            }
        } else if (strcmp(argv[a], "--chunk") == 0 && a + 1 < argc) {
            if (!parse_int(argv[++a], 1, (long)sizeof(buf), &chunk)) {
                return usage();
            }
        } else if (strcmp(argv[a], "--sh1106") == 0) {
            controller = OLED_SH1106;
        } else if (argv[a][0] != '-' && out == NULL) {
            out = argv[a];
        } else {
            return usage();
        }
    }
    if (out == NULL) {
        return usage();
    }

    gs_sim_screen_init(&screen, controller);
    while ((got = fread(buf, 1, sizeof(buf), stdin)) > 0) {
        for (i = 0; i < got; i += take) {
            take = got - i < (size_t)chunk ? got - i : (size_t)chunk;
            gs_sim_screen_write(&screen, buf + i, take);
        }
    }
    status = gs_sim_screen_save_png(&screen, out, (int)scale);
    if (status != GS_SIM_OK) {
        fprintf(stderr, "gs-screen: cannot write %s: %s\n", out, strerror(errno));
        return 2;
    }
    if (screen.panel.errors > 0) {
        fprintf(stderr, "gs-screen: %s stream error: %s\n",
                controller == OLED_SH1106 ? "SH1106" : "SSD1306", screen.panel.error);
        return 1;
    }
    return 0;
}
