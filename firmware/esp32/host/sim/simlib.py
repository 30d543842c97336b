"""ctypes access to the OLED library and screen simulator (libgs_sim.so), for the pytest suite.

    lib = simlib.load()          # builds with CMake if needed, returns the prototyped CDLL
    fb = simlib.framebuffer()    # 1024 zero bytes, page layout
    lib.oled_draw_char(fb, 0, 0, ord("A"))

The build is the host build every C test uses: gptstack.tools.firmware_host.build_host("release")
configures firmware/esp32/host/CMakeLists.txt, which includes oled.cmake (the one definition of
the gs_oled / gs_sim targets), and rebuilds incrementally, once per process; load() takes
libgs_sim.so from there.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint8, c_uint32, c_void_p
from functools import cache
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent

WIDTH, HEIGHT, PAGES, FB_BYTES = 128, 64, 8, 1024
COLS, ROWS, CELL_W, GLYPH_W = 21, 8, 6, 5
I2C_ADDR = 0x3C
PLACEHOLDER = 0x7F

# int (*write)(void *ctx, uint8_t i2c_addr, const uint8_t *bytes, size_t n)
WRITE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint8, POINTER(c_uint8), c_size_t)


class Transport(ctypes.Structure):
    _fields_ = [("ctx", c_void_p), ("write", WRITE_FN)]


SSD1306, SH1106 = 0, 1  # oled.h OLED_SSD1306, OLED_SH1106
SH1106_COLUMN_OFFSET, RAM_COLS = 2, 132  # oled.h, gs_sim.h GS_SIM_RAM_COLS


class Device(ctypes.Structure):
    _fields_ = [("bus", Transport), ("i2c_addr", c_uint8), ("controller", c_uint8)]


@cache
def build() -> Path:
    """Build the host firmware (release variant) if needed, once per process; its build
    directory."""
    from gptstack.tools.firmware_host import build_host

    return build_host("release").build_dir


def _prototype(lib: ctypes.CDLL) -> ctypes.CDLL:
    u8p = POINTER(c_uint8)
    sigs = {
        "oled_clear": (None, [u8p]),
        "oled_set_pixel": (None, [u8p, c_int, c_int, c_int]),
        "oled_get_pixel": (c_int, [u8p, c_int, c_int]),
        "oled_glyph": (u8p, [c_uint8]),
        "oled_draw_glyph": (None, [u8p, c_int, c_int, u8p]),
        "oled_draw_char": (None, [u8p, c_int, c_int, c_uint8]),
        "oled_draw_string": (c_int, [u8p, c_int, c_int, c_char_p]),
        "oled_console_init": (None, [c_void_p, u8p]),
        "oled_text_write": (None, [c_void_p, c_char_p, c_size_t]),
        "oled_text_puts": (None, [c_void_p, c_char_p]),
        "oled_text_finish": (None, [c_void_p]),
        "oled_console_take_dirty": (c_uint8, [c_void_p]),
        "oled_init": (c_int, [POINTER(Device)]),
        "oled_flush": (c_int, [POINTER(Device), u8p]),
        "oled_flush_pages": (c_int, [POINTER(Device), u8p, c_uint8]),
        "oled_set_contrast": (c_int, [POINTER(Device), c_uint8]),
        "oled_display_on": (c_int, [POINTER(Device), c_int]),
        "gs_sim_write_png": (c_int, [u8p, c_char_p, c_int]),
        "gs_sim_crc32": (c_uint32, [c_uint32, c_char_p, c_size_t]),
        "gs_sim_adler32": (c_uint32, [c_uint32, c_char_p, c_size_t]),
        "gs_sim_panel_reset": (None, [c_void_p, c_uint8, c_uint8]),
        "gs_sim_panel_i2c_write": (c_int, [c_void_p, c_uint8, c_char_p, c_size_t]),
        "gs_sim_panel_view": (None, [c_void_p, u8p]),
        "gs_sim_screen_init": (None, [c_void_p, c_uint8]),
        "gs_sim_screen_write": (None, [c_void_p, c_char_p, c_size_t]),
        "gs_sim_screen_save_png": (c_int, [c_void_p, c_char_p, c_int]),
        "gs_sim_capi_sizeof_console": (c_size_t, []),
        "gs_sim_capi_sizeof_panel": (c_size_t, []),
        "gs_sim_capi_sizeof_screen": (c_size_t, []),
        "gs_sim_capi_panel_errors": (c_uint32, [c_void_p]),
        "gs_sim_capi_panel_error": (c_char_p, [c_void_p]),
        "gs_sim_capi_panel_transactions": (c_uint32, [c_void_p]),
        "gs_sim_capi_panel_data_bytes": (c_uint32, [c_void_p]),
        "gs_sim_capi_panel_gddram": (u8p, [c_void_p]),
        "gs_sim_capi_screen_fb": (u8p, [c_void_p]),
        "gs_sim_capi_screen_panel": (c_void_p, [c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


@cache
def load() -> ctypes.CDLL:
    """Build if needed and load libgs_sim.so with every prototype set."""
    return _prototype(ctypes.CDLL(str(build() / "libgs_sim.so")))


def screen_tool() -> Path:
    """The gs-screen executable (of the same build as load())."""
    return build() / "gs-screen"


def framebuffer(data: bytes | None = None) -> ctypes.Array:
    """A 1024-byte framebuffer, zeroed or holding `data`."""
    fb = (c_uint8 * FB_BYTES)()
    if data is not None:
        ctypes.memmove(fb, data, FB_BYTES)
    return fb


def opaque(size: int) -> ctypes.Array:
    """Zeroed, malloc-aligned storage for a C struct Python does not look inside."""
    return ctypes.create_string_buffer(size)


def new_console(lib: ctypes.CDLL, fb: ctypes.Array) -> ctypes.Array:
    console = opaque(lib.gs_sim_capi_sizeof_console())
    lib.oled_console_init(console, fb)
    return console


def new_panel(lib: ctypes.CDLL, addr: int = I2C_ADDR, controller: int = SSD1306) -> ctypes.Array:
    panel = opaque(lib.gs_sim_capi_sizeof_panel())
    lib.gs_sim_panel_reset(panel, addr, controller)
    return panel


def panel_view(lib: ctypes.CDLL, panel: ctypes.Array) -> bytes:
    view = framebuffer()
    lib.gs_sim_panel_view(panel, view)
    return bytes(view)


def panel_error(lib: ctypes.CDLL, panel: ctypes.Array) -> str:
    return (lib.gs_sim_capi_panel_error(panel) or b"").decode()


class Capture:
    """A transport that records every I2C write as (address, bytes) and can fail on demand."""

    def __init__(self, fail_at: int | None = None, status: int = 5) -> None:
        self.writes: list[tuple[int, bytes]] = []
        self.fail_at, self.status = fail_at, status
        self._fn = WRITE_FN(self._write)  # keep a reference: C holds this pointer

    def _write(self, _ctx, addr, data, n) -> int:
        if self.fail_at is not None and len(self.writes) == self.fail_at:
            return self.status
        self.writes.append((addr, ctypes.string_at(data, n)))
        return 0

    def device(self, addr: int = I2C_ADDR, controller: int = SSD1306) -> Device:
        return Device(Transport(None, self._fn), addr, controller)
