"""The window slide's batched re-encode (FORMAT.md sections 8 and 11) and what it costs: the tile
size is the same formula in C and Python, the engine's count of artifact bytes read equals the
memory plan's accounting step by step, the slide callback reports each tile, logits stay the
reference's bits for every tiling (one position at a time, tiles that divide T/2 and tiles that
do not), and gs_peek_header reads the header alone as gs_open would.
"""

from __future__ import annotations

import numpy as np
import pytest
from gs_engine_ctypes import GsError
from gs_testlib import assert_logits_equal, teacher_ids

from gptstack.quant import (
    ModelSpec,
    Session,
    corrupted_artifacts,
    read_artifact,
    synthetic_artifact,
    synthetic_tables,
)
from gptstack.quant.budget import feed_read_bytes, memory_plan
from gptstack.quant.format import slide_tile_positions

ESP32 = ModelSpec(512, 64, 6, 8, 256, bias=True)


def _expected_reads(spec: ModelSpec, n_fed: int) -> int:
    """feed_read_bytes summed over n_fed tokens from an empty window (section 8's positions)."""
    pos, total = 0, 0
    for _ in range(n_fed):
        total += feed_read_bytes(spec, pos)
        pos = spec.block_size // 2 + 1 if pos == spec.block_size else pos + 1
    return total


def test_tile_formula_agrees(engine, rng):
    cases = [(64, 6), (16, 2), (8, 1), (2, 1), (256, 6), (1024, 12)]
    cases += [(2 * int(rng.integers(1, 600)), int(rng.integers(1, 40))) for _ in range(200)]
    for T, L in cases:
        spec = ModelSpec(100, T, L, 1, 4, bias=False)
        assert engine.slide_tile_formula(T, L) == slide_tile_positions(spec), (T, L)
    assert slide_tile_positions(ESP32) == 12  # tiles of 12, 12 and 8 for the 32 kept positions


def test_esp32_plan_accounts_the_tile():
    """The tile fits in the discarded K/V rows (no arena growth) and the steady-state flash read
    per token over 256 generated tokens is within 1.1 x one forward (the issue 14 goal)."""
    plan = memory_plan(ESP32, "host", tables=synthetic_tables("bpe", 512, seed=2))
    discarded = ESP32.block_size // 2 * ESP32.n_layer * ESP32.n_embd  # per cache, K and V
    assert 0 < plan.slide_tile_bytes <= 2 * discarded
    assert plan.slide_tile_positions * 16 * ESP32.n_embd <= discarded  # the float blocks in K
    # gs-run's loop for a 6-token prompt and 256 new tokens: 255 feeds after the prompt
    total = _expected_reads(ESP32, 6 + 255) - _expected_reads(ESP32, 6)
    assert total / 256 <= 1.1 * plan.token_read_bytes


def _slide_spec_artifacts():
    """Configs whose slides take every tiling path: P = 0 (one position at a time in the token
    buffers), P = 1, a P that divides T/2 and one that leaves a short last tile."""
    tables = synthetic_tables("bpe", 300, seed=11)
    specs = {
        "P0": ModelSpec(300, 8, 1, 2, 16, bias=True, bos_token=tables.special_ids[0]),
        "P1": ModelSpec(300, 16, 2, 2, 16, bias=False),
        "P4": ModelSpec(300, 32, 4, 4, 32, bias=True),
        "P3-short": ModelSpec(300, 32, 3, 2, 24, bias=True),
    }
    return {name: (spec, synthetic_artifact(spec, tables, seed=9)) for name, spec in specs.items()}


SLIDE_CASES = _slide_spec_artifacts()


@pytest.mark.parametrize("name", sorted(SLIDE_CASES))
def test_slides_match_reference_count_bytes_and_report_tiles(engine, name, rng):
    spec, data = SLIDE_CASES[name]
    art = read_artifact(data)
    P, half, T = slide_tile_positions(spec), spec.block_size // 2, spec.block_size
    assert (P == 0) == (name == "P0") and (half % max(P, 1) != 0) == name.endswith("short")
    ids = rng.integers(0, spec.vocab_size, 3 * T + 5).tolist()
    model = engine.open(data)
    calls = model.record_slides()
    got, pos, expected_calls = [], 0, []
    for t in ids:
        before = model.weight_bytes
        want = feed_read_bytes(spec, pos)
        if pos == T:  # a slide: 0, then after each tile
            expected_calls.append((0, half))
            expected_calls += [(min(d + max(P, 1), half), half) for d in range(0, half, max(P, 1))]
        got.append(model.forward(t))
        assert model.weight_bytes - before == want, f"{name}: token at pos {pos}"
        pos = half + 1 if pos == T else pos + 1
    assert calls == expected_calls
    session = Session(art)
    assert_logits_equal(np.stack(got), np.stack([session.feed(t) for t in ids]), name)


def test_trained_counter_matches_plan(engine, trained_artifact, shakespeare_text):
    """The trained esp32 artifact (tiles of 12, 12, 8): bytes read over a run with two slides."""
    spec = trained_artifact.art.spec
    ids = teacher_ids(trained_artifact, shakespeare_text[:4000], spec.block_size + 40)
    model = engine.open(trained_artifact.data)
    for t in ids:
        model.forward(t)
    assert model.weight_bytes == _expected_reads(spec, len(ids))


def test_peek_header_reads_what_gs_open_checks_first(engine, bpe_artifact, utf8_artifact):
    for artifact in (bpe_artifact, utf8_artifact):
        got = engine.peek_header(artifact.data[:128])  # the header alone is enough
        h, spec = artifact.art.header, artifact.art.spec
        assert got["file_bytes"] == h.file_bytes == len(artifact.data)
        assert (
            got["vocab_size"],
            got["block_size"],
            got["n_layer"],
            got["n_head"],
            got["n_embd"],
            got["arena_bytes"],
        ) == (
            spec.vocab_size,
            spec.block_size,
            spec.n_layer,
            spec.n_head,
            spec.n_embd,
            h.arena_bytes,
        )
        assert got["head_size"] == spec.n_embd // spec.n_head
        assert got["bos_token"] == (spec.bos_token if spec.bos_token is not None else 0xFFFFFFFF)
        for case in corrupted_artifacts(artifact.data):
            if case.step in (1, 2, 3, 4, 8):  # the header-only steps
                with pytest.raises(GsError) as e:
                    engine.peek_header(case.data)
                assert e.value.status == case.status, case.name
            else:
                assert engine.peek_header(case.data)["file_bytes"] == int.from_bytes(
                    case.data[12:16], "little"
                ), case.name
