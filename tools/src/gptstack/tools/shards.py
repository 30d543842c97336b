"""Pre-tokenized `.bin` token shards (llm.c / modded-nanogpt format) and how training reads them.

    write_shard(path, tokens)            # uint16 tokens -> one shard file, atomically
    tokens = read_shard(path)            # validated, memory-mapped (N,) uint16
    stream = ShardStream(paths)          # the shards as one token sequence
    x, y = stream.block(k, B, T)         # the k-th micro-batch of the sequential stream

A shard is a 1,024-byte header of 256 little-endian int32 words -- word 0 the magic 20240520,
word 1 the version 1, word 2 the token count, the rest zero -- then that many uint16 tokens
(llm.c dev/data/data_common.py `write_datafile`; modded-nanogpt data/fineweb.py writes the
same). The header words are all checked; the tokens carry no checksum in this format.

Training reads shard corpora in order, as llm.c's DataLoader does: global micro-batch k (= step x
grad_accum + index) is the k-th block of B x T + 1 consecutive tokens (x its first B x T, y the
same shifted by one), blocks never crossing a shard's end, wrapping after the last. Each block is
read by exactly the rank that owns the index (distributed.py), so ranks never overlap, an epoch
reads every token once, and the data position is a function of the step: resume needs no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gptstack.tokenizer import atomic_path

from .data import batch_rng, get_batch
from .errors import DataError

MAGIC = 20240520
VERSION = 1  # uint16 tokens; llm.c's version 2 holds uint32 (LLaMA-3) tokens
HEADER_WORDS = 256
HEADER_BYTES = HEADER_WORDS * 4
TOKEN_DTYPE = np.dtype("<u2")
MAX_VOCAB = 1 << 16


def shard_header(n_tokens: int) -> np.ndarray:
    header = np.zeros(HEADER_WORDS, dtype="<i4")
    header[:3] = (MAGIC, VERSION, n_tokens)
    return header


def write_shard(path: Path, tokens: np.ndarray) -> Path:
    """Write uint16 `tokens` as one shard at `path` (temporary name, then renamed)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) >= 1 << 31:
        raise DataError(f"shard {path}: tokens must be 1-D and fewer than 2^31, got {tokens.shape}")
    if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= MAX_VOCAB):
        raise DataError(f"shard {path}: token ids must fit uint16 (0..65535)")
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(shard_header(len(tokens)).tobytes())
        f.write(tokens.astype(TOKEN_DTYPE, copy=False).tobytes())
    return Path(path)


def read_shard(path: Path) -> np.ndarray:
    """The tokens of one shard, memory-mapped read-only, after checking the whole header and the
    file size. Raises DataError naming the file and the check that failed."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise DataError(f"shard {path}: cannot be read ({e.strerror or e})") from None
    if len(raw) < HEADER_BYTES:
        raise DataError(
            f"shard {path}: short file, {size} bytes; a shard starts with a "
            f"{HEADER_BYTES}-byte header"
        )
    header = np.frombuffer(raw, dtype="<i4")
    magic, version, count = (int(v) for v in header[:3])
    if magic != MAGIC:
        raise DataError(
            f"shard {path}: bad magic {magic}, expected {MAGIC} (not a .bin token "
            "shard: write one with `gptstack data shard`)"
        )
    if version != VERSION:
        raise DataError(
            f"shard {path}: version {version}; this gptstack reads version {VERSION} "
            "(uint16 tokens)"
        )
    nonzero = np.flatnonzero(header[3:])
    if len(nonzero):
        word = 3 + int(nonzero[0])
        raise DataError(
            f"shard {path}: header word {word} is {int(header[word])}; words "
            f"3..{HEADER_WORDS - 1} must be zero (a damaged header)"
        )
    expected = HEADER_BYTES + count * TOKEN_DTYPE.itemsize
    if count < 0 or size != expected:
        raise DataError(
            f"shard {path}: count mismatch, the header says {count} tokens "
            f"({expected} bytes) but the file has {size} bytes"
        )
    if count == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))


class ShardStream:
    """Several shards read as one token sequence: `len`, numpy indexing (what the random eval
    windows and `gptstack eval` use), and the sequential training blocks."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self.shards = [read_shard(p) for p in self.paths]
        self.offsets = np.cumsum([0] + [len(s) for s in self.shards])  # (n_shards + 1,)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index) -> np.ndarray:
        if isinstance(index, slice) and index.step in (None, 1):
            start, stop, _ = index.indices(len(self))
            return self._range(start, stop)
        if isinstance(index, slice):
            index = np.arange(*index.indices(len(self)))
        index = np.asarray(index, dtype=np.int64)
        flat = index.reshape(-1)
        if len(flat) and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"token index out of range 0..{len(self) - 1}")
        which = np.searchsorted(self.offsets, flat, side="right") - 1
        out = np.empty(flat.shape, dtype=TOKEN_DTYPE)
        for s in np.unique(which):
            mask = which == s
            out[mask] = self.shards[s][flat[mask] - self.offsets[s]]
        return out.reshape(index.shape)

    def _range(self, start: int, stop: int) -> np.ndarray:
        parts = []
        for s, shard in enumerate(self.shards):
            lo, hi = max(start, self.offsets[s]), min(stop, self.offsets[s + 1])
            if lo < hi:
                parts.append(shard[lo - self.offsets[s] : hi - self.offsets[s]])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=TOKEN_DTYPE)

    def blocks_per_shard(self, batch_size: int, block_size: int) -> np.ndarray:
        """How many whole training blocks (B x T + 1 tokens) each shard holds."""
        per_block = batch_size * block_size
        return np.array([max(0, (len(s) - 1) // per_block) for s in self.shards], dtype=np.int64)

    def block(self, k: int, batch_size: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Micro-batch k of the sequential stream: x (B, T) and targets y (B, T), int64."""
        per_block = batch_size * block_size
        counts = self.blocks_per_shard(batch_size, block_size)
        total = int(counts.sum())
        if total == 0:
            raise DataError(
                f"no shard of {self.paths[0].parent} holds B x T + 1 = "
                f"{per_block + 1} tokens: use a smaller train.batch_size or "
                "model.block_size"
            )
        k %= total  # the next epoch starts over
        ends = np.cumsum(counts)
        s = int(np.searchsorted(ends, k, side="right"))
        start = (k - (ends[s] - counts[s])) * per_block
        buf = np.asarray(self.shards[s][start : start + per_block + 1], dtype=np.int64)
        return (buf[:-1].reshape(batch_size, block_size), buf[1:].reshape(batch_size, block_size))


def train_batch(
    corpus, batch_size: int, block_size: int, seed: int, step: int, micro: int, grad_accum: int
) -> tuple[np.ndarray, np.ndarray]:
    """Global micro-batch `micro` of `step`: random windows of a text corpus, seeded by
    (seed, step, micro) (data.py), or the next sequential block of a shard corpus."""
    if isinstance(corpus.train, ShardStream):
        return corpus.train.block(step * grad_accum + micro, batch_size, block_size)
    return get_batch(corpus.train, batch_size, block_size, batch_rng(seed, step, micro))


def regrouped_batches(
    corpus,
    batch_size: int,
    grad_accum: int,
    block_size: int,
    seed: int,
    step: int,
    rows: int,
    micros: Sequence[int],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Micro-batches `micros` of `rows` sequences each of `step`, cut from the sequences the
    configured batch_size x grad_accum split draws (train_batch, in order): a step's data does
    not depend on the micro-batch it runs in (train.cuda_batch_size). Each configured
    micro-batch is drawn once, however many of the requested ones it spans or they split."""
    drawn: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def configured(j: int) -> tuple[np.ndarray, np.ndarray]:
        if j not in drawn:
            drawn[j] = train_batch(corpus, batch_size, block_size, seed, step, j, grad_accum)
        return drawn[j]

    out = []
    for micro in micros:
        if rows == batch_size:
            out.append(configured(micro))
            continue
        start, stop = micro * rows, (micro + 1) * rows
        xs, ys = [], []
        for j in range(start // batch_size, (stop - 1) // batch_size + 1):
            x, y = configured(j)
            lo, hi = max(start - j * batch_size, 0), min(stop - j * batch_size, batch_size)
            xs.append(x[lo:hi])
            ys.append(y[lo:hi])
        out.append((np.concatenate(xs), np.concatenate(ys)))
    return out
