"""Attention backends against an independent per-query float64 reference, incl. cached cases."""

import math

import pytest
import torch

from gptstack.model import (
    GPT,
    ModelError,
    attention_backends,
    get_attention_backend,
    register_attention_backend,
)
from gptstack.model import attention as attention_module

# fp32 against a float64 reference: docs/MEASURING.md rule 5 (relative error < 1e-5).
FP32_REL_TOL = 1e-5


def reference_attention(q, k, v, q_start, kv_len):
    """One query at a time in float64: softmax over keys j <= q_start + i (and j < kv_len)."""
    q, k, v = q.double(), k.double(), v.double()
    B, nh, Tq, hs = q.shape
    Tk = k.size(2)
    limit = Tk if kv_len is None else int(kv_len)
    out = torch.zeros(B, nh, Tq, hs, dtype=torch.float64)
    for i in range(Tq):
        visible = min(int(q_start) + i + 1, limit)  # keys [0, visible)
        scores = q[:, :, i : i + 1] @ k[:, :, :visible].transpose(-2, -1) / math.sqrt(hs)
        out[:, :, i] = (torch.softmax(scores, dim=-1) @ v[:, :, :visible])[:, :, 0]
    return out


CASES = [
    # (Tq, Tk, q_start, kv_len, position-as-tensor)
    (7, 7, 0, None, False),  # training / prefill: is_causal
    (1, 9, 8, None, False),  # KV-cache decode: one query at the last key
    (3, 10, 7, None, False),  # a chunk after a cached prefix (general case)
    (1, 12, 4, 5, True),  # static cache decode: tensor position, invalid tail
    (2, 12, 3, 5, True),  # static cache, two queries
    (4, 12, 0, 4, False),  # static-cache prefill with an int kv_len
    (3, 12, 6, 4, True),  # kv_len below the causal limit: it alone masks keys 4 and 5
    (2, 12, 6, 5, False),
]


@pytest.mark.parametrize("backend", ["manual", "sdpa"])
@pytest.mark.parametrize("Tq, Tk, q_start, kv_len, as_tensor", CASES)
def test_backend_matches_reference(backend, Tq, Tk, q_start, kv_len, as_tensor, rel_err):
    g = torch.Generator().manual_seed(1000 * Tq + Tk)
    B, nh, hs = 2, 3, 8
    q = torch.randn(B, nh, Tq, hs, generator=g)
    k = torch.randn(B, nh, Tk, hs, generator=g)
    v = torch.randn(B, nh, Tk, hs, generator=g)
    pos = torch.tensor(q_start) if as_tensor else q_start
    length = torch.tensor(kv_len) if (as_tensor and kv_len is not None) else kv_len
    y = get_attention_backend(backend)(q, k, v, q_start=pos, kv_len=length)
    assert y.shape == (B, nh, Tq, hs) and y.dtype == q.dtype
    assert rel_err(y, reference_attention(q, k, v, q_start, kv_len)) < FP32_REL_TOL


def test_masked_keys_do_not_matter():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(1, 2, 1, 8, generator=g)
    k, v = torch.randn(1, 2, 10, 8, generator=g), torch.randn(1, 2, 10, 8, generator=g)
    for name in ("manual", "sdpa"):
        fn = get_attention_backend(name)
        y1 = fn(q, k, v, q_start=torch.tensor(3), kv_len=torch.tensor(4))
        k2, v2 = k.clone(), v.clone()
        k2[:, :, 4:] = 1e3  # garbage in the invalid tail of a static cache
        v2[:, :, 4:] = -1e3
        y2 = fn(q, k2, v2, q_start=torch.tensor(3), kv_len=torch.tensor(4))
        assert torch.equal(y1, y2)


def test_registry_errors():
    assert {"manual", "sdpa"} <= set(attention_backends())
    with pytest.raises(ModelError, match="'nope' is not registered"):
        get_attention_backend("nope")
    with pytest.raises(ModelError, match="already registered"):
        register_attention_backend("sdpa", attention_module.manual_attention)
    with pytest.raises(ModelError, match="callable"):
        register_attention_backend("broken", 3)


def test_registered_backend_plugs_into_the_blocks(monkeypatch, make_gpt, random_tokens):
    monkeypatch.setattr(attention_module, "_BACKENDS", dict(attention_module._BACKENDS))
    calls = []

    def counting(q, k, v, *, q_start=0, kv_len=None, dropout_p=0.0):
        calls.append(q.shape)
        return attention_module.manual_attention(
            q, k, v, q_start=q_start, kv_len=kv_len, dropout_p=dropout_p
        )

    register_attention_backend("counting", counting)
    model = make_gpt(3, attention="manual")
    idx = random_tokens(3, 2, 9, model.config.vocab_size)
    expected, _ = model(idx)
    model.set_attention_backend("counting")
    got, _ = model(idx)
    assert len(calls) == model.config.n_layer and calls[0] == (2, 4, 9, 8)
    assert torch.equal(got, expected)
    assert isinstance(model, GPT) and model.config.attention == "counting"
    with pytest.raises(ModelError):
        model.set_attention_backend("missing")
