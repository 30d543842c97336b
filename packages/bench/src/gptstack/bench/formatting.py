"""How numbers from result JSON are written in tables: one named formatter per kind of number.

Suites name a formatter for each table column (`Column(header, key, fmt)`); the report applies
it to the value found at `key` in each row. Nothing else writes numbers into benchmarks/README.md,
so every figure there is one of these functions applied to one value of a result file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MISSING = "—"


def num(v: float) -> str:
    """Three significant digits; thousands separators from 1,000 up."""
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 999.5:  # .3g would switch to e-notation here
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    if abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:#.3g}".rstrip(".")


def _spread(d: dict[str, Any], scale: float) -> str:
    return f"{num(d['median'] * scale)} ({num(d['min'] * scale)}–{num(d['max'] * scale)})"


def _ratio(d: dict[str, Any]) -> str:
    return f"{num(d['median'])}× [{num(d['min'])}–{num(d['max'])}]"


def _check(d: dict[str, Any]) -> str:
    if "rel_err" in d:
        return f"{'ok' if d['ok'] else 'FAIL'} {num(d['rel_err'])}"
    return "ok" if d["ok"] else "FAIL"


FORMATTERS: dict[str, Callable[[Any], str]] = {
    "text": str,
    "int": lambda v: f"{v:,.0f}",
    "num": num,
    "x": lambda v: f"{num(v)}×",  # a plain ratio value
    "ms": lambda v: num(v * 1e3),  # seconds -> milliseconds
    "us": lambda v: num(v * 1e6),  # seconds -> microseconds
    "s": num,
    "time_ms": lambda d: _spread(d, 1e3),  # {"median", "min", "max"} in seconds
    "time_us": lambda d: _spread(d, 1e6),
    "time_s": lambda d: _spread(d, 1.0),
    "ratio": _ratio,  # {"median", "min", "max"} of paired ratios
    "pct": lambda v: f"{num(v * 100)} %",  # a fraction
    "mib": lambda v: num(v / 2**20),  # bytes
    "gbs": lambda v: num(v / 1e9),  # bytes/s -> GB/s
    "mbs": lambda v: num(v / 1e6),  # bytes/s -> MB/s
    "tflops": lambda v: num(v / 1e12),  # FLOP/s -> TFLOP/s
    "gflops": lambda v: num(v / 1e9),
    "sci": lambda v: f"{v:.2e}",
    "bool": lambda v: "yes" if v else "no",
    "check": _check,  # {"ok", "rel_err"?}
}


def format_value(value: Any, fmt: str) -> str:
    """The table text of one value; MISSING for None."""
    if value is None:
        return MISSING
    return FORMATTERS[fmt](value)
