"""Read a tokenizer file (`tokenizer.json`, see `fileformat.py`) back into a tokenizer.

Every check says what failed: not found, not UTF-8, not JSON, not this format, another version,
unknown kind, missing or unexpected keys, bad pattern, bad vocabulary, merges or special tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeGuard

from .base import Tokenizer
from .bpe import N_BYTE_TOKENS, BPETokenizer
from .char import CharTokenizer
from .errors import TokenizerError, TokenizerFileError
from .fileformat import FORMAT_NAME, FORMAT_VERSION
from .gpt2 import GPT2_SPECIAL_TOKENS, gpt2_tokenizer

REMAKE = "re-create it with `gptstack tokenizer train` (or Tokenizer.save)"
COMMON_KEYS = {"format", "version", "kind", "pattern", "special_tokens"}
KIND_KEYS = {"char": COMMON_KEYS | {"vocab"}, "bpe": COMMON_KEYS | {"merges"}, "gpt2": COMMON_KEYS}


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a tokenizer file written by `Tokenizer.save`.

    A gpt2 file loads GPT-2's ranks as `gpt2_tokenizer()` does (local file, else tiktoken).

    Raises:
        TokenizerFileError: the file is missing, unreadable, not JSON, or fails a format check
            (the message names the check and the fix).
        TokenizerError: a gpt2 file whose GPT-2 ranks cannot be found.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerFileError(
            path, "not found", "check the path, or create it with `gptstack tokenizer train`"
        ) from None
    except OSError as exc:
        raise TokenizerFileError(
            path, f"cannot be read ({exc.strerror})", "check the path"
        ) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TokenizerFileError(
            path, f"is not UTF-8 text (bad byte at offset {exc.start})", REMAKE
        ) from None
    except json.JSONDecodeError as exc:
        raise TokenizerFileError(
            path,
            f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}; truncated?)",
            REMAKE,
        ) from None
    return tokenizer_from_dict(data, source=path)


def tokenizer_from_dict(data: Any, *, source: str | os.PathLike[str] = "<dict>") -> Tokenizer:
    """Build a tokenizer from its file content (`Tokenizer.to_dict()`), checking every field.

    Raises:
        TokenizerFileError: a check failed; `source` names the file in the message.
    """

    def fail(problem: str, fix: str = REMAKE) -> TokenizerFileError:
        return TokenizerFileError(source, problem, fix)

    if not isinstance(data, dict):
        raise fail(f"holds a JSON {type(data).__name__}, not an object")
    if data.get("format") != FORMAT_NAME:
        raise fail(
            f"is not a gptstack tokenizer file (its format is {data.get('format')!r}, "
            f"expected {FORMAT_NAME!r})",
            "pass a tokenizer.json written by gptstack",
        )
    version = data.get("version")
    if not _is_int(version):
        raise fail(f"has version {version!r}, not an integer")
    if version != FORMAT_VERSION:
        fix = "upgrade gptstack-tokenizer" if version > FORMAT_VERSION else REMAKE
        raise fail(
            f"is format version {version}; this gptstack reads version {FORMAT_VERSION}", fix
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KIND_KEYS:
        raise fail(f"has unknown kind {kind!r} (expected one of {sorted(KIND_KEYS)})")
    missing = sorted(KIND_KEYS[kind] - set(data))
    if missing:
        raise fail(f"is missing key(s) {missing} required for kind {kind!r}")
    extra = sorted(set(data) - KIND_KEYS[kind])
    if extra:
        raise fail(f"has unexpected key(s) {extra} for kind {kind!r}")
    specials = data["special_tokens"]
    if not isinstance(specials, dict) or not all(_is_int(i) for i in specials.values()):
        raise fail("has special_tokens that is not an object of token text → integer id")

    if kind == "gpt2":
        if data["pattern"] != "gpt2":
            raise fail(f"kind 'gpt2' has pattern {data['pattern']!r}; it must be 'gpt2'")
        if specials != GPT2_SPECIAL_TOKENS:
            raise fail(
                f"kind 'gpt2' has special_tokens {specials}; GPT-2 has {GPT2_SPECIAL_TOKENS}"
            )
        return gpt2_tokenizer()  # its errors concern the GPT-2 ranks, not this file
    try:
        if kind == "char":
            return _char_from_dict(data, specials)
        return _bpe_from_dict(data, specials)
    except TokenizerError as exc:
        raise fail(str(exc)) from None


def _char_from_dict(data: dict[str, Any], specials: dict[str, int]) -> CharTokenizer:
    if data["pattern"] is not None:
        raise TokenizerError(f"kind 'char' has pattern {data['pattern']!r}; it must be null")
    vocab = data["vocab"]
    if not isinstance(vocab, list):
        raise TokenizerError("vocab is not a list of characters")
    return CharTokenizer(vocab, _special_names(specials, first_id=len(vocab)))


def _bpe_from_dict(data: dict[str, Any], specials: dict[str, int]) -> BPETokenizer:
    merges = data["merges"]
    if not isinstance(merges, list):
        raise TokenizerError("merges is not a list of [left, right] id pairs")
    names = _special_names(specials, first_id=N_BYTE_TOKENS + len(merges))
    return BPETokenizer(merges, data["pattern"], names)  # it checks the pattern and the merges


def _special_names(specials: dict[str, int], first_id: int) -> list[str]:
    """Special token names in id order, checking the ids are first_id, first_id + 1, …"""
    ordered = sorted(specials, key=lambda name: specials[name])
    ids = [specials[name] for name in ordered]
    expected = list(range(first_id, first_id + len(ordered)))
    if ids != expected:
        raise TokenizerError(
            f"special token ids {ids} must be {expected} (consecutive, right after the "
            "ordinary tokens)"
        )
    return ordered


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
