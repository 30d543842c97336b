"""The text console: word wrap, overlong words, newlines, scrolling, UTF-8 fed in pieces.

Expectations come from the rules in lib/oled/oled.h, written here as literal screens and as a
small Python model of those rules (`model_screen`), never from the C code's output.
"""

from __future__ import annotations

import itertools

import pytest
import simlib
from hypothesis import given, settings
from hypothesis import strategies as st

COLS, ROWS = simlib.COLS, simlib.ROWS
PLACEHOLDER = "\ufffd"

# Pixel art for the glyphs of the wrapped-line test ('#' lit), 6 x 8 with the spacing column.
ART = {
    "H": ["#...#.", "#...#.", "#...#.", "#####.", "#...#.", "#...#.", "#...#.", "......"],
    "i": ["..#...", "......", ".##...", "..#...", "..#...", "..#...", ".###..", "......"],
    "!": ["..#...", "..#...", "..#...", "..#...", "..#...", "......", "..#...", "......"],
}


class Console:
    def __init__(self, lib):
        self.lib = lib
        self.fb = simlib.framebuffer()
        self.con = simlib.new_console(lib, self.fb)

    def write(self, data: bytes) -> Console:
        self.lib.oled_text_write(self.con, data, len(data))
        return self

    def finish(self) -> Console:
        self.lib.oled_text_finish(self.con)
        return self

    def dirty(self) -> int:
        return self.lib.oled_console_take_dirty(self.con)

    def screen(self) -> list[str]:
        """The 8 text lines on screen, each cell read back as its character."""
        lookup = {}
        for code in range(0x20, 0x80):
            cell = bytes(self.lib.oled_glyph(code)[:5]) + b"\x00"
            lookup[cell] = PLACEHOLDER if code == 0x7F else chr(code)
        fb = bytes(self.fb)
        lines = []
        for row in range(ROWS):
            line = ""
            for col in range(COLS):
                cell = fb[row * 128 + col * 6 : row * 128 + col * 6 + 6]
                assert cell in lookup, f"cell ({col}, {row}) holds no glyph: {cell.hex()}"
                line += lookup[cell]
            assert fb[row * 128 + 126 : row * 128 + 128] == b"\x00\x00"  # unused columns
            lines.append(line.rstrip(" "))
        return lines


def padded(lines: list[str]) -> list[str]:
    return lines + [""] * (ROWS - len(lines))


def model_screen(data: bytes) -> list[str]:
    """oled.h's console rules, restated in Python: what 8 x 21 cells show after `data`."""
    lines: list[list[str]] = [[]]
    col = 0  # COLS means "line full"
    word: list[str] = []

    def new_line():
        nonlocal col, word
        lines.append([])
        col, word = 0, []

    def glyph(ch: str):
        nonlocal col, word
        if col == COLS:
            if 0 < len(word) < COLS:
                moved = list(word)
                del lines[-1][COLS - len(moved) :]
                new_line()
                lines[-1].extend(moved)
                col, word = len(moved), moved
            else:
                new_line()
        word.append(ch)
        lines[-1].append(ch)
        col += 1

    for ch in data.decode("utf-8", errors="replace"):
        if ch == "\n":
            new_line()
        elif ch in " \t":
            if col == COLS:
                new_line()
            else:
                word = []
                lines[-1].append(" ")
                col += 1
        elif " " < ch < "\x7f":
            glyph(ch)
        elif ord(ch) >= 0x80:
            glyph(PLACEHOLDER)
    return padded(["".join(line).rstrip(" ") for line in lines[-ROWS:]])


def test_wrapped_line_pixels(lib):
    text = "HiHiHiHiHiHiHiHiHi Hi!"  # 18 + 1 + 3 cells: "Hi!" does not fit, moves down whole
    c = Console(lib).write(text.encode())
    expected = simlib.framebuffer()
    for col, ch in enumerate("HiHiHiHiHiHiHiHiHi"):
        draw_art(expected, col, 0, ART[ch])
    for col, ch in enumerate("Hi!"):
        draw_art(expected, col, 1, ART[ch])
    assert bytes(c.fb) == bytes(expected)


def draw_art(fb, col: int, row: int, art: list[str]) -> None:
    for y, line in enumerate(art):
        for x, pixel in enumerate(line):
            if pixel == "#":
                fb[row * 128 + col * 6 + x] |= 1 << y


@pytest.mark.parametrize(
    "text, lines",
    [
        ("one two\nthree", ["one two", "three"]),
        ("x" * 25, ["x" * 21, "xxxx"]),  # overlong word breaks
        ("a" * 18 + " bcd", ["a" * 18, "bcd"]),  # word moves down whole
        ("a" * 21 + " b", ["a" * 21, "b"]),  # the wrapping space is dropped
        ("y" * 21 + "\nz", ["y" * 21, "z"]),  # full line + '\n': no blank line
        ("a b" + " " * 30 + "c", ["a b" + " " * 18, " " * 11 + "c"]),
        ("a\tb\r\nc\x07d", ["a b", "cd"]),  # tab = space, CR/BEL ignored
        ("w" * 42 + "v", ["w" * 21, "w" * 21, "v"]),
        ("\n\nx", ["", "", "x"]),
    ],
)
def test_layout_examples(lib, text, lines):
    assert Console(lib).write(text.encode()).screen() == padded([s.rstrip(" ") for s in lines])


def test_view_scrolls_up_when_full(lib):
    text = "\n".join(f"line {i}" for i in range(11))
    assert Console(lib).write(text.encode()).screen() == [f"line {i}" for i in range(3, 11)]


def test_wrap_on_the_last_line_scrolls(lib):
    text = "\n" * 7 + "last line has many words in it"
    c = Console(lib).write(text.encode())
    assert c.screen() == padded([""] * 6 + ["last line has many", "words in it"])


@pytest.mark.parametrize(
    "pieces, shown",
    [
        ([b"caf\xc3", b"\xa9!"], "caf\ufffd!"),  # 2-byte character split
        ([b"\xe2", b"\x82", b"\xac5"], "\ufffd5"),  # 3-byte character, byte by byte
        ([b"\xf0\x9f", b"\x98\x80"], "\ufffd"),  # 4-byte character
        ([b"\xff"], "\ufffd"),  # never valid
        ([b"\x80\x80"], "\ufffd\ufffd"),  # stray continuations
        ([b"\xe2\x82", b"A"], "\ufffdA"),  # cut short by ASCII
        ([b"\xe0\x80"], "\ufffd\ufffd"),  # overlong: E0 needs A0..BF
    ],
)
def test_utf8_pieces(lib, pieces, shown):
    c = Console(lib)
    for piece in pieces:
        c.write(piece)
    c.finish()
    assert c.screen()[0] == shown
    # one cell per character as Python's decoder counts them (U+FFFD per maximal invalid subpart)
    decoded = b"".join(pieces).decode("utf-8", errors="replace")
    assert shown == "".join(PLACEHOLDER if ord(ch) >= 0x80 else ch for ch in decoded)


def test_incomplete_character_waits_for_more_bytes(lib):
    c = Console(lib).write(b"ab\xe2\x82")
    assert c.screen()[0] == "ab"  # nothing drawn yet
    c.finish()
    assert c.screen()[0] == "ab" + PLACEHOLDER  # the end of the stream draws it once


def test_dirty_pages(lib):
    c = Console(lib)
    assert c.dirty() == 0xFF  # init cleared everything
    assert c.dirty() == 0
    c.write(b"abc")
    assert c.dirty() == 0b1
    c.write(b"\nd")
    assert c.dirty() == 0b10
    c.write(b"\n" * 7)  # reach the bottom and scroll
    assert c.dirty() == 0xFF


# Bytes that exercise every rule: letters, spaces, newlines, tabs, controls, multi-byte
# characters and invalid bytes.
_ATOMS = st.sampled_from(
    [
        b"a",
        b"Zz",
        b"word",
        b"longerword",
        b" ",
        b"  ",
        b"\n",
        b"\t",
        b"\r",
        b"x" * 23,
        "é".encode(),
        "€".encode(),
        "😀".encode(),
        b"\xff",
        b"\x80",
        b"\xe2\x82",
        b"\xc3",
        b"!?",
    ]
)


@settings(max_examples=200, deadline=None)
@given(atoms=st.lists(_ATOMS, max_size=60), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_console_matches_model_for_any_split(lib, atoms, cuts):
    data = b"".join(atoms)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    c = Console(lib)
    for a, b in itertools.pairwise(bounds):
        c.write(data[a:b])
    c.finish()
    assert c.screen() == model_screen(data)
