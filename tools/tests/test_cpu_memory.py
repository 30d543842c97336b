"""cpu_memory: when malloc is left alone, that keep_freed_memory really ends the page faults of
a training-shaped allocation pattern, and that a CPU run says what it did."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.cpu_memory import why_not
from gptstack.tools.train import train

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize(
    ("env", "libc", "expected"),
    [
        ({}, "glibc", None),
        ({"MALLOC_ARENA_MAX": "2", "LD_PRELOAD": ""}, "glibc", None),
        ({}, "", "not glibc's malloc (unknown libc)"),
        ({}, "musl", "not glibc's malloc (musl)"),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, "glibc", "MALLOC_TRIM_THRESHOLD_ set in the environment"),
        (
            {"MALLOC_MMAP_THRESHOLD_": "1", "MALLOC_TOP_PAD_": "0"},
            "glibc",
            "MALLOC_MMAP_THRESHOLD_, MALLOC_TOP_PAD_ set in the environment",
        ),
        (
            {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"},
            "glibc",
            "GLIBC_TUNABLES set in the environment",
        ),
        ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, "glibc", None),
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "glibc", "jemalloc preloaded"),
        ({"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, "glibc", "tcmalloc preloaded"),
    ],
)
def test_malloc_is_left_alone_where_someone_chose_it(env, libc, expected):
    assert why_not(env, libc) == expected


# Each round touches 12 fresh 4 MiB blocks and frees them all, as a training step does with its
# activations: glibc's defaults return them to the kernel (the mmap threshold and the trim of
# the heap top), so every round faults its 48 MiB in again.
ROUNDS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from gptstack.tools.cpu_memory import keep_freed_memory

    if sys.argv[1] == "keep":
        note = keep_freed_memory()
        assert note.applied, note
    def round_():
        blocks = [np.ones(1 << 20, dtype=np.float32) for _ in range(12)]
        return sum(float(b[-1]) for b in blocks)
    for _ in range(3):
        round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        round_()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc thresholds: this process runs another libc")
def test_kept_memory_ends_the_page_faults_of_repeated_steps():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    env.pop("LD_PRELOAD", None)
    faults = {}
    for mode in ("default", "keep"):
        run = subprocess.run(
            [sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stderr
        faults[mode] = int(run.stdout.split()[-1])
    pages = 20 * 12 * (4 << 20) // 4096  # every block of every round, faulted in again
    assert faults["default"] > pages // 4, faults  # 122,480 on the 2-core development machine
    assert faults["keep"] < pages // 100, faults


def test_a_cpu_run_names_what_it_did_to_malloc(tmp_path, small_corpus, monkeypatch):
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")  # another choice is kept, and said so
    base = load_preset("smoke")
    cfg = apply_overrides(
        base, [f"data.path={small_corpus}", "train.max_steps=2", "train.device=cpu"]
    )
    lines = []
    train(cfg, tmp_path / "run", progress=False, log=lines.append)
    header = next(line for line in lines if line.startswith("run "))
    assert "malloc as it is (MALLOC_TOP_PAD_ set in the environment)" in header, header
    off = apply_overrides(cfg, ["train.cpu_keep_freed_memory=false"])
    lines = []
    train(off, tmp_path / "run2", progress=False, log=lines.append)
    header = next(line for line in lines if line.startswith("run "))
    assert "malloc" not in header, header
