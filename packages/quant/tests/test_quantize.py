"""Per-row int8 quantization of weights and the checkpoint converter."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from gptstack.quant import (
    ModelSpec,
    QuantError,
    dequantize_rows,
    quantize_checkpoint,
    quantize_rows,
    read_artifact,
    required_tensors,
    synthetic_weights,
    write_artifact,
)
from gptstack.quant.format import DTYPE_I8


def _weights(rng: np.random.Generator, rows: int = 64, cols: int = 96) -> list[np.ndarray]:
    """Gaussian, heavy-tailed, row-scaled and outlier-bearing matrices, plus an all-zero row."""
    g = rng.normal(0, 0.02, (rows, cols))
    t = rng.standard_t(3, (rows, cols)) * 0.05
    scaled = g * rng.lognormal(0, 1.0, (rows, 1))
    outlier = g.copy()
    outlier[rng.integers(0, rows, 5), rng.integers(0, cols, 5)] = 1.5
    zero_row = g.copy()
    zero_row[3] = 0
    return [m.astype(np.float32) for m in (g, t, scaled, outlier, zero_row)]


def test_absmax_error_is_at_most_half_a_step(rng):
    for w in _weights(rng):
        q, s = quantize_rows(w)
        assert q.dtype == np.int8 and s.dtype == np.float32 and q.shape == w.shape
        assert np.all(np.abs(q.astype(int)) <= 127)
        np.testing.assert_allclose(s, np.abs(w).max(axis=1) / 127, rtol=1e-6)
        # exact real arithmetic in float64: |w - q*s| <= s/2 (1e-12: float64 rounding)
        err = np.abs(w.astype(np.float64) - q * s.astype(np.float64)[:, None])
        assert np.all(err <= s.astype(np.float64)[:, None] / 2 * (1 + 1e-12) + 1e-30)
        # each row's largest magnitude maps to ±127
        nonzero = s > 0
        assert np.all(np.abs(q[nonzero]).max(axis=1) == 127)
        np.testing.assert_array_equal(dequantize_rows(q, s), q.astype(np.float32) * s[:, None])


def test_zero_rows_quantize_to_zero(rng):
    w = _weights(rng)[-1]
    q, s = quantize_rows(w)
    assert s[3] == 0 and not q[3].any()
    q, s = quantize_rows(np.zeros((2, 5), np.float32), clip=True)
    assert not q.any() and not s.any()


def test_clipping_is_never_worse_than_absmax(rng):
    improved = 0
    for w in _weights(rng):
        qa, sa = quantize_rows(w)
        qc, sc = quantize_rows(w, clip=True)
        w64 = w.astype(np.float64)
        err_a = ((w64 - qa * sa.astype(np.float64)[:, None]) ** 2).sum(axis=1)
        err_c = ((w64 - qc * sc.astype(np.float64)[:, None]) ** 2).sum(axis=1)
        assert np.all(err_c <= err_a)
        assert np.all(sc <= sa)  # a clipping threshold never exceeds the row's absmax
        improved += int(np.sum(err_c < err_a * 0.99))
    assert improved > 0  # on heavy tails and outliers, clipping helps somewhere


def test_quantize_rows_rejects_bad_input():
    with pytest.raises(QuantError, match="2-D"):
        quantize_rows(np.zeros(4, np.float32))
    with pytest.raises(QuantError, match="NaN"):
        quantize_rows(np.array([[1.0, np.nan]], np.float32))
    with pytest.raises(QuantError, match="2-D float"):
        quantize_rows(np.zeros((2, 2), np.int32))


def _checkpoint(tmp_path, spec: ModelSpec, weights: dict, extra_config: dict | None = None):
    model = {
        "vocab_size": spec.vocab_size,
        "block_size": spec.block_size,
        "n_layer": spec.n_layer,
        "n_head": spec.n_head,
        "n_embd": spec.n_embd,
        "bias": spec.bias,
        "dropout": 0.0,
        **(extra_config or {}),
    }
    (tmp_path / "config.json").write_text(json.dumps({"model": model, "train": {"lr": 1e-3}}))
    save_file(
        {k: np.ascontiguousarray(v) for k, v in weights.items()},
        str(tmp_path / "model.safetensors"),
    )
    return tmp_path


def test_checkpoint_to_artifact(tmp_path, tiny_spec, bpe_tables):
    weights = synthetic_weights(tiny_spec, seed=3, style="trained")
    ckpt = _checkpoint(tmp_path, tiny_spec, weights)
    spec, tensors = quantize_checkpoint(ckpt, bpe_tables, bos_token=tiny_spec.bos_token)
    assert spec == tiny_spec
    art = read_artifact(write_artifact(tmp_path / "m.gsm", spec, bpe_tables, tensors))
    for name, dtype, _ in required_tensors(spec):
        w = weights[name]
        if dtype == DTYPE_I8:
            s = art.scales(name).astype(np.float64)[:, None]
            err = np.abs(art.tensor(name) * s - w)  # float64: the real value of q·s
            assert np.all(err <= s / 2 * (1 + 1e-12))
            np.testing.assert_allclose(art.dequantized(name), w, rtol=0, atol=float(s.max()) / 2)
        else:
            np.testing.assert_array_equal(art.tensor(name), w)
    # a tied lm_head.weight equal to wte is accepted and dropped
    (tmp_path / "tied").mkdir()
    tied = _checkpoint(
        tmp_path / "tied", tiny_spec, {**weights, "lm_head.weight": weights["wte.weight"]}
    )
    assert quantize_checkpoint(tied, bpe_tables)[0].vocab_size == tiny_spec.vocab_size


@pytest.mark.parametrize(
    "problem, match",
    [
        ("missing", "missing .*h.1.ln_2.weight"),
        ("extra", "unexpected .*h.0.attn.bias"),
        ("shape", "h.0.mlp.c_fc.weight has shape"),
        ("untied", "lm_head.weight differs"),
        ("int", "int32, expected float32"),
        ("config", "cannot read the model config"),
        ("bad_config", "n_head 5 does not divide"),
        ("vocab", "the checkpoint's vocab_size"),
        ("no_weights", "has no model.safetensors"),
    ],
)
def test_checkpoint_problems_are_named(tmp_path, tiny_spec, bpe_tables, problem, match):
    weights = synthetic_weights(tiny_spec, seed=3)
    extra = None
    if problem == "missing":
        del weights["h.1.ln_2.weight"]
    elif problem == "extra":
        weights["h.0.attn.bias"] = np.tril(np.ones((16, 16), np.float32))  # a causal-mask buffer
    elif problem == "shape":
        weights["h.0.mlp.c_fc.weight"] = weights["h.0.mlp.c_fc.weight"][:, :-1]
    elif problem == "untied":
        weights["lm_head.weight"] = weights["wte.weight"] * 2
    elif problem == "int":
        weights["ln_f.bias"] = np.zeros(32, np.int32)
    elif problem == "bad_config":
        extra = {"n_head": 5}
    elif problem == "vocab":
        extra = {"vocab_size": 200}
    ckpt = _checkpoint(tmp_path, tiny_spec, weights, extra)
    if problem == "config":
        (ckpt / "config.json").write_text('{"model": {"vocab_size": 3}}')
    if problem == "no_weights":
        (ckpt / "model.safetensors").unlink()
    with pytest.raises(QuantError, match=match):
        quantize_checkpoint(ckpt, bpe_tables)
