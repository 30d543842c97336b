/* oled_controller.c - the SSD1306 and SH1106 command streams: power-on configuration and
 * framebuffer flush.
 *
 * SSD1306 commands cite "SSD1306 Rev 1.1" (Solomon Systech, Apr 2008): section 9 (Table 9-1,
 * command table) and section 10 (command descriptions). The charge pump command 8Dh is not in
 * Rev 1.1's table: it is in the "Charge Pump Regulator" application note appended to it, which
 * later revisions took into the datasheet (section 8.10, "Charge Pump Regulator"). SH1106
 * commands cite the command table of "SH1106", Sino Wealth, V2.3 by command name.
 * Both controllers are flushed the same way, in page addressing mode (the SH1106 has no other):
 * per page, the page address (B0h | page), the start column as two nibble commands (00h-0Fh
 * low, 10h-1Fh high), then the page's 128 bytes.
 * The host simulator (firmware/esp32/host/sim/panel_sim.c) decodes exactly these commands.
 */
#include "oled.h"

/* SSD1306 power-on configuration for a 128x64 panel driven by the internal charge pump, as on
 * the common 0.96" I2C modules. Order: display off, timing and panel configuration, the charge
 * pump enabled, addressing and display modes, and display on last (the charge pump
 * application note switches the pump on with 8Dh 14h before AFh). */
static const uint8_t ssd1306_init[] = {
    0xAE,       /* display off (sleep) while configuring: 10.1.12 */
    0xD5, 0x80, /* display clock: divide ratio 1 (A[3:0] = 0), oscillator frequency 8 (A[7:4],
                   the reset value): 10.1.16 */
    0xA8, 0x3F, /* multiplex ratio 64 (value + 1), all 64 COM lines: 10.1.11 */
    0xD3, 0x00, /* display offset 0, no vertical shift: 10.1.15 */
    0x40,       /* display start line 0 (40h | line): 10.1.6 */
    0x8D, 0x14, /* charge pump on (A[2] = 1) so the panel's VCC comes from the 3.3 V supply:
                   Charge Pump Regulator, "Charge Pump Setting" */
    0x20, 0x02, /* memory addressing mode: page (A[1:0] = 10b, also the reset value), the mode
                   both controllers share: 10.1.3 */
    0xA1,       /* segment re-map: column 127 drives SEG0, i.e. x = 0 on the left of a module
                   mounted with its header on top: 10.1.8 */
    0xC8,       /* COM output scan direction remapped, COM63 -> COM0, i.e. page 0 at the top of
                   that module: 10.1.14 */
    0xDA, 0x12, /* COM pins: alternative configuration (A[4] = 1), no left/right remap (A[5] = 0),
                   as a 128x64 panel is wired: 10.1.18 */
    0x81, 0xCF, /* contrast 207 of 255 (reset value 7Fh): 10.1.7 */
    0xD9, 0xF1, /* pre-charge: phase 1 = 1 DCLK, phase 2 = 15 DCLK, the setting for the internal
                   charge pump (reset value 22h is for an external VCC): 10.1.17 */
    0xDB, 0x20, /* VCOMH deselect level ~0.77 x VCC (A[6:4] = 010b): 10.1.19 */
    0x2E,       /* deactivate scrolling, so RAM writes are shown as written: 10.2.3 */
    0xA4,       /* output follows RAM content (A5h would light every pixel): 10.1.9 */
    0xA6,       /* normal display, RAM bit 1 = pixel on (A7h inverts): 10.1.10 */
    0xAF,       /* display on: 10.1.12 */
};

/* SH1106 power-on configuration for the 1.3" 128x64 modules: the same panel settings in the
 * SH1106's commands, its DC-DC converter on instead of a charge pump, display on last. */
static const uint8_t sh1106_init[] = {
    0xAE,       /* Display OFF while configuring */
    0xD5, 0x50, /* Set Display Clock Divide Ratio/Oscillator Frequency: ratio 1 and the
                   nominal frequency (the POR value) */
    0xA8, 0x3F, /* Set Multiplex Ration: 64 */
    0xD3, 0x00, /* Set Display Offset: 0 */
    0x40,       /* Set Display Start Line: 0 */
    0xAD, 0x8B, /* Set DC-DC OFF/ON: 8Bh = on (the module has no external VPP) */
    0xA1,       /* Set Segment Re-map: reverse, so x = 0 is on the left (as A1h on the SSD1306) */
    0xC8,       /* Set Common Output Scan Direction: COM63 -> COM0, page 0 at the top */
    0xDA, 0x12, /* Set Common pads hardware configuration: alternative (the POR value) */
    0x81, 0xCF, /* Set Contrast Control: 207 of 255, as on the SSD1306 */
    0xD9, 0x22, /* Set Dis-charge/Pre-charge Period: 2 DCLK each (the POR value) */
    0xDB, 0x35, /* Set VCOM Deselect Level: 35h, the POR value (~0.77 x VREF) */
    0xA4,       /* Set Entire Display OFF/ON: off, output follows RAM */
    0xA6,       /* Set Normal/Reverse Display: normal */
    0xAF,       /* Display ON */
};

static int send(const oled_device *dev, uint8_t control, const uint8_t *bytes, size_t n)
{
    uint8_t packet[1 + OLED_I2C_MAX_PAYLOAD];
    size_t chunk, i;
    int status;

    while (n > 0) {
        chunk = n < OLED_I2C_MAX_PAYLOAD ? n : OLED_I2C_MAX_PAYLOAD;
        packet[0] = control;
        for (i = 0; i < chunk; i++) {
            packet[1 + i] = bytes[i];
        }
        status = dev->bus.write(dev->bus.ctx, dev->i2c_addr, packet, chunk + 1);
        if (status != 0) {
            return status;
        }
        bytes += chunk;
        n -= chunk;
    }
    return 0;
}

static int send_commands(const oled_device *dev, const uint8_t *commands, size_t n)
{
    return send(dev, OLED_CONTROL_COMMANDS, commands, n);
}

/* Point the RAM at the first shown column of `page` (SSD1306 10.1.13, 10.1.1, 10.1.2; SH1106
 * Set Page Address, Set Lower / Higher Column Address). */
static int set_page(const oled_device *dev, uint8_t page)
{
    const uint8_t column = dev->controller == OLED_SH1106 ? OLED_SH1106_COLUMN_OFFSET : 0;
    uint8_t commands[3];

    commands[0] = (uint8_t)(0xB0 | page);
    commands[1] = (uint8_t)(0x00 | (column & 0x0F));
    commands[2] = (uint8_t)(0x10 | (column >> 4));
    return send_commands(dev, commands, sizeof(commands));
}

int oled_init(const oled_device *dev)
{
    if (dev->controller == OLED_SH1106) {
        return send_commands(dev, sh1106_init, sizeof(sh1106_init));
    }
    return send_commands(dev, ssd1306_init, sizeof(ssd1306_init));
}

int oled_flush(const oled_device *dev, const uint8_t fb[OLED_FB_BYTES])
{
    return oled_flush_pages(dev, fb, 0xFF);
}

int oled_flush_pages(const oled_device *dev, const uint8_t fb[OLED_FB_BYTES], uint8_t page_mask)
{
    uint8_t page;
    int status;

    for (page = 0; page < OLED_PAGES; page++) {
        if (((unsigned)page_mask >> page) & 1u) {
            status = set_page(dev, page);
            if (status == 0) {
                status = send(dev, OLED_CONTROL_DATA, fb + (size_t)page * OLED_WIDTH, OLED_WIDTH);
            }
            if (status != 0) {
                return status;
            }
        }
    }
    return 0;
}

int oled_set_contrast(const oled_device *dev, uint8_t contrast)
{
    uint8_t commands[2];

    commands[0] = 0x81; /* SSD1306 10.1.7; SH1106 Set Contrast Control */
    commands[1] = contrast;
    return send_commands(dev, commands, sizeof(commands));
}

int oled_display_on(const oled_device *dev, int on)
{
    uint8_t command = on ? 0xAF : 0xAE; /* SSD1306 10.1.12; SH1106 Display OFF/ON */

    return send_commands(dev, &command, 1);
}
