"""The harness: warm-up, alternation, rotation, stop rules, failures. No timing assertions."""

import pytest
import torch

from gptstack.bench import BenchError, Settings, Variant, compare
from gptstack.bench.timers import Clock

CPU = torch.device("cpu")


def recorder(log, name):
    def fn(x):
        log.append((name, x))

    return fn


def test_variants_alternate_round_by_round_after_warm_up():
    log = []
    variants = [Variant("A", recorder(log, "A"), [0]), Variant("B", recorder(log, "B"), [0])]
    cmp = compare(
        variants,
        Settings(warmup=2, min_repeats=5, min_repeats_slow=1, max_repeats=5, budget_s=0),
        device=CPU,
    )
    assert [n for n, _ in log[:4]] == ["A", "A", "B", "B"]  # each warms up before any timing
    assert [n for n, _ in log[4:]] == ["A", "B"] * 5
    assert cmp.rounds == 5 and {len(m.samples) for m in cmp.measurements.values()} == {5}


def test_inputs_rotate_between_samples():
    log = []
    cmp = compare(
        [Variant("A", recorder(log, "A"), ["x", "y", "z"])],
        Settings(warmup=0, min_repeats=7, min_repeats_slow=1, max_repeats=7, budget_s=0),
        device=CPU,
    )
    assert [x for _, x in log] == ["x", "y", "z", "x", "y", "z", "x"]
    assert cmp.measurements["A"].timing == "cpu"


def test_stop_rules():
    def make():
        return [Variant("A", lambda _: None, [0])]

    # budget spent at once: exactly min_repeats rounds
    assert (
        compare(
            make(), Settings(warmup=0, min_repeats=4, max_repeats=50, budget_s=0), device=CPU
        ).rounds
        == 4
    )
    # endless budget: max_repeats caps
    assert (
        compare(
            make(),
            Settings(warmup=0, min_repeats=2, min_repeats_slow=1, max_repeats=6, budget_s=1e9),
            device=CPU,
        ).rounds
        == 6
    )
    # a variant over slow_s per call needs only min_repeats_slow rounds (self-timed here)
    slow = [Variant("S", lambda _: 2.0, [0], timing="self")]
    cmp = compare(
        slow,
        Settings(
            warmup=0, min_repeats=10, min_repeats_slow=3, max_repeats=20, budget_s=0, slow_s=1.0
        ),
        device=CPU,
    )
    assert cmp.rounds == 3 and cmp.measurements["S"].samples == [2.0, 2.0, 2.0]


def test_a_failing_variant_is_reported_and_the_others_carry_on():
    calls = {"n": 0}

    def flaky(_):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("capture failed\nsecond line")

    def broken(_):
        raise ValueError("cannot compile")

    cmp = compare(
        [
            Variant("ok", lambda _: None, [0]),
            Variant("flaky", flaky, [0]),
            Variant("broken", broken, [0]),
        ],
        Settings(warmup=1, min_repeats=4, min_repeats_slow=1, max_repeats=4, budget_s=0),
        device=CPU,
    )
    assert set(cmp.measurements) == {"ok"}
    assert len(cmp.measurements["ok"].samples) == 4
    assert cmp.failures["broken"].startswith("ValueError: cannot compile")
    assert cmp.failures["flaky"].startswith("RuntimeError: capture failed")
    assert "\n" not in cmp.failures["flaky"]


def test_bad_settings_and_clocks_are_refused():
    with pytest.raises(BenchError, match="max_repeats"):
        Settings(min_repeats=30, max_repeats=10)
    with pytest.raises(BenchError, match="CUDA"):
        Clock(lambda _: None, [0], timing="cuda_events", device=CPU)
    with pytest.raises(BenchError, match="cuda_graph"):
        Clock(lambda _: None, [0], timing="cpu", device=CPU, inner=4)
    with pytest.raises(BenchError, match="unique"):
        compare([Variant("A", print, [0]), Variant("A", print, [0])], Settings(), device=CPU)


def test_failure_names_the_error_it_replaced():
    # a failed CUDA-graph capture: capture_end's error is raised while the body's is handled
    def capture(_):
        try:
            raise ValueError("launch refused\ndetail")
        finally:
            raise RuntimeError("operation failed due to a previous error during capture")

    def explicit(_):
        try:
            raise KeyError("hidden")
        except KeyError:
            raise TypeError("shown") from None  # suppressed context: not reported

    cmp = compare(
        [Variant("capture", capture, [0]), Variant("explicit", explicit, [0])],
        Settings(warmup=1, min_repeats=1, min_repeats_slow=1, max_repeats=1, budget_s=0),
        device=CPU,
    )
    text = cmp.failures["capture"]
    assert text.startswith("RuntimeError: operation failed due to a previous error")
    assert "; first: ValueError: launch refused" in text and "\n" not in text
    assert cmp.failures["explicit"].startswith("TypeError: shown")
    assert "hidden" not in cmp.failures["explicit"]
