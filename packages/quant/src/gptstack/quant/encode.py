"""Prompt encoding and streaming decoding from an artifact's tokenizer tables (FORMAT.md §10).

    enc = PromptEncoder(artifact.tables); ids = enc.encode("Hello world")
    dec = StreamDecoder(artifact.tables); out = b"".join(dec.push(i) for i in ids) + dec.flush()

This is what the C engine does on the device, written plainly so the engine can be tested
against it: chunks by GPT-2's pattern with the device's character classes (every byte >= 0x80
is a letter), a whole-chunk lookup, then pair merges, lowest merged id first. For ASCII text the
result equals tiktoken's `encode_ordinary` with the same ranks.
"""

from __future__ import annotations

import re

from .errors import QuantError, UnknownCharacterError, UnsupportedPatternError
from .tables import TokenizerTables

# GPT-2's pre-tokenization pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
# \s+(?!\S)|\s+` over bytes, with FORMAT.md section 10's classes: L = ASCII letters and every
# byte >= 0x80 (each non-ASCII code point, and each invalid byte, is a letter; since L only ever
# appears in runs, counting a code point as one letter or as its bytes gives the same chunks),
# N = ASCII digits, \s = \t \n \v \f \r and space, everything else punctuation.
_WS = rb"\t\n\x0b\x0c\r "
_LETTER = rb"A-Za-z\x80-\xff"
_GPT2_CHUNKS = re.compile(
    rb"'s|'t|'re|'ve|'m|'ll|'d"
    rb"| ?[" + _LETTER + rb"]+"
    rb"| ?[0-9]+"
    rb"| ?[^" + _WS + _LETTER + rb"0-9]+"
    rb"|[" + _WS + rb"]+(?![^" + _WS + rb"])"
    rb"|[" + _WS + rb"]+"
)


def split_chunks(text: bytes) -> list[bytes]:
    """GPT-2 pattern chunks of the prompt bytes, with the device's character classes."""
    return _GPT2_CHUNKS.findall(text)


class PromptEncoder:
    """Turns prompt text into ids like the C engine (FORMAT.md section 10)."""

    def __init__(self, tables: TokenizerTables) -> None:
        self.tables = tables
        special = set(tables.special_ids)
        self._ordinary = {t: i for i, t in enumerate(tables.token_bytes) if i not in special}
        self._pairs = {(a, b): m for a, b, m in tables.pairs}

    def encode(self, text: str | bytes) -> list[int]:
        """Ids of the prompt (special-token text is plain text).

        Raises UnknownCharacterError (char tokenizer, a character not in the vocabulary) or
        UnsupportedPatternError (PATTERN_GPT4: the engine does not encode those prompts).
        """
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if self.tables.kind == "char":
            return self._encode_chars(data)
        if self.tables.pattern != "gpt2":
            raise UnsupportedPatternError(
                f"prompt encoding supports the GPT-2 pattern only, this tokenizer uses "
                f"{self.tables.pattern!r}: give token ids, or start from bos_token"
            )
        out: list[int] = []
        for chunk in split_chunks(data):
            out.extend(self._encode_chunk(chunk))
        return out

    def _encode_chars(self, data: bytes) -> list[int]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UnknownCharacterError(
                f"prompt byte 0x{data[e.start]:02X} at offset {e.start} is not UTF-8: "
                "a char tokenizer takes whole characters"
            ) from None
        out = []
        for i, ch in enumerate(text):
            tok = self._ordinary.get(ch.encode("utf-8"))
            if tok is None:
                raise UnknownCharacterError(
                    f"prompt character {ch!r} (position {i}) is not in the char vocabulary: "
                    "remove it or retrain the tokenizer on text that has it"
                )
            out.append(tok)
        return out

    def _encode_chunk(self, chunk: bytes) -> list[int]:
        whole = self._ordinary.get(chunk)
        if whole is not None:
            return [whole]
        parts = [self.tables.byte_to_token[b] for b in chunk]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                merged = self._pairs.get((parts[i], parts[i + 1]))
                if merged is not None and (best is None or merged < best):
                    best, at = merged, i  # strict <: the leftmost on ties
            if best is None:
                break
            parts[at : at + 2] = [best]
        return parts


def encode(tables: TokenizerTables, text: str | bytes) -> list[int]:
    """PromptEncoder(tables).encode(text), for one-off use."""
    return PromptEncoder(tables).encode(text)


# Unicode Table 3-7 (well-formed UTF-8): allowed second byte per lead byte, and sequence length.
def _second_byte_range(lead: int) -> tuple[int, int]:
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(
        lead, (0x80, 0xBF)
    )


def _sequence_length(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # ASCII, a continuation byte, or a byte that never starts a sequence


def incomplete_tail(buf: bytes) -> int:
    """Length (0..3) of buf's trailing bytes that are a proper prefix of one UTF-8 character."""
    for n in range(1, min(3, len(buf)) + 1):
        lead = buf[-n]
        if 0x80 <= lead <= 0xBF:
            continue  # a continuation byte: its lead is further back
        need = _sequence_length(lead)
        if need <= n:
            return 0
        tail = buf[-n:]
        lo, hi = _second_byte_range(lead)
        if n >= 2 and not lo <= tail[1] <= hi:
            return 0
        return n
    return 0


class StreamDecoder:
    """Streaming decode of FORMAT.md section 10: push ids, get bytes ending on character boundaries.

    push(id) returns the bytes that can be shown now (possibly empty); a trailing incomplete UTF-8
    character (at most 3 bytes) is held back until its next bytes arrive or flush() is called.
    The concatenation of every returned piece is exactly the concatenated token bytes.
    """

    def __init__(self, tables: TokenizerTables) -> None:
        self.tables = tables
        self._pending = b""

    def push(self, token: int) -> bytes:
        if not 0 <= token < self.tables.n_tokens:
            raise QuantError(
                f"token id {token} has no bytes: the tokenizer has "
                f"{self.tables.n_tokens} tokens (ids >= that are padding rows)"
            )
        buf = self._pending + self.tables.token_bytes[token]
        hold = incomplete_tail(buf)
        self._pending = buf[len(buf) - hold :]
        return buf[: len(buf) - hold]

    def flush(self) -> bytes:
        out, self._pending = self._pending, b""
        return out


def decode(tables: TokenizerTables, ids: list[int]) -> bytes:
    """The concatenated bytes of the ids."""
    dec = StreamDecoder(tables)
    return b"".join(dec.push(i) for i in ids) + dec.flush()
