/* panel_sim.c - a model of the SSD1306 and of the SH1106 that decodes the I2C byte stream into
 * display RAM and display state, and renders what the glass shows.
 *
 * It is written from the datasheets (SSD1306 Rev 1.1, sections 8.1.5 and 9-10; SH1106 V2.3,
 * its command table), not from lib/oled: it accepts any valid stream (Co = 1 single-byte
 * control, page / vertical / horizontal addressing on the SSD1306, commands split across
 * transactions) and rejects a command the simulated controller does not have, so a test that
 * decodes what lib/oled sent and gets the framebuffer back checks the bytes, their order and
 * that each controller got its own commands.
 */
#include "gs_sim.h"

#include <stdio.h>
#include <string.h>

#define MODE_HORIZONTAL 0
#define MODE_VERTICAL 1
#define MODE_PAGE 2

static void protocol_error(gs_sim_panel *p, const char *what, unsigned value)
{
    p->errors++;
    if (p->error[0] == '\0') {
        snprintf(p->error, sizeof(p->error), "%s (0x%02X) after %lu command and %lu data bytes",
                 what, value, (unsigned long)p->command_bytes, (unsigned long)p->data_bytes);
    }
}

void gs_sim_panel_reset(gs_sim_panel *p, uint8_t i2c_addr, uint8_t controller)
{
    memset(p, 0, sizeof(*p));
    p->i2c_addr = i2c_addr;
    p->controller = controller;
    /* Reset values: SSD1306 section 10 command descriptions and Table 9-1 "(RESET)" entries;
     * the SH1106's power-on values where they differ (its DC-DC converter is on, 8Bh). */
    p->mode = MODE_PAGE;
    p->col_end = OLED_WIDTH - 1;
    p->page_end = OLED_PAGES - 1;
    p->contrast = controller == OLED_SH1106 ? 0x80 : 0x7F;
    p->mux = 63;
    p->com_pins = 0x12;
    p->clock = controller == OLED_SH1106 ? 0x50 : 0x80;
    p->precharge = 0x22;
    p->vcomh = controller == OLED_SH1106 ? 0x35 : 0x20;
    p->charge_pump = controller == OLED_SH1106 ? 1 : 0;
}

/* SH1106 command table: parameter bytes after the first byte; -1: not an SH1106 command. */
static int sh1106_parameter_count(uint8_t c)
{
    if (c <= 0x1F || (c >= 0x30 && c <= 0x33) || (c >= 0x40 && c <= 0x7F) ||
        (c >= 0xB0 && c <= 0xB7)) {
        return 0; /* column nibbles, pump voltage, start line, page address */
    }
    switch (c) {
    case 0x81: case 0xA8: case 0xAD: case 0xD3: case 0xD5: case 0xD9: case 0xDA: case 0xDB:
        return 1;
    case 0xA0: case 0xA1: case 0xA4: case 0xA5: case 0xA6: case 0xA7: case 0xAE: case 0xAF:
    case 0xC0: case 0xC8: case 0xE0: case 0xE3: case 0xEE:
        return 0;
    default:
        return -1; /* 20h-22h, 8Dh, scrolling ...: SSD1306 only */
    }
}

/* Parameter bytes that follow each command's first byte (Table 9-1); -1: not a command. */
static int parameter_count(const gs_sim_panel *p, uint8_t c)
{
    if (p->controller == OLED_SH1106) {
        return sh1106_parameter_count(c);
    }
    if (c <= 0x1F || (c >= 0x40 && c <= 0x7F) || (c >= 0xB0 && c <= 0xB7)) {
        return 0; /* column nibble, start line, page start */
    }
    switch (c) {
    case 0x20: case 0x81: case 0x8D: case 0xA8: case 0xD3: case 0xD5: case 0xD9: case 0xDA:
    case 0xDB:
        return 1;
    case 0x21: case 0x22: case 0xA3:
        return 2;
    case 0x26: case 0x27:
        return 6;
    case 0x29: case 0x2A:
        return 5;
    case 0x2E: case 0x2F: case 0xA0: case 0xA1: case 0xA4: case 0xA5: case 0xA6: case 0xA7:
    case 0xAE: case 0xAF: case 0xC0: case 0xC8: case 0xE3:
        return 0;
    default:
        return -1;
    }
}

static void execute(gs_sim_panel *p)
{
    const uint8_t *a = p->cmd + 1; /* parameters */
    uint8_t c = p->cmd[0];

    if (c <= 0x0F) {                                    /* 10.1.1 lower column nibble */
        p->page_mode_col_start = (uint8_t)((p->page_mode_col_start & 0xF0) | c);
        p->col = p->page_mode_col_start;
    } else if (c <= 0x1F) {                             /* 10.1.2 higher column nibble */
        /* 3 bits on the SSD1306 (128 columns), 4 on the SH1106 (132) */
        const uint8_t high = (uint8_t)(c & (p->controller == OLED_SH1106 ? 0x0F : 0x07));
        p->page_mode_col_start = (uint8_t)((p->page_mode_col_start & 0x0F) | (high << 4));
        p->col = p->page_mode_col_start;
    } else if (c >= 0x30 && c <= 0x33) {                /* SH1106 pump voltage: no effect here */
    } else if (c >= 0x40 && c <= 0x7F) {                /* 10.1.6 display start line */
        p->start_line = (uint8_t)(c & 0x3F);
    } else if (c >= 0xB0 && c <= 0xB7) {                /* 10.1.13 page start (page mode) */
        p->page = (uint8_t)(c & 0x07);
    } else {
        switch (c) {
        case 0x20:                                      /* 10.1.3 addressing mode */
            if ((a[0] & 0x03) == 0x03) {
                protocol_error(p, "invalid addressing mode", a[0]);
            } else {
                p->mode = (uint8_t)(a[0] & 0x03);
            }
            break;
        case 0x21:                                      /* 10.1.4 column window */
            p->col_start = (uint8_t)(a[0] & 0x7F);
            p->col_end = (uint8_t)(a[1] & 0x7F);
            p->col = p->col_start;
            break;
        case 0x22:                                      /* 10.1.5 page window */
            p->page_start = (uint8_t)(a[0] & 0x07);
            p->page_end = (uint8_t)(a[1] & 0x07);
            p->page = p->page_start;
            break;
        case 0x81: p->contrast = a[0]; break;           /* 10.1.7 */
        case 0x8D: p->charge_pump = (uint8_t)((a[0] >> 2) & 1); break; /* charge pump note */
        case 0xAD: p->charge_pump = (uint8_t)(a[0] & 1); break;  /* SH1106 DC-DC: 8Bh on */
        case 0xA0: case 0xA1: p->seg_remap = (uint8_t)(c & 1); break;  /* 10.1.8 */
        case 0xA4: case 0xA5: p->entire_on = (uint8_t)(c & 1); break;  /* 10.1.9 */
        case 0xA6: case 0xA7: p->inverse = (uint8_t)(c & 1); break;    /* 10.1.10 */
        case 0xA8:                                      /* 10.1.11 multiplex ratio */
            if ((a[0] & 0x3F) < 15) {
                protocol_error(p, "invalid multiplex ratio", a[0]);
            } else {
                p->mux = (uint8_t)(a[0] & 0x3F);
            }
            break;
        case 0xAE: case 0xAF: p->display_on = (uint8_t)(c & 1); break; /* 10.1.12 */
        case 0xC0: case 0xC8: p->com_remap = (uint8_t)((c >> 3) & 1); break; /* 10.1.14 */
        case 0xD3: p->offset = (uint8_t)(a[0] & 0x3F); break;           /* 10.1.15 */
        case 0xD5: p->clock = a[0]; break;                              /* 10.1.16 */
        case 0xD9: p->precharge = a[0]; break;                          /* 10.1.17 */
        case 0xDA: p->com_pins = (uint8_t)(a[0] & 0x32); break;         /* 10.1.18 */
        case 0xDB: p->vcomh = (uint8_t)(a[0] & 0x70); break;            /* 10.1.19 */
        case 0x2E: p->scrolling = 0; break;                             /* 10.2.3 */
        case 0x2F: p->scrolling = 1; break;                             /* 10.2.4 */
        default: break;                                 /* scroll setup, A3h, NOP: no effect here */
        }
    }
}

static void command_byte(gs_sim_panel *p, uint8_t byte)
{
    int params;

    p->command_bytes++;
    if (p->cmd_need > 0) {
        p->cmd[p->cmd_len++] = byte;
        p->cmd_need--;
        if (p->cmd_need == 0) {
            execute(p);
        }
        return;
    }
    params = parameter_count(p, byte);
    if (params < 0) {
        protocol_error(p, "unknown command", byte);
        return;
    }
    p->cmd[0] = byte;
    p->cmd_len = 1;
    p->cmd_need = (uint8_t)params;
    if (params == 0) {
        execute(p);
    }
}

/* Write one GDDRAM byte and advance the pointers as the addressing mode says (10.1.3). */
static void data_byte(gs_sim_panel *p, uint8_t byte)
{
    p->data_bytes++;
    if (p->cmd_need > 0) {
        protocol_error(p, "data while a command waits for parameters", p->cmd[0]);
        p->cmd_need = 0;
    }
    if (p->controller == OLED_SH1106) {
        /* page mode only; the column counts up to the last RAM column: a write past it is a
         * stream no SH1106 driver should send */
        if (p->col >= GS_SIM_RAM_COLS) {
            protocol_error(p, "data past the last RAM column", p->col);
            return;
        }
        p->gddram[(size_t)p->page * GS_SIM_RAM_COLS + p->col] = byte;
        p->col++;
        return;
    }
    p->gddram[(size_t)p->page * GS_SIM_RAM_COLS + p->col] = byte;
    if (p->mode == MODE_PAGE) {
        p->col = p->col >= OLED_WIDTH - 1 ? p->page_mode_col_start : (uint8_t)(p->col + 1);
    } else if (p->mode == MODE_HORIZONTAL) {
        if (p->col >= p->col_end) {
            p->col = p->col_start;
            p->page = p->page >= p->page_end ? p->page_start : (uint8_t)(p->page + 1);
        } else {
            p->col++;
        }
    } else {
        if (p->page >= p->page_end) {
            p->page = p->page_start;
            p->col = p->col >= p->col_end ? p->col_start : (uint8_t)(p->col + 1);
        } else {
            p->page++;
        }
    }
}

/* One payload byte after `control`: GDDRAM data when D/C# (bit 6) is set, else a command. */
static void payload_byte(gs_sim_panel *p, uint8_t control, uint8_t byte)
{
    if (control & 0x40) {
        data_byte(p, byte);
    } else {
        command_byte(p, byte);
    }
}

int gs_sim_panel_i2c_write(void *ctx, uint8_t i2c_addr, const uint8_t *bytes, size_t n)
{
    gs_sim_panel *p = (gs_sim_panel *)ctx;
    size_t i = 0;
    uint8_t control;

    if (i2c_addr != p->i2c_addr) {
        return -1;
    }
    p->transactions++;
    if (n == 0) {
        protocol_error(p, "empty write: no control byte", 0);
        return 0;
    }
    /* 8.1.5.1: control byte = Co D/C# 0 0 0 0 0 0. Co = 0: every byte after it is command
     * (D/C# = 0) or data (D/C# = 1). Co = 1: one byte, then another control byte. */
    while (i < n) {
        control = bytes[i++];
        if ((control & 0x3F) != 0) {
            protocol_error(p, "control byte with reserved bits set", control);
            return 0;
        }
        if (i == n) {
            protocol_error(p, "control byte without a payload", control);
            return 0;
        }
        if (control & 0x80) {
            payload_byte(p, control, bytes[i++]);
            continue;
        }
        for (; i < n; i++) {
            payload_byte(p, control, bytes[i]);
        }
    }
    return 0;
}

oled_transport gs_sim_transport(gs_sim_panel *panel)
{
    oled_transport t;

    t.ctx = panel;
    t.write = gs_sim_panel_i2c_write;
    return t;
}

/* The module's glass: with COM scan remap (C8h) and the alternative COM pin configuration
 * (DAh 12h), row y of the glass shows display line y; without the remap, line 63 - y. A
 * sequential COM pin configuration on this glass interleaves the lines (10.1.18: line d lands
 * on row 2d for d < 32, row 2(d - 32) + 1 otherwise). Display line d shows RAM row
 * (d + start line + offset) mod 64 (10.1.6, 10.1.15). Column x shows RAM column x with A1h,
 * 127 - x without (10.1.8); on the SH1106, whose 1.3" glass is wired to the middle 128 of its
 * 132 segments, x + 2 with A1h and 129 - x without. */
void gs_sim_panel_view(const gs_sim_panel *p, uint8_t view[OLED_FB_BYTES])
{
    const int first = p->controller == OLED_SH1106 ? OLED_SH1106_COLUMN_OFFSET : 0;
    int x, y, line, ram_row, ram_col, lit;

    memset(view, 0, OLED_FB_BYTES);
    if (!p->display_on || !p->charge_pump) {
        return; /* no VCC for the panel, or sleep: dark */
    }
    for (y = 0; y < OLED_HEIGHT; y++) {
        line = p->com_remap ? y : OLED_HEIGHT - 1 - y;
        if ((p->com_pins & 0x10) == 0) {
            line = line % 2 == 0 ? line / 2 : OLED_HEIGHT / 2 + line / 2;
        }
        if (line > p->mux) {
            continue; /* COM lines past the multiplex ratio are not driven */
        }
        ram_row = (line + p->start_line + p->offset) % OLED_HEIGHT;
        for (x = 0; x < OLED_WIDTH; x++) {
            ram_col = p->seg_remap ? first + x : first + OLED_WIDTH - 1 - x;
            lit = (p->gddram[(size_t)(ram_row / 8) * GS_SIM_RAM_COLS + (size_t)ram_col] >>
                   (ram_row % 8)) & 1; /* page layout */
            if (p->entire_on) {
                lit = 1;
            } else if (p->inverse) {
                lit = !lit;
            }
            if (lit) {
                oled_set_pixel(view, x, y, 1);
            }
        }
    }
}
