"""What the GPU's clocks and power did while a benchmark ran: nvidia-smi sampled in the background.

    with GpuTelemetry() as gpu:
        subprocess.run(["gptstack", "train", ...])
    gpu.summary()  # {"samples": 212, "sm_clock_mhz": {"median": 1755, "min": 1410}, ...}

Why: an H100 or H200 at its power limit lowers its SM clock, so two kernels timed alone at the
boost clock can rank otherwise inside a long training step (2026-12-07: cuBLASLt algorithms
1.2x faster in a graph of one product were no faster end to end). A side-by-side record that
carries each run's median SM clock, power and the reasons the driver gave for lowering the
clock says whether two sides ran under the same conditions. Without nvidia-smi (a CPU run),
summary() is None; a driver that does not know the reasons' name is asked by the older one,
or without them.
"""

from __future__ import annotations

import functools
import statistics
import subprocess
from typing import Any

# nvidia-smi --query-gpu fields, in the order of each sample's columns
CLOCK, POWER, TEMPERATURE, REASONS = (
    "clocks.sm",
    "power.draw",
    "temperature.gpu",
    "clocks_event_reasons.active",
)
FIELDS = (CLOCK, POWER, TEMPERATURE, REASONS)
OLD_REASONS = "clocks_throttle_reasons.active"  # the same mask, its name before driver 535
# The bits of clocks_event_reasons.active (nvml.h, nvmlClocksEventReason*)
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def parse_sample(line: str, fields: tuple[str, ...]) -> dict[str, float | int] | None:
    """One line of `--format=csv,noheader,nounits` output as {field: value} (None: not a
    sample, e.g. "[N/A]" or an error line). The reasons mask is an int, the rest floats."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(fields):
        return None
    out: dict[str, float | int] = {}
    try:
        for field, cell in zip(fields, cells, strict=True):
            if field in (REASONS, OLD_REASONS):
                out[REASONS] = int(cell, 16)
            else:
                out[field] = float(cell)
    except ValueError:
        return None
    return out


def reason_names(mask: int) -> list[str]:
    """The named bits set in a clocks_event_reasons mask (unknown bits as hex)."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    return names + ([hex(rest)] if rest else [])


def summarize(samples: list[dict[str, float | int]]) -> dict[str, Any] | None:
    """Medians and extremes of the samples; for each reason, the share of samples it was
    active in (gpu_idle left out: between kernels, not a slowdown)."""
    if not samples:
        return None
    out: dict[str, Any] = {"samples": len(samples)}
    clocks = [s[CLOCK] for s in samples if CLOCK in s]
    power = [s[POWER] for s in samples if POWER in s]
    temps = [s[TEMPERATURE] for s in samples if TEMPERATURE in s]
    if clocks:
        out["sm_clock_mhz"] = {"median": statistics.median(clocks), "min": min(clocks)}
    if power:
        out["power_w"] = {"median": statistics.median(power), "max": max(power)}
    if temps:
        out["temperature_c"] = {"max": max(temps)}
    masks = [int(s[REASONS]) for s in samples if REASONS in s]
    if masks:
        counts: dict[str, int] = {}
        for mask in masks:
            for name in reason_names(mask):
                counts[name] = counts.get(name, 0) + 1
        counts.pop("gpu_idle", None)
        out["clock_reasons_share"] = {
            k: round(v / len(masks), 3) for k, v in sorted(counts.items())
        }
    return out


def _query(command: str, gpu: int, fields: tuple[str, ...], *extra: str) -> list[str]:
    fmt = "--format=csv,noheader,nounits"
    return [command, f"--query-gpu={','.join(fields)}", fmt, "-i", str(gpu), *extra]


@functools.cache
def supported_fields(command: str, gpu: int) -> tuple[str, ...]:
    """FIELDS, with the reasons' older name or without them where this driver rejects the
    name; () where `command` is missing or fails. Asked once per process and GPU (a benchmark
    samples many short windows)."""
    for fields in (FIELDS, (*FIELDS[:-1], OLD_REASONS), FIELDS[:-1]):
        try:
            proc = subprocess.run(
                _query(command, gpu, fields), capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            return ()
        if proc.returncode == 0 and parse_sample(proc.stdout.strip(), fields) is not None:
            return fields
    return ()


class GpuTelemetry:
    """Samples GPU `gpu` every `interval_ms` while the `with` block runs (nvidia-smi -lms)."""

    def __init__(self, gpu: int = 0, interval_ms: int = 250, command: str = "nvidia-smi"):
        self.gpu, self.interval_ms, self.command = gpu, interval_ms, command
        self.fields: tuple[str, ...] = ()
        self.samples: list[dict[str, float | int]] = []
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> GpuTelemetry:
        self.fields = supported_fields(self.command, self.gpu)
        if self.fields:
            self._proc = subprocess.Popen(
                _query(self.command, self.gpu, self.fields, "-lms", str(self.interval_ms)),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            out, _ = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        self._proc = None
        for line in out.splitlines():
            sample = parse_sample(line, self.fields)
            if sample is not None:
                self.samples.append(sample)

    def summary(self) -> dict[str, Any] | None:
        return summarize(self.samples)
