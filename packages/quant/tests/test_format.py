"""format.py against FORMAT.md itself: the constants table, the tensor list and the arena."""

from __future__ import annotations

import re
from pathlib import Path

import gptstack.quant.format as fmt
from gptstack.quant import ModelSpec, arena_buffers, arena_bytes, constants, required_tensors
from gptstack.quant.format import tensor_count

FORMAT_MD = Path(__file__).resolve().parents[1] / "FORMAT.md"


def _section_one_rows() -> dict[str, str]:
    text = FORMAT_MD.read_text()
    table = text[text.index("| name | value | meaning |") : text.index("## 2. Header")]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3:
            names = re.findall(r"`([A-Z_0-9]+)`", cells[0])
            values = [v.strip() for v in cells[1].split(",")]
            for i, name in enumerate(names):
                rows[name] = values[i] if len(values) == len(names) else cells[1]
    return rows


def test_constants_match_the_format_table():
    rows = _section_one_rows()
    got = constants()
    assert set(rows) == set(got)
    for name, cell in rows.items():
        if name == "MAGIC":
            hex_bytes = bytes(int(h, 16) for h in re.findall(r"\b[0-9A-F]{2}\b", cell))
            assert got[name] == hex_bytes == b"GSMF"
        elif name == "FLAG_BIAS":
            assert cell.startswith("bit 0") and got[name] == 1 << 0
        else:
            assert got[name] == int(cell.strip("`"), 0), name


def test_only_the_format_constants_are_upper_case():
    upper = {n for n in dir(fmt) if n.isupper()}
    assert upper == set(constants())


def test_required_tensors_follow_section_4_order():
    spec = ModelSpec(100, 8, 2, 2, 16, bias=True)
    names = [n for n, _, _ in required_tensors(spec)]
    per_layer = [
        "ln_1.weight",
        "ln_1.bias",
        "attn.c_attn.weight",
        "attn.c_attn.bias",
        "attn.c_proj.weight",
        "attn.c_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.c_fc.weight",
        "mlp.c_fc.bias",
        "mlp.c_proj.weight",
        "mlp.c_proj.bias",
    ]
    expected = ["wte.weight", "wpe.weight"]
    expected += [f"h.{i}.{n}" for i in range(2) for n in per_layer]
    expected += ["ln_f.weight", "ln_f.bias"]
    assert names == expected
    no_bias = ModelSpec(100, 8, 2, 2, 16, bias=False)
    assert [n for n, _, _ in required_tensors(no_bias)] == [n for n in expected if "bias" not in n]
    shapes = dict((n, s) for n, _, s in required_tensors(spec))
    assert shapes["h.1.mlp.c_proj.weight"] == (16, 64) and shapes["h.0.attn.c_attn.bias"] == (48,)
    assert all(len(n) < fmt.NAME_BYTES for n in names)
    for spec in (spec, no_bias, ModelSpec(100, 8, 7, 2, 16, bias=True)):
        assert tensor_count(spec) == len(required_tensors(spec))


def test_arena_of_the_esp32_preset_is_the_documented_one():
    # FORMAT.md section 11: "215,552 bytes, of which the int8 KV cache is 196,608"
    spec = ModelSpec(vocab_size=512, block_size=64, n_layer=6, n_head=8, n_embd=256, bias=True)
    assert arena_bytes(spec) == 215_552
    buffers = dict(arena_buffers(spec))
    assert buffers["k_cache"] + buffers["v_cache"] == 196_608
    assert all(n % fmt.ALIGN == 0 for n in buffers.values())


def test_arena_formula_rounds_each_buffer_up(rng):
    for _ in range(20):
        V, T, L, C = (
            int(rng.integers(1, 700)),
            2 * int(rng.integers(1, 40)),
            int(rng.integers(1, 5)),
            4 * int(rng.integers(1, 30)),
        )
        spec = ModelSpec(V, T, L, 1, C, bias=False)
        a = lambda n: -(-n // 16) * 16  # noqa: E731
        expected = (
            a(4 * C) * 3
            + a(12 * C)
            + a(16 * C)
            + a(4 * T) * 2
            + a(4 * V) * 2
            + a(4 * C)
            + 2 * a(L * T * C)
            + 2 * a(4 * L * T)
        )
        assert arena_bytes(spec) == expected
