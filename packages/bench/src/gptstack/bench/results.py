"""Result files: one JSON per suite run, written as the run goes and checked against the schema.

    result = Result("train", params={...}, settings=settings.to_dict(), env=environment(...),
                    path=result_path(out_dir, "train", device))
    result.add_row(make_row(section="ladder", group="esp32", name="fp32 eager", measurement=m))
    result.table("Training step ladder", "ladder", [Column("preset", "group"), ...])
    result.finish()

Each add_row rewrites the file (temporary name + os.replace), so a run cut short still leaves
its finished rows, marked `"complete": false`. Layout (schema "gptstack-bench/1"):

    schema, suite, complete, env (environment.py), params, settings, floors (or null), notes,
    summary, rows, tables, plots
    row: section, group, name, status ("ok" | "skipped" | "error"), note, params, timing,
         samples_s (every raw sample, seconds per call), time_s {n, median, min, max},
         metrics {name: number or null}, ratios {key: {vs, n, median, min, max}}, check
"""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from gptstack.tokenizer import write_atomic

from .environment import device_slug
from .errors import BenchError
from .formatting import FORMATTERS
from .harness import Comparison, Measurement
from .stats import summarize

SCHEMA = "gptstack-bench/1"
SUITES = ("train", "generate", "attention", "ops", "engine", "tokenizer")
STATUSES = ("ok", "skipped", "error")
PLOT_KINDS = ("bars", "lines")


@dataclass(frozen=True)
class Column:
    """A table column: header text, a dotted path into the row (e.g. "metrics.tokens_per_s",
    "params.batch", "time_s", "ratios.vs_baseline"), and a formatter name (formatting.py)."""

    header: str
    key: str
    fmt: str = "text"


def make_row(
    *,
    section: str,
    group: str,
    name: str,
    params: dict[str, Any] | None = None,
    measurement: Measurement | None = None,
    metrics: dict[str, Any] | None = None,
    ratios: dict[str, dict[str, Any]] | None = None,
    check: dict[str, Any] | None = None,
    status: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """One table row. With a measurement the status is "ok"; without, give status and note."""
    if measurement is None and status in (None, "ok"):
        raise BenchError(f"row {group}/{name}: a row without a measurement needs a status and note")
    row: dict[str, Any] = {
        "section": section,
        "group": group,
        "name": name,
        "status": status or "ok",
        "note": note,
        "params": params or {},
        "timing": None,
        "samples_s": [],
        "time_s": None,
        "metrics": metrics or {},
        "ratios": ratios or {},
        "check": check,
    }
    if measurement is not None:
        row["timing"] = measurement.timing
        row["samples_s"] = list(measurement.samples)
        row["time_s"] = measurement.stats
    return row


def ratio_entry(comparison: Comparison, baseline: str, candidate: str) -> dict[str, Any] | None:
    """{"vs", "n", "median", "min", "max"} of per-round speedups of candidate over baseline;
    None when either did not run."""
    m = comparison.measurements
    if baseline not in m or candidate not in m:
        return None
    return {"vs": baseline, **summarize(comparison.speedups(baseline, candidate))}


def ratio_entries(
    comparison: Comparison, candidate: str, baselines: Mapping[str, str | None]
) -> dict[str, dict[str, Any]]:
    """A row's `ratios`: {key: ratio_entry(baseline, candidate)} for each key -> baseline name,
    leaving out a baseline that is None, the candidate itself, or did not run."""
    out = {}
    for key, baseline in baselines.items():
        if baseline is None or baseline == candidate:
            continue
        entry = ratio_entry(comparison, baseline, candidate)
        if entry is not None:
            out[key] = entry
    return out


def result_path(
    out_dir: str | os.PathLike, suite: str, device: torch.device, tag: str = ""
) -> Path:
    """<out_dir>/<suite>-<device>[-<tag>]-<UTC date-time>.json"""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    parts = [suite, device_slug(device), *([tag] if tag else []), stamp]
    return Path(out_dir) / ("-".join(parts) + ".json")


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON to a temporary name in the same folder, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, allow_nan=True) + "\n")


class Result:
    """A suite run being recorded (see the module doc)."""

    def __init__(
        self,
        suite: str,
        *,
        params: dict[str, Any],
        settings: dict[str, Any],
        env: dict[str, Any],
        path: str | os.PathLike | None = None,
    ) -> None:
        if suite not in SUITES:
            raise BenchError(f"suite {suite!r} is unknown: one of {', '.join(SUITES)}")
        self.path = Path(path) if path is not None else None
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "suite": suite,
            "complete": False,
            "env": env,
            "params": params,
            "settings": settings,
            "floors": None,
            "notes": [],
            "summary": {},
            "rows": [],
            "tables": [],
            "plots": [],
        }

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["rows"]

    def add_row(self, row: dict[str, Any]) -> None:
        self.data["rows"].append(row)
        self.save()

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.save()

    def table(self, title: str, section: str, columns: Sequence[Column], about: str = "") -> None:
        self.data["tables"].append(
            {
                "title": title,
                "section": section,
                "about": about,
                "columns": [asdict(c) for c in columns],
            }
        )

    def plot(self, kind: str, section: str, title: str, **spec: Any) -> None:
        """kind "bars": value, label (x tick), series; kind "lines": x, y, series; plus log."""
        self.data["plots"].append({"kind": kind, "section": section, "title": title, **spec})

    def save(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, self.data)

    def finish(self) -> dict[str, Any]:
        self.data["complete"] = True
        self.data["env"]["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        try:  # other load on the machine during the run shows here (and in the spreads)
            self.data["env"]["load_average_at_finish"] = list(os.getloadavg())
        except OSError:
            pass
        problems = validate_result(self.data)
        if problems:
            raise BenchError(
                f"result of suite {self.data['suite']} fails its schema: {problems[0]}"
            )
        self.save()
        return self.data


def lookup(row: dict[str, Any], key: str) -> Any:
    """The value at a dotted path of a row, or None where any part is missing."""
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _finite_positive(xs: Any) -> bool:
    return isinstance(xs, list) and all(
        isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in xs
    )


def _check_row(i: int, row: Any) -> list[str]:
    where = f"rows[{i}]"
    if not isinstance(row, dict):
        return [f"{where} is not an object"]
    keys = (
        "section",
        "group",
        "name",
        "status",
        "note",
        "params",
        "timing",
        "samples_s",
        "time_s",
        "metrics",
        "ratios",
        "check",
    )
    missing = [k for k in keys if k not in row]
    if missing:
        return [f"{where} lacks {missing}"]
    where = f"rows[{i}] ({row['group']}/{row['name']})"
    out = []
    if row["status"] not in STATUSES:
        out.append(f"{where}: status {row['status']!r} not in {STATUSES}")
    if row["status"] == "ok":
        s = row["samples_s"]
        if not s or not _finite_positive(s):
            out.append(f"{where}: an ok row needs raw samples, all finite and > 0")
        elif not isinstance(row["time_s"], dict) or row["time_s"].get("n") != len(s):
            out.append(f"{where}: time_s must summarize the {len(s)} samples")
        elif summarize(s)["median"] != row["time_s"]["median"]:
            out.append(f"{where}: time_s.median is not the median of samples_s")
    elif not isinstance(row["note"], str) or not row["note"]:
        out.append(f"{where}: a {row['status']} row needs a note saying why")
    for name, value in row["metrics"].items():
        if value is not None and not isinstance(value, (int, float, str, bool)):
            out.append(f"{where}: metric {name} is {type(value).__name__}, expected a number")
    for key, r in row["ratios"].items():
        fields = {"vs", "median", "min", "max", "n"}
        if "." in key or not isinstance(r, dict) or not fields <= set(r):
            out.append(f"{where}: ratio {key!r} needs vs, n, median, min, max (no dot in the key)")
    return out


def validate_result(data: Any) -> list[str]:
    """Every way `data` breaks the result schema (empty when it is valid)."""
    if not isinstance(data, dict):
        return ["a result is a JSON object"]
    top = (
        "schema",
        "suite",
        "complete",
        "env",
        "params",
        "settings",
        "floors",
        "notes",
        "summary",
        "rows",
        "tables",
        "plots",
    )
    missing = [k for k in top if k not in data]
    if missing:
        return [f"missing top-level keys {missing}"]
    out = []
    if data["schema"] != SCHEMA:
        out.append(f"schema is {data['schema']!r}, this gptstack reads {SCHEMA!r}")
    if data["suite"] not in SUITES:
        out.append(f"suite {data['suite']!r} is unknown")
    env = data["env"]
    for k in ("date", "command", "git", "device", "python", "torch", "cpu"):
        if not isinstance(env, dict) or k not in env:
            out.append(f"env lacks {k!r}")
    for i, row in enumerate(data["rows"]):
        out += _check_row(i, row)
    for t in data["tables"]:
        for c in t.get("columns", []):
            if c.get("fmt") not in FORMATTERS:
                out.append(
                    f"table {t.get('title')!r} column {c.get('header')!r}: "
                    f"unknown formatter {c.get('fmt')!r}"
                )
    for p in data["plots"]:
        if p.get("kind") not in PLOT_KINDS:
            out.append(f"plot {p.get('title')!r}: kind {p.get('kind')!r} not in {PLOT_KINDS}")
    return out


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check one result file; BenchError naming the file and the first problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise BenchError(
            f"result file {path} cannot be read as JSON ({e}): re-run its suite"
        ) from None
    return checked_result(data, path)


def checked_result(data: Any, path: str | os.PathLike) -> dict[str, Any]:
    """data (the parsed JSON of the result file at path) if it passes the schema; else
    BenchError naming the file and the first problem."""
    problems = validate_result(data)
    if problems:
        raise BenchError(
            f"result file {path} fails the schema: {problems[0]} "
            f"({len(problems)} problem(s)); re-run its suite"
        )
    return data
