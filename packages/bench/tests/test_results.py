"""Result files: the schema check, incremental writing, and loading errors."""

import copy
import json

import pytest
import torch

from gptstack.bench import BenchError, Column, Result, load_result, validate_result
from gptstack.bench.environment import environment
from gptstack.bench.harness import Measurement
from gptstack.bench.results import make_row


def sample_result(path=None) -> Result:
    result = Result(
        "ops",
        params={"x": 1},
        settings={"warmup": 1},
        env=environment(torch.device("cpu"), ["gptstack", "bench", "ops"]),
        path=path,
    )
    m = Measurement("eager", [0.003, 0.001, 0.002], "cpu", 1)
    result.table("t", "ops", [Column("time", "time_s", "time_ms")])
    result.plot("bars", "ops", "p", value="metrics.flops_per_s", label="group", series="name")
    result.add_row(
        make_row(
            section="ops",
            group="g",
            name="eager",
            measurement=m,
            metrics={"flops_per_s": 1e9},
            ratios={"vs_x": {"vs": "x", "n": 3, "median": 1.0, "min": 0.9, "max": 1.1}},
        )
    )
    result.add_row(
        make_row(section="ops", group="g", name="native", status="skipped", note="not built")
    )
    return result


def test_a_well_formed_result_passes_and_its_file_is_written_as_it_goes(tmp_path):
    path = tmp_path / "r.json"
    result = sample_result(path)
    on_disk = json.loads(path.read_text())
    assert on_disk["complete"] is False and len(on_disk["rows"]) == 2
    data = result.finish()
    assert validate_result(data) == []
    assert load_result(path)["complete"] is True
    assert data["rows"][0]["time_s"] == {"n": 3, "median": 0.002, "min": 0.001, "max": 0.003}
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed into place


@pytest.mark.parametrize(
    "break_it, words",
    [
        (lambda d: d.pop("rows"), "missing top-level"),
        (lambda d: d.__setitem__("schema", "other/9"), "schema"),
        (lambda d: d["rows"][0].__setitem__("status", "fine"), "status"),
        (lambda d: d["rows"][0].__setitem__("samples_s", []), "raw samples"),
        (lambda d: d["rows"][0].__setitem__("samples_s", [0.1, -1.0, 0.2]), "raw samples"),
        (lambda d: d["rows"][0]["time_s"].__setitem__("median", 0.5), "median"),
        (lambda d: d["rows"][0]["ratios"].__setitem__("vs.y", {"vs": "y"}), "ratio"),
        (lambda d: d["rows"][1].__setitem__("note", None), "note saying why"),
        (lambda d: d["tables"][0]["columns"][0].__setitem__("fmt", "furlongs"), "formatter"),
        (lambda d: d["plots"][0].__setitem__("kind", "pie"), "kind"),
        (lambda d: d["env"].pop("command"), "command"),
    ],
)
def test_each_schema_break_is_named(break_it, words):
    data = copy.deepcopy(sample_result().finish())
    break_it(data)
    problems = validate_result(data)
    assert problems and any(words in p for p in problems), problems


def test_rows_without_a_measurement_need_a_status_and_note():
    with pytest.raises(BenchError, match="status and note"):
        make_row(section="s", group="g", name="n")


def test_loading_a_damaged_file_names_it(tmp_path):
    bad = tmp_path / "train-cpu-x.json"
    bad.write_text('{"schema": ')
    with pytest.raises(BenchError, match="train-cpu-x.json"):
        load_result(bad)
    bad.write_text(json.dumps({"schema": "gptstack-bench/1"}))
    with pytest.raises(BenchError, match="fails the schema"):
        load_result(bad)
