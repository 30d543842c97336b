"""Freed memory stays in the process while a CPU trains (glibc malloc's two thresholds).

    note = keep_freed_memory()    # once, before the first step
    print(note.describe())        # "glibc malloc keeps freed memory (...)", or why not

A training step on a CPU frees and allocates the same activations and gradients every step,
a few MB each. glibc's malloc gives every block over its mmap threshold (128 KiB at start,
rising up to 32 MiB as such blocks are freed) back to the kernel when it is freed, and trims
the top of its heap once more than M_TRIM_THRESHOLD is free there. The next step's tensors are
then fresh pages again: each one faults in on first touch and the kernel zeroes it. The esp32
preset's bf16 training on the 2-core development machine took ~13,000 page faults a step
(5.8 M in a 450-step run); with both thresholds raised once before training, 0.2 M in the
whole run (benchmarks/results/train-ab-esp32-cpu-20261205.json, together with the fused
AdamW; `--set train.cpu_keep_freed_memory=false` runs the step as before).
The allocators people preload for CPU training (jemalloc, tcmalloc) avoid the same cost.

Applied only where this process runs glibc's malloc and nobody chose its behaviour already: not
when a glibc malloc tunable is set in the environment (MALLOC_*_ variables, or glibc.malloc in
GLIBC_TUNABLES) or LD_PRELOAD loads an allocator. The memory the process keeps is at most what
its own peak already held.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc takes on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX:
# 4 MiB * sizeof(long)); blocks above it still come from mmap.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30  # trim the heap top only past 1 GiB of free memory there

_MALLOC_ENV = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
_PRELOADED_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc", "hoard")


@dataclass(frozen=True)
class MemoryNote:
    """What keep_freed_memory did (applied) or why it left malloc alone."""

    applied: bool
    detail: str

    def describe(self) -> str:
        if self.applied:
            return f"glibc malloc keeps freed memory ({self.detail})"
        return f"malloc as it is ({self.detail})"


def why_not(env: Mapping[str, str], libc: str) -> str | None:
    """Why malloc is left alone in this environment (env: os.environ, libc:
    platform.libc_ver()[0]), or None when keep_freed_memory may change it."""
    if libc != "glibc":
        return f"not glibc's malloc ({libc or 'unknown libc'})"
    chosen = [name for name in _MALLOC_ENV if name in env]
    if "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        chosen.append("GLIBC_TUNABLES")
    if chosen:
        return f"{', '.join(chosen)} set in the environment"
    preload = env.get("LD_PRELOAD", "")
    allocator = next((a for a in _PRELOADED_ALLOCATORS if a in preload), None)
    if allocator:
        return f"{allocator} preloaded"
    return None


def keep_freed_memory() -> MemoryNote:
    """Raise glibc's mmap and trim thresholds for the rest of the process (see the module
    docstring); a no-op, said in the note, where it does not apply."""
    reason = why_not(os.environ, platform.libc_ver()[0])
    if reason is not None:
        return MemoryNote(False, reason)
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return MemoryNote(False, "no mallopt in this process")
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or not mallopt(
        M_TRIM_THRESHOLD, TRIM_THRESHOLD
    ):
        return MemoryNote(False, "mallopt refused the thresholds")
    return MemoryNote(True, f"mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim past 1 GiB")
