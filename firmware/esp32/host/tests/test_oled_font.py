"""The 6x8 font: the C table matches its design source, glyphs are distinct and drawn where and
how the expectations below (written by hand here, not read from the code) say."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import gen_font
import pytest
import simlib

SIM_DIR = Path(__file__).resolve().parents[1] / "sim"
OLED_DIR = Path(__file__).resolve().parents[2] / "lib" / "oled"

# Expected pixels, drawn independently of font6x8.txt: '#' lit, '.' dark, 6 columns (the 6th is
# the spacing column) by 8 rows (a page).
EXPECTED = {
    "A": [
        ".###..",
        "#...#.",
        "#...#.",
        "#####.",
        "#...#.",
        "#...#.",
        "#...#.",
        "......",
    ],
    "g": [
        "......",
        "......",
        ".####.",
        "#...#.",
        "#...#.",
        ".####.",
        "....#.",
        ".###..",
    ],
    "7": [
        "#####.",
        "....#.",
        "...#..",
        "..#...",
        "..#...",
        "..#...",
        "..#...",
        "......",
    ],
}


def cell_art(lib, fb, col: int, row: int) -> list[str]:
    """The 6x8 pixels of text cell (col, row) read back with oled_get_pixel."""
    x0, y0 = col * simlib.CELL_W, row * 8
    return [
        "".join(
            "#" if lib.oled_get_pixel(fb, x0 + x, y0 + y) else "." for x in range(simlib.CELL_W)
        )
        for y in range(8)
    ]


def glyph_bytes(lib, code: int) -> bytes:
    return bytes(lib.oled_glyph(code)[: simlib.GLYPH_W])


def test_generated_table_matches_design_source():
    result = subprocess.run(
        [sys.executable, str(SIM_DIR / "gen_font.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("char", sorted(EXPECTED))
@pytest.mark.parametrize("cell", [(0, 0), (20, 7), (7, 3)])
def test_glyph_pixels_at_a_cell(lib, char, cell):
    fb = simlib.framebuffer(b"\xff" * simlib.FB_BYTES)  # drawing must replace the whole cell
    lib.oled_draw_char(fb, cell[0], cell[1], ord(char))
    assert cell_art(lib, fb, *cell) == EXPECTED[char]
    # nothing outside the cell changed
    x0, y0 = cell[0] * simlib.CELL_W, cell[1] * 8
    for y in range(simlib.HEIGHT):
        for x in range(simlib.WIDTH):
            if not (x0 <= x < x0 + simlib.CELL_W and y0 <= y < y0 + 8):
                assert lib.oled_get_pixel(fb, x, y) == 1, (x, y)


def test_printable_glyphs_distinct_and_non_empty(lib):
    glyphs = {code: glyph_bytes(lib, code) for code in range(0x20, 0x7F)}
    assert glyphs[0x20] == bytes(simlib.GLYPH_W)
    for code, g in glyphs.items():
        if code != 0x20:
            assert any(g), f"glyph {chr(code)!r} is empty"
    by_bitmap: dict[bytes, int] = {}
    for code, g in glyphs.items():
        assert g not in by_bitmap, f"{chr(code)!r} looks like {chr(by_bitmap[g])!r}"
        by_bitmap[g] = code
    placeholder = glyph_bytes(lib, simlib.PLACEHOLDER)
    assert any(placeholder) and placeholder not in by_bitmap


@pytest.mark.parametrize("code", [0, 9, 0x1F, 0x7F, 0x80, 0xC3, 0xFF])
def test_non_printable_codes_draw_the_placeholder(lib, code):
    assert glyph_bytes(lib, code) == glyph_bytes(lib, simlib.PLACEHOLDER)


def test_draw_string_clips_at_the_right_edge(lib):
    fb = simlib.framebuffer()
    assert lib.oled_draw_string(fb, 18, 2, b"ABCDEF") == 3
    assert cell_art(lib, fb, 18, 2) == EXPECTED["A"]
    assert lib.oled_draw_string(fb, 0, 8, b"A") == 0  # row outside the grid
    assert lib.oled_draw_string(fb, 21, 0, b"A") == 0


def test_pixels_use_ssd1306_page_layout(lib):
    fb = simlib.framebuffer()
    lib.oled_set_pixel(fb, 5, 13, 1)  # page 1, bit 5
    expected = bytearray(simlib.FB_BYTES)
    expected[1 * 128 + 5] = 1 << 5
    assert bytes(fb) == bytes(expected)
    lib.oled_set_pixel(fb, 5, 13, 0)
    lib.oled_set_pixel(fb, -1, 0, 1)
    lib.oled_set_pixel(fb, 128, 0, 1)
    lib.oled_set_pixel(fb, 0, 64, 1)
    assert bytes(fb) == bytes(simlib.FB_BYTES)
    assert lib.oled_get_pixel(fb, 200, -3) == 0


@pytest.mark.parametrize(
    "source, message",
    [
        ("0x41 A\n.###.\n", "fewer than 8 rows"),
        ("0x41 A\n.##.\n", "must be 5 cells"),
        ("0x41 A\n" + ".....\n" * 8 + "0x41 A\n", "drawn twice"),
        ("0x19 x\n", "outside"),
        (".....\n", "before any"),
        ("0x41 A\n" + ".....\n" * 8, "glyphs missing: 0x20"),
    ],
)
def test_font_source_errors_name_the_problem(source, message):
    with pytest.raises(gen_font.FontSourceError, match=message):
        gen_font.parse(source)


def test_oled_library_compiles_freestanding_for_xtensa(tmp_path):
    """The library needs no libc: C99 freestanding with a cross compiler and no headers."""
    cc = shutil.which("xtensa-lx106-elf-gcc")
    if cc is None:
        if os.environ.get("GPTSTACK_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("xtensa-lx106-elf-gcc not found (Debian: apt-get install gcc-xtensa-lx106)")
        pytest.skip("xtensa-lx106-elf-gcc not installed")
    for source in sorted(OLED_DIR.glob("*.c")):
        cmd = [
            cc,
            "-std=c99",
            "-ffreestanding",
            "-nostdlib",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Os",
            "-c",
            str(source),
            "-o",
            str(tmp_path / (source.stem + ".o")),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
