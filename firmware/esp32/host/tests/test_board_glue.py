"""src/main.cpp (the board glue) compiles warning-free as C++ against stand-in declarations of the
Arduino-ESP32 / ESP-IDF calls it makes (board_stubs/), for both OLED controllers: a check of the
file's own syntax and types and of its use of the engine and OLED headers, not of the real
framework headers (the toolchain cannot be downloaded here; README.md says what was verified)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gs_testlib import require_program

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]


@pytest.mark.parametrize("flags", [[], ["-DGS_OLED_SH1106"]], ids=["ssd1306", "sh1106"])
def test_main_cpp_compiles_against_the_stubs(flags):
    cxx = require_program("g++", "apt-get install g++")
    cmd = [
        cxx,
        "-std=gnu++17",
        "-fsyntax-only",
        "-Wall",
        "-Wextra",
        "-Werror",
        *flags,
        f"-I{HERE / 'board_stubs'}",
        f"-I{PROJECT / 'lib' / 'engine'}",
        f"-I{PROJECT / 'lib' / 'oled'}",
        str(PROJECT / "src" / "main.cpp"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
