"""One gs-run of a small artifact under valgrind's memcheck: no invalid access, no use of
uninitialized memory, no leak (--error-exitcode=1)."""

from __future__ import annotations

from gs_testlib import require_program, run_gs


def test_gs_run_under_valgrind(release_build, utf8_artifact):
    valgrind = require_program("valgrind", "apt-get install valgrind")
    proc = run_gs(
        valgrind,
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,indirect",
        "-q",
        release_build.gs_run,
        utf8_artifact.path,
        "--prompt",
        "hello",
        "--tokens",
        24,
        "--temperature",
        0.9,
        "--top-k",
        20,
        "--seed",
        3,
        check=False,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
