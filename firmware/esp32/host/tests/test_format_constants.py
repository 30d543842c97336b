"""lib/engine/gs_format.h and gptstack.quant.format define FORMAT.md section 1's constants once
per language: parse the C header and compare name by name, both ways."""

from __future__ import annotations

import re
from pathlib import Path

from gptstack.quant import format as quant_format

GS_FORMAT_H = Path(__file__).resolve().parents[2] / "lib" / "engine" / "gs_format.h"


def c_constants() -> dict[str, int | bytes]:
    out: dict[str, int | bytes] = {}
    for name, value in re.findall(r"^#define GS_(\w+)[ \t]+(\S+)", GS_FORMAT_H.read_text(), re.M):
        if value.startswith('"'):
            out[name] = value.strip('"').encode("ascii")
        else:
            out[name] = int(value.rstrip("uUlL"), 0)
    return out


def test_header_matches_python_name_by_name():
    # constants() is every upper-case name of the module: packages/quant/tests/test_format.py
    c, py = c_constants(), quant_format.constants()
    assert sorted(c) == sorted(py), (
        f"only in C: {set(c) - set(py)}, only in Python: {set(py) - set(c)}"
    )
    for name, value in py.items():
        assert c[name] == value, f"GS_{name} is {c[name]!r} in C, {value!r} in Python"
