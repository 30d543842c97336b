"""The engine compiles for an Xtensa core freestanding (no C library headers), warning-free,
keeps no writable static data (.data + .bss = 0: everything is in the caller's arena), and calls
no C library exp or tanh there either (newlib's differ from the reference: FORMAT.md section 7)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gs_testlib import require_program

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "xtensa_sizes.sh"


def test_xtensa_freestanding_sizes(tmp_path):
    require_program("xtensa-lx106-elf-gcc", "apt-get install gcc-xtensa-lx106")
    require_program("xtensa-lx106-elf-size", "apt-get install binutils-xtensa-lx106")
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    totals = {
        m[0]: tuple(map(int, m[1:]))
        for m in re.findall(r"^total (\w+) text=(\d+) data=(\d+) bss=(\d+)$", proc.stdout, re.M)
    }
    text, data, bss = totals["engine"]
    assert text > 0 and data + bss == 0, proc.stdout
    n_sources = len(list((SCRIPT.parents[2] / "lib" / "engine").glob("*.c")))
    assert proc.stdout.count("/engine_") == n_sources  # every engine file was compiled
    nm = require_program("xtensa-lx106-elf-nm", "apt-get install binutils-xtensa-lx106")
    out = subprocess.run(
        [nm, "-u", *map(str, sorted(tmp_path.glob("engine_*.o")))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    undefined = {line.split()[-1] for line in out.splitlines() if line.strip().startswith("U ")}
    libc = {s for s in undefined if not s.startswith(("gs_", "__"))}  # __: libgcc soft-float
    assert libc <= {"sqrtf", "rintf", "memcpy", "memmove", "memset"}, libc
    assert "rintf" in libc  # the check reads real nm output
