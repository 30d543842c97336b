"""Shard folders: `gptstack data shard` writes them, `gptstack train --data DIR` trains on them.

    gptstack data shard --data input.txt --tokenizer gpt2 -o data/shards
    gptstack train --preset gpt2-124m --data data/shards --nproc-per-node 8

A folder holds `NAME_train_000000.bin, ...` and `NAME_val_000000.bin, ...` (shards.py), split
90/10 as the text path splits (the last `val_fraction` of the text is validation), each
encoded exactly as `gptstack train` encodes the text, plus `tokenizer.json` and `shards.json`
(source, checksum, token and character counts, for bits/char). Folders written by llm.c or
modded-nanogpt (GPT-2 tokens, no tokenizer.json) train with `tokenizer.kind = gpt2`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gptstack.tokenizer import (
    CharTokenizer,
    Tokenizer,
    gpt2_tokenizer,
    load_tokenizer,
    write_atomic,
)

from .config import RunConfig
from .data import Corpus, split_text
from .errors import DataError
from .shards import MAX_VOCAB, ShardStream, write_shard

FORMAT = "gptstack-shards"
VERSION = 1
SHARD_TOKENS = 100_000_000  # tokens per shard file (200 MB), as modded-nanogpt's fineweb shards
PIECE_CHARS = 1 << 20  # text encoded a piece at a time, so the progress bar moves


@dataclass
class ShardCorpus(Corpus):
    """A Corpus whose splits are ShardStreams; no text is kept, so bits/char comes from the
    character count shards.json records (NaN for folders without one)."""

    val_chars: int | None = None

    @property
    def val_chars_per_token(self) -> float:
        return self.val_chars / max(1, len(self.val)) if self.val_chars else float("nan")

    def bits_per_char(self, loss_nats: float) -> float:
        if not self.val_chars:
            return float("nan")
        return float(loss_nats / np.log(2.0) * len(self.val) / self.val_chars)


def is_shard_folder(path: str | Path) -> bool:
    return bool(path) and Path(path).expanduser().is_dir()


def text_pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in pieces of about `size` characters, cut only before a space that follows a
    letter. There GPT-2's and GPT-4's pre-tokenization patterns always end a token (a letter run
    ends at a space) and none looks ahead across the cut; whitespace before a cut would not be
    safe (GPT-2 splits two newlines before a digit into two tokens, but two newlines at the end
    of a piece into one). So the pieces encode to the tokens of the whole text. A text without
    such a space stays one piece."""
    start = 0
    while start < len(text):
        cut = _safe_cut(text, start + size)
        yield text[start:cut]
        start = cut


def _safe_cut(text: str, at: int) -> int:
    i = text.find(" ", max(1, at))
    while i != -1 and not text[i - 1].isalpha():
        i = text.find(" ", i + 1)
    return len(text) if i == -1 else i


def shard_tokenizer(spec: str, text: str) -> Tokenizer:
    """--tokenizer: a tokenizer.json, `gpt2`, or `char` (the characters of the text)."""
    if spec == "gpt2":
        return gpt2_tokenizer()
    if spec == "char":
        return CharTokenizer.from_text(text)
    return load_tokenizer(Path(spec))


def check_shard_folder(out: Path) -> None:
    """The folder to write shards into must hold none yet (old and new ones would mix)."""
    if Path(out).is_dir() and any(Path(out).glob("*.bin")):
        raise DataError(
            f"{out} already holds .bin shards: write into an empty folder (or delete them), so "
            "old and new shards cannot mix"
        )


def write_shards(
    text: str,
    name: str,
    tokenizer: Tokenizer,
    out: Path,
    *,
    val_fraction: float = 0.1,
    shard_tokens: int = SHARD_TOKENS,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Tokenize `text` (a corpus called `name`) into shard files under `out`; returns
    shards.json's content. `progress(n)` is called with each encoded piece's character count."""
    out = Path(out)
    check_shard_folder(out)
    if not 0.0 < val_fraction < 1.0 or shard_tokens < 1:
        raise DataError("--val-fraction must be in (0, 1) and --shard-tokens >= 1")
    if tokenizer.vocab_size > MAX_VOCAB:
        raise DataError(
            f"the .bin shard format stores uint16 tokens; this tokenizer has "
            f"{tokenizer.vocab_size:,} ids (at most {MAX_VOCAB:,})"
        )
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "source": name,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "tokenizer": tokenizer.fingerprint(),
        "val_fraction": val_fraction,
    }
    stem = Path(name).stem
    for split, part in zip(("train", "val"), split_text(text, val_fraction), strict=True):
        files, n_tokens = _write_split(
            part, tokenizer, out, f"{stem}_{split}", shard_tokens, progress
        )
        meta[split] = {"files": files, "tokens": n_tokens, "chars": len(part)}
    tokenizer.save(out / "tokenizer.json")
    write_atomic(out / "shards.json", json.dumps(meta, indent=2) + "\n")
    return meta


def _write_split(
    text: str, tokenizer: Tokenizer, out: Path, prefix: str, shard_tokens: int, progress
) -> tuple[list[str], int]:
    files: list[str] = []
    pending: list[np.ndarray] = []
    held = total = 0

    def flush(n: int) -> None:
        nonlocal pending, held
        joined = np.concatenate(pending) if pending else np.zeros(0, dtype=np.uint16)
        path = out / f"{prefix}_{len(files):06d}.bin"
        write_shard(path, joined[:n])
        files.append(path.name)
        pending, held = [joined[n:]], len(joined) - n

    for piece in text_pieces(text):
        ids = np.asarray(tokenizer.encode(piece), dtype=np.uint16)
        pending.append(ids)
        held += len(ids)
        total += len(ids)
        while held >= shard_tokens:
            flush(shard_tokens)
        if progress is not None:
            progress(len(piece))
    if held or not files:
        flush(held)
    return files, total


def load_shard_corpus(cfg: RunConfig, tokenizer: Tokenizer | None = None) -> ShardCorpus:
    """The shard folder `cfg.data.path` as a Corpus (train/val ShardStreams, validated)."""
    folder = Path(cfg.data.path).expanduser()
    splits = {
        s: sorted(p for p in folder.glob("*.bin") if _split_of(p) == s) for s in ("train", "val")
    }
    for split, paths in splits.items():
        if not paths:
            raise DataError(
                f"{folder} has no {split} shards (*{split}*.bin): write them with "
                "`gptstack data shard --data FILE --tokenizer ... -o DIR`"
            )
    meta = _read_meta(folder)
    tokenizer = _folder_tokenizer(folder, cfg, tokenizer)
    train, val = ShardStream(splits["train"]), ShardStream(splits["val"])
    if meta is None:  # written elsewhere: check every id against the vocabulary once
        for stream in (train, val):
            for path, shard in zip(stream.paths, stream.shards, strict=True):
                if len(shard) and int(shard.max()) >= tokenizer.vocab_size:
                    raise DataError(
                        f"shard {path}: token id {int(shard.max())} is outside the "
                        f"{tokenizer.kind} tokenizer's {tokenizer.vocab_size} ids"
                    )
    need = cfg.model.block_size + 1
    if (
        len(val) < need
        or not train.blocks_per_shard(cfg.train.batch_size, cfg.model.block_size).any()
    ):
        raise DataError(
            f"the shards of {folder} are too small for batch_size "
            f"{cfg.train.batch_size} x block_size {cfg.model.block_size}: every "
            "training block needs B x T + 1 tokens inside one shard"
        )
    sha = meta["sha256"] if meta else _identity(train.paths + val.paths)
    val_chars = meta["val"]["chars"] if meta else None
    return ShardCorpus(folder.name, sha, tokenizer, train, val, "", "", val_chars)


def _split_of(path: Path) -> str | None:
    """The split a shard file belongs to: the last word "train" or "val" in its name
    (fineweb_train_000001.bin, tiny_shakespeare_val.bin; train_val_000000.bin is val)."""
    words = [w for w in re.split(r"[_\-.]", path.stem) if w in ("train", "val")]
    return words[-1] if words else None


def _read_meta(folder: Path) -> dict | None:
    path = folder / "shards.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(
            f"{path} is unreadable ({e}): rewrite the folder with `gptstack data shard`"
        ) from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DataError(f"{path} is not a gptstack shard index of version {VERSION}")
    return meta


def _folder_tokenizer(folder: Path, cfg: RunConfig, given: Tokenizer | None) -> Tokenizer:
    file = folder / "tokenizer.json"
    if file.is_file():
        own = load_tokenizer(file)
        if given is not None and given.fingerprint() != own.fingerprint():
            raise DataError(
                f"{file} is not the tokenizer of the checkpoint being resumed: "
                "resume on the shards the run was trained on"
            )
        return own
    if given is not None:
        return given
    if cfg.tokenizer.kind == "gpt2":
        return gpt2_tokenizer()
    raise DataError(
        f"{folder} has no tokenizer.json, so its token ids mean nothing to a "
        f"{cfg.tokenizer.kind} tokenizer: shards from elsewhere are GPT-2 tokens "
        "(--set tokenizer.kind=gpt2), or write them with `gptstack data shard`"
    )


def _identity(paths: list[Path]) -> str:
    """A checksum for folders without shards.json: the names and headers of their files."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            h.update(f.read(16))
    return h.hexdigest()
