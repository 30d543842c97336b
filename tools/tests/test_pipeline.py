"""`gptstack pipeline`: every stage end to end, resuming its own interrupted run, refusing to
train over a finished one, and replacing it only when told."""

import json

import pytest

from gptstack.tools.cli import main


def starts(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if '"start"' in line]


def last_step(run_dir):
    return json.loads((run_dir / "last" / "config.json").read_text())["step"]


@pytest.mark.slow
def test_pipeline_resumes_refuses_and_overwrites(tmp_path, small_corpus, capsys):
    out = tmp_path / "pipe"
    small = [f"--set=data.path={small_corpus}", "--set=train.eval_batches=2"]
    # an interrupted pipeline: its training stopped at step 8 of 20
    assert (
        main(
            [
                "train",
                "--preset",
                "smoke",
                "--out",
                str(out / "train"),
                "--stop-at",
                "8",
                "--set",
                "train.max_steps=20",
                "--no-progress",
                *small,
            ]
        )
        == 0
    )
    capsys.readouterr()

    assert main(["pipeline", "--preset", "smoke", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unfinished" in err and f"--resume {out}" in err and "--overwrite" in err

    assert main(["pipeline", "--resume", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert starts(out / "train") == [0, 8] and last_step(out / "train") == 20  # continued
    assert "resuming" in text and "[6/6]" in text and "memory plan for esp32s3" in text
    for name in (
        "train/best/config.json",
        "train/loss.png",
        "train/summary.json",
        "sample.txt",
        "model.gsm",
        "eval.json",
        "engine.txt",
        "screen.png",
        "summary.json",
    ):
        assert (out / name).is_file(), name
    assert (out / "engine.txt").read_text().startswith("ROMEO:")
    assert (out / "screen.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and set(summary["stages"]) == {
        "data",
        "train",
        "sample",
        "export",
        "evaluate",
        "engine",
    }
    assert "stage times" in text and all(name in text for name in summary["stages"])
    ev = json.loads((out / "eval.json").read_text())
    # float and int8 scored the same val windows: the CPU subset
    assert ev["float"]["val_windows"] < ev["float"]["val_windows_total"]
    assert ev["artifact"]["int8"]["n_predictions"] == ev["float"]["val_predictions"]
    assert summary["eval"]["real_word_fraction"] == ev["float"]["generated"]["real_word_fraction"]

    assert main(["pipeline", "--preset", "smoke", "--out", str(out)]) == 2
    assert "finished" in capsys.readouterr().err

    assert (
        main(
            [
                "pipeline",
                "--preset",
                "smoke",
                "--out",
                str(out),
                "--overwrite",
                "--steps",
                "5",
                "--no-progress",
                "--val-windows",
                "all",
                *small,
            ]
        )
        == 0
    )
    assert starts(out / "train") == [0] and last_step(out / "train") == 5
    ev = json.loads((out / "eval.json").read_text())
    assert ev["float"]["val_windows"] == ev["float"]["val_windows_total"]
