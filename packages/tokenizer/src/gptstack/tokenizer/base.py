"""The interface every gptstack tokenizer implements (char, byte-level BPE, GPT-2).

Subclasses provide encoding, byte decoding, the token table and their file dict; this class adds
text decoding, special-token selection, the file header, saving and the fingerprint on top.
"""

from __future__ import annotations

import hashlib
import operator
import os
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

from .atomic import write_atomic
from .errors import TokenizerError
from .fileformat import FORMAT_NAME, FORMAT_VERSION, canonical_bytes

AllowedSpecial = Literal["all"] | Collection[str]


class Tokenizer(ABC):
    """Text ↔ token ids, one of three kinds ("char", "bpe", "gpt2").

    Attributes:
        kind: "char", "bpe" or "gpt2".
        pattern_name: the pre-tokenization pattern ("gpt2", "gpt4") or None for char.
    """

    kind: str
    pattern_name: str | None

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, special tokens included: ids are 0 … vocab_size − 1."""

    @property
    @abstractmethod
    def special_tokens(self) -> dict[str, int]:
        """Special token text → id (a fresh dict, ascending ids)."""

    @abstractmethod
    def encode(self, text: str, *, allowed_special: AllowedSpecial = ()) -> list[int]:
        """Encode `text` into ids.

        By default special-token text is encoded as ordinary text. `allowed_special="all"` (or a
        set of special token strings) makes those strings encode to their special ids.

        Raises:
            TokenizerError: `allowed_special` names a string that is not a special token.
        """

    @abstractmethod
    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Concatenate the bytes of `ids` (special tokens as their UTF-8 text).

        Raises:
            TokenizerError: an id is outside 0 … vocab_size − 1.
        """

    @abstractmethod
    def token_bytes(self) -> list[bytes]:
        """Every token's bytes, index = id, length vocab_size (special tokens as UTF-8 text)."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The tokenizer as its file content (see `fileformat.py`), JSON-ready."""

    def decode(self, ids: Sequence[int]) -> str:
        """Decode `ids` to text; bytes that are not valid UTF-8 become U+FFFD.

        Raises:
            TokenizerError: an id is outside 0 … vocab_size − 1.
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def mergeable_ranks(self) -> dict[bytes, int]:
        """Token bytes → rank (= id) of the ordinary tokens, tiktoken's `mergeable_ranks`.

        Raises:
            TokenizerError: this kind of tokenizer has no merges (char).
        """
        raise TokenizerError(
            f"a {self.kind} tokenizer has no BPE merge ranks: use token_bytes() instead"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tokenizer file to `path` atomically (temporary file + `os.replace`).

        Returns the path written.

        Raises:
            TokenizerError: the file cannot be written (e.g. its folder does not exist).
        """
        try:
            return write_atomic(path, canonical_bytes(self.to_dict()))
        except OSError as exc:
            raise TokenizerError(
                f"cannot write tokenizer file {path} ({exc.strerror}): check that its folder "
                "exists and is writable"
            ) from None

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical file content: equal fingerprints, equal tokenizers."""
        return hashlib.sha256(canonical_bytes(self.to_dict())).hexdigest()

    def _file_dict(self, **body: Any) -> dict[str, Any]:
        """The file content for `to_dict`: the common header, the kind's own `body` keys, then
        the special tokens (the key order on disk is fixed by `fileformat.canonical_bytes`)."""
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "kind": self.kind,
            "pattern": self.pattern_name,
            **body,
            "special_tokens": self.special_tokens,
        }

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} kind={self.kind!r} pattern={self.pattern_name!r} "
            f"vocab_size={self.vocab_size}>"
        )

    def _allowed_specials(self, allowed_special: AllowedSpecial) -> frozenset[str]:
        """Resolve `allowed_special` to a set of this tokenizer's special token strings."""
        if allowed_special == "all":
            return frozenset(self.special_tokens)
        if isinstance(allowed_special, str):
            raise TokenizerError(
                f"allowed_special={allowed_special!r} is a string: pass 'all' or a set of special "
                f"tokens such as {{{allowed_special!r}}}"
            )
        allowed = frozenset(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            known = sorted(self.special_tokens) or "none"
            raise TokenizerError(
                f"allowed_special names {sorted(unknown)}, which are not special tokens of this "
                f"{self.kind} tokenizer (its special tokens: {known}): pass only those"
            )
        return allowed


def check_special_names(names: Sequence[str]) -> list[str]:
    """Validate special token strings: non-empty, valid UTF-8 text, no duplicates.

    Raises:
        TokenizerError: naming the offending token.
    """
    names = list(names)
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise TokenizerError(
                f"special token {name!r} is not a non-empty string: give each special token as "
                "text, e.g. '<|endoftext|>'"
            )
        if not is_utf8_encodable(name):
            raise TokenizerError(
                f"special token {name!r} contains a lone surrogate and has no UTF-8 form: "
                "remove that character"
            )
        if name in seen:
            raise TokenizerError(f"special token {name!r} is listed twice: list it once")
        seen.add(name)
    return names


def is_utf8_encodable(text: str) -> bool:
    """True when `text` has no lone surrogates (so `text.encode('utf-8')` succeeds)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def checked_ids(ids: Sequence[int], vocab_size: int, kind: str) -> list[int]:
    """`ids` as a list of Python ints, each checked to lie in 0 … vocab_size − 1.

    Accepts any integer type (e.g. numpy integers), so callers may pass array rows.

    Raises:
        TokenizerError: naming the first id that is not an integer in range.
    """
    out = []
    for i in ids:
        try:
            value = operator.index(i)
        except TypeError:
            value = -1
        if not 0 <= value < vocab_size:
            raise TokenizerError(
                f"token id {i!r} is not in this {kind} tokenizer (ids 0..{vocab_size - 1}): "
                "decode ids produced by the same tokenizer"
            )
        out.append(value)
    return out
