"""The CPU thread policy: how many threads PyTorch's intra-op pool gets, chosen per job.

    choice = use_threads(device, rows=1, n_params=model.num_params())   # sets torch's threads
    print(choice.describe())   # "1 thread (of 2 cores: affinity 2, no cgroup CPU limit; ...)"
    threads = DecodeThreads(device, batch=1, prompt_len=6, block_size=256, n_params=...)
    threads.before(i)          # before each new token: the choice of its phase (see the class)

PyTorch starts with one thread per physical core it is allowed on and ignores a container's CPU
quota. That is wrong twice for gptstack's small models:
- Batch-1 decoding runs ~100 small ops per token (the esp32 preset: ~5M multiply-adds per
  token). Each op split over threads pays a fork/join, and a thread that waits for a core busy
  with other work stalls the whole op: on the shared 2-core development machine the KV-cache
  decoder made 53 tokens/s with PyTorch's 2 threads and 679 tokens/s with 1 (issue 16;
  benchmarks/results/generate-cpu-*.json has the side-by-side rows). Small work runs on 1 thread.
- A cgroup quota of 1.5 CPUs on a 64-core host would get 64 threads that the kernel throttles.
  The cores counted here are the affinity mask, capped by the cgroup quota (cgroup v2 cpu.max,
  or v1 cpu.cfs_quota_us / cpu.cfs_period_us), rounded down, at least one.
Large work (a training step, an evaluation batch) takes every available core: there the
threads pay (the CPU training rows of benchmarks/results/train-cpu-*.json).
`OMP_NUM_THREADS`, when the user set it, wins over the policy.

numpy and os only at import: torch is imported by `use_threads` alone.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# Multiply-adds of one forward call (rows x parameters) below which a job runs on one thread.
# Batch-1 decoding of every preset here is below it (esp32 4.9M, shakespeare-char 10.7M per
# token) and so is batch 8 of esp32 (39M); a training or evaluation batch of 64 x 64 tokens of
# esp32 is 20G. Set from the CPU decode rows of `gptstack bench generate --device cpu`.
SMALL_WORK_MACS = 50_000_000

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    """The cores this process may use, and where that number came from."""

    cores: int
    detail: str  # e.g. "affinity 2, cgroup quota 1.5 CPUs"
    user_threads: int | None  # OMP_NUM_THREADS, when the user set it


def _cgroup_v2_quota(root: Path, proc_cgroup: Path) -> float | None:
    """The tightest cpu.max quota (in CPUs) on this process's cgroup v2 path, or None."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    rel = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), "/")
    folder = root / rel.lstrip("/")
    quotas = []
    for d in (folder, *folder.parents):
        try:
            quota, period = (d / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            pass
        else:
            if quota != "max" and float(period) > 0:
                quotas.append(float(quota) / float(period))
        if d == root:
            break
    return min(quotas) if quotas else None


def _cgroup_v1_quota(root: Path) -> float | None:
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _user_threads(env: dict[str, str]) -> int | None:
    try:
        n = int(env.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        return None
    return n if n >= 1 else None


def cpu_budget(
    *,
    env: dict[str, str] | None = None,
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
) -> CpuBudget:
    """The cores available to this process: affinity mask, capped by the cgroup CPU quota."""
    env = dict(os.environ) if env is None else env
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    quota = _cgroup_v2_quota(cgroup_root, proc_cgroup)
    if quota is None:
        quota = _cgroup_v1_quota(cgroup_root)
    cores = affinity if quota is None else max(1, min(affinity, math.floor(quota)))
    limit = "no cgroup CPU limit" if quota is None else f"cgroup quota {quota:g} CPUs"
    return CpuBudget(cores, f"affinity {affinity}, {limit}", _user_threads(env))


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str

    def describe(self) -> str:
        return f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.reason})"


def choose_threads(*, rows: int, n_params: int, budget: CpuBudget | None = None) -> ThreadChoice:
    """Threads for a job whose forward calls each process `rows` token rows through a model of
    n_params parameters (decoding: rows = batch; training, evaluation: batch x block_size)."""
    budget = budget or cpu_budget()
    cores = f"of {budget.cores} core{'s' if budget.cores != 1 else ''}: {budget.detail}"
    if budget.user_threads is not None:
        return ThreadChoice(budget.user_threads, f"OMP_NUM_THREADS={budget.user_threads}; {cores}")
    work = rows * n_params
    if work < SMALL_WORK_MACS or budget.cores == 1:
        return ThreadChoice(
            1,
            f"{cores}; {work / 1e6:,.0f}M multiply-adds per call is small "
            "work, which more threads slow down",
        )
    return ThreadChoice(budget.cores, f"{cores}; {work / 1e9:,.1f}G multiply-adds per call")


def use_threads(device, *, rows: int, n_params: int) -> ThreadChoice | None:
    """Apply the policy to PyTorch when the job runs on the CPU; None on a GPU (the CPU only
    feeds it there, and PyTorch's default is left alone)."""
    if getattr(device, "type", device) != "cpu":
        return None
    import torch

    choice = choose_threads(rows=rows, n_params=n_params)
    torch.set_num_threads(choice.threads)
    return choice


# DecodeThreads switches threads at the slide window (True), or keeps the first phase's choice
# for the whole job (False: the policy before 2026-12-05), the A/B switch of
# benchmarks/sample_speed.py
BY_PHASE = True


class DecodeThreads:
    """The policy for one decoding job, by phase. With the KV-cache decoder a step runs `batch`
    rows while the context fills (small work: one thread for these models), but under the slide
    window, once the prompt and the new tokens reach block_size, every step re-runs the whole
    window: batch x block_size rows (esp32 at batch 1: 311M multiply-adds a step, large work).
    The naive decoder re-runs the whole context from the start. `before(i)`, called before new
    token i is computed, applies the choice of its phase; on a GPU nothing is changed. (What it
    gains: tools/README.md, "Threads".)"""

    def __init__(
        self,
        device,
        *,
        batch: int,
        prompt_len: int,
        block_size: int,
        n_params: int,
        window: str = "slide",
        mode: str = "kv",
    ) -> None:
        self.device, self.n_params = device, n_params
        self.window_rows = batch * block_size
        self.filling = use_threads(device, rows=batch, n_params=n_params)
        self.full: ThreadChoice | None = None
        # the first new token whose step re-runs a whole window; None: none does, or a GPU
        self.full_at: int | None = None
        if self.filling is not None:
            if mode == "naive":
                self.full_at = 0
            elif window == "slide":
                self.full_at = block_size - prompt_len

    def before(self, i: int) -> None:
        if BY_PHASE and self.full is None and self.full_at is not None and i >= self.full_at:
            self.full = use_threads(self.device, rows=self.window_rows, n_params=self.n_params)

    @property
    def threads(self) -> int | None:
        """The threads of the last phase reached (None on a GPU)."""
        choice = self.full or self.filling
        return choice.threads if choice else None

    def describe(self) -> str | None:
        if self.filling is None:
            return None
        if self.full is None or self.full.threads == self.filling.threads:
            return (self.full or self.filling).describe()
        return (
            f"{self.filling.threads} thread{'s' * (self.filling.threads != 1)} while the context "
            f"fills, then {self.full.describe()} for the slide window's steps"
        )
