/* Unity tests of lib/oled for `pio test -e native` (the pytest suite in host/tests covers the
 * same library more deeply through the CMake build and the SSD1306 simulator). */
#include <string.h>
#include <unity.h>

#include "oled.h"

static uint8_t fb[OLED_FB_BYTES];

void setUp(void) { memset(fb, 0, sizeof(fb)); }
void tearDown(void) {}

/* Cell (col, row) as 8 strings of 6 '#'/'.' characters. */
static void cell_art(int col, int row, char art[8][7])
{
    int x, y;
    for (y = 0; y < 8; y++) {
        for (x = 0; x < 6; x++) {
            art[y][x] = oled_get_pixel(fb, col * 6 + x, row * 8 + y) ? '#' : '.';
        }
        art[y][6] = '\0';
    }
}

static void test_glyph_A_pixels(void)
{
    static const char *expected[8] = {".###..", "#...#.", "#...#.", "#####.",
                                      "#...#.", "#...#.", "#...#.", "......"};
    char art[8][7];
    int y;

    oled_draw_char(fb, 3, 2, 'A');
    cell_art(3, 2, art);
    for (y = 0; y < 8; y++) {
        TEST_ASSERT_EQUAL_STRING(expected[y], art[y]);
    }
}

static void test_pixel_page_layout(void)
{
    oled_set_pixel(fb, 5, 13, 1);
    TEST_ASSERT_EQUAL_UINT8(1u << 5, fb[128 + 5]);
    TEST_ASSERT_EQUAL_INT(1, oled_get_pixel(fb, 5, 13));
    oled_set_pixel(fb, 500, 13, 1); /* ignored */
    TEST_ASSERT_EQUAL_INT(0, oled_get_pixel(fb, -1, 0));
}

/* The glyph code drawn at a cell, by comparing with every glyph; -1 if none matches. */
static int cell_code(int col, int row)
{
    const uint8_t *cell = &fb[row * OLED_WIDTH + col * OLED_CELL_W];
    int code;
    for (code = OLED_GLYPH_FIRST; code <= OLED_GLYPH_PLACEHOLDER; code++) {
        if (memcmp(cell, oled_glyph((uint8_t)code), OLED_GLYPH_W) == 0 && cell[5] == 0) {
            return code;
        }
    }
    return -1;
}

static void test_word_wraps_whole(void)
{
    oled_console con;
    oled_console_init(&con, fb);
    oled_text_puts(&con, "aaaaaaaaaaaaaaaaaa bcd"); /* 18 + 1 + 3 > 21 */
    TEST_ASSERT_EQUAL_INT('a', cell_code(17, 0));
    TEST_ASSERT_EQUAL_INT(' ', cell_code(19, 0));
    TEST_ASSERT_EQUAL_INT('b', cell_code(0, 1));
    TEST_ASSERT_EQUAL_INT('d', cell_code(2, 1));
}

static void test_scrolls_when_full(void)
{
    oled_console con;
    int i;
    oled_console_init(&con, fb);
    for (i = 0; i < 10; i++) {
        char line[3] = {(char)('0' + i), '\n', '\0'};
        oled_text_puts(&con, line);
    }
    /* lines "0".."9" then an empty line: the view shows "3".."9" and the empty last line */
    TEST_ASSERT_EQUAL_INT('3', cell_code(0, 0));
    TEST_ASSERT_EQUAL_INT('9', cell_code(0, 6));
    TEST_ASSERT_EQUAL_INT(' ', cell_code(0, 7));
}

static void test_utf8_split_draws_one_placeholder(void)
{
    oled_console con;
    const uint8_t first[] = {'c', 0xC3}, second[] = {0xA9, 'x'};
    oled_console_init(&con, fb);
    oled_text_write(&con, first, sizeof(first));
    TEST_ASSERT_EQUAL_INT(' ', cell_code(1, 0)); /* waiting for the continuation byte */
    oled_text_write(&con, second, sizeof(second));
    TEST_ASSERT_EQUAL_INT(OLED_GLYPH_PLACEHOLDER, cell_code(1, 0));
    TEST_ASSERT_EQUAL_INT('x', cell_code(2, 0));
}

/* A transport that records what would go on the I2C bus. */
static uint8_t bus_bytes[4096];
static size_t bus_len;
static int bus_writes;

static int record(void *ctx, uint8_t addr, const uint8_t *bytes, size_t n)
{
    (void)ctx;
    TEST_ASSERT_EQUAL_HEX8(OLED_I2C_ADDR, addr);
    TEST_ASSERT_TRUE(n >= 2 && n <= 1 + OLED_I2C_MAX_PAYLOAD);
    TEST_ASSERT_TRUE(bytes[0] == OLED_CONTROL_COMMANDS || bytes[0] == OLED_CONTROL_DATA);
    if (bytes[0] == OLED_CONTROL_DATA) {
        memcpy(bus_bytes + bus_len, bytes + 1, n - 1);
        bus_len += n - 1;
    }
    bus_writes++;
    return 0;
}

/* Both controllers get the framebuffer's bytes, page after page. */
static void test_flush_sends_the_framebuffer(void)
{
    static const uint8_t controllers[2] = {OLED_SSD1306, OLED_SH1106};
    oled_device dev;
    int i, c;
    for (i = 0; i < OLED_FB_BYTES; i++) {
        fb[i] = (uint8_t)(i * 7 + 3);
    }
    for (c = 0; c < 2; c++) {
        dev.bus.ctx = NULL;
        dev.bus.write = record;
        dev.i2c_addr = OLED_I2C_ADDR;
        dev.controller = controllers[c];
        bus_len = 0;
        bus_writes = 0;
        TEST_ASSERT_EQUAL_INT(0, oled_init(&dev));
        TEST_ASSERT_EQUAL_INT(0, oled_flush(&dev, fb));
        TEST_ASSERT_EQUAL_size_t(OLED_FB_BYTES, bus_len);
        TEST_ASSERT_EQUAL_MEMORY(fb, bus_bytes, OLED_FB_BYTES);
    }
}

int main(void)
{
    UNITY_BEGIN();
    RUN_TEST(test_glyph_A_pixels);
    RUN_TEST(test_pixel_page_layout);
    RUN_TEST(test_word_wraps_whole);
    RUN_TEST(test_scrolls_when_full);
    RUN_TEST(test_utf8_split_draws_one_placeholder);
    RUN_TEST(test_flush_sends_the_framebuffer);
    return UNITY_END();
}
