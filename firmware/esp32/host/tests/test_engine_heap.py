"""The engine allocates nothing and prints nothing: its object files reference no allocator or
stdio symbol (nm), and a run with malloc & co. interposed counts zero calls around gs_open,
gs_attach_arena, gs_encode, gs_forward (past a window slide), gs_sample and gs_decode."""

from __future__ import annotations

import re
import subprocess

import pytest

from gs_testlib import require_program, run_gs

# What the engine may call outside itself: the four libm functions of FORMAT.md section 7 and
# the memory primitives a compiler emits for struct copies and loops.
ALLOWED = {"expf", "tanhf", "sqrtf", "rintf", "memcpy", "memmove", "memset"}
FORBIDDEN = re.compile(r"^(malloc|calloc|realloc|free|.*printf|puts|putchar|f?write|fopen|exit|"
                       r"_exit|abort|__assert_fail|posix_memalign|aligned_alloc|memalign)$")


def test_engine_objects_reference_no_allocator(release_build):
    nm = require_program("nm", "apt-get install binutils")
    out = subprocess.run([nm, "-u", str(release_build.engine_archive)], capture_output=True,
                         text=True, check=True).stdout
    undefined = {line.split()[-1] for line in out.splitlines() if line.strip().startswith("U ")}
    external = {s for s in undefined if not s.startswith("gs_")}
    assert not {s for s in external if FORBIDDEN.match(s)}
    assert external <= ALLOWED, f"unexpected external symbols: {external - ALLOWED}"
    assert external & {"expf", "tanhf"}  # the check reads real nm output


@pytest.mark.parametrize("name", ["bpe", "char"])
def test_no_allocation_at_run_time(release_build, request, name):
    artifact = request.getfixturevalue(f"{name}_artifact")
    out = run_gs(release_build.program("gs-heapcheck"), artifact.path, 80).stdout
    assert "GS_OK, 80 tokens, 0 allocations" in out


def test_heapcheck_counts_allocations(release_build, bpe_artifact):
    """The interposed counter works: the control run allocates inside the window and fails."""
    proc = run_gs(release_build.program("gs-heapcheck"), bpe_artifact.path, 4, "--control",
                  check=False)
    assert proc.returncode == 1 and "2 allocations" in proc.stdout
