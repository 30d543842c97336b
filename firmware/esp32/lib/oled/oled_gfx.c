/* oled_gfx.c - the 128x64 framebuffer in SSD1306 page layout: pixels, glyphs, strings.
 *
 * Layout (oled.h, SSD1306 datasheet 8.7): pixel (x, y) is bit (y % 8) of fb[(y / 8) * 128 + x].
 * A 6x8 text cell is 6 consecutive bytes of one page, so drawing a glyph is 6 byte stores.
 */
#include "oled.h"

/* No <string.h>: the library builds freestanding (C99 4p6), where only the headers without
 * functions are guaranteed; these loops are all the byte moving it needs. */
void oled_clear(uint8_t fb[OLED_FB_BYTES])
{
    size_t i;

    for (i = 0; i < OLED_FB_BYTES; i++) {
        fb[i] = 0;
    }
}

void oled_set_pixel(uint8_t fb[OLED_FB_BYTES], int x, int y, int on)
{
    uint8_t *byte;
    uint8_t bit;

    if (x < 0 || x >= OLED_WIDTH || y < 0 || y >= OLED_HEIGHT) {
        return;
    }
    byte = &fb[(y / 8) * OLED_WIDTH + x];
    bit = (uint8_t)(1u << (y % 8));
    if (on) {
        *byte = (uint8_t)(*byte | bit);
    } else {
        *byte = (uint8_t)(*byte & (uint8_t)~bit);
    }
}

int oled_get_pixel(const uint8_t fb[OLED_FB_BYTES], int x, int y)
{
    if (x < 0 || x >= OLED_WIDTH || y < 0 || y >= OLED_HEIGHT) {
        return 0;
    }
    return (fb[(y / 8) * OLED_WIDTH + x] >> (y % 8)) & 1;
}

const uint8_t *oled_glyph(uint8_t code)
{
    if (code < OLED_GLYPH_FIRST || code > OLED_GLYPH_LAST) {
        code = OLED_GLYPH_PLACEHOLDER;
    }
    return oled_font6x8[code - OLED_GLYPH_FIRST];
}

void oled_draw_glyph(uint8_t fb[OLED_FB_BYTES], int col, int row, const uint8_t glyph[OLED_GLYPH_W])
{
    uint8_t *cell;
    int i;

    if (col < 0 || col >= OLED_COLS || row < 0 || row >= OLED_ROWS) {
        return;
    }
    cell = &fb[row * OLED_WIDTH + col * OLED_CELL_W];
    for (i = 0; i < OLED_GLYPH_W; i++) {
        cell[i] = glyph[i];
    }
    cell[OLED_GLYPH_W] = 0; /* the spacing column */
}

void oled_draw_char(uint8_t fb[OLED_FB_BYTES], int col, int row, uint8_t code)
{
    oled_draw_glyph(fb, col, row, oled_glyph(code));
}

int oled_draw_string(uint8_t fb[OLED_FB_BYTES], int col, int row, const char *s)
{
    int drawn = 0;

    if (row < 0 || row >= OLED_ROWS || col < 0) {
        return 0;
    }
    while (*s != '\0' && col + drawn < OLED_COLS) {
        oled_draw_char(fb, col + drawn, row, (uint8_t)*s);
        s++;
        drawn++;
    }
    return drawn;
}
