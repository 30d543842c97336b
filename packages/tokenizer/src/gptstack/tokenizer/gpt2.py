"""GPT-2's tokenizer (50257 ids, `<|endoftext|>` = 50256), through tiktoken, offline when possible.

Where the ranks come from, first match wins:
1. `gpt2_tokenizer(ranks_path)`: that file;
2. `default_data_dir() / "gpt2.tiktoken"` when it exists;
3. tiktoken's own `get_encoding("gpt2")` (downloads once, then tiktoken's cache).
A local file must have the SHA-256 in `GPT2_RANKS`, otherwise it is rejected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from .errors import TokenizerError
from .paths import DATA_DIR_ENV, default_data_dir
from .tiktoken_backed import TiktokenTokenizer


@dataclass(frozen=True)
class RanksFile:
    """A tiktoken ranks file: local file name, canonical URL, SHA-256 of its bytes."""

    filename: str
    url: str
    sha256: str


# GPT-2's ranks in tiktoken's format: the file tiktoken's `r50k_base` downloads (same ranks as
# its `gpt2` encoding, which is built from GPT-2's original vocab.bpe/encoder.json).
GPT2_RANKS = RanksFile(
    filename="gpt2.tiktoken",
    url="https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
    sha256="306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
)
GPT2_N_RANKS = 50256
GPT2_SPECIAL_TOKENS = {"<|endoftext|>": GPT2_N_RANKS}  # the one special id follows the ranks


class GPT2Tokenizer(TiktokenTokenizer):
    """GPT-2's byte-level BPE (pattern "gpt2"), ids = GPT-2's ranks, `<|endoftext|>` = 50256."""

    kind = "gpt2"

    def __init__(self, ranks: dict[bytes, int]) -> None:
        """Build from GPT-2's ranks (bytes → rank). Use `gpt2_tokenizer()` to get them."""
        super().__init__(
            name="gpt2", pattern_name="gpt2", ranks=ranks, special_tokens=GPT2_SPECIAL_TOKENS
        )

    def to_dict(self) -> dict[str, Any]:
        # The ranks are GPT-2's (GPT2_RANKS), so the file names the kind only.
        return self._file_dict()


def gpt2_tokenizer(ranks_path: str | os.PathLike[str] | None = None) -> GPT2Tokenizer:
    """GPT-2's tokenizer, from a local ranks file when there is one (see module doc).

    Raises:
        TokenizerError: the ranks file is missing (explicit path), has the wrong SHA-256 or is
            malformed, or no local file exists and tiktoken cannot download the ranks.
    """
    if ranks_path is not None:
        path = Path(ranks_path)
        if not path.is_file():
            raise TokenizerError(
                f"GPT-2 ranks file {path} not found: pass the path of {GPT2_RANKS.filename} "
                f"(download {GPT2_RANKS.url})"
            )
        return _from_file(path)
    local = default_data_dir() / GPT2_RANKS.filename
    if local.is_file():
        return _from_file(local)
    return _from_tiktoken()


def _from_file(path: Path) -> GPT2Tokenizer:
    stat = path.stat()
    return _cached_from_file(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4)
def _cached_from_file(path: str, size: int, mtime_ns: int) -> GPT2Tokenizer:
    """One tokenizer per ranks file version per process (building one parses 50k ranks)."""
    return GPT2Tokenizer(read_gpt2_ranks(Path(path)))


@lru_cache(maxsize=1)
def _from_tiktoken() -> GPT2Tokenizer:
    return GPT2Tokenizer(_download_ranks())


def read_gpt2_ranks(path: Path) -> dict[bytes, int]:
    """Read GPT-2's ranks from a tiktoken file (one `base64-token rank` per line), hash-checked.

    Raises:
        TokenizerError: wrong SHA-256, or a line that does not parse.
    """
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read GPT-2 ranks file {path}: {exc.strerror}") from None
    digest = hashlib.sha256(content).hexdigest()
    if digest != GPT2_RANKS.sha256:
        raise TokenizerError(
            f"GPT-2 ranks file {path} has SHA-256 {digest}, expected {GPT2_RANKS.sha256}: "
            f"it is not GPT-2's ranks or it is damaged; replace it with a fresh download of "
            f"{GPT2_RANKS.url}"
        )
    ranks: dict[bytes, int] = {}
    for line_no, line in enumerate(content.splitlines(), start=1):
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise TokenizerError(f"GPT-2 ranks file {path} line {line_no} is malformed") from None
    # The hash pins the content; this guards the parser itself.
    assert len(ranks) == GPT2_N_RANKS and set(ranks.values()) == set(range(GPT2_N_RANKS))
    return ranks


def _download_ranks() -> dict[bytes, int]:
    """GPT-2's ranks through tiktoken's registry (network on first use, then its cache)."""
    try:
        encoding = tiktoken.get_encoding("gpt2")
    except Exception as exc:  # tiktoken surfaces network failures as various library errors
        raise TokenizerError(
            f"cannot get GPT-2's ranks from tiktoken ({type(exc).__name__}: {str(exc)[:160]}) "
            "and no local "
            f"copy exists: download {GPT2_RANKS.url} to "
            f"{default_data_dir() / GPT2_RANKS.filename} (or set ${DATA_DIR_ENV})"
        ) from exc
    return {encoding.decode_single_token_bytes(i): i for i in range(GPT2_N_RANKS)}
