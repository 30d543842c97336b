/* sim_screen.c - the whole host screen: text console -> SSD1306 command stream -> simulated
 * panel -> PNG, wired exactly as the firmware's loop (src/main.cpp) wires the real panel.
 */
#include "gs_sim.h"

#include <string.h>

void gs_sim_screen_init(gs_sim_screen *s, uint8_t controller)
{
    memset(s, 0, sizeof(*s));
    gs_sim_panel_reset(&s->panel, OLED_I2C_ADDR, controller);
    s->device.bus = gs_sim_transport(&s->panel);
    s->device.i2c_addr = OLED_I2C_ADDR;
    s->device.controller = controller;
    oled_console_init(&s->console, s->fb);
    /* The simulated bus never NACKs its own address, so these cannot fail. */
    (void)oled_init(&s->device);
    (void)oled_flush(&s->device, s->fb);
    (void)oled_console_take_dirty(&s->console);
}

void gs_sim_screen_write(gs_sim_screen *s, const uint8_t *bytes, size_t n)
{
    oled_text_write(&s->console, bytes, n);
    (void)oled_flush_pages(&s->device, s->fb, oled_console_take_dirty(&s->console));
}

int gs_sim_screen_save_png(gs_sim_screen *s, const char *path, int scale)
{
    uint8_t view[OLED_FB_BYTES];

    oled_text_finish(&s->console);
    (void)oled_flush_pages(&s->device, s->fb, oled_console_take_dirty(&s->console));
    gs_sim_panel_view(&s->panel, view);
    return gs_sim_write_png(view, path, scale);
}
