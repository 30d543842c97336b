/* sim_capi.c - sizes and field access for Python's ctypes (the pytest suite), linked only into
 * libgs_sim.so. Python allocates the structs as opaque buffers of these sizes, so it never
 * mirrors a C layout that could drift.
 */
#include "gs_sim.h"

size_t gs_sim_capi_sizeof_console(void);
size_t gs_sim_capi_sizeof_panel(void);
size_t gs_sim_capi_sizeof_screen(void);
uint32_t gs_sim_capi_panel_errors(const gs_sim_panel *panel);
const char *gs_sim_capi_panel_error(const gs_sim_panel *panel);
uint32_t gs_sim_capi_panel_transactions(const gs_sim_panel *panel);
uint32_t gs_sim_capi_panel_data_bytes(const gs_sim_panel *panel);
const uint8_t *gs_sim_capi_panel_gddram(const gs_sim_panel *panel);
uint8_t *gs_sim_capi_screen_fb(gs_sim_screen *screen);
gs_sim_panel *gs_sim_capi_screen_panel(gs_sim_screen *screen);

size_t gs_sim_capi_sizeof_console(void) { return sizeof(oled_console); }
size_t gs_sim_capi_sizeof_panel(void) { return sizeof(gs_sim_panel); }
size_t gs_sim_capi_sizeof_screen(void) { return sizeof(gs_sim_screen); }
uint32_t gs_sim_capi_panel_errors(const gs_sim_panel *panel) { return panel->errors; }
const char *gs_sim_capi_panel_error(const gs_sim_panel *panel) { return panel->error; }
uint32_t gs_sim_capi_panel_transactions(const gs_sim_panel *panel) { return panel->transactions; }
uint32_t gs_sim_capi_panel_data_bytes(const gs_sim_panel *panel) { return panel->data_bytes; }
const uint8_t *gs_sim_capi_panel_gddram(const gs_sim_panel *panel) { return panel->gddram; }
uint8_t *gs_sim_capi_screen_fb(gs_sim_screen *screen) { return screen->fb; }
gs_sim_panel *gs_sim_capi_screen_panel(gs_sim_screen *screen) { return &screen->panel; }
