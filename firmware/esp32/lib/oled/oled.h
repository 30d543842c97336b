/* oled.h - SSD1306 / SH1106 128x64 text display for gptstack: framebuffer, 6x8 font,
 * word-wrapping console and the controllers' command streams.
 *
 * Portable C99: no heap, no platform headers, no I/O. The board glue (firmware/esp32/src) gives
 * it an I2C write function through `oled_transport`; the host simulator (firmware/esp32/host/sim)
 * gives it one that decodes the bytes back into a screen. Datasheet references are to
 * "SSD1306 128 x 64 Dot Matrix OLED/PLED Segment/Common Driver with Controller", Solomon
 * Systech, Rev 1.1 (Apr 2008); section numbers as in that revision.
 *
 * Framebuffer layout = the SSD1306's GDDRAM layout (datasheet 8.7, Figure 8-13): 8 pages of
 * 128 columns, one byte per (page, column), bit 0 the top row of the page:
 *   pixel (x, y) is bit (y % 8) of fb[(y / 8) * 128 + x].
 * A text row of the console is exactly one page, so scrolling the text is a memmove of pages.
 */
#ifndef GS_OLED_H
#define GS_OLED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- geometry ---------------------------------------------------------------------------- */
#define OLED_WIDTH 128                              /* columns (SEG0..SEG127) */
#define OLED_HEIGHT 64                              /* rows (COM0..COM63) */
#define OLED_PAGES (OLED_HEIGHT / 8)                /* 8 pages of 8 rows */
#define OLED_FB_BYTES (OLED_PAGES * OLED_WIDTH)     /* 1024 */

/* ---- font: 5x7 glyphs (descenders use row 8) in a 6x8 cell -------------------------------- */
#define OLED_GLYPH_W 5                              /* drawn columns; column 6 of a cell is blank */
#define OLED_CELL_W 6
#define OLED_CELL_H 8                               /* one page */
#define OLED_GLYPH_FIRST 32                         /* ' ' */
#define OLED_GLYPH_LAST 126                         /* '~' */
#define OLED_GLYPH_PLACEHOLDER 127                  /* drawn for non-ASCII and unknown bytes */
#define OLED_GLYPH_COUNT (OLED_GLYPH_PLACEHOLDER - OLED_GLYPH_FIRST + 1)

/* Column bytes of every glyph, generated from the design source lib/oled/font6x8.txt by
 * host/sim/gen_font.py (byte i = column i, bit 0 = top row). Index = code - OLED_GLYPH_FIRST. */
extern const uint8_t oled_font6x8[OLED_GLYPH_COUNT][OLED_GLYPH_W];

/* ---- text console geometry ---------------------------------------------------------------- */
#define OLED_COLS (OLED_WIDTH / OLED_CELL_W)        /* 21 cells per line (2 columns unused) */
#define OLED_ROWS (OLED_HEIGHT / OLED_CELL_H)       /* 8 lines */

/* ---- framebuffer ------------------------------------------------------------------------- */
void oled_clear(uint8_t fb[OLED_FB_BYTES]);
/* Out-of-range coordinates are ignored (set) or read as 0 (get). */
void oled_set_pixel(uint8_t fb[OLED_FB_BYTES], int x, int y, int on);
int oled_get_pixel(const uint8_t fb[OLED_FB_BYTES], int x, int y);

/* The 5 column bytes drawn for byte `code`: its glyph for 32..126, the placeholder otherwise. */
const uint8_t *oled_glyph(uint8_t code);
/* Draw 5 column bytes plus one blank spacing column at text cell (col, row), replacing the
 * cell's 6x8 pixels. Cells outside the 21x8 grid are ignored. */
void oled_draw_glyph(uint8_t fb[OLED_FB_BYTES], int col, int row, const uint8_t glyph[OLED_GLYPH_W]);
void oled_draw_char(uint8_t fb[OLED_FB_BYTES], int col, int row, uint8_t code);
/* Draw a NUL-terminated ASCII string from cell (col, row) to the right, clipped at the right
 * edge (no wrapping: that is the console's job). Returns the number of cells drawn. */
int oled_draw_string(uint8_t fb[OLED_FB_BYTES], int col, int row, const char *s);

/* ---- word-wrapping text console ----------------------------------------------------------
 * A 21 x 8 text view over a framebuffer, fed UTF-8 bytes in pieces of any size (a multi-byte
 * character may be split across calls; it is drawn once, as the placeholder glyph):
 *   - printable ASCII is drawn at the cursor; '\t' is a space; '\n' starts a new line;
 *     '\r' and the other control bytes are ignored;
 *   - words wrap at spaces: a word that would cross the right edge moves to the next line
 *     whole; a word longer than a line is broken at the edge; the space that falls on a
 *     wrap is dropped, so wrapped lines do not start with it;
 *   - when the cursor leaves the last line, the view scrolls up one line;
 *   - invalid UTF-8 draws one placeholder per maximal invalid subpart (Unicode 15, section 3.9,
 *     "U+FFFD Substitution of Maximal Subparts"; what Python's bytes.decode("utf-8", "replace")
 *     does): a byte that cannot start a character is one placeholder; a valid prefix cut short
 *     by a byte that cannot continue it is one placeholder, and that byte then starts afresh.
 * The console draws into `fb` immediately and records which pages changed (`dirty`, bit p =
 * page p) so a caller can send only those to the panel (oled_flush_pages). */
typedef struct oled_console {
    uint8_t *fb;                 /* OLED_FB_BYTES, owned by the caller */
    uint8_t col;                 /* cursor cell; OLED_COLS = line full, wrap decided by the next byte */
    uint8_t row;                 /* cursor line, 0..OLED_ROWS-1 */
    uint8_t word_len;            /* glyphs of the word that ends at the cursor, on this line */
    uint8_t word[OLED_COLS];     /* those glyph codes, to move the word when it wraps */
    uint8_t utf8_need;           /* continuation bytes still expected for the current character */
    uint8_t utf8_lo, utf8_hi;    /* the range allowed for the next continuation byte */
    uint8_t dirty;               /* pages changed since oled_console_take_dirty */
} oled_console;

/* Clear `fb`, put the cursor at the top left. */
void oled_console_init(oled_console *con, uint8_t fb[OLED_FB_BYTES]);
/* Feed `n` bytes of UTF-8 text (see above). */
void oled_text_write(oled_console *con, const uint8_t *bytes, size_t n);
/* Feed a NUL-terminated string. */
void oled_text_puts(oled_console *con, const char *s);
/* End of the stream: a character still waiting for continuation bytes is drawn as the
 * placeholder. */
void oled_text_finish(oled_console *con);
/* Pages changed since the last call, as a bit mask; clears it. */
uint8_t oled_console_take_dirty(oled_console *con);

/* ---- SSD1306 or SH1106 over I2C -----------------------------------------------------------
 * Each call to `write` is one I2C write transaction to `i2c_addr` (7-bit): `bytes[0]` is the
 * control byte (0x00: the rest are commands, 0x40: the rest are GDDRAM data; datasheet 8.1.5.1,
 * Figure 8-7: Co = 0, D/C# = 0 or 1), then at most OLED_I2C_MAX_PAYLOAD bytes. It returns 0 on
 * success, anything else on a bus error (passed back to the caller unchanged). */
typedef struct oled_transport {
    void *ctx;
    int (*write)(void *ctx, uint8_t i2c_addr, const uint8_t *bytes, size_t n);
} oled_transport;

#define OLED_I2C_ADDR 0x3C          /* SA0 low (datasheet 8.1.5: 0111100b); 0x3D with SA0 high */
#define OLED_CONTROL_COMMANDS 0x00  /* Co = 0, D/C# = 0 */
#define OLED_CONTROL_DATA 0x40      /* Co = 0, D/C# = 1 */
/* Payload bytes per transaction after the control byte: small enough for Arduino's 128-byte
 * Wire buffer and ESP-IDF's default I2C command link, large enough that the per-transaction
 * cost (start, address, control byte, stop: about 20 bit times) is under 4% of 64 * 9 bits. */
#define OLED_I2C_MAX_PAYLOAD 64

/* The two controllers sold on "128x64 OLED" I2C modules. Both take the same control bytes and
 * page addressing; they differ in their configuration commands and in where the glass sits in
 * their display RAM:
 *   OLED_SSD1306  0.96" modules: 128 RAM columns, all shown; internal charge pump (8Dh).
 *   OLED_SH1106   1.3" modules: 132 RAM columns of which the panel shows 2..129 (so every page
 *                 write starts at column OLED_SH1106_COLUMN_OFFSET), page addressing only (no
 *                 20h/21h/22h), the DC-DC converter set with ADh. "SH1106 132 x 64 Dot Matrix
 *                 OLED/PLED Segment/Common Driver with Controller", Sino Wealth, V2.3: command
 *                 table. */
#define OLED_SSD1306 0
#define OLED_SH1106 1
#define OLED_SH1106_COLUMN_OFFSET 2

typedef struct oled_device {
    oled_transport bus;
    uint8_t i2c_addr;
    uint8_t controller;     /* OLED_SSD1306 (0, what a zeroed struct says) or OLED_SH1106 */
} oled_device;

/* Send the power-on configuration of the device's controller for a 128x64 panel with its
 * internal supply (charge pump / DC-DC, as the common I2C modules are wired) and switch the
 * display on. Leaves page addressing mode set. Returns 0 or the transport's error. */
int oled_init(const oled_device *dev);
/* Send the whole framebuffer (every page; 1024 data bytes). */
int oled_flush(const oled_device *dev, const uint8_t fb[OLED_FB_BYTES]);
/* Send only the pages whose bit is set in `page_mask`: each page's address and start column,
 * then its 128 bytes. */
int oled_flush_pages(const oled_device *dev, const uint8_t fb[OLED_FB_BYTES], uint8_t page_mask);
/* Contrast 0..255 (datasheet 10.1.7, command 81h). */
int oled_set_contrast(const oled_device *dev, uint8_t contrast);
/* Display on (AFh) or off / sleep (AEh) (datasheet 10.1.12). */
int oled_display_on(const oled_device *dev, int on);

#ifdef __cplusplus
}
#endif

#endif /* GS_OLED_H */
