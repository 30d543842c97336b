"""The C loader (gs_open) against FORMAT.md section 6: every corruption class of
gptstack.quant.corrupted_artifacts is rejected by C with the status that matches the Python
reader's error, valid artifacts open, and the run-time argument checks answer their codes."""

from __future__ import annotations

import ctypes
import re
import zlib
from pathlib import Path

import pytest
from gs_engine_ctypes import GsError
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import arena_bytes, corrupted_artifacts, read_artifact
from gptstack.quant.corrupt import fix_crc

ENGINE_H = Path(__file__).resolve().parents[2] / "lib" / "engine" / "gs_engine.h"
FORMAT_MD = Path(__file__).resolve().parents[4] / "packages" / "quant" / "FORMAT.md"


@pytest.mark.parametrize("name", ["bpe", "char", "utf8"])
def test_every_corruption_rejected_alike(engine, request, name):
    artifact = request.getfixturevalue(f"{name}_artifact")
    cases = corrupted_artifacts(artifact.data)
    assert {c.step for c in cases} >= set(range(1, 14)) - ({10} if name == "char" else set())
    for case in cases:
        with pytest.raises(case.error):
            read_artifact(case.data)
        got = engine.open_status(case.data)
        assert got == case.status, f"{name}: {case.name} (step {case.step}): {got}"


def test_valid_artifacts_open(engine, bpe_artifact, char_artifact, utf8_artifact, gpt2_artifact):
    for artifact in (bpe_artifact, char_artifact, utf8_artifact, gpt2_artifact):
        model = engine.open(artifact.data)
        spec = artifact.art.spec
        assert (
            model.config["vocab_size"],
            model.config["block_size"],
            model.config["n_layer"],
            model.config["n_head"],
            model.config["n_embd"],
        ) == (spec.vocab_size, spec.block_size, spec.n_layer, spec.n_head, spec.n_embd)
        assert model.config["n_tokens"] == artifact.tables.n_tokens
        assert model.config["arena_bytes"] == arena_bytes(spec)


def test_tokenizer_padding_must_be_zero(engine, utf8_artifact):
    """Section 3 row 10: the bytes after the blob up to a multiple of 4 are zero."""
    art = utf8_artifact.art
    t0, n = art.header.tokenizer_offset, art.tables.n_tokens
    blob_end = t0 + 32 + 4 * (n + 1) + sum(len(t) for t in art.tables.token_bytes)
    if (blob_end - t0) % 4 == 0:
        pytest.skip("this tokenizer section has no padding")
    data = bytearray(utf8_artifact.data)
    data[blob_end] = 0x55
    assert engine.open_status(fix_crc(data)) == "GS_ERR_TOKENIZER"


def test_short_and_empty_inputs(engine, bpe_artifact):
    for n in (0, 1, 127):
        assert engine.open_status(bpe_artifact.data[:n]) == "GS_ERR_TRUNCATED"


@given(data=st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_crc32_equals_zlib(engine, data):
    assert engine.crc32(data) == zlib.crc32(data)


@given(
    V=st.integers(1, 60000),
    T=st.integers(1, 2048).map(lambda t: 2 * t),
    L=st.integers(1, 48),
    C=st.integers(1, 2048).map(lambda c: 4 * c),
)
@settings(max_examples=300, deadline=None)
def test_arena_formula_equals_python(engine, V, T, L, C):
    class Spec:
        vocab_size, block_size, n_layer, n_embd, bias = V, T, L, C, True

    assert engine.arena_formula(V, T, L, C) == arena_bytes(Spec)


def test_esp32_preset_arena(engine):
    """FORMAT.md section 11's worked example, by the C formula (Python's: test_format.py)."""
    assert engine.arena_formula(512, 64, 6, 256) == 215_552


def test_run_time_argument_checks(engine, bpe_artifact):
    lib = engine.lib
    model = engine.open(bpe_artifact.data)
    logits = ctypes.POINTER(ctypes.c_float)()
    fresh = ctypes.create_string_buffer(lib.gs_capi_model_bytes())
    data = ctypes.create_string_buffer(bpe_artifact.data, len(bpe_artifact.data))
    # gs_open with NULLs
    assert engine.status_name(lib.gs_open(None, data, 10)) == "GS_ERR_NULL"
    assert engine.status_name(lib.gs_open(fresh, None, 10)) == "GS_ERR_NULL"
    # arena: misaligned, too small; forward without an arena
    assert lib.gs_open(fresh, data, len(bpe_artifact.data)) == 0
    assert engine.status_name(lib.gs_forward(fresh, 0, ctypes.byref(logits))) == "GS_ERR_ARENA"
    need = model.config["arena_bytes"]
    buf = ctypes.create_string_buffer(need + 32)
    base = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 16
    assert engine.status_name(lib.gs_attach_arena(fresh, base + 8, need)) == "GS_ERR_ARENA"
    assert engine.status_name(lib.gs_attach_arena(fresh, base, need - 1)) == "GS_ERR_ARENA"
    assert lib.gs_attach_arena(fresh, base, need) == 0
    # token ids: padding rows run, ids >= V do not
    V, Vt = model.vocab_size, model.config["n_tokens"]
    model.forward(Vt)
    with pytest.raises(GsError) as e:
        model.forward(V)
    assert e.value.status == "GS_ERR_TOKEN"
    with pytest.raises(GsError) as e:
        model.token_bytes(Vt)
    assert e.value.status == "GS_ERR_TOKEN"


def test_status_codes_match_format_md(engine):
    """The enum in gs_engine.h, gs_status_name and FORMAT.md section 6 name the same codes."""
    header = ENGINE_H.read_text()
    enum = dict((name, int(v)) for name, v in re.findall(r"\b(GS_(?:OK|ERR_\w+)) = (\d+)", header))
    spec = set(re.findall(r"GS_ERR_[A-Z_]+", FORMAT_MD.read_text()))
    assert set(enum) - {"GS_OK"} == spec
    assert sorted(enum.values()) == list(range(len(enum)))
    assert all(engine.status_name(v) == name for name, v in enum.items())
    assert engine.status_name(len(enum)) == "GS_ERR_?"
