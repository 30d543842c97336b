"""PNG plots of result rows, drawn from a plot spec that the suite stored in its JSON.

    render_plot(result_data, spec, Path("benchmarks/plots/train-h200-...-ladder.png"))

Two kinds (results.PLOT_KINDS):
- "bars": one group of bars per distinct `label` value, one bar per `series` value, height
  `value` (a dotted key into the row); `log` for a log y axis.
- "lines": one line per distinct `series` (a key or a list of keys), points (x, y).
Rows that are not "ok" or lack the value are left out. matplotlib runs headless (Agg).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .results import lookup


def _series_name(row: dict[str, Any], series: str | list[str]) -> str:
    keys = [series] if isinstance(series, str) else series
    return " · ".join(str(lookup(row, k)) for k in keys)


def _points(data: dict[str, Any], spec: dict[str, Any], keys: list[str]) -> list[dict]:
    rows = [r for r in data["rows"] if r["section"] == spec["section"] and r["status"] == "ok"]
    return [r for r in rows if all(lookup(r, k) is not None for k in keys)]


def render_plot(data: dict[str, Any], spec: dict[str, Any], path: Path) -> bool:
    """Draw one plot to path; False (nothing written) when no row has the values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if spec["kind"] == "bars":
        rows = _points(data, spec, [spec["value"]])
    else:
        rows = _points(data, spec, [spec["x"], spec["y"]])
    if not rows:
        return False
    device = data["env"]["device"]["name"]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    if spec["kind"] == "bars":
        _bars(ax, rows, spec)
    else:
        _lines(ax, rows, spec)
    ax.set_title(f"{spec['title']}\n{device}, {data['env']['date'][:10]}", fontsize=10)
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _bars(ax, rows: list[dict], spec: dict[str, Any]) -> None:
    labels = list(dict.fromkeys(str(lookup(r, spec["label"])) for r in rows))
    series = list(dict.fromkeys(_series_name(r, spec["series"]) for r in rows))
    width = 0.8 / max(1, len(series))
    for j, s in enumerate(series):
        xs, ys = [], []
        for r in rows:
            if _series_name(r, spec["series"]) == s:
                xs.append(
                    labels.index(str(lookup(r, spec["label"])))
                    + (j - (len(series) - 1) / 2) * width
                )
                ys.append(lookup(r, spec["value"]))
        ax.bar(xs, ys, width=width, label=s)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(
        labels,
        rotation=15 if len(labels) > 3 else 0,
        ha="right" if len(labels) > 3 else "center",
        fontsize=8,
    )
    if spec.get("log"):
        ax.set_yscale("log")
    if spec["value"].startswith("ratios."):
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")  # the baseline itself
    ax.legend(fontsize=7, ncol=2 if len(series) > 4 else 1)


def _lines(ax, rows: list[dict], spec: dict[str, Any]) -> None:
    by_series: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_series.setdefault(_series_name(r, spec["series"]), []).append(
            (lookup(r, spec["x"]), lookup(r, spec["y"]))
        )
    for name, pts in by_series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if spec.get("logx"):
        ax.set_xscale("log", base=2)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xlabel(spec.get("xlabel", spec["x"]))
    ax.legend(fontsize=7)
