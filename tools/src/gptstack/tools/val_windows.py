"""Which validation windows an evaluation scores: all of them, or a fixed subset spread evenly.

The val split is cut into non-overlapping windows of block_size tokens (targets: the next token),
so every token is predicted once. The float model and the int8 artifact score the same windows.
On a CPU the int8 reference (numpy, the C engine's exact arithmetic) is the slow part: ~0.1 s a
window of the esp32 preset on one core, so all 928 windows of Tiny Shakespeare's val split take
minutes there. A CPU scores CPU_VAL_WINDOWS windows spread evenly over the split instead (in
chunks of CHUNK adjacent windows, so the int8 reference still runs batched); a GPU, and
`--val-windows all`, score every window. The CLI imports this module for its constants, so numpy
is imported by the functions that use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

CPU_VAL_WINDOWS = 128  # 8,192 predictions of the esp32 preset: ~14 % of the val split
CHUNK = 8  # adjacent windows per chunk: one batch of the int8 reference (quant.evaluate_loss)


def parse_val_windows(text: str | int | None) -> int | str:
    """'auto', 'all' or a positive count, from --val-windows."""
    if text is None or text == "auto":
        return "auto"
    if text == "all":
        return "all"
    try:
        n = int(text)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ConfigError(
            f"--val-windows {text!r}: write all, auto or a positive number of windows"
        )
    return n


def resolve_val_windows(setting: int | str, device_type: str) -> int | None:
    """The number of windows to score (None: all) for `setting` on this device."""
    setting = parse_val_windows(setting)
    if setting == "auto":
        return CPU_VAL_WINDOWS if device_type == "cpu" else None
    return None if setting == "all" else setting


def window_chunks(n_windows: int, count: int | None) -> list[range]:
    """Runs of adjacent window indices covering `count` of n_windows windows, spread evenly
    (all of them, as one run, when count is None or not below n_windows)."""
    import numpy as np

    if count is None or count >= n_windows:
        return [range(n_windows)]
    n_chunks = max(1, count // CHUNK)
    sizes = [count // n_chunks + (i < count % n_chunks) for i in range(n_chunks)]
    # chunk i starts at an even spacing of the split; the last one ends at or before its end
    starts = np.linspace(0, n_windows - sizes[-1], n_chunks).astype(int)
    chunks, end = [], 0
    for start, size in zip(starts, sizes, strict=True):
        start = max(int(start), end)  # never overlap the previous chunk
        chunks.append(range(start, start + size))
        end = start + size
    return chunks


def chunk_tokens(tokens: np.ndarray, block_size: int, chunk: range) -> np.ndarray:
    """The token stream of a run of adjacent windows: its inputs plus the last target."""
    import numpy as np

    first, last = chunk.start * block_size, chunk.stop * block_size
    return np.asarray(tokens[first : last + 1], dtype=np.int64)
