/* oled_text.c - the word-wrapping, scrolling text console (21 x 8 cells) over the framebuffer.
 *
 * State machine, one byte at a time (oled_text_write may be called with any split):
 *   UTF-8 layer: ASCII goes to the layout layer; a lead byte arms `utf8_need` continuation
 *   bytes; the last one emits one placeholder. Malformed input follows the rules in oled.h.
 *   Layout layer: the cursor (col, row) and the current word (the glyphs since the last space on
 *   this line) decide wrapping. col == OLED_COLS means "line full": the next byte decides
 *   whether that is a plain line break (a space or '\n', consumed) or a word that must move.
 */
#include "oled.h"

/* Freestanding: no <string.h> (see oled_gfx.c). */
static void fill_zero(uint8_t *p, size_t n)
{
    while (n-- > 0) {
        *p++ = 0;
    }
}

static void mark_dirty(oled_console *con, int row)
{
    con->dirty = (uint8_t)(con->dirty | (1u << row));
}

/* Move the cursor to the start of the next line, scrolling the view up when at the bottom. */
static void new_line(oled_console *con)
{
    int page;
    size_t i;

    con->col = 0;
    con->word_len = 0;
    if (con->row + 1 < OLED_ROWS) {
        con->row++;
    } else {
        /* One text line is one page: scrolling is a move of 7 pages up. */
        for (i = 0; i < (size_t)(OLED_ROWS - 1) * OLED_WIDTH; i++) {
            con->fb[i] = con->fb[i + OLED_WIDTH];
        }
        for (page = 0; page < OLED_ROWS - 1; page++) {
            mark_dirty(con, page);
        }
    }
    fill_zero(con->fb + (size_t)con->row * OLED_WIDTH, OLED_WIDTH);
    mark_dirty(con, con->row);
}

/* Blank cells [from, OLED_COLS) of the cursor's line. */
static void clear_cells_from(oled_console *con, int from)
{
    uint8_t *line = con->fb + (size_t)con->row * OLED_WIDTH;

    fill_zero(line + from * OLED_CELL_W, (size_t)(OLED_COLS - from) * OLED_CELL_W);
    mark_dirty(con, con->row);
}

static void draw_at_cursor(oled_console *con, uint8_t code)
{
    oled_draw_char(con->fb, con->col, con->row, code);
    mark_dirty(con, con->row);
    con->col++;
}

/* A glyph that belongs to a word (anything but a space). */
static void put_word_glyph(oled_console *con, uint8_t code)
{
    int i;

    if (con->col == OLED_COLS) {
        if (con->word_len > 0 && con->word_len < OLED_COLS) {
            /* The word started after a space on this line: move it to the next line whole. */
            clear_cells_from(con, OLED_COLS - con->word_len);
            i = con->word_len;
            new_line(con);
            con->word_len = (uint8_t)i;
            for (i = 0; i < con->word_len; i++) {
                draw_at_cursor(con, con->word[i]);
            }
        } else {
            /* The line ended in a space, or the word fills the whole line: break here. */
            new_line(con);
        }
    }
    if (con->word_len < OLED_COLS) {
        con->word[con->word_len] = code;
        con->word_len++;
    }
    draw_at_cursor(con, code);
}

static void put_space(oled_console *con)
{
    if (con->col == OLED_COLS) {
        new_line(con); /* the space that falls on the wrap is dropped */
        return;
    }
    con->word_len = 0;
    draw_at_cursor(con, ' ');
}

static void put_ascii(oled_console *con, uint8_t byte)
{
    if (byte == '\n') {
        new_line(con);
    } else if (byte == ' ' || byte == '\t') {
        put_space(con);
    } else if (byte >= OLED_GLYPH_FIRST && byte <= OLED_GLYPH_LAST) {
        put_word_glyph(con, byte);
    }
    /* '\r', DEL and the other control bytes draw nothing. */
}

/* Arm the decoder for the lead byte `lead`: how many continuation bytes follow and the range
 * allowed for the first of them (RFC 3629 section 4, Unicode 15 Table 3-7: the narrower ranges
 * after E0, ED, F0 and F4 exclude overlong forms, surrogates and code points above U+10FFFF).
 * Returns 0 for a byte that cannot start a character. */
static uint8_t utf8_start(oled_console *con, uint8_t lead)
{
    con->utf8_lo = 0x80;
    con->utf8_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        return 1;
    }
    if (lead >= 0xE0 && lead <= 0xEF) {
        if (lead == 0xE0) {
            con->utf8_lo = 0xA0;
        } else if (lead == 0xED) {
            con->utf8_hi = 0x9F;
        }
        return 2;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
        if (lead == 0xF0) {
            con->utf8_lo = 0x90;
        } else if (lead == 0xF4) {
            con->utf8_hi = 0x8F;
        }
        return 3;
    }
    return 0;
}

static void put_byte(oled_console *con, uint8_t byte)
{
    if (con->utf8_need > 0) {
        if (byte >= con->utf8_lo && byte <= con->utf8_hi) {
            con->utf8_lo = 0x80;
            con->utf8_hi = 0xBF;
            con->utf8_need--;
            if (con->utf8_need == 0) {
                put_word_glyph(con, OLED_GLYPH_PLACEHOLDER);
            }
            return;
        }
        /* Cut short: the partial character is one placeholder, then this byte starts afresh. */
        con->utf8_need = 0;
        put_word_glyph(con, OLED_GLYPH_PLACEHOLDER);
    }
    if (byte < 0x80) {
        put_ascii(con, byte);
        return;
    }
    con->utf8_need = utf8_start(con, byte);
    if (con->utf8_need == 0) {
        /* A stray continuation byte or a byte never valid in UTF-8 (C0, C1, F5..FF). */
        put_word_glyph(con, OLED_GLYPH_PLACEHOLDER);
    }
}

void oled_console_init(oled_console *con, uint8_t fb[OLED_FB_BYTES])
{
    con->fb = fb;
    con->col = 0;
    con->row = 0;
    con->word_len = 0;
    con->utf8_need = 0;
    con->utf8_lo = 0x80;
    con->utf8_hi = 0xBF;
    oled_clear(fb);
    con->dirty = 0xFF;
}

void oled_text_write(oled_console *con, const uint8_t *bytes, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        put_byte(con, bytes[i]);
    }
}

void oled_text_puts(oled_console *con, const char *s)
{
    while (*s != '\0') {
        put_byte(con, (uint8_t)*s);
        s++;
    }
}

void oled_text_finish(oled_console *con)
{
    if (con->utf8_need > 0) {
        con->utf8_need = 0;
        put_word_glyph(con, OLED_GLYPH_PLACEHOLDER);
    }
}

uint8_t oled_console_take_dirty(oled_console *con)
{
    uint8_t dirty = con->dirty;

    con->dirty = 0;
    return dirty;
}
