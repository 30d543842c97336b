"""The benchmark report: benchmarks/README.md and its PNG plots, regenerated from every result.

    build_report("benchmarks/results", "benchmarks/README.md", "benchmarks/plots")
    print(text_summary([load_result(p) for p in paths]))     # the short table of the GPU script

Every figure in the markdown is a formatter of formatting.py applied to one value of one result
file, and each table names the file it came from and the command that produced it (docs/MEASURING.md
rule 6: the summary is generated, never typed). Files are grouped by suite, newest first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gptstack.tokenizer import write_atomic

from .errors import BenchError
from .formatting import MISSING, format_value, num
from .plots import render_plot
from .results import SCHEMA, SUITES, checked_result, load_result, lookup

REPORT_COMMAND = "gptstack bench report"
QUESTIONS = {
    "train": "What makes a training step fast?",
    "generate": "How fast does a model decode, and when does the KV cache start to pay?",
    "attention": "Does batching the heads pay, and which attention kernel should we use?",
    "ops": "How close is each op to this machine's floor, and does a kernel beat PyTorch?",
    "engine": "How fast is the firmware's C engine on a host CPU, next to PyTorch?",
    "tokenizer": "How long does BPE training take, and how fast does text encode?",
}


# Other JSON files may share benchmarks/results/ (e.g. `gptstack train` run summaries, eval
# results). They are listed; training-run summaries also get one table of their headline numbers.
TRAINING_RUN_COLUMNS = [
    ("run", "run", "text"),
    ("device", "device", "text"),
    ("parameters", "n_params", "int"),
    ("steps", "steps", "int"),
    ("tokens/s (median)", "tokens_per_s_median", "int"),
    ("MFU (median)", "mfu_median", "pct"),
    ("wall s", "wall_time_s", "num"),
    ("best val loss", "best_val_loss", "num"),
]


@dataclass
class Report:
    readme: Path
    plots: list[Path] = field(default_factory=list)
    results: list[Path] = field(default_factory=list)
    others: list[Path] = field(default_factory=list)


def _read_any(path: Path) -> tuple[str, dict[str, Any] | None]:
    """("bench", data) for a gptstack-bench result (checked), ("other", data) for any other
    JSON object, ("unreadable", None) for a file that is not JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "unreadable", None
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        return "bench", checked_result(data, path)
    return "other", data if isinstance(data, dict) else {}


def _other_files(others: list[tuple[Path, dict | None]], readme_dir: Path) -> list[str]:
    if not others:
        return []
    rows = []
    for path, data in others:
        if data is None:
            what = "not JSON"
        else:
            what = str(
                data.get("kind")
                or data.get("command")
                or data.get("note")
                or "JSON with keys " + ", ".join(list(data)[:5])
            )
        rows.append([f"[`{path.name}`]({_rel(path, readme_dir)})", what[:120]])
    out = [
        "## Other files in the results folder",
        "",
        "Not written by `gptstack bench`: listed here; training-run summaries also in the "
        "table below.",
        "",
        *_md_table(["file", "kind / command"], rows),
        "",
    ]
    runs = [(p, d) for p, d in others if d is not None and d.get("kind") == "training-run"]
    if runs:
        out += [
            "### Training runs (`gptstack train` summaries)",
            "",
            *_md_table(
                ["file", *(h for h, _, _ in TRAINING_RUN_COLUMNS)],
                [
                    [
                        f"`{p.name}`",
                        *(format_value(d.get(k), f) for _, k, f in TRAINING_RUN_COLUMNS),
                    ]
                    for p, d in runs
                ],
            ),
            "",
            "Sources: the file named in each row (its top-level keys).",
            "",
        ]
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(_cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _commit(git: dict[str, Any]) -> str:
    return (git.get("commit") or "unknown")[:12] + (" (dirty)" if git.get("dirty") else "")


def _env_line(env: dict[str, Any]) -> str:
    dev = env["device"]
    commit = _commit(env["git"])
    parts = [f"**{dev['name']}**"]
    if dev.get("type") == "cuda":
        parts.append(f"driver {dev.get('driver') or '?'}, CUDA {env.get('cuda')}")
    parts += [
        f"torch {env['torch']}",
        f"Python {env['python']}",
        f"CPU {env['cpu']['model']} ({env['cpu']['threads_available']} threads, torch uses "
        f"{env['cpu']['torch_threads']})",
        f"commit {commit}",
        env["date"],
    ]
    return " · ".join(parts)


def _floors(floors: dict[str, Any] | None) -> list[str]:
    if not floors or "copy" not in floors:
        return []
    c, m = floors["copy"], floors["matmul"]
    return [
        "Floors measured in this run:",
        "",
        *_md_table(
            ["floor", "rate", "time ms (median, min–max)", "what"],
            [
                [
                    "copy bandwidth",
                    format_value(c["bytes_per_s"], "gbs") + " GB/s",
                    format_value(c["time_s"], "time_ms"),
                    c["what"],
                ],
                [
                    "matmul rate",
                    format_value(m["flops_per_s"], "tflops") + " TFLOP/s",
                    format_value(m["time_s"], "time_ms"),
                    f"{m['what']} {m['dtype']}",
                ],
            ],
        ),
        "",
    ]


def _summary(summary: dict[str, Any]) -> list[str]:
    """A dict of dicts as one table; numbers through formatting.num."""
    if not summary or not all(isinstance(v, dict) for v in summary.values()):
        return []
    keys = list(dict.fromkeys(k for v in summary.values() for k in v))

    def show(v: Any) -> str:
        if v is None:
            return MISSING
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return str(v)
        return num(v)

    return [
        "Summary (the `summary` of the JSON):",
        "",
        *_md_table(
            ["", *keys], [[name, *(show(v.get(k)) for k in keys)] for name, v in summary.items()]
        ),
        "",
    ]


def _file_section(
    path: Path, data: dict[str, Any], readme_dir: Path, plots_dir: Path, report: Report
) -> list[str]:
    env = data["env"]
    src = _rel(path, readme_dir)
    out = [
        f"### {env['device']['name']}, {env['date'][:10]} — [`{path.name}`]({src})",
        "",
        _env_line(env),
        "",
        f"Produced by: `{env['command']}`",
        "",
    ]
    if not data["complete"]:
        out += [
            "**Incomplete run**: the suite stopped before its end; the rows below are those "
            "it finished.",
            "",
        ]
    for n in data["notes"]:
        out += [f"- {n}"]
    if data["notes"]:
        out += [""]
    out += _floors(data.get("floors"))
    out += _summary(data.get("summary"))
    for table in data["tables"]:
        rows = [r for r in data["rows"] if r["section"] == table["section"]]
        if not rows:
            continue
        cols = table["columns"]
        out += [f"#### {table['title']}", ""]
        if table.get("about"):
            out += [table["about"], ""]
        cells = [[format_value(lookup(r, c["key"]), c["fmt"]) for c in cols] for r in rows]
        out += _md_table([c["header"] for c in cols], cells)
        out += ["", f"Source: `{src}` (rows with `section` = `{table['section']}`).", ""]
    stem = path.stem
    for spec in data["plots"]:
        png = plots_dir / f"{stem}-{spec['section']}-{spec['kind']}.png"
        if render_plot(data, spec, png):
            report.plots.append(png)
            out += [f"![{spec['title']}]({_rel(png, readme_dir)})", ""]
    return out


def _sort_key(item: tuple[Path, dict[str, Any]]) -> tuple:
    path, data = item
    gpu = data["env"]["device"].get("type") == "cuda"
    return (SUITES.index(data["suite"]), not gpu, _neg(data["env"]["date"]), path.name)


def _neg(date: str) -> tuple:
    return tuple(-ord(ch) for ch in date)  # newest first


def build_report(
    results_dir: str | os.PathLike, readme: str | os.PathLike, plots_dir: str | os.PathLike
) -> Report:
    """Regenerate the markdown and every plot from all *.json in results_dir."""
    results_dir, readme, plots_dir = Path(results_dir), Path(readme), Path(plots_dir)
    if not results_dir.is_dir():
        raise BenchError(
            f"results folder {results_dir} does not exist: run a suite first, e.g. "
            f"`gptstack bench tokenizer`"
        )
    files = sorted(results_dir.glob("*.json"))
    read = [(p, *_read_any(p)) for p in files]
    loaded = sorted(((p, d) for p, kind, d in read if kind == "bench"), key=_sort_key)
    others = [(p, d) for p, kind, d in read if kind != "bench"]
    report = Report(readme, results=[p for p, _ in loaded], others=[p for p, _ in others])
    readme_dir = readme.parent.resolve()
    lines = [
        "# gptstack benchmarks",
        "",
        f"Generated by `{REPORT_COMMAND}` from every JSON file in "
        f"`{_rel(results_dir.resolve(), readme_dir)}/`; do not edit it by hand, re-run the "
        f"command. How the numbers are taken: `packages/bench/README.md` and the rules in "
        f"docs/MEASURING.md (warm-up, alternated A/B rounds, medians, ratios of pairs). "
        f"Ratios are speedups: > 1 means faster than the row named in the header.",
        "",
    ]
    index = [
        [
            f"[`{p.name}`]({_rel(p, readme_dir)})",
            d["suite"],
            d["env"]["device"]["name"],
            d["env"]["date"],
            _commit(d["env"]["git"]),
            "yes" if d["complete"] else "no",
            f"`{d['env']['command']}`",
        ]
        for p, d in loaded
    ]
    lines += [
        "## Result files",
        "",
        *_md_table(
            ["file", "suite", "device", "date (UTC)", "commit", "complete", "command"], index
        ),
        "",
    ]
    if not loaded:
        lines += [
            "No `gptstack bench` results yet: run a suite, e.g. `gptstack bench tokenizer`.",
            "",
        ]
    plots_dir.mkdir(parents=True, exist_ok=True)
    lines += _other_files(others, readme_dir)
    for suite in SUITES:
        items = [(p, d) for p, d in loaded if d["suite"] == suite]
        if not items:
            continue
        lines += [f"## `{suite}`: {QUESTIONS[suite]}", ""]
        for path, data in items:
            lines += _file_section(path, data, readme_dir, plots_dir.resolve(), report)
    keep = {p.resolve() for p in report.plots}
    for png in plots_dir.glob("*.png"):
        # a plot this report drew before, of a bench result file that is gone; other PNGs in the
        # folder (e.g. training-loss plots) are not the report's to delete
        ours = any(png.stem.startswith(f"{suite}-") for suite in SUITES)
        if ours and png.resolve() not in keep:
            png.unlink()
    readme.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(readme, "\n".join(lines).rstrip() + "\n")
    return report


def _ratio_text(row: dict[str, Any]) -> str:
    text = ", ".join(f"{num(r['median'])}x {k.replace('_', ' ')}" for k, r in row["ratios"].items())
    text = text or "-"
    if row["check"] is not None and not row["check"].get("ok", True):
        text += "  CHECK FAILED"
    return text


def text_summary(results: Iterable[dict[str, Any]], *, short: bool = False) -> str:
    """A plain-text table of result rows: suite, group, variant, median time, first ratio.
    short: per suite, section, group and row parameters only the fastest variant, plus a count
    of the rows that were skipped or failed."""
    lines = [f"{'suite':<10} {'group':<34} {'variant':<38} {'median':>12}  ratio / status"]
    for data in results:
        rows = data["rows"]
        if short:
            best: dict[tuple, dict] = {}
            for r in rows:
                if r["status"] != "ok":
                    continue
                key = (r["section"], r["group"], repr(sorted(r["params"].items())))
                if key not in best or r["time_s"]["median"] < best[key]["time_s"]["median"]:
                    best[key] = r
            bad = [r for r in rows if r["status"] != "ok"]
            shown = list(best.values())
        else:
            shown, bad = rows, []
        for r in shown:
            if r["status"] != "ok":
                med, tail = "", f"{r['status']}: {(r['note'] or '')[:60]}"
            else:
                med, tail = f"{num(r['time_s']['median'] * 1e3)} ms", _ratio_text(r)
            group = r["group"]
            if "prompt_len" in r["params"] and r["section"] != "decode":  # generate's sweeps
                group += f" P={r['params']['prompt_len']} N={r['params']['new_tokens']}"
            lines.append(
                f"{data['suite']:<10} {group[:34]:<34} {r['name'][:38]:<38} {med:>12}  {tail}"
            )
        if bad:
            kinds = ", ".join(
                f"{sum(r['status'] == k for r in bad)} {k}"
                for k in ("skipped", "error")
                if any(r["status"] == k for r in bad)
            )
            lines.append(
                f"{data['suite']:<10} ({kinds}: see the JSON notes)"
                + ("" if data["complete"] else "  INCOMPLETE RUN")
            )
        elif not data["complete"]:
            lines.append(f"{data['suite']:<10} INCOMPLETE RUN")
    return "\n".join(lines)


def summarize_files(paths: Iterable[str | os.PathLike], *, short: bool = False) -> str:
    return text_summary((load_result(p) for p in paths), short=short)
