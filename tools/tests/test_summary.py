"""summary.json from metrics.jsonl: the fields a resumed run (several segments) adds up."""

import json
import random

import pytest

from gptstack.tools.summary import summarize_run


def write_segments(run_dir, segments):
    """metrics.jsonl of a run trained in len(segments) processes: each (start, end) pair with
    the end event's extra fields."""
    lines, t = [], 1000.0
    for i, end_fields in enumerate(segments):
        lines.append({"event": "start", "time": t, "process_start": t - 2.0, "device": "cpu"})
        lines.append({"event": "train", "step": i, "tokens_per_s": 100.0, "time": t + 1})
        lines.append({"event": "end", "step": i + 1, "time": t + 10.0, **end_fields})
        t += 100.0
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_peak_memory_is_the_largest_segments_and_none_without_a_gpu(tmp_path):
    peaks = [random.randrange(1, 2**36) for _ in range(3)]
    write_segments(tmp_path, [{"peak_memory_bytes": p} for p in peaks])
    summary = summarize_run(tmp_path, command=["test"])
    assert summary["peak_memory_bytes"] == max(peaks)
    assert summary["wall_time_s"] == pytest.approx(30.0)  # three segments of 10 s

    # a CPU run records None, and runs written before the field have none
    write_segments(tmp_path, [{"peak_memory_bytes": None}, {}])
    assert summarize_run(tmp_path, command=["test"])["peak_memory_bytes"] is None
