"""Streaming decode in C (gs_decode / gs_decode_flush, FORMAT.md section 10): the pieces
concatenate to exactly the token bytes, no valid UTF-8 character is ever split between pieces,
and the pieces equal gptstack.quant.StreamDecoder's."""

from __future__ import annotations

import pytest
from gs_engine_ctypes import GsError
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import StreamDecoder


def valid_char_spans(data: bytes) -> list[tuple[int, int]]:
    """[start, end) of every well-formed multi-byte UTF-8 character in data (Python's strict
    decoder decides), scanning left to right as a decoder would."""
    spans, i = [], 0
    while i < len(data):
        for n in (4, 3, 2):
            try:
                if len(data[i : i + n].decode("utf-8")) == 1 and i + n <= len(data):
                    spans.append((i, i + n))
                    i += n
                    break
            except UnicodeDecodeError:
                pass
        else:
            i += 1
    return spans


@pytest.fixture(scope="module")
def decoders(engine, utf8_artifact, gpt2_artifact):
    return {a.name: (a, engine.open(a.data)) for a in (utf8_artifact, gpt2_artifact)}


@pytest.fixture(scope="module")
def fragments(utf8_artifact, gpt2_artifact):
    """Per artifact, the ids whose bytes are not ASCII: characters straddle these tokens."""
    return {
        a.name: [i for i, t in enumerate(a.tables.token_bytes) if max(t) >= 0x80]
        for a in (utf8_artifact, gpt2_artifact)
    }


def _check_stream(artifact, model, ids: list[int]) -> None:
    tables = artifact.tables
    c_dec, py_dec = model.decoder(), StreamDecoder(tables)
    pieces = []
    for i in ids:
        piece = c_dec.push(i)
        assert piece == py_dec.push(i)
        pieces.append(piece)
    tail = c_dec.flush()
    assert tail == py_dec.flush() and len(tail) <= 3
    pieces.append(tail)
    stream = b"".join(tables.token_bytes[i] for i in ids)
    assert b"".join(pieces) == stream
    cuts, at = set(), 0
    for p in pieces[:-1]:
        at += len(p)
        cuts.add(at)
    for start, end in valid_char_spans(stream):
        assert not any(start < c < end for c in cuts), f"character at {start} split"


@pytest.mark.parametrize("name", ["utf8", "gpt2"])
@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_stream_pieces(decoders, fragments, name, data):
    artifact, model = decoders[name]
    tables = artifact.tables
    ids = data.draw(
        st.lists(
            st.one_of(st.sampled_from(fragments[name]), st.integers(0, tables.n_tokens - 1)),
            max_size=40,
        )
    )
    _check_stream(artifact, model, ids)


def test_text_round_trip(decoders):
    artifact, model = decoders["gpt2"]
    text = "naïve café — 中文字 😀 done"
    ids = artifact.tokenizer.encode(text)
    dec = model.decoder()
    assert (b"".join(dec.push(i) for i in ids) + dec.flush()).decode() == text


def test_padding_ids_and_errors(decoders):
    artifact, model = decoders["utf8"]
    Vt, V = model.config["n_tokens"], model.vocab_size
    assert Vt < V
    dec = model.decoder()
    euro = artifact.tables.token_bytes.index("€".encode()[:2])  # an incomplete character
    assert dec.push(euro) == b""
    assert dec.push(Vt) == b""  # a padding row has no bytes and leaves the held ones alone
    with pytest.raises(GsError) as e:
        dec.push(V)
    assert e.value.status == "GS_ERR_TOKEN"
    big = max(range(Vt), key=lambda i: len(artifact.tables.token_bytes[i]))
    with pytest.raises(GsError) as e:  # held 2 + token bytes do not fit: nothing consumed
        dec.push(big, max_out=len(artifact.tables.token_bytes[big]))
    assert e.value.status == "GS_ERR_BUFFER"
    with pytest.raises(GsError) as e:
        dec.flush(max_out=1)
    assert e.value.status == "GS_ERR_BUFFER"
    assert dec.flush() == "€".encode()[:2]
