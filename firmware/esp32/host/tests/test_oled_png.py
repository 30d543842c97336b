"""The simulator's PNG writer: decoded here with zlib and struct (no image library), the pixels
must be the framebuffer's, scaled; the checksums must be zlib's."""

from __future__ import annotations

import random
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
import simlib
from hypothesis import given, settings
from hypothesis import strategies as st


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of 8-bit gray) of a non-interlaced grayscale PNG; checks every CRC."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos : pos + 4])
        kind, body = blob[pos + 4 : pos + 8], blob[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", blob[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, color, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, comp, filt, interlace) == (8, 0, 0, 0, 0)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))  # Adler too
    stride = 1 + width
    assert len(raw) == stride * height
    rows = []
    for y in range(height):
        assert raw[y * stride] == 0  # filter type none
        rows.append(raw[y * stride + 1 : (y + 1) * stride])
    return width, height, rows


def expected_rows(fb: bytes, scale: int) -> list[bytes]:
    rows = []
    for y in range(64 * scale):
        py = y // scale
        row = bytes(
            255 if fb[(py // 8) * 128 + x // scale] >> (py % 8) & 1 else 0
            for x in range(128 * scale)
        )
        rows.append(row)
    return rows


@pytest.mark.parametrize("scale", [1, 3, 16])  # 16: several 64 KiB stored blocks
def test_png_pixels_equal_framebuffer(lib, tmp_path, scale):
    fb = random.Random(scale).randbytes(1024)
    path = tmp_path / "screen.png"
    assert lib.gs_sim_write_png(simlib.framebuffer(fb), str(path).encode(), scale) == 0
    width, height, rows = read_png(path)
    assert (width, height) == (128 * scale, 64 * scale)
    assert rows == expected_rows(fb, scale)
    assert not path.with_name("screen.png.tmp").exists()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_checksums_match_zlib(lib, blob, start):
    assert lib.gs_sim_crc32(0, blob, len(blob)) == zlib.crc32(blob)
    assert lib.gs_sim_crc32(start, blob, len(blob)) == zlib.crc32(blob, start)
    assert lib.gs_sim_adler32(1, blob, len(blob)) == zlib.adler32(blob)


def test_png_rejects_bad_arguments_and_paths(lib, tmp_path):
    fb = simlib.framebuffer()
    assert lib.gs_sim_write_png(fb, str(tmp_path / "a.png").encode(), 0) == -1
    assert lib.gs_sim_write_png(fb, str(tmp_path / "a.png").encode(), 17) == -1
    missing = tmp_path / "no" / "such" / "dir" / "a.png"
    assert lib.gs_sim_write_png(fb, str(missing).encode(), 1) == -2
    assert not any(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("controller", [simlib.SSD1306, simlib.SH1106])
def test_screen_png_shows_what_the_panel_decoded(lib, tmp_path, controller):
    screen = simlib.opaque(lib.gs_sim_capi_sizeof_screen())
    lib.gs_sim_screen_init(screen, controller)
    text = b"ROMEO: But soft, what light through yonder window breaks?"
    lib.gs_sim_screen_write(screen, text, len(text))
    path = tmp_path / "screen.png"
    assert lib.gs_sim_screen_save_png(screen, str(path).encode(), 2) == 0
    fb = bytes(lib.gs_sim_capi_screen_fb(screen)[:1024])
    assert read_png(path)[2] == expected_rows(fb, 2)


@pytest.mark.parametrize("flags", [[], ["--sh1106"]])
def test_gs_screen_tool(lib, tmp_path, flags):
    """The CLI: stdin text in 1-byte pieces -> PNG equal to the console's own framebuffer,
    through a simulated SSD1306 or SH1106."""
    text = "gptstack on an ESP32-S3\nna\u00efve caf\u00e9 \u2192 ok".encode()
    out = tmp_path / "tool.png"
    done = subprocess.run(
        [str(simlib.screen_tool()), "--scale", "1", "--chunk", "1", *flags, str(out)],
        input=text,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fb = simlib.framebuffer()
    con = simlib.new_console(lib, fb)
    lib.oled_text_write(con, text, len(text))
    lib.oled_text_finish(con)
    assert read_png(out)[2] == expected_rows(bytes(fb), 1)
    bad = subprocess.run(
        [str(simlib.screen_tool()), "--scale", "99", str(out)], capture_output=True, check=False
    )
    assert bad.returncode == 2 and b"usage" in bad.stderr
