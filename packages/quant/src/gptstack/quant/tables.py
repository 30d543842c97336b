"""Tokenizer tables of the `.gsm` artifact (FORMAT.md section 3): the data class and its codec.

`TokenizerTables` is plain data (kind, pattern, every token's bytes, the special ids); the three
look-up tables a device needs (`byte_to_token`, `sorted_ids`, `pairs`) are derived from it here,
once, by the same rules the reader uses to check a file. `pack_tokenizer` / `parse_tokenizer`
turn the tables into the section's bytes and back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from .errors import BadTokenizerError
from .format import NO_TOKEN, PATTERN_GPT2, PATTERN_GPT4, PATTERN_NONE, TOK_KIND_BPE, TOK_KIND_CHAR

_KINDS = {"char": TOK_KIND_CHAR, "bpe": TOK_KIND_BPE}
_PATTERNS = {None: PATTERN_NONE, "gpt2": PATTERN_GPT2, "gpt4": PATTERN_GPT4}
# kind, pattern, n_tokens, n_pairs, n_special, blob_bytes, reserved[2]
_SECTION_HEAD = struct.Struct("<8I")


@dataclass(frozen=True)
class TokenizerTables:
    """What the artifact carries of a tokenizer (FORMAT.md section 3).

    kind: "char" or "bpe"; pattern: None for char, "gpt2" or "gpt4" for BPE (the pre-tokenization
    regex of section 10); token_bytes[i]: the bytes of token i (Vt tokens, each at least one byte);
    special_ids: ascending ids of special tokens (e.g. <|endoftext|>), the others are "ordinary".
    Derived on construction: byte_to_token (256 ids, NO_TOKEN for char), sorted_ids (ordinary ids
    by their bytes) and pairs (every split of every ordinary multi-byte token into two ordinary
    tokens, as (left, right, merged), sorted). Raises BadTokenizerError if a rule is broken.
    """

    kind: str
    pattern: str | None
    token_bytes: list[bytes]
    special_ids: list[int] = field(default_factory=list)
    byte_to_token: list[int] = field(init=False, compare=False, repr=False)
    sorted_ids: list[int] = field(init=False, compare=False, repr=False)
    pairs: list[tuple[int, int, int]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        token_bytes = [bytes(t) for t in self.token_bytes]
        special_ids = [int(i) for i in self.special_ids]
        object.__setattr__(self, "token_bytes", token_bytes)
        object.__setattr__(self, "special_ids", special_ids)
        self._check()
        special = set(special_ids)
        ordinary = [i for i in range(len(token_bytes)) if i not in special]
        index = {token_bytes[i]: i for i in ordinary}
        if len(index) != len(ordinary):
            seen: dict[bytes, int] = {}
            for i in ordinary:
                if token_bytes[i] in seen:
                    raise BadTokenizerError(
                        f"tokens {seen[token_bytes[i]]} and {i} have the same bytes "
                        f"{token_bytes[i]!r}: ordinary tokens must be distinct (section 3)"
                    )
                seen[token_bytes[i]] = i
        byte_to_token = [NO_TOKEN] * 256
        if self.kind == "bpe":
            for b in range(256):
                tok = index.get(bytes([b]))
                if tok is None:
                    raise BadTokenizerError(
                        f"BPE tokenizer has no ordinary one-byte token for byte 0x{b:02X}: "
                        "byte-level BPE needs all 256 (section 3, byte_to_token)"
                    )
                byte_to_token[b] = tok
        pairs: list[tuple[int, int, int]] = []
        if self.kind == "bpe":
            for m in ordinary:
                bm = token_bytes[m]
                for cut in range(1, len(bm)):
                    left, right = index.get(bm[:cut]), index.get(bm[cut:])
                    if left is not None and right is not None:
                        pairs.append((left, right, m))
            pairs.sort()
        object.__setattr__(self, "byte_to_token", byte_to_token)
        object.__setattr__(self, "sorted_ids", sorted(ordinary, key=token_bytes.__getitem__))
        object.__setattr__(self, "pairs", pairs)

    def _check(self) -> None:
        if self.kind not in _KINDS:
            raise BadTokenizerError(f"tokenizer kind {self.kind!r} is unknown: use 'char' or 'bpe'")
        if self.pattern not in _PATTERNS:
            raise BadTokenizerError(
                f"tokenizer pattern {self.pattern!r} is unknown: use None, 'gpt2' or 'gpt4'"
            )
        if (self.kind == "char") != (self.pattern is None):
            raise BadTokenizerError(
                f"a {self.kind!r} tokenizer with pattern {self.pattern!r}: char takes None, "
                "BPE takes 'gpt2' or 'gpt4' (section 3)"
            )
        if not self.token_bytes:
            raise BadTokenizerError("tokenizer has no tokens: it needs at least one")
        for i, t in enumerate(self.token_bytes):
            if not t:
                raise BadTokenizerError(f"token {i} has no bytes: every token needs at least one")
        n = len(self.token_bytes)
        for a, b in zip(self.special_ids, self.special_ids[1:]):
            if b <= a:
                raise BadTokenizerError(
                    f"special_ids {self.special_ids} are not strictly ascending"
                )
        for i in self.special_ids:
            if not 0 <= i < n:
                raise BadTokenizerError(f"special id {i} is not a token id (0 .. {n - 1})")

    @property
    def n_tokens(self) -> int:
        """Vt, the number of tokens."""
        return len(self.token_bytes)

    @property
    def kind_code(self) -> int:
        return _KINDS[self.kind]

    @property
    def pattern_code(self) -> int:
        return _PATTERNS[self.pattern]


def tokenizer_section_bytes(tables: TokenizerTables) -> int:
    """Size of the tokenizer section for these tables (the header's `tokenizer_bytes`)."""
    return _section_size(
        tables.n_tokens,
        sum(len(t) for t in tables.token_bytes),
        len(tables.pairs),
        len(tables.special_ids),
    )


def _section_size(n_tokens: int, blob_bytes: int, n_pairs: int, n_special: int) -> int:
    head_and_blob = _SECTION_HEAD.size + 4 * (n_tokens + 1) + blob_bytes
    padded = (head_and_blob + 3) // 4 * 4
    return padded + 4 * 256 + 4 * (n_tokens - n_special) + 12 * n_pairs + 4 * n_special


def pack_tokenizer(tables: TokenizerTables) -> bytes:
    """The tokenizer section's bytes (FORMAT.md section 3), in field order."""
    lengths = np.array([len(t) for t in tables.token_bytes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("<u4")
    blob = b"".join(tables.token_bytes)
    parts = [
        _SECTION_HEAD.pack(
            tables.kind_code,
            tables.pattern_code,
            tables.n_tokens,
            len(tables.pairs),
            len(tables.special_ids),
            len(blob),
            0,
            0,
        ),
        offsets.tobytes(),
        blob,
    ]
    used = sum(len(p) for p in parts)
    parts.append(b"\0" * ((-used) % 4))
    parts.append(np.array(tables.byte_to_token, dtype="<u4").tobytes())
    parts.append(np.array(tables.sorted_ids, dtype="<u4").tobytes())
    parts.append(np.array(tables.pairs, dtype="<u4").reshape(-1).tobytes())
    parts.append(np.array(tables.special_ids, dtype="<u4").tobytes())
    out = b"".join(parts)
    assert len(out) == tokenizer_section_bytes(tables)
    return out


def parse_tokenizer(section: memoryview, vocab_size: int, where: str) -> TokenizerTables:
    """Read and check a tokenizer section (FORMAT.md section 6, step 10).

    section: exactly `tokenizer_bytes` bytes; vocab_size: V from the header; where: the artifact's
    name for messages. Raises BadTokenizerError naming the first broken rule.
    """

    def bad(msg: str) -> BadTokenizerError:
        return BadTokenizerError(
            f"artifact {where}: tokenizer section: {msg}; re-run `gptstack export`"
        )

    if len(section) < _SECTION_HEAD.size:
        raise bad(
            f"tokenizer_bytes is {len(section)}, smaller than its {_SECTION_HEAD.size}-byte head"
        )
    head = _SECTION_HEAD.unpack_from(section)
    kind, pattern, n_tokens, n_pairs, n_special, blob_bytes, r0, r1 = head
    kinds = {v: k for k, v in _KINDS.items()}
    patterns = {v: k for k, v in _PATTERNS.items()}
    if kind not in kinds:
        raise bad(f"kind is {kind}, expected {TOK_KIND_CHAR} (char) or {TOK_KIND_BPE} (BPE)")
    if pattern not in patterns:
        raise bad(f"pattern is {pattern}, expected 0, 1 or 2")
    if r0 or r1:
        raise bad(f"reserved words are {r0}, {r1}, expected 0")
    if not 1 <= n_tokens <= vocab_size:
        raise bad(f"n_tokens is {n_tokens}, expected 1 .. vocab_size {vocab_size}")
    if n_special > n_tokens:
        raise bad(f"n_special is {n_special}, more than n_tokens {n_tokens}")
    expected = _section_size(n_tokens, blob_bytes, n_pairs, n_special)
    if expected != len(section):
        raise bad(f"tokenizer_bytes is {len(section)}, but its counts need {expected}")
    pos = _SECTION_HEAD.size
    offsets = np.frombuffer(section, dtype="<u4", count=n_tokens + 1, offset=pos).astype(np.int64)
    pos += 4 * (n_tokens + 1)
    if offsets[0] != 0 or offsets[-1] != blob_bytes or np.any(np.diff(offsets) < 1):
        raise bad("token_offsets must start at 0, end at blob_bytes and grow by at least 1")
    blob = bytes(section[pos : pos + blob_bytes])
    pos += blob_bytes
    pos += (-pos) % 4

    def words(count: int) -> list[int]:
        nonlocal pos
        out = np.frombuffer(section, dtype="<u4", count=count, offset=pos).tolist()
        pos += 4 * count
        return out

    byte_to_token = words(256)
    sorted_ids = words(n_tokens - n_special)
    flat_pairs = words(3 * n_pairs)
    special_ids = words(n_special)
    tokens = [blob[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    try:
        tables = TokenizerTables(kinds[kind], patterns[pattern], tokens, special_ids)
    except BadTokenizerError as e:
        raise bad(str(e)) from None
    if byte_to_token != tables.byte_to_token:
        raise bad("byte_to_token does not match the tokens' bytes")
    if sorted_ids != tables.sorted_ids:
        raise bad("sorted_ids is not the ordinary ids sorted by their bytes")
    pairs = list(zip(flat_pairs[0::3], flat_pairs[1::3], flat_pairs[2::3]))
    if pairs != tables.pairs:
        raise bad(
            f"the pair table ({n_pairs} entries) is not every split of every ordinary token "
            f"into two ordinary tokens ({len(tables.pairs)} entries), sorted"
        )
    return tables
