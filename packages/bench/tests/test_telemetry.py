"""gptstack.bench.telemetry: nvidia-smi's samples parsed, summarized, and taken in the background
(a fake nvidia-smi on the CPU machine)."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from gptstack.bench.telemetry import (
    CLOCK,
    FIELDS,
    OLD_REASONS,
    POWER,
    REASONS,
    TEMPERATURE,
    GpuTelemetry,
    parse_sample,
    reason_names,
    summarize,
)


@given(
    clock=st.integers(0, 3000),
    power=st.floats(0, 2000, allow_nan=False).map(lambda p: round(p, 2)),
    temp=st.integers(0, 120),
    mask=st.integers(0, 2**64 - 1),
)
def test_a_sample_line_round_trips(clock, power, temp, mask):
    line = f"{clock}, {power:.2f}, {temp}, 0x{mask:016x}"  # what --format=csv,nounits prints
    assert parse_sample(line, FIELDS) == {CLOCK: clock, POWER: power, TEMPERATURE: temp,
                                          REASONS: mask}  # fmt: skip


def test_lines_that_are_not_samples_are_skipped():
    assert parse_sample("1755, [N/A], 60, 0x0", FIELDS) is None
    assert parse_sample("1755, 650.1, 60", FIELDS) is None  # a column short
    assert parse_sample("Failed to initialize NVML", FIELDS) is None
    assert parse_sample("1755, 650.1, 60", FIELDS[:3]) == {CLOCK: 1755, POWER: 650.1,
                                                           TEMPERATURE: 60}  # fmt: skip


def test_reason_bits_are_named():
    assert reason_names(0) == []
    assert reason_names(0x4) == ["sw_power_cap"]
    assert reason_names(0x4 | 0x8 | 0x1) == ["gpu_idle", "sw_power_cap", "hw_slowdown"]
    assert reason_names(0x1000 | 0x40) == ["hw_thermal_slowdown", "0x1000"]


def test_summary_of_samples():
    samples = [
        {CLOCK: c, POWER: p, TEMPERATURE: t, REASONS: m}
        for c, p, t, m in [
            (1980, 300.0, 50, 0x1),
            (1755, 690.5, 71, 0x4),
            (1410, 700.0, 74, 0x4),
            (1830, 650.0, 73, 0x0),
        ]  # fmt: skip
    ]
    s = summarize(samples)
    assert s["samples"] == 4
    assert s["sm_clock_mhz"] == {"median": (1755 + 1830) / 2, "min": 1410}
    assert s["power_w"] == {"median": (650.0 + 690.5) / 2, "max": 700.0}
    assert s["temperature_c"] == {"max": 74}
    assert s["clock_reasons_share"] == {"sw_power_cap": 0.5}  # gpu_idle is not a slowdown
    assert summarize([]) is None


FAKE_SMI = """#!/usr/bin/env bash
# a fake nvidia-smi: one sample, or one every 10 ms with -lms
# REJECT_REASONS=1: a driver without clocks_event_reasons; 2: without either name
[ -n "${SMI_LOG:-}" ] && echo "$*" >> "$SMI_LOG"
for a in "$@"; do
  case "$a" in
    *clocks_event_reasons*) [ "${REJECT_REASONS:-0}" != 0 ] && exit 2;;
    *clocks_throttle_reasons*) [ "${REJECT_REASONS:-0}" = 2 ] && exit 2;;
  esac
done
line() {
  case "$*" in
    *_reasons.active*) echo "1755, 612.34, 70, 0x0000000000000004";;
    *) echo "1755, 612.34, 70";;
  esac
}
case "$*" in
  *-lms*) while true; do line "$@"; sleep 0.01; done;;
  *) line "$@";;
esac
"""


def _fake(tmp_path, monkeypatch, reject_reasons: int):
    script = tmp_path / "nvidia-smi"
    script.write_text(FAKE_SMI)
    script.chmod(0o755)
    monkeypatch.setenv("REJECT_REASONS", str(reject_reasons))
    return str(script)


def test_samples_are_taken_while_the_block_runs(tmp_path, monkeypatch):
    with GpuTelemetry(command=_fake(tmp_path, monkeypatch, 0), interval_ms=10) as gpu:
        time.sleep(0.3)
    s = gpu.summary()
    assert s["samples"] >= 3
    assert s["sm_clock_mhz"] == {"median": 1755, "min": 1755}
    assert s["power_w"]["max"] == 612.34
    assert s["clock_reasons_share"] == {"sw_power_cap": 1.0}


def test_an_older_driver_is_asked_by_the_reasons_older_name(tmp_path, monkeypatch):
    with GpuTelemetry(command=_fake(tmp_path, monkeypatch, 1), interval_ms=10) as gpu:
        time.sleep(0.2)
    assert gpu.fields == (*FIELDS[:3], OLD_REASONS)
    assert gpu.summary()["clock_reasons_share"] == {"sw_power_cap": 1.0}


def test_a_driver_without_the_reasons_field_is_asked_without_it(tmp_path, monkeypatch):
    with GpuTelemetry(command=_fake(tmp_path, monkeypatch, 2), interval_ms=10) as gpu:
        time.sleep(0.2)
    assert gpu.fields == FIELDS[:3]
    s = gpu.summary()
    assert s["samples"] >= 2 and "clock_reasons_share" not in s


def test_without_nvidia_smi_there_is_no_summary(tmp_path):
    with GpuTelemetry(command=str(tmp_path / "no-such-nvidia-smi")) as gpu:
        pass
    assert gpu.fields == () and gpu.summary() is None


def test_the_driver_is_asked_for_its_fields_once(tmp_path, monkeypatch):
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("SMI_LOG", str(log))
    command = _fake(tmp_path, monkeypatch, 0)
    for _ in range(3):  # three short windows, as a benchmark's rounds take them
        with GpuTelemetry(command=command, interval_ms=10) as gpu:
            time.sleep(0.05)
        assert gpu.fields == FIELDS
    calls = log.read_text().splitlines()
    assert sum("-lms" not in c for c in calls) == 1  # the fields' probe
    assert sum("-lms" in c for c in calls) == 3  # a sampler a window
