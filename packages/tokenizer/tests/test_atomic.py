"""The one atomic-write helper: old or new content, never a mix, even when the writer is killed;
no temporary file after an exception; the umask's permissions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gptstack.tokenizer import atomic_path, write_atomic

# Writes 64 MiB through atomic_path in 1 MiB blocks, printing "started" once the temporary file
# exists, so the test can kill it in the middle of the write.
SLOW_WRITER = r"""
import sys, time
from gptstack.tokenizer import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    with open(tmp, "wb") as f:
        for i in range(64):
            f.write(bytes([i % 251]) * (1 << 20))
            f.flush()
            if i == 0:
                print("started", flush=True)
            time.sleep(0.05)
"""


def test_killed_writer_leaves_the_old_file_whole(tmp_path):
    target = tmp_path / "model.bin"
    old = os.urandom(4096)
    target.write_bytes(old)
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.2)  # a few blocks into the write
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert target.read_bytes() == old
    leftovers = [p for p in tmp_path.iterdir() if p != target]
    assert leftovers and all(p.name.startswith(".model.bin.") for p in leftovers)
    # the next write succeeds beside the leftover and replaces the target
    new = os.urandom(1000)
    write_atomic(target, new)
    assert target.read_bytes() == new


def test_an_exception_removes_the_temporary_file_and_keeps_the_old(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_permissions_follow_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "f.txt", "text")
    finally:
        os.umask(previous)
    assert path.read_text() == "text"
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
