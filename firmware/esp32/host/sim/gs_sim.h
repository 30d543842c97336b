/* gs_sim.h - host-only OLED simulator: a model of the SSD1306 and the SH1106 that decodes the
 * I2C byte stream the firmware sends, and a PNG writer, so a host run shows what the device
 * would show.
 *
 * Build: CMake targets gs_oled and gs_sim from firmware/esp32/host/sim/oled.cmake (C99, stdio only).
 *
 * Typical use (the `gs-run --screen out.png` path of the host CLI):
 *
 *     gs_sim_screen screen;                         // one per run; do not copy (self-pointers)
 *     gs_sim_screen_init(&screen, OLED_SSD1306);    // console + simulated panel, init sequence sent
 *     gs_sim_screen_write(&screen, piece, n);       // each decoded text piece, any UTF-8 split
 *     gs_sim_screen_save_png(&screen, "out.png", 4);// what the glass shows, 4x4 px per pixel
 *
 * gs_sim_screen_write is oled_text_write followed by oled_flush_pages through the simulated
 * panel, as the firmware's loop does; the PNG is rendered from the panel's decoded state
 * (GDDRAM, remaps, display on/off, charge pump), not from the firmware's framebuffer.
 */
#ifndef GS_SIM_H
#define GS_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "oled.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes of the file-writing functions. */
#define GS_SIM_OK 0
#define GS_SIM_ERR_ARG (-1) /* NULL pointer, scale outside 1..GS_SIM_MAX_SCALE */
#define GS_SIM_ERR_IO (-2)  /* could not create, write or rename the file (errno is set) */

#define GS_SIM_MAX_SCALE 16

/* ---- PNG ----------------------------------------------------------------------------------
 * Write a page-layout framebuffer (oled.h) as an 8-bit grayscale PNG, lit pixels 255, dark 0,
 * each pixel a scale x scale block (image 128*scale x 64*scale). Self-contained writer (PNG
 * spec, W3C 2003: IHDR, one IDAT of zlib stored blocks with Adler-32 (RFC 1950/1951), IEND,
 * CRC-32 per chunk). Written to "<path>.tmp" and renamed into place. */
int gs_sim_write_png(const uint8_t fb[OLED_FB_BYTES], const char *path, int scale);
/* CRC-32 (IEEE, as zlib.crc32) and Adler-32 (as zlib.adler32) updates; start from 0 and 1. */
uint32_t gs_sim_crc32(uint32_t crc, const uint8_t *bytes, size_t n);
uint32_t gs_sim_adler32(uint32_t adler, const uint8_t *bytes, size_t n);

/* ---- simulated SSD1306 or SH1106 ----------------------------------------------------------
 * State after reset follows the datasheet's reset values (SSD1306 section 9 / 10: display off,
 * page addressing mode, contrast 7Fh, no remaps, multiplex 63, COM pins alternative, charge
 * pump off; the SH1106's own power-on values, its DC-DC converter on). The glass is modelled as
 * the common modules (0.96" SSD1306, 1.3" SH1106 showing RAM columns 2..129): the image is
 * upright when segment remap (A1h) and COM scan remap (C8h) are set; without them it shows
 * mirrored; with the display off or the charge pump / DC-DC off the panel is dark. */
#define GS_SIM_RAM_COLS 132            /* the SH1106's RAM width; the SSD1306 uses 0..127 */

typedef struct gs_sim_panel {
    uint8_t i2c_addr;                  /* address it answers; other addresses NACK */
    uint8_t controller;                /* OLED_SSD1306 or OLED_SH1106 */
    uint8_t gddram[OLED_PAGES * GS_SIM_RAM_COLS]; /* display RAM, page layout, 132 per page */
    /* addressing (10.1.1 - 10.1.5, 10.1.13) */
    uint8_t mode;                      /* 0 horizontal, 1 vertical, 2 page */
    uint8_t col_start, col_end, page_start, page_end;
    uint8_t col, page;                 /* RAM pointers */
    uint8_t page_mode_col_start;
    /* display configuration */
    uint8_t display_on, entire_on, inverse, charge_pump; /* charge_pump: or the SH1106 DC-DC */
    uint8_t seg_remap, com_remap, com_pins, start_line, offset, mux, contrast;
    uint8_t clock, precharge, vcomh, scrolling;
    /* command decoder: a command and its parameter bytes may span transactions */
    uint8_t cmd[8];
    uint8_t cmd_len, cmd_need;
    /* counters and the first protocol error (empty string when none) */
    uint32_t transactions, command_bytes, data_bytes, errors;
    char error[128];
} gs_sim_panel;

void gs_sim_panel_reset(gs_sim_panel *panel, uint8_t i2c_addr, uint8_t controller);
/* One I2C write transaction: control byte(s) and payload, as oled_transport.write sends it.
 * Returns 0 (ACK), or -1 when the address is not the panel's (NACK; nothing changes). A
 * malformed stream (unknown command, bad control byte, empty write) counts an error, keeps
 * the first message in `error` and still returns 0, as the chip would ACK it. */
int gs_sim_panel_i2c_write(void *panel, uint8_t i2c_addr, const uint8_t *bytes, size_t n);
/* A transport whose writes go to `panel`. */
oled_transport gs_sim_transport(gs_sim_panel *panel);
/* What the glass shows, as a page-layout framebuffer (1 = lit). */
void gs_sim_panel_view(const gs_sim_panel *panel, uint8_t view[OLED_FB_BYTES]);

/* ---- the whole screen: console + SSD1306 command stream + simulated panel ------------------ */
typedef struct gs_sim_screen {
    uint8_t fb[OLED_FB_BYTES];         /* the firmware-side framebuffer the console draws into */
    oled_console console;
    gs_sim_panel panel;
    oled_device device;                /* transport wired to `panel` */
} gs_sim_screen;

/* Reset a panel of this controller (OLED_SSD1306 or OLED_SH1106), clear the console, send
 * oled_init and a full flush. */
void gs_sim_screen_init(gs_sim_screen *screen, uint8_t controller);
/* Draw UTF-8 text (any split) and flush the changed pages through the panel. */
void gs_sim_screen_write(gs_sim_screen *screen, const uint8_t *bytes, size_t n);
/* oled_text_finish, flush, then write the panel's view as PNG (see gs_sim_write_png). */
int gs_sim_screen_save_png(gs_sim_screen *screen, const char *path, int scale);

#ifdef __cplusplus
}
#endif

#endif /* GS_SIM_H */
