"""Encoding and decoding through a `tiktoken.Encoding`, shared by the BPE and GPT-2 tokenizers.

tiktoken applies the merge rule "repeatedly join the adjacent pair whose joined bytes have the
lowest rank" inside each pre-tokenized piece, in Rust; with rank == id this is the tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tiktoken

from .base import AllowedSpecial, Tokenizer, checked_ids
from .patterns import pattern_regex


class TiktokenTokenizer(Tokenizer):
    """A tokenizer whose ordinary ids are tiktoken ranks (ids 0 … n_ranks − 1, then specials)."""

    def __init__(
        self,
        name: str,
        pattern_name: str,
        ranks: Mapping[bytes, int],
        special_tokens: Mapping[str, int],
    ) -> None:
        """Wrap a tiktoken Encoding over `ranks` (bytes → id) and `special_tokens` (text → id).

        The caller guarantees ids 0 … len(ranks) + len(special_tokens) − 1, each used once.

        Raises:
            TokenizerError: unknown `pattern_name`.
        """
        self.pattern_name = pattern_name
        self._ranks = dict(ranks)
        self._specials = dict(sorted(special_tokens.items(), key=lambda kv: kv[1]))
        self._n_vocab = len(self._ranks) + len(self._specials)
        self._encoding = tiktoken.Encoding(
            name,
            pat_str=pattern_regex(pattern_name),
            mergeable_ranks=self._ranks,
            special_tokens=self._specials,
            explicit_n_vocab=self._n_vocab,
        )
        self._table: list[bytes] | None = None

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._specials)

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The underlying `tiktoken.Encoding` (for batch encoding and other tiktoken APIs)."""
        return self._encoding

    def encode(self, text: str, *, allowed_special: AllowedSpecial = ()) -> list[int]:
        """Encode `text` with tiktoken (lone surrogates become U+FFFD, as in tiktoken).

        Raises:
            TokenizerError: `allowed_special` names an unknown special token.
        """
        allowed = self._allowed_specials(allowed_special)
        if not allowed:
            return self._encoding.encode_ordinary(text)
        return self._encoding.encode(text, allowed_special=allowed, disallowed_special=())

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        try:
            return self._encoding.decode_bytes(ids)
        except (KeyError, OverflowError, TypeError):  # an unknown id, or not a list of ints
            return self._encoding.decode_bytes(checked_ids(ids, self._n_vocab, self.kind))

    def token_bytes(self) -> list[bytes]:
        if self._table is None:
            table = [b""] * self._n_vocab
            for token, rank in self._ranks.items():
                table[rank] = token
            for name, i in self._specials.items():
                table[i] = name.encode("utf-8")
            self._table = table
        return list(self._table)

    def mergeable_ranks(self) -> dict[bytes, int]:
        return dict(self._ranks)
