"""Memory plans against the target budgets."""

from __future__ import annotations

import pytest

from gptstack.quant import (
    BUDGETS,
    ModelSpec,
    QuantError,
    check_fits,
    memory_plan,
    read_artifact,
    synthetic_artifact,
    synthetic_tables,
)

ESP32_PRESET = {
    "vocab_size": 512,
    "block_size": 64,
    "n_layer": 6,
    "n_head": 8,
    "n_embd": 256,
    "bias": True,
}


@pytest.fixture(scope="module")
def tables512():
    return synthetic_tables("bpe", 512, seed=2)


def test_esp32_preset_fits_with_margin(tables512):
    plan = check_fits(memory_plan(ModelSpec(**ESP32_PRESET), "esp32s3", tables=tables512))
    assert plan.arena_bytes == 215_552  # FORMAT.md section 11
    assert plan.ram_budget == 286_720 and plan.flash_budget == 0x600000
    assert plan.ram_margin == 286_720 - 215_552 > 0.2 * plan.ram_budget
    assert plan.flash_margin > 0
    # int8 weights: wte + wpe + 12 C^2 per layer
    C = 256
    assert plan.weights_bytes == 512 * C + 64 * C + 6 * 12 * C * C


def test_slide_tile_lives_in_the_discarded_kv_rows(tables512):
    """FORMAT.md section 11: the tile's buffers fit the rows a slide frees, so the arena does not
    grow; the flash read per token and per slide add up from the tensors' sizes."""
    spec = ModelSpec(**ESP32_PRESET)
    plan = memory_plan(spec, "esp32s3", tables=tables512)
    C, L, T, P = 256, 6, 64, plan.slide_tile_positions
    assert P == min(T // 2, L * T // 32) == 12
    assert P * 16 * C <= (T // 2) * L * C and plan.slide_tile_bytes - P * 16 * C <= (T // 2) * L * C
    # one token: every int8 weight with its scales, every f32 parameter, 2 embedding rows
    assert plan.token_read_bytes == (
        plan.weights_bytes - 64 * C + plan.scales_bytes - 4 * 64 + plan.float_bytes + 2 * (C + 4)
    )
    # a slide: 3 tiles (12, 12, 8); per tile the layers' matrices (weights, scales, biases),
    # per position the two embedding rows and the layers' LayerNorm parameters (f32 w and b)
    per_position = 2 * (C + 4) + L * 2 * 8 * C
    head = 512 * C + 4 * 512 + 8 * C  # wte as the tied head, and ln_f
    matrices = plan.token_read_bytes - head - per_position
    assert plan.slide_read_bytes == 3 * matrices + 32 * per_position
    assert any("tiles of 12 positions" in line for line in plan.lines())


def test_plan_of_an_artifact_adds_up(tiny_bytes):
    art = read_artifact(tiny_bytes)
    plan = memory_plan(art, "host")
    assert plan.file_bytes == len(tiny_bytes)
    assert (
        plan.weights_bytes
        + plan.scales_bytes
        + plan.float_bytes
        + plan.tokenizer_bytes
        + plan.overhead_bytes
    ) == plan.file_bytes
    assert plan.overhead_bytes >= 128 + 96 * len(art.entries) + 4
    assert (
        (plan.kv_cache_bytes + plan.activation_bytes + plan.logits_bytes + plan.scratch_bytes)
        == plan.arena_bytes
        == art.header.arena_bytes
    )
    assert plan.ram_margin is None and plan.fits and check_fits(plan) is plan
    assert plan == memory_plan(art.spec, "host", tables=art.tables)
    assert any("arena" in line for line in plan.lines())


def test_too_much_context_names_the_kv_cache(tables512):
    plan = memory_plan(ModelSpec(**{**ESP32_PRESET, "block_size": 128}), tables=tables512)
    over = plan.arena_bytes - BUDGETS["esp32s3"].ram_bytes
    assert over > 0 and not plan.fits
    with pytest.raises(QuantError, match=f"{over:,} more than .* shrink block_size or n_layer"):
        check_fits(plan)


def test_too_many_weights_names_the_width(tables512):
    plan = memory_plan(
        ModelSpec(**{**ESP32_PRESET, "n_embd": 320, "block_size": 32}), tables=tables512
    )
    assert plan.ram_margin >= 0 and plan.flash_margin < 0
    with pytest.raises(QuantError, match="model partition.*shrink n_embd or n_layer"):
        check_fits(plan)


def test_unknown_target_and_missing_tables(tables512):
    with pytest.raises(QuantError, match="esp32s3"):
        memory_plan(ModelSpec(**ESP32_PRESET), "esp8266", tables=tables512)
    with pytest.raises(QuantError, match="tokenizer tables"):
        memory_plan(ModelSpec(**ESP32_PRESET))


def test_synthetic_esp32_artifact_matches_its_plan(tables512):
    spec = ModelSpec(**ESP32_PRESET, bos_token=511)
    art = read_artifact(synthetic_artifact(spec, tables512, seed=1))
    assert memory_plan(art) == memory_plan(spec, tables=tables512)
