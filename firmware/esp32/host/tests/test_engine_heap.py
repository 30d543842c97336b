"""The engine allocates nothing, prints nothing and calls no libm transcendental: its object files
reference no allocator, stdio, expf or tanhf symbol (nm), and a run with malloc & co. interposed
counts zero calls around gs_open, gs_attach_arena, gs_encode, gs_forward (past a window slide),
gs_sample and gs_decode."""

from __future__ import annotations

import re
import subprocess

import pytest
from gs_testlib import require_program, run_gs

# What the engine may call outside itself: the two libm functions whose results IEEE-754 pins
# (sqrtf correctly rounded, rintf exact; FORMAT.md section 7) and the memory primitives a
# compiler emits for struct copies and loops.
ALLOWED = {"sqrtf", "rintf", "memcpy", "memmove", "memset"}
FORBIDDEN = re.compile(
    r"^(malloc|calloc|realloc|free|.*printf|puts|putchar|f?write|fopen|exit|"
    r"_exit|abort|__assert_fail|posix_memalign|aligned_alloc|memalign)$"
)
# exp and tanh are the engine's own (gs_math.c): a C library's differ in the last bit from
# numpy's and from newlib's on the chip
TRANSCENDENTAL = re.compile(
    r"^(__)?(exp|exp2|expm1|tanh|sinh|cosh|log|log2|log1p|pow|erf)[fl]?"
    r"(_finite)?$"
)


def _nm(archive, *flags: str) -> set[str]:
    nm = require_program("nm", "apt-get install binutils")
    out = subprocess.run(
        [nm, *flags, str(archive)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 2}


def test_engine_objects_reference_no_allocator_or_libm_exp(release_build):
    undefined = _nm(release_build.engine_archive, "-u")
    external = {s for s in undefined if not s.startswith("gs_")}
    assert not {s for s in external if FORBIDDEN.match(s)}
    assert not {s for s in external if TRANSCENDENTAL.match(s)}, external
    assert external <= ALLOWED, f"unexpected external symbols: {external - ALLOWED}"
    assert external & {"sqrtf", "rintf"}  # the check reads real nm output
    assert {"gs_exp", "gs_tanh"} <= _nm(release_build.engine_archive, "--defined-only")
    assert TRANSCENDENTAL.match("expf") and TRANSCENDENTAL.match("__tanhf_finite")


@pytest.mark.parametrize("name", ["bpe", "char"])
def test_no_allocation_at_run_time(release_build, request, name):
    artifact = request.getfixturevalue(f"{name}_artifact")
    out = run_gs(release_build.program("gs-heapcheck"), artifact.path, 80).stdout
    assert "GS_OK, 80 tokens, 0 allocations" in out


def test_heapcheck_counts_allocations(release_build, bpe_artifact):
    """The interposed counter works: the control run allocates inside the window and fails."""
    proc = run_gs(
        release_build.program("gs-heapcheck"), bpe_artifact.path, 4, "--control", check=False
    )
    assert proc.returncode == 1 and "2 allocations" in proc.stdout
