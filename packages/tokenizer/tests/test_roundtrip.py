"""Round trips through every kind: text → ids → text, bytes → byte ids → bytes (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.tokenizer import BPETokenizer, CharTokenizer, GPT2Tokenizer

# hypothesis' text() has no lone surrogates: those cannot be UTF-8 and tiktoken replaces them.
any_text = st.text(max_size=400)


@settings(max_examples=150, deadline=None)
@given(text=any_text)
def test_bpe_text_round_trip(small_bpe: BPETokenizer, text: str) -> None:
    ids = small_bpe.encode(text)
    assert all(0 <= i < small_bpe.vocab_size for i in ids)
    assert small_bpe.decode(ids) == text
    assert small_bpe.decode_bytes(ids) == text.encode("utf-8")


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400))
def test_bpe_byte_ids_round_trip(small_bpe: BPETokenizer, data: bytes) -> None:
    # ids 0..255 are the bytes themselves
    assert small_bpe.decode_bytes(list(data)) == data


@settings(max_examples=150, deadline=None)
@given(text=any_text)
def test_gpt2_text_round_trip(gpt2: GPT2Tokenizer, text: str) -> None:
    assert gpt2.decode(gpt2.encode(text)) == text


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400))
def test_gpt2_byte_tokens_round_trip(gpt2: GPT2Tokenizer, data: bytes) -> None:
    ranks = gpt2.mergeable_ranks()
    assert gpt2.decode_bytes([ranks[bytes([b])] for b in data]) == data


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_char_round_trip(char_tok: CharTokenizer, data: st.DataObject) -> None:
    text = data.draw(st.text(alphabet=char_tok.vocab, max_size=400))
    ids = char_tok.encode(text)
    assert len(ids) == len(text)
    assert char_tok.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(pieces=st.lists(st.one_of(any_text, st.just("<|endoftext|>")), max_size=6))
def test_special_tokens_recognized_only_when_allowed(
    small_bpe: BPETokenizer, pieces: list[str]
) -> None:
    text = "".join(pieces)
    eot = small_bpe.special_tokens["<|endoftext|>"]
    plain = small_bpe.encode(text)
    special = small_bpe.encode(text, allowed_special="all")
    assert eot not in plain
    assert special.count(eot) == text.count("<|endoftext|>")
    assert small_bpe.encode(text, allowed_special={"<|endoftext|>"}) == special
    assert small_bpe.decode(plain) == small_bpe.decode(special) == text


def test_decode_replaces_invalid_utf8(small_bpe: BPETokenizer, gpt2: GPT2Tokenizer) -> None:
    assert small_bpe.decode([0xE2, 0x82]) == "\ufffd"  # a truncated 3-byte sequence
    ranks = gpt2.mergeable_ranks()
    assert gpt2.decode([ranks[b"\xff"]]) == "\ufffd"
