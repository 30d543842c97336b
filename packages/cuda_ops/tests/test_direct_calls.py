"""Inference calls skip torch's dispatcher (_checks.direct): they compute what the custom ops
compute, never import torch._dynamo (the first dispatch of any custom op does: seconds of
`gptstack sample` start-up), and calls that autograd must record still go through the ops."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import gptstack.cuda_ops as ops
from gptstack.cuda_ops._checks import direct


def _calls(gen):
    """Every op with a direct path, as (public call, the custom op's own result)."""
    x = torch.randn(3, 64, generator=gen)
    r = torch.randn(3, 64, generator=gen)
    w, b = 1 + 0.1 * torch.randn(64, generator=gen), torch.randn(64, generator=gen)
    lin = torch.randn(40, 64, generator=gen) / 8
    q, k, v = (torch.randn(1, 2, 5, 32, generator=gen) for _ in range(3))
    qkv = torch.randn(2, 3 * 2 * 32, generator=gen)
    kc, vc = torch.randn(2, 2, 7, 32, generator=gen), torch.randn(2, 2, 7, 32, generator=gen)
    cache = [kc, vc, kc.clone(), vc.clone()]  # the same pair twice: one for each path
    pos = torch.tensor(4)
    g = torch.ops.gptstack
    return [
        (lambda: ops.layernorm(x, w, b), lambda: g.layernorm(x, w, b, 1e-5)[0]),
        (lambda: ops.add_layernorm(x, r, w, b), lambda: g.add_layernorm(x, r, w, b, 1e-5)[:2]),
        (lambda: ops.gelu_tanh(x), lambda: g.gelu_tanh(x)),
        (lambda: ops.causal_attention(q, k, v), lambda: g.causal_attention(q, k, v, 0.0, None)[0]),
        (
            lambda: ops.decode_linear(x, lin, None, ln_weight=w, gelu=True, residual=None),
            lambda: g.decode_linear(x, lin, None, w, None, None, 1e-5, True),
        ),
        (
            lambda: (ops.decode_attention(qkv, cache[0], cache[1], pos), cache[0], cache[1]),
            lambda: (g.decode_attention(qkv, cache[2], cache[3], pos), cache[2], cache[3]),
        ),
    ]


def test_direct_calls_compute_what_the_custom_ops_compute(gen):
    with torch.no_grad():
        for public, custom in _calls(gen):
            got, ref = public(), custom()
            got = got if isinstance(got, tuple) else (got,)
            ref = ref if isinstance(ref, tuple) else (ref,)
            for a, b in zip(got, ref, strict=True):
                assert torch.equal(a, b)


def test_direct_only_where_nothing_needs_the_dispatcher():
    x, p = torch.ones(2), torch.nn.Parameter(torch.ones(2))
    with torch.no_grad():
        assert direct(x, p, None)
        assert not direct(torch.ones(2, device="meta"))  # the fake kernels handle meta tensors
    assert direct(x, p.detach())
    assert not direct(x, p)  # autograd records this call
    compiled = torch.compile(lambda t: torch.tensor(direct(t)), backend="eager", fullgraph=True)
    assert not compiled(x)  # while torch.compile traces, the graph needs the custom op


_NO_DYNAMO = textwrap.dedent("""
    import sys, torch
    import gptstack.cuda_ops as ops
    x = torch.randn(3, 64)
    w = torch.ones(64)
    with torch.no_grad():
        ops.layernorm(x, w); ops.add_layernorm(x, x, w); ops.gelu_tanh(x)
        ops.decode_linear(x, torch.ones(8, 64), ln_weight=w)
        q = torch.randn(1, 2, 5, 32); ops.causal_attention(q, q, q)
    print("torch._dynamo" in sys.modules)
    ops.layernorm(x.requires_grad_(), w)  # autograd: through the custom op
    print("torch._dynamo" in sys.modules)
""")


@pytest.mark.slow
def test_inference_never_imports_dynamo_and_training_calls_still_dispatch():
    out = subprocess.run(
        [sys.executable, "-c", _NO_DYNAMO], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]
