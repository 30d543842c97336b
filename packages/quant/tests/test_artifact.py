"""Artifact writer/reader round trip (hypothesis), atomic writes and the writer's own checks."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptstack.quant import (
    BadConfigError,
    BadTensorError,
    BadTokenizerError,
    ModelSpec,
    TokenizerTables,
    artifact_bytes,
    memory_plan,
    quantize_tensors,
    read_artifact,
    required_tensors,
    synthetic_weights,
    write_artifact,
)
from gptstack.quant.format import DTYPE_I8


@st.composite
def token_tables(draw) -> TokenizerTables:
    specials = draw(st.lists(st.binary(min_size=1, max_size=6), max_size=3))
    if draw(st.booleans()):  # char: distinct code points, possibly multi-byte
        chars = draw(st.lists(st.characters(codec="utf-8"), min_size=1, max_size=40, unique=True))
        ordinary = [c.encode() for c in chars]
        kind, pattern = "char", None
    else:  # byte-level BPE: every byte, then merged tokens of up to 5 bytes
        merges = draw(st.lists(st.binary(min_size=2, max_size=5), max_size=30, unique=True))
        ordinary = [bytes([b]) for b in draw(st.permutations(range(256)))] + merges
        kind, pattern = "bpe", draw(st.sampled_from(["gpt2", "gpt4"]))
    tokens = ordinary + specials
    # specials go at random ids: shuffle all tokens, remember where the specials went
    order = draw(st.permutations(range(len(tokens))))
    shuffled = [tokens[i] for i in order]
    special_ids = sorted(order.index(len(ordinary) + j) for j in range(len(specials)))
    return TokenizerTables(kind, pattern, shuffled, special_ids)


@st.composite
def specs(draw, n_tokens: int) -> ModelSpec:
    n_head = draw(st.sampled_from([1, 2, 4]))
    n_embd = n_head * 4 * draw(st.integers(1, 3))
    V = n_tokens + draw(st.integers(0, 5))
    bos = draw(st.one_of(st.none(), st.integers(0, n_tokens - 1)))
    return ModelSpec(
        vocab_size=V,
        block_size=2 * draw(st.integers(1, 4)),
        n_layer=draw(st.integers(1, 2)),
        n_head=n_head,
        n_embd=n_embd,
        bias=draw(st.booleans()),
        layernorm_eps=draw(st.floats(1e-8, 1e-2)),
        bos_token=bos,
    )


def _random_tensors(spec: ModelSpec, rng: np.random.Generator) -> dict:
    out = {}
    for name, dtype, shape in required_tensors(spec):
        if dtype == DTYPE_I8:
            out[name] = (
                rng.integers(-127, 128, shape).astype(np.int8),
                rng.uniform(0, 1, shape[0]).astype(np.float32),
            )
        else:
            out[name] = rng.normal(size=shape).astype(np.float32)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_gives_identical_spec_tables_and_tensors(data):
    tables = data.draw(token_tables())
    spec = data.draw(specs(tables.n_tokens))
    tensors = _random_tensors(spec, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))
    blob = artifact_bytes(spec, tables, tensors)
    art = read_artifact(blob)
    assert art.spec == spec
    assert art.tables == tables
    assert art.tables.pairs == tables.pairs and art.tables.sorted_ids == tables.sorted_ids
    assert art.names == list(tensors)
    for name, value in tensors.items():
        if isinstance(value, tuple):
            np.testing.assert_array_equal(art.tensor(name), value[0])
            np.testing.assert_array_equal(art.scales(name), value[1])
        else:
            np.testing.assert_array_equal(art.tensor(name), value)
    assert art.header.file_bytes == len(blob) == memory_plan(spec, "host", tables=tables).file_bytes


def test_views_are_zero_copy(tiny_bytes):
    art = read_artifact(tiny_bytes)
    w = art.tensor("h.0.attn.c_attn.weight")
    assert not w.flags.owndata and not w.flags.writeable
    assert np.shares_memory(w, np.frombuffer(tiny_bytes, np.uint8))
    assert np.shares_memory(art.scales("wte.weight"), np.frombuffer(tiny_bytes, np.uint8))


def test_write_is_atomic_and_reads_back(tmp_path, tiny_spec, bpe_tables, tiny_bytes):
    tensors = quantize_tensors(tiny_spec, synthetic_weights(tiny_spec, seed=5))
    path = write_artifact(tmp_path / "model.gsm", tiny_spec, bpe_tables, tensors)
    assert path.read_bytes() == tiny_bytes  # same inputs, same bytes
    assert os.listdir(tmp_path) == ["model.gsm"]  # no temporary file left behind
    assert read_artifact(path).spec == tiny_spec
    # a failing write leaves the old file in place and no temporary file
    broken = dict(tensors)
    del broken["ln_f.weight"]
    with pytest.raises(BadTensorError):
        write_artifact(path, tiny_spec, bpe_tables, broken)
    assert os.listdir(tmp_path) == ["model.gsm"] and path.read_bytes() == tiny_bytes


def test_writer_rejects_what_the_reader_would(tiny_spec, bpe_tables, rng):
    tensors = _random_tensors(tiny_spec, rng)
    with pytest.raises(BadTensorError, match="missing .*wpe.weight"):
        artifact_bytes(
            tiny_spec, bpe_tables, {k: v for k, v in tensors.items() if k != "wpe.weight"}
        )
    with pytest.raises(BadTensorError, match="unexpected .*lm_head"):
        artifact_bytes(tiny_spec, bpe_tables, {**tensors, "lm_head.weight": tensors["ln_f.weight"]})
    q, s = tensors["h.0.mlp.c_fc.weight"]
    for bad in [
        q.astype(np.float32),
        (q.astype(np.int16), s),
        (q[:-1], s[:-1]),
        (q, s[:-1]),
        (q, np.full_like(s, np.nan)),
    ]:
        with pytest.raises(BadTensorError, match="h.0.mlp.c_fc.weight"):
            artifact_bytes(tiny_spec, bpe_tables, {**tensors, "h.0.mlp.c_fc.weight": bad})
    with pytest.raises(BadTensorError, match="ln_f.bias"):
        artifact_bytes(tiny_spec, bpe_tables, {**tensors, "ln_f.bias": np.zeros(3, np.float32)})
    small = ModelSpec(200, 16, 2, 4, 32, bias=True)
    with pytest.raises(BadTokenizerError, match="300 tokens"):
        artifact_bytes(small, bpe_tables, _random_tensors(small, rng))
    no_bos = ModelSpec(320, 16, 2, 4, 32, bias=True, bos_token=310)  # a padding row
    with pytest.raises(BadTokenizerError, match="bos_token 310"):
        artifact_bytes(no_bos, bpe_tables, tensors)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(vocab_size=0), "vocab_size"),
        (dict(block_size=7), "block_size"),
        (dict(n_embd=30, n_head=3), "multiple of 4"),
        (dict(n_head=3), "n_head 3 does not divide"),
        (dict(layernorm_eps=0.0), "layernorm_eps"),
        (dict(layernorm_eps=float("nan")), "layernorm_eps"),
        (dict(bos_token=64), "bos_token"),
    ],
)
def test_model_spec_rejects_bad_configs(kwargs, match):
    base = dict(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=32, bias=False)
    with pytest.raises(BadConfigError, match=match):
        ModelSpec(**{**base, **kwargs})


def test_tokenizer_tables_rules():
    with pytest.raises(BadTokenizerError, match="byte 0x"):
        TokenizerTables("bpe", "gpt2", [bytes([b]) for b in range(255)])
    with pytest.raises(BadTokenizerError, match="same bytes"):
        TokenizerTables("char", None, [b"a", b"b", b"a"])
    with pytest.raises(BadTokenizerError, match="no bytes"):
        TokenizerTables("char", None, [b"a", b""])
    with pytest.raises(BadTokenizerError, match="pattern"):
        TokenizerTables("char", "gpt2", [b"a"])
    with pytest.raises(BadTokenizerError, match="ascending"):
        TokenizerTables("char", None, [b"a", b"b", b"c"], [2, 1])
    # a special token may repeat an ordinary token's bytes: it is not looked up by bytes
    TokenizerTables("char", None, [b"a", b"b", b"a"], [2])


@settings(max_examples=50, deadline=None)
@given(tables=token_tables())
def test_derived_tables_follow_section_3(tables):
    special = set(tables.special_ids)
    ordinary = {t: i for i, t in enumerate(tables.token_bytes) if i not in special}
    # pairs: brute force over all pairs of ordinary tokens
    expected = sorted(
        (a, b, ordinary[ta + tb])
        for ta, a in ordinary.items()
        for tb, b in ordinary.items()
        if ta + tb in ordinary
    )
    assert tables.pairs == (expected if tables.kind == "bpe" else [])
    keys = [tables.token_bytes[i] for i in tables.sorted_ids]
    assert keys == sorted(ordinary) and set(tables.sorted_ids) == set(ordinary.values())
    if tables.kind == "bpe":
        assert all(tables.token_bytes[t] == bytes([b]) for b, t in enumerate(tables.byte_to_token))
