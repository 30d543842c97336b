"""Character-level tokenizer: one id per distinct character of a training text.

    tok = CharTokenizer.from_text(open("tinyshakespeare.txt").read())   # 65 ids, sorted chars
    tok.encode("Hi")  ->  [20, 47]

Characters outside the vocabulary are an error (`UnknownCharacterError`), never silently
dropped. Optional special tokens get the ids after the characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import regex

from .base import (
    AllowedSpecial,
    Tokenizer,
    check_special_names,
    checked_ids,
    is_utf8_encodable,
)
from .errors import TokenizerError, UnknownCharacterError


class CharTokenizer(Tokenizer):
    """One id per character: id i is `vocab[i]`; special tokens follow the characters."""

    kind = "char"
    pattern_name = None

    def __init__(self, vocab: Sequence[str], special_tokens: Sequence[str] = ()) -> None:
        """Build from an explicit character list (ids in list order).

        Raises:
            TokenizerError: empty vocabulary, an entry that is not one character, a duplicate,
                a lone surrogate, or a bad special token.
        """
        vocab = list(vocab)
        if not vocab:
            raise TokenizerError(
                "a char tokenizer needs at least one character: build it from non-empty text"
            )
        for i, ch in enumerate(vocab):
            if not isinstance(ch, str) or len(ch) != 1:
                raise TokenizerError(
                    f"char vocabulary entry {i} is {ch!r}, not a single character: "
                    "list one character per entry"
                )
            if not is_utf8_encodable(ch):
                raise TokenizerError(
                    f"char vocabulary entry {i} is a lone surrogate {ch!r} with no UTF-8 form: "
                    "remove it from the text"
                )
        if len(set(vocab)) != len(vocab):
            dup = next(ch for i, ch in enumerate(vocab) if ch in vocab[:i])
            raise TokenizerError(f"character {dup!r} appears twice in the char vocabulary")
        specials = check_special_names(special_tokens)
        self._vocab = vocab
        self._stoi = {ch: i for i, ch in enumerate(vocab)}
        self._specials = {name: len(vocab) + k for k, name in enumerate(specials)}
        self._table = [ch.encode("utf-8") for ch in vocab] + [s.encode("utf-8") for s in specials]

    @classmethod
    def from_text(cls, text: str, *, special_tokens: Sequence[str] = ()) -> CharTokenizer:
        """Vocabulary = the sorted unique characters of `text` (by code point).

        Raises:
            TokenizerError: `text` is empty or holds a lone surrogate.
        """
        return cls(sorted(set(text)), special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._table)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._specials)

    @property
    def vocab(self) -> list[str]:
        """The characters, index = id (special tokens not included)."""
        return list(self._vocab)

    def encode(self, text: str, *, allowed_special: AllowedSpecial = ()) -> list[int]:
        """Encode `text` one character at a time.

        Raises:
            UnknownCharacterError: a character is not in the vocabulary (names it and its
                position in `text`).
            TokenizerError: `allowed_special` names an unknown special token.
        """
        allowed = self._allowed_specials(allowed_special)
        if not allowed:
            return self._encode_chars(text, 0)
        # Longest first, so that a special token containing another one wins.
        alternatives = "|".join(regex.escape(s) for s in sorted(allowed, key=len, reverse=True))
        ids: list[int] = []
        start = 0
        for match in regex.finditer(alternatives, text):
            ids += self._encode_chars(text[start : match.start()], start)
            ids.append(self._specials[match.group()])
            start = match.end()
        ids += self._encode_chars(text[start:], start)
        return ids

    def _encode_chars(self, text: str, offset: int) -> list[int]:
        """Ids of the characters of `text`, a slice that starts at `offset` of the caller's text."""
        stoi = self._stoi
        try:
            return [stoi[ch] for ch in text]
        except KeyError:
            position = next(i for i, ch in enumerate(text) if ch not in stoi)
            raise UnknownCharacterError(
                text[position], offset + position, len(self._vocab)
            ) from None

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        table = self._table
        try:
            if len(ids) and min(ids) < 0:  # a negative index would silently wrap around
                raise IndexError
            return b"".join([table[i] for i in ids])
        except (IndexError, TypeError):
            return b"".join([table[i] for i in checked_ids(ids, len(table), self.kind)])

    def token_bytes(self) -> list[bytes]:
        return list(self._table)

    def to_dict(self) -> dict[str, Any]:
        return self._file_dict(vocab=list(self._vocab))
