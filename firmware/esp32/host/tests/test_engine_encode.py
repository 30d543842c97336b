"""Prompt encoding in C (gs_encode, FORMAT.md section 10) against the tokenizers themselves
(tiktoken's encode_ordinary for BPE and GPT-2, CharTokenizer.encode) on ASCII text, and against
the reference encoder gptstack.quant.PromptEncoder on any text and any bytes."""

from __future__ import annotations

import pytest
from gs_engine_ctypes import GsError
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import (
    ModelSpec,
    PromptEncoder,
    UnknownCharacterError,
    synthetic_artifact,
    synthetic_tables,
)

ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=80)
# ASCII plus the pattern's interesting pieces, so contractions and whitespace runs show up often
PIECES = st.lists(
    st.sampled_from(
        [
            "'s",
            "'t",
            "'re",
            "'ve",
            "'m",
            "'ll",
            "'d",
            "'S",
            "'",
            " ",
            "  ",
            "\n",
            "\n\n",
            "\t",
            " \n",
            "\r\n",
            "\x0b",
            "\x0c",
            "a",
            "Romeo",
            " the",
            "42",
            " 7",
            "!!",
            " ?",
            "...",
            "<|endoftext|>",
            "x1y",
            "\x00",
            "\x7f",
        ]
    ),
    max_size=30,
).map("".join)
ANY_TEXT = st.text(max_size=60)


@pytest.fixture(scope="module")
def models(engine, bpe_artifact, char_artifact, gpt2_artifact):
    return {
        a.name: (a, engine.open(a.data), PromptEncoder(a.tables))
        for a in (bpe_artifact, char_artifact, gpt2_artifact)
    }


@pytest.mark.parametrize("name", ["bpe", "gpt2"])
@given(text=st.one_of(ASCII, PIECES))
@settings(max_examples=150, deadline=None)
def test_bpe_ascii_equals_tiktoken(models, name, text):
    artifact, model, reference = models[name]
    want = artifact.tokenizer.encode(text)  # tiktoken's encode_ordinary
    assert model.encode(text) == want
    assert reference.encode(text) == want


@pytest.mark.parametrize("name", ["bpe", "gpt2"])
@given(
    data=st.one_of(
        ANY_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=40)
    )
)
@settings(max_examples=150, deadline=None)
def test_bpe_any_bytes_equal_reference_encoder(models, name, data):
    _, model, reference = models[name]
    assert model.encode(data) == reference.encode(data)


def test_gpt2_long_text_equals_tiktoken(models, shakespeare_text, rng):
    artifact, model, _ = models["gpt2"]
    start = int(rng.integers(0, len(shakespeare_text) - 20_000))
    text = shakespeare_text[start : start + 20_000]
    assert model.encode(text) == artifact.tokenizer.encode(text)
    assert model.encode("Hello world") == [
        15496,
        995,
    ]  # GPT-2 (tiktoken r50k_base) ids of "Hello world"


def test_special_token_text_is_plain_text(models):
    artifact, model, _ = models["bpe"]
    ids = model.encode("a<|endoftext|>b")
    eot = artifact.tokenizer.special_tokens["<|endoftext|>"]
    assert eot not in ids and ids == artifact.tokenizer.encode("a<|endoftext|>b")


@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_char_equals_char_tokenizer(models, data):
    artifact, model, reference = models["char"]
    text = data.draw(st.text(alphabet=st.sampled_from(artifact.tokenizer.vocab), max_size=60))
    want = artifact.tokenizer.encode(text)
    assert model.encode(text) == want == reference.encode(text)


@pytest.mark.parametrize(
    "text",
    [
        "Romeo\u00e9",
        "caf\u00e9",
        "\U0001f600",
        b"ab\xff",
        b"\xc3",
        b"\xed\xa0\x80",
        "<|endoftext|>\x01",
    ],
)
def test_char_unknown_characters(models, text):
    _, model, reference = models["char"]
    with pytest.raises(UnknownCharacterError):
        reference.encode(text)
    with pytest.raises(GsError) as e:
        model.encode(text)
    assert e.value.status == "GS_ERR_UNKNOWN_CHAR"


def test_buffer_sizes(models):
    artifact, model, _ = models["bpe"]
    text = "To be, or not to be, that is the question:"
    ids = model.encode(text)
    assert model.encode(text, max_ids=len(text.encode())) == ids  # one slot per byte suffices
    with pytest.raises(GsError) as e:
        model.encode(text, max_ids=len(ids) - 1)
    assert e.value.status == "GS_ERR_BUFFER"
    assert model.encode("", max_ids=0) == []


def test_gpt4_pattern_is_unsupported(engine):
    tables = synthetic_tables("bpe", 300, seed=5, pattern="gpt4")
    spec = ModelSpec(300, 4, 1, 1, 4, bias=False, bos_token=tables.special_ids[0])
    model = engine.open(synthetic_artifact(spec, tables, seed=5))
    with pytest.raises(GsError) as e:
        model.encode("hello")
    assert e.value.status == "GS_ERR_UNSUPPORTED"
    model.forward(spec.bos_token)  # generation from bos_token still works
