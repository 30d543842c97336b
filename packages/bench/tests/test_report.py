"""The report: regenerated from a folder of results, every table number traceable to its JSON."""

import json
import re
import shutil
from pathlib import Path

import pytest

from gptstack.bench import build_report, text_summary
from gptstack.bench.formatting import FORMATTERS

pytestmark = pytest.mark.slow  # needs the session's suite results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]\d+)?")


def leaves(obj):
    """Every value of a JSON tree, dicts included (the spread/ratio/check formatters take one)."""
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from leaves(v)


def formatted_numbers(data) -> set[str]:
    """Every number token any formatter can produce from any value of the result."""
    out = set()
    for value in leaves(data):
        for fmt in FORMATTERS.values():
            try:
                text = fmt(value)
            except (TypeError, KeyError, ValueError, AttributeError):
                continue
            out.update(NUMBER.findall(str(text)))
    return out


def tables_with_sources(markdown: str):
    """(source json path, [table lines]) for each table followed by its Source line."""
    lines, table, out = markdown.splitlines(), [], []
    for line in lines:
        if line.startswith("|"):
            table.append(line)
        elif line.startswith("Source: `"):
            out.append((line.split("`")[1], table))
            table = []
        elif line.strip():
            table = []
    return out


@pytest.fixture
def report_dir(tmp_path, suite_results, results_dir):
    results = tmp_path / "benchmarks" / "results"
    shutil.copytree(results_dir, results)
    return tmp_path / "benchmarks"


def test_report_regenerates_tables_and_plots(report_dir, suite_results):
    report = build_report(report_dir / "results", report_dir / "README.md", report_dir / "plots")
    text = (report_dir / "README.md").read_text()
    assert len(report.results) == len(suite_results)
    for path in suite_results.values():
        assert f"results/{path.name}" in text
    assert "Produced by: `pytest bench`" in text
    assert report.plots
    for png in report.plots:
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert f"plots/{png.name}" in text


def test_every_table_number_comes_from_its_json(report_dir, suite_results):
    build_report(report_dir / "results", report_dir / "README.md", report_dir / "plots")
    text = (report_dir / "README.md").read_text()
    tables = tables_with_sources(text)
    assert len(tables) >= len(suite_results)
    for source, table in tables:
        data = json.loads((report_dir / source).read_text())
        allowed = formatted_numbers(data)
        for line in table[2:]:  # skip the header and the separator
            for cell in line.strip("|").split(" | "):
                for token in NUMBER.findall(cell):
                    assert token in allowed, f"{token!r} in {cell!r} ({source}) is in no value"


def test_plots_of_removed_results_go_and_incomplete_runs_say_so(report_dir, suite_results):
    first = build_report(report_dir / "results", report_dir / "README.md", report_dir / "plots")
    gone = suite_results["attention"].name
    (report_dir / "results" / gone).unlink()
    ops = report_dir / "results" / suite_results["ops"].name
    data = json.loads(ops.read_text())
    data["complete"] = False
    ops.write_text(json.dumps(data))
    second = build_report(report_dir / "results", report_dir / "README.md", report_dir / "plots")
    stem = Path(gone).stem
    assert any(p.name.startswith(stem) for p in first.plots)
    assert not any(p.name.startswith(stem) for p in (report_dir / "plots").iterdir())
    assert len(second.plots) < len(first.plots)
    assert "Incomplete run" in (report_dir / "README.md").read_text()


def test_text_summary_lists_every_suite(suite_results):
    datas = [json.loads(p.read_text()) for p in suite_results.values()]
    for short in (False, True):
        out = text_summary(datas, short=short)
        for suite in suite_results:
            assert suite in out


def test_other_json_is_listed_and_training_runs_tabled(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    run = {
        "kind": "training-run",
        "run": "esp32",
        "device": "NVIDIA H200",
        "n_params": 4_900_000,
        "steps": 1234,
        "tokens_per_s_median": 305504.5,
        "mfu_median": 0.0094,
        "wall_time_s": 257.19,
        "best_val_loss": 2.791,
    }
    (results / "run-esp32.json").write_text(json.dumps(run))
    (results / "eval-esp32.json").write_text(json.dumps({"command": "gptstack eval --ckpt x"}))
    (results / "broken.json").write_text("{")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "run-esp32-loss.png").write_bytes(PNG_MAGIC)  # not the report's: must stay
    report = build_report(results, tmp_path / "README.md", plots)
    text = (tmp_path / "README.md").read_text()
    assert report.results == [] and len(report.others) == 3
    assert "gptstack eval --ckpt x" in text and "not JSON" in text
    row = next(line for line in text.splitlines() if line.startswith("| `run-esp32.json`"))
    for token in NUMBER.findall(row):
        assert token in formatted_numbers(run), token
    assert (plots / "run-esp32-loss.png").exists()
