"""The CPU thread policy: cores from affinity and the cgroup quota, the user's OMP_NUM_THREADS,
one thread for small work."""

import os

import pytest
import torch

from gptstack.tools import threads as threads_module
from gptstack.tools.threads import (
    SMALL_WORK_MACS,
    CpuBudget,
    DecodeThreads,
    choose_threads,
    cpu_budget,
    use_threads,
)

AFFINITY = len(os.sched_getaffinity(0))


def cgroup(tmp_path, cpu_max=None, path="/job"):
    """A fake cgroup v2 tree with cpu.max at `path`, and the /proc/self/cgroup line naming it."""
    root = tmp_path / "cgroup"
    folder = root / path.lstrip("/")
    folder.mkdir(parents=True)
    if cpu_max is not None:
        (folder / "cpu.max").write_text(cpu_max + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{path}\n")
    return root, proc


@pytest.mark.parametrize(
    "cpu_max, cores",
    [
        (None, AFFINITY),
        ("max 100000", AFFINITY),
        ("50000 100000", 1),  # half a CPU: still one thread
        ("150000 100000", 1),  # 1.5 CPUs: rounded down, so the kernel never throttles a thread
        ("6400000 100000", AFFINITY),  # a quota above the affinity mask: the mask decides
    ],
)
def test_cores_are_the_affinity_mask_capped_by_the_cgroup_quota(tmp_path, cpu_max, cores):
    root, proc = cgroup(tmp_path, cpu_max)
    budget = cpu_budget(env={}, cgroup_root=root, proc_cgroup=proc)
    assert budget.cores == cores and budget.user_threads is None
    assert f"affinity {AFFINITY}" in budget.detail


def test_a_quota_on_a_parent_cgroup_counts(tmp_path):
    root, proc = cgroup(tmp_path, None, path="/outer/inner")
    (root / "outer" / "cpu.max").write_text("100000 100000\n")
    assert cpu_budget(env={}, cgroup_root=root, proc_cgroup=proc).cores == 1


@pytest.mark.parametrize(
    "value, threads", [("3", 3), ("1", 1), ("", None), ("zero", None), ("0", None), ("4,2", 4)]
)
def test_omp_num_threads_is_the_users_choice(tmp_path, value, threads):
    root, proc = cgroup(tmp_path)
    budget = cpu_budget(env={"OMP_NUM_THREADS": value}, cgroup_root=root, proc_cgroup=proc)
    assert budget.user_threads == threads
    if threads is not None:  # it wins over the policy, for small and large work alike
        for rows in (1, 10**6):
            assert choose_threads(rows=rows, n_params=10**6, budget=budget).threads == threads


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_small_work_gets_one_thread_large_work_every_core(cores):
    budget = CpuBudget(cores, "test", None)
    n_params = 4_900_000  # the esp32 preset
    decode = choose_threads(rows=1, n_params=n_params, budget=budget)
    step = choose_threads(rows=64 * 64, n_params=n_params, budget=budget)
    assert decode.threads == 1 and "small" in decode.reason
    assert step.threads == cores
    edge = SMALL_WORK_MACS // n_params
    assert choose_threads(rows=edge, n_params=n_params, budget=budget).threads == 1
    assert choose_threads(rows=edge + 1, n_params=n_params, budget=budget).threads == cores


def test_use_threads_sets_torch_on_a_cpu_only():
    before = torch.get_num_threads()
    try:
        choice = use_threads(torch.device("cpu"), rows=1, n_params=1000)
        assert choice is not None and torch.get_num_threads() == choice.threads
        assert choice.describe().startswith(f"{choice.threads} thread")
        torch.set_num_threads(before)
        assert use_threads(torch.device("cuda", 0), rows=1, n_params=1000) is None
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)


def test_decoding_takes_every_core_once_the_slide_window_is_full(monkeypatch):
    """One thread while the KV cache fills (batch rows a step), every core once each step
    re-runs the whole window (batch x block_size rows); halve never re-runs it, naive always."""
    monkeypatch.setattr(threads_module, "cpu_budget", lambda **_: CpuBudget(4, "test", None))
    cpu, before = torch.device("cpu"), torch.get_num_threads()
    shape = {"batch": 1, "block_size": 64, "n_params": 4_900_000}  # the esp32 preset
    try:
        slide = DecodeThreads(cpu, prompt_len=6, **shape)
        for i in range(58):  # 6 + 58 = 64: the cache is full after token 57
            slide.before(i)
            assert torch.get_num_threads() == 1 and slide.threads == 1
        slide.before(58)
        assert torch.get_num_threads() == 4 and slide.threads == 4
        assert slide.describe().startswith("1 thread while the context fills, then 4 threads (")
        halve = DecodeThreads(cpu, prompt_len=6, window="halve", **shape)
        for i in range(500):
            halve.before(i)
        assert torch.get_num_threads() == 1 and halve.describe().startswith("1 thread (")
        for kind in (
            DecodeThreads(cpu, prompt_len=6, mode="naive", **shape),
            DecodeThreads(cpu, prompt_len=80, **shape),  # a prompt longer than the context
        ):
            torch.set_num_threads(1)
            kind.before(0)
            assert torch.get_num_threads() == 4
        torch.set_num_threads(before)
        gpu = DecodeThreads(torch.device("cuda", 0), prompt_len=6, **shape)
        gpu.before(100)
        assert gpu.threads is None and gpu.describe() is None and gpu.full_at is None
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
