"""The data pipeline: corpus text -> tokenizer -> cached token memmaps -> seeded random batches.

Tokens are cached once per (corpus hash, tokenizer fingerprint, split) under
`<cache_dir>/tokens/` as raw uint16/uint32 arrays, written atomically. Batches are nanoGPT-style
random windows, drawn from a generator seeded by (seed, step, micro-step), so a batch is a pure
function of the step and a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gptstack.tokenizer import (
    CharTokenizer,
    Tokenizer,
    gpt2_tokenizer,
    train_bpe,
    write_atomic,
)

from .config import RunConfig
from .datasets import cache_dir, read_corpus, resolve_dataset
from .errors import DataError

CACHE_FORMAT = 1


@dataclass
class Corpus:
    """A tokenized corpus split into train and val, plus what bits/char needs."""

    name: str
    sha256: str
    tokenizer: Tokenizer
    train: np.ndarray  # (N_train,) token ids
    val: np.ndarray  # (N_val,) token ids
    train_text: str
    val_text: str

    @property
    def val_chars_per_token(self) -> float:
        return len(self.val_text) / max(1, len(self.val))

    def bits_per_char(self, loss_nats: float) -> float:
        """A mean per-token loss on val in bits per character (comparable across tokenizers)."""
        return float(loss_nats / np.log(2.0) * len(self.val) / max(1, len(self.val_text)))


def corpus_text(cfg: RunConfig) -> tuple[str, str]:
    """(name, text) of the configured corpus: --data FILE, or the named dataset."""
    if cfg.data.path:
        path = Path(cfg.data.path).expanduser()
        return path.name, read_corpus(path)
    return cfg.data.dataset, read_corpus(resolve_dataset(cfg.data.dataset))


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    cut = int(len(text) * (1.0 - val_fraction))
    return text[:cut], text[cut:]


def build_tokenizer(cfg: RunConfig, text: str, train_text: str, progress=None) -> Tokenizer:
    """The run's tokenizer: chars of the whole corpus, BPE trained on the train split, or GPT-2."""
    kind = cfg.tokenizer.kind
    if kind == "char":
        return CharTokenizer.from_text(text)
    if kind == "bpe":
        return train_bpe(
            train_text, cfg.tokenizer.vocab_size, pattern=cfg.tokenizer.pattern, progress=progress
        )
    return gpt2_tokenizer()


def _token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def _encode_cached(text: str, tokenizer: Tokenizer, key: str) -> np.ndarray:
    folder = cache_dir() / "tokens"
    path = folder / f"{key}.bin"
    meta_path = folder / f"{key}.json"
    dtype = _token_dtype(tokenizer.vocab_size)
    if path.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("format") == CACHE_FORMAT and meta.get("dtype") == np.dtype(dtype).name:
                arr = np.memmap(path, dtype=dtype, mode="r")
                if len(arr) == meta["n_tokens"]:
                    return arr
        except (OSError, ValueError, KeyError):
            pass  # a broken cache entry is rebuilt below
    ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
    if len(ids) and int(ids.max()) >= tokenizer.vocab_size:
        raise DataError("tokenizer produced an id outside its vocabulary")  # internal invariant
    arr = ids.astype(dtype)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(path, arr.tobytes())
    write_atomic(
        meta_path,
        json.dumps(
            {"format": CACHE_FORMAT, "dtype": np.dtype(dtype).name, "n_tokens": int(len(arr))}
        ),
    )
    return np.memmap(path, dtype=dtype, mode="r") if len(arr) else arr


def prepare_corpus(cfg: RunConfig, tokenizer: Tokenizer | None = None, *, progress=None) -> Corpus:
    """Read, split and tokenize the configured corpus (building the tokenizer unless given).
    A folder as data.path is a shard folder, read as written (shard_corpus.py)."""
    from .shard_corpus import is_shard_folder, load_shard_corpus

    if is_shard_folder(cfg.data.path):
        return load_shard_corpus(cfg, tokenizer)
    name, text = corpus_text(cfg)
    train_text, val_text = split_text(text, cfg.data.val_fraction)
    if tokenizer is None:
        tokenizer = build_tokenizer(cfg, text, train_text, progress=progress)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    base = f"{sha[:16]}-{tokenizer.fingerprint()[:16]}-{cfg.data.val_fraction:g}"
    train = _encode_cached(train_text, tokenizer, base + "-train")
    val = _encode_cached(val_text, tokenizer, base + "-val")
    need = cfg.model.block_size + 1
    for split, arr in (("train", train), ("val", val)):
        if len(arr) < need:
            raise DataError(
                f"the {split} split of {name} has {len(arr)} tokens, fewer than block_size + 1 = "
                f"{need}: use a larger corpus, a smaller model.block_size, or another "
                "data.val_fraction"
            )
    return Corpus(name, sha, tokenizer, train, val, train_text, val_text)


def batch_rng(seed: int, *stream: int) -> np.random.Generator:
    """A generator that depends only on the seed and the stream ids (step, micro-step, ...)."""
    return np.random.default_rng([seed, *stream])


def get_batch(
    tokens: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Random windows: x (B, T) and the next-token targets y (B, T), int64."""
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
    idx = starts[:, None] + np.arange(block_size + 1)[None, :]
    windows = np.asarray(tokens[idx], dtype=np.int64)  # (B, T+1)
    return windows[:, :-1], windows[:, 1:]
