"""Byte-level BPE tokenizer defined by an ordered merge list (see `train.py` for training).

Ids 0..255 are the single bytes 0..255, id 256 + i is merge i (the bytes of its left token
followed by those of its right token), special tokens come after the merges. Encoding and
decoding run through a `tiktoken.Encoding` with rank == id, so they are tiktoken-fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import check_special_names
from .errors import TokenizerError
from .patterns import pattern_regex
from .tiktoken_backed import TiktokenTokenizer

N_BYTE_TOKENS = 256  # ids 0..255 are the raw bytes


def merged_token_bytes(merges: Sequence[tuple[int, int]]) -> list[bytes]:
    """The bytes of every ordinary token (256 + len(merges) of them) of a merge list.

    Raises:
        TokenizerError: a merge that is not two ints, refers to an id not yet defined, repeats an
            earlier pair, or makes bytes an earlier token already has.
    """
    table = [bytes([b]) for b in range(N_BYTE_TOKENS)]
    seen_pairs: dict[tuple[int, int], int] = {}
    seen_bytes = {token: i for i, token in enumerate(table)}
    for i, merge in enumerate(merges):
        new_id = N_BYTE_TOKENS + i
        if (
            not isinstance(merge, (list, tuple))
            or len(merge) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in merge)
        ):
            raise TokenizerError(f"merge {i} is {merge!r}, not a pair of token ids [left, right]")
        left, right = merge
        if not (0 <= left < new_id and 0 <= right < new_id):
            raise TokenizerError(
                f"merge {i} is {[left, right]}, but it may only join ids 0..{new_id - 1} "
                "(the bytes and earlier merges)"
            )
        if (left, right) in seen_pairs:
            raise TokenizerError(
                f"merge {i} {[left, right]} repeats merge {seen_pairs[left, right]}"
            )
        token = table[left] + table[right]
        if token in seen_bytes:
            raise TokenizerError(
                f"merge {i} {[left, right]} makes bytes {token!r}, which token "
                f"{seen_bytes[token]} already has (token bytes must be unique)"
            )
        seen_pairs[left, right] = i
        seen_bytes[token] = new_id
        table.append(token)
    return table


class BPETokenizer(TiktokenTokenizer):
    """Byte-level BPE from an ordered merge list, encoded by tiktoken."""

    kind = "bpe"

    def __init__(
        self,
        merges: Sequence[tuple[int, int]],
        pattern: str = "gpt2",
        special_tokens: Sequence[str] = (),
    ) -> None:
        """Build from `merges` (merge i joins ids (left, right) into id 256 + i).

        Args:
            merges: ordered (left_id, right_id) pairs.
            pattern: pre-tokenization pattern name, "gpt2" or "gpt4".
            special_tokens: special token strings; they get ids 256 + len(merges) onwards, in order.

        Raises:
            TokenizerError: bad merges, unknown pattern or bad special tokens.
        """
        pattern_regex(pattern)  # fail early on an unknown name
        table = merged_token_bytes(merges)
        specials = check_special_names(special_tokens)
        self._merges = [(int(left), int(right)) for left, right in merges]
        super().__init__(
            name=f"gptstack-bpe-{pattern}-{len(table)}",
            pattern_name=pattern,
            ranks={token: i for i, token in enumerate(table)},
            special_tokens={name: len(table) + k for k, name in enumerate(specials)},
        )

    @property
    def merges(self) -> list[tuple[int, int]]:
        """The merge list: entry i joins (left_id, right_id) into id 256 + i."""
        return list(self._merges)

    def to_dict(self) -> dict[str, Any]:
        return self._file_dict(merges=[[left, right] for left, right in self._merges])
