"""Prompt encoding and streaming decoding of FORMAT.md section 10.

Checked against tiktoken (imported inside the tests only: quant never needs it at run time) with
GPT-2's own ranks and with synthetic tables, and against Python's strict UTF-8 decoder.
"""

from __future__ import annotations

import base64
import codecs

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import (
    PromptEncoder,
    QuantError,
    StreamDecoder,
    TokenizerTables,
    UnknownCharacterError,
    UnsupportedPatternError,
    decode,
    synthetic_tables,
)

# tiktoken's r50k_base / gpt2 pattern
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# non-ASCII text where the device's classes agree with Unicode: letters only
LETTERS = "naïve café über Straße ÆØÅ, ελληνικά and кириллица; 中文字 日本語.\n"


def _tiktoken(tables: TokenizerTables):
    tiktoken = pytest.importorskip("tiktoken")
    special = set(tables.special_ids)
    ranks = {t: i for i, t in enumerate(tables.token_bytes) if i not in special}
    specials = {tables.token_bytes[i].decode(): i for i in tables.special_ids}
    return tiktoken.Encoding(
        "test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )


@pytest.fixture(scope="module")
def gpt2_tables(data_dir) -> TokenizerTables:
    lines = (data_dir / "gpt2.tiktoken").read_bytes().split()
    ranked = sorted((int(r), base64.b64decode(t)) for t, r in zip(lines[0::2], lines[1::2]))
    assert [r for r, _ in ranked] == list(range(len(ranked)))
    return TokenizerTables(
        "bpe", "gpt2", [t for _, t in ranked] + [b"<|endoftext|>"], [len(ranked)]
    )


def test_gpt2_ranks_encode_like_tiktoken(gpt2_tables, shakespeare_text, rng):
    enc, ref = PromptEncoder(gpt2_tables), _tiktoken(gpt2_tables)
    assert enc.encode("Hello world") == [
        15496,
        995,
    ]  # GPT-2 (tiktoken r50k_base) ids of "Hello world"
    start = int(rng.integers(0, len(shakespeare_text) - 20_000))
    for text in [
        shakespeare_text[start : start + 20_000],
        LETTERS,
        "it's  \t\n  x  <|endoftext|> 3.14159 ab12cd   \n\n\n end  ",
        " ",
        "\n",
        "!!",
    ]:
        assert enc.encode(text) == ref.encode_ordinary(text), text[:40]


def test_synthetic_tables_encode_like_tiktoken(rng):
    tables = synthetic_tables("bpe", 900, seed=int(rng.integers(0, 2**31)), n_special=2)
    enc, ref = PromptEncoder(tables), _tiktoken(tables)
    alphabet = list("etaoin shrdlu ETAOIN.,'\n\t0123456789") + ["é", "€", "中", "😀"]
    for _ in range(30):
        text = "".join(rng.choice(alphabet, int(rng.integers(0, 80))).tolist())
        assert enc.encode(text) == ref.encode_ordinary(text)
        assert decode(tables, enc.encode(text)) == text.encode()


@pytest.fixture(scope="module")
def synthetic_pair():
    tables = synthetic_tables("bpe", 700, seed=3)
    return tables, PromptEncoder(tables), _tiktoken(tables)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=127)))
def test_any_ascii_text_round_trips_and_matches_tiktoken(synthetic_pair, text):
    tables, enc, ref = synthetic_pair
    ids = enc.encode(text)
    assert decode(tables, ids) == text.encode()
    assert ids == ref.encode_ordinary(text)


def test_invalid_utf8_bytes_are_letters():
    tables = synthetic_tables("bpe", 400, seed=1)
    enc = PromptEncoder(tables)
    data = b"ab\xff\xfecd !\x80x"
    ids = enc.encode(data)
    assert decode(tables, ids) == data
    # "ab\xff\xfecd" is one letter run, " !" punctuation, "\x80x" letters: no id spans two runs
    pieces = [tables.token_bytes[i] for i in ids]
    boundaries = np.cumsum([len(p) for p in pieces]).tolist()
    assert 6 in boundaries and 8 in boundaries


def test_char_tokenizer_encoding():
    tables = TokenizerTables("char", None, [c.encode() for c in sorted("\n !HWdelor€")])
    enc = PromptEncoder(tables)
    text = "Hello World €!\n"
    ids = enc.encode(text)
    assert [tables.token_bytes[i].decode() for i in ids] == list(text)
    with pytest.raises(UnknownCharacterError, match="'z'"):
        enc.encode("Hello z")
    with pytest.raises(UnknownCharacterError, match="not UTF-8"):
        enc.encode(b"He\xff")


def test_gpt4_pattern_is_not_encoded():
    tables = synthetic_tables("bpe", 300, pattern="gpt4")
    with pytest.raises(UnsupportedPatternError, match="GPT-2 pattern"):
        PromptEncoder(tables).encode("hi")


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.binary(min_size=1, max_size=5), min_size=1, max_size=12),
    ids=st.lists(st.integers(0, 11), max_size=40),
)
def test_stream_decoder_holds_back_only_incomplete_characters(tokens, ids):
    tokens = list(dict.fromkeys(tokens))  # distinct
    ids = [i % len(tokens) for i in ids]
    tables = TokenizerTables("char", None, tokens)
    dec = StreamDecoder(tables)
    pieces = []
    for i in ids:
        pieces.append(dec.push(i))
        held = dec._pending
        assert len(held) <= 3
        if held:  # a proper prefix of one well-formed character (Python's decoder is strict)
            assert codecs.getincrementaldecoder("utf-8")().decode(held, final=False) == ""
            assert len(held) < {0xC: 2, 0xD: 2, 0xE: 3, 0xF: 4}[held[0] >> 4]
    pieces.append(dec.flush())
    joined = b"".join(tables.token_bytes[i] for i in ids)
    assert b"".join(pieces) == joined
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return
    for piece in pieces:  # valid text: every piece is whole characters
        piece.decode("utf-8")


def test_stream_decoder_examples():
    tokens = [b"\xe2", b"\x82", b"\xac", b"a", b"\xed\xa0", b"\xf0\x9f"]
    tables = TokenizerTables("char", None, tokens)
    dec = StreamDecoder(tables)
    assert [dec.push(i) for i in (0, 1, 2, 3)] == [b"", b"", "€".encode(), b"a"]
    assert dec.push(4) == b"\xed\xa0"  # ED A0 starts a surrogate: never valid, emitted as is
    assert dec.push(5) == b"" and dec.flush() == b"\xf0\x9f"
    with pytest.raises(QuantError, match="token id 6"):
        dec.push(6)
