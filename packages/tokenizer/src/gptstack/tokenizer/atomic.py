"""Atomic file writes: the one helper every gptstack package writes user files through.

    write_atomic(path, b"bytes")                 # bytes or str (UTF-8)
    with atomic_path(path) as tmp:               # for writers that want a path
        torch.save(state, tmp)

The content goes to a temporary file in the target's folder, is flushed and fsync'ed, given the
permissions a plain `open()` would give it (0666 minus the umask; `mkstemp` makes 0600 files),
renamed over the target with `os.replace` (atomic on POSIX within one file system), and the
folder is fsync'ed so the rename itself survives a power cut. A crash or kill at any moment leaves
the old file or the new one, never a mix; an exception removes the temporary file. (A SIGKILL
mid-write leaves a `.NAME.*.tmp` beside the target, which the next successful write ignores.)

Lives in the tokenizer package because it is the one member every other member depends on and
it needs nothing but the standard library.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def sync_dir(folder: str | os.PathLike[str]) -> None:
    """fsync a folder, so renames and new entries in it are durable (no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems (and Windows) cannot fsync a directory
    finally:
        os.close(fd)


def sync_file(path: str | os.PathLike[str]) -> None:
    """fsync one file that was written by someone else (a library writing to a path)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends without an exception, the file
    written there replaces `path` (see the module doc). The folder must exist."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        sync_file(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_dir(path.parent)


def write_atomic(path: str | os.PathLike[str], content: bytes | str) -> Path:
    """Write bytes (or UTF-8 text) to `path` atomically; returns the path."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
