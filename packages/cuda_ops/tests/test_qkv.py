"""qkv_grad and qkv_heads: the joined gradient and its column sums against torch.cat and sum,
the gradients of qkv_heads against F.linear(...).split's, gradcheck, opcheck, bad inputs, and
the CUDA kernel against the CPU on fresh inputs (both vector widths, many chunks)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import OpInputError, OpTypeError
from gptstack.cuda_ops.qkv import MAX_CHUNKS, MIN_CHUNK_ROWS

DTYPES = [torch.float32, torch.bfloat16, torch.float64]
# one row, odd widths (not a multiple of the 8-lane vector), one chunk, several, the most
SHAPES = [(1, 1), (1, 8), (3, 5), (MIN_CHUNK_ROWS + 1, 24), (500, 40), (MAX_CHUNKS * 70, 16)]


def _inputs(N: int, C: int, dtype, gen, device="cpu"):
    return [(3 * torch.randn(N, C, generator=gen)).to(dtype).to(device) for _ in range(3)]


def _sum_tolerance(dqkv: torch.Tensor) -> torch.Tensor:
    """A column sum's rounding bound: rows x float eps x the column's absolute sum (float64
    inputs are summed in double)."""
    acc = torch.float64 if dqkv.dtype == torch.float64 else torch.float32
    eps = torch.finfo(acc).eps
    return dqkv.shape[0] * eps * dqkv.double().abs().sum(0) + 1e-30


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_joins_and_sums_like_torch(shape, dtype, gen):
    dq, dk, dv = _inputs(*shape, dtype, gen)
    dqkv, dbias = ops.qkv_grad(dq, dk, dv)
    expected = torch.cat([dq, dk, dv], dim=1)
    assert dqkv.dtype == dtype and torch.equal(dqkv, expected)  # a copy: exact
    assert dbias.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    err = (dbias.double() - expected.double().sum(0)).abs()
    assert (err <= _sum_tolerance(expected)).all(), err.max()


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 3 * MIN_CHUNK_ROWS),
    width=st.integers(1, 37),
    seed=st.integers(0, 2**31 - 1),
)
def test_any_rows_and_width(rows, width, seed):
    """Property: for any (rows, C), including zero rows, the join is torch.cat's and the sums
    are float64 column sums to rounding (zero where there are no rows)."""
    g = torch.Generator().manual_seed(seed)
    dq, dk, dv = (torch.randn(rows, width, generator=g) for _ in range(3))
    dqkv, dbias = ops.qkv_grad(dq, dk, dv)
    expected = torch.cat([dq, dk, dv], dim=1)
    assert torch.equal(dqkv, expected)
    assert dbias.shape == (3 * width,)
    err = (dbias.double() - expected.double().sum(0)).abs()
    assert (err <= _sum_tolerance(expected)).all()


def test_sums_have_the_same_bits_every_call(gen):
    dq, dk, dv = _inputs(3000, 48, torch.float32, gen)
    first = ops.qkv_grad(dq, dk, dv)[1]
    for _ in range(3):
        assert torch.equal(ops.qkv_grad(dq, dk, dv)[1], first)


def _linear_split(x, w, b, heads):
    """A loss through c_attn's three column blocks: PyTorch's (heads=None) or qkv_heads."""
    C = w.shape[1]
    if heads is None:
        q, k, v = F.linear(x, w, b).split(C, dim=-1)
    else:
        q, k, v = heads(F.linear(x, w, None if b is None else b.detach()), b)
    return (q * 1.5 + k.sin() * v).sum()


@pytest.mark.parametrize("bias", [True, False])
def test_qkv_heads_gradients_are_linear_split_gradients(bias, gen):
    x = torch.randn(2, 7, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(18, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(18, generator=gen, dtype=torch.float64, requires_grad=True) if bias else None
    params = [x, w] + ([b] if bias else [])
    ref = torch.autograd.grad(_linear_split(x, w, b, None), params)
    got = torch.autograd.grad(_linear_split(x, w, b, ops.qkv_heads), params)
    for r, g in zip(ref, got, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


def test_qkv_heads_with_an_unused_block(gen):
    """v unused: autograd hands the backward zeros for it, so its block of dqkv is zero."""
    qkv = torch.randn(4, 9, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(9, generator=gen, dtype=torch.float64, requires_grad=True)
    q, k, _ = ops.qkv_heads(qkv, b)
    dqkv, db = torch.autograd.grad((q * k).sum(), [qkv, b])
    qr, kr = qkv.detach()[:, :3], qkv.detach()[:, 3:6]
    expected = torch.cat([kr, qr, torch.zeros(4, 3, dtype=torch.float64)], dim=1)
    torch.testing.assert_close(dqkv, expected)
    torch.testing.assert_close(db, expected.sum(0))


def test_gradcheck_float64(gen):
    qkv = torch.randn(5, 12, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, generator=gen, dtype=torch.float64, requires_grad=True)

    def f(qkv, b):
        q, k, v = ops.qkv_heads(qkv + b.detach(), b)
        return q * k, v.exp()

    assert torch.autograd.gradcheck(f, (qkv, b))


def test_opcheck(gen):
    dq, dk, dv = _inputs(70, 8, torch.float32, gen)
    torch.library.opcheck(torch.ops.gptstack.qkv_grad.default, (dq, dk, dv))


def test_compile_fullgraph(gen):
    x = torch.randn(3, 5, 8, generator=gen, requires_grad=True)
    w = torch.randn(24, 8, generator=gen, requires_grad=True)
    b = torch.randn(24, generator=gen, requires_grad=True)
    compiled = torch.compile(lambda *a: _linear_split(*a, ops.qkv_heads), fullgraph=True)
    got = torch.autograd.grad(compiled(x, w, b), [x, w, b])
    ref = torch.autograd.grad(_linear_split(x, w, b, None), [x, w, b])
    for r, g in zip(ref, got, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_bad_inputs_raise_clear_errors(gen):
    dq, dk, dv = _inputs(4, 6, torch.float32, gen)
    with pytest.raises(OpTypeError, match="dk is bfloat16 but dq is float32"):
        ops.qkv_grad(dq, dk.bfloat16(), dv)
    with pytest.raises(OpInputError, match=r"dv has shape \(4, 5\); expected \(4, 6\)"):
        ops.qkv_grad(dq, dk, dv[:, :5].contiguous())
    with pytest.raises(OpInputError, match="2-D"):
        ops.qkv_grad(dq[None], dk[None], dv[None])
    with pytest.raises((OpInputError, ValueError), match="contiguous"):
        ops.qkv_grad(dq, dk, torch.randn(6, 4, generator=gen).t())
    with pytest.raises(OpTypeError):
        ops.qkv_grad(dq.long(), dk, dv)
    with pytest.raises(OpInputError, match="must be 3C"):
        ops.qkv_heads(torch.randn(2, 7), None)
    with pytest.raises(OpInputError, match=r"bias has shape \(6,\); expected \(9,\)"):
        ops.qkv_heads(torch.randn(2, 9), torch.randn(6))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape",
    # gpt2-124m's width at a few rows and at 16 rows of 1024; odd widths take the W=1 kernel
    [(1, 768), (33, 768), (16 * 1024, 768), (1000, 37), (130, 8), (MAX_CHUNKS * 64 + 5, 64)],
)
def test_cuda_matches_the_cpu(shape, dtype):
    g = torch.Generator().manual_seed(hash(shape) % 2**31)
    cpu = _inputs(*shape, dtype, g)
    dqkv, dbias = ops.qkv_grad(*(t.cuda() for t in cpu))
    expected = torch.cat(cpu, dim=1)
    assert torch.equal(dqkv.cpu(), expected)
    err = (dbias.cpu().double() - expected.double().sum(0)).abs()
    assert (err <= _sum_tolerance(expected)).all(), err.max()


@pytest.mark.cuda
def test_cuda_sums_have_the_same_bits_every_call():
    g = torch.Generator().manual_seed(7)
    dq, dk, dv = (t.cuda() for t in _inputs(20000, 768, torch.bfloat16, g))
    first = ops.qkv_grad(dq, dk, dv)[1]
    for _ in range(3):
        assert torch.equal(ops.qkv_grad(dq, dk, dv)[1], first)


@pytest.mark.cuda
def test_cuda_unaligned_rows_take_the_scalar_kernel():
    """Inputs that start 2 bytes past a 16-byte boundary: the same join and sums."""
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(65 * 24 + 1, generator=g).bfloat16().cuda() for _ in range(3)]
    dq, dk, dv = (t[1:].view(65, 24) for t in base)
    dqkv, dbias = ops.qkv_grad(dq, dk, dv)
    expected = torch.cat([dq, dk, dv], dim=1)
    assert torch.equal(dqkv, expected)
    torch.testing.assert_close(dbias, expected.float().sum(0), rtol=1e-5, atol=1e-3)


@pytest.mark.cuda
def test_cuda_inside_a_graph_capture():
    g = torch.Generator().manual_seed(6)
    dq, dk, dv = (t.cuda() for t in _inputs(512, 96, torch.bfloat16, g))
    ops.qkv_grad(dq, dk, dv)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dqkv, dbias = ops.qkv_grad(dq, dk, dv)
    for t in (dq, dk, dv):
        t.copy_(torch.randn(t.shape, device="cuda").bfloat16())
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.cat([dq, dk, dv], dim=1)
    assert torch.equal(dqkv, expected)
    torch.testing.assert_close(dbias, expected.float().sum(0), rtol=1e-4, atol=1e-2)
