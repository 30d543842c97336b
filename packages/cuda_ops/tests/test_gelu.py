"""GELU (tanh form): forward and backward against PyTorch, gradcheck, opcheck, bad inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.testing import assert_close

# T=1 rows, odd sizes, sizes that are not a multiple of the 8-lane vector, and one above the
# OpenMP threshold (2**15 elements) so the threaded loop runs
SHAPES = [(1,), (7,), (1, 1, 9), (3, 5), (2, 3, 13), (5, 4 * 48 + 3), (33, 1031)]
DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def _reference(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's GELU and its gradient, in float64 from the same (rounded) inputs."""
    x64 = x.double().requires_grad_()
    y = F.gelu(x64, approximate="tanh")
    (dx,) = torch.autograd.grad(y, x64, dy.double())
    return y.detach(), dx


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_backward_match_torch(shape, dtype, cpu_path, gen):
    x = (3 * torch.randn(shape, generator=gen)).to(dtype).requires_grad_()
    dy = torch.randn(shape, generator=gen).to(dtype)
    y = ops.gelu_tanh(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    y_ref, dx_ref = _reference(x.detach(), dy)
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, y_ref, dtype, f"gelu forward {shape} {dtype} {cpu_path}")
    assert_close(dx, dx_ref, dtype, f"gelu backward {shape} {dtype} {cpu_path}")


def test_extreme_inputs_saturate(cpu_path):
    x = torch.tensor([-1e4, -60.0, -10.0, 0.0, 1e-30, 10.0, 60.0, 1e4] * 2)
    y_ref, _ = _reference(x, torch.ones_like(x))
    y = ops.gelu_tanh(x)
    assert torch.isfinite(y).all()
    assert_close(y, y_ref, torch.float32, "gelu at extremes")


def test_gradcheck_float64(gen):
    x = torch.randn(3, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ops.gelu_tanh, (x,))


def test_opcheck(gen):
    x = torch.randn(4, 19, generator=gen, requires_grad=True)
    torch.library.opcheck(torch.ops.gptstack.gelu_tanh.default, (x,))
    dy = torch.randn(4, 19, generator=gen)
    torch.library.opcheck(torch.ops.gptstack.gelu_tanh_backward.default, (dy, x.detach()))


def test_compile_fullgraph(gen):
    x = torch.randn(6, 21, generator=gen, requires_grad=True)

    def f(x):
        return (ops.gelu_tanh(x) * 2).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    (g,) = torch.autograd.grad(compiled(x), x)
    (g_ref,) = torch.autograd.grad(f(x), x)
    assert_close(g, g_ref, torch.float32, "compiled gelu gradient")


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (lambda: ops.gelu_tanh([1.0, 2.0]), TypeError, "torch.Tensor"),
        (lambda: ops.gelu_tanh(torch.ones(3, dtype=torch.int64)), TypeError, "int64"),
        (lambda: ops.gelu_tanh(torch.ones(3, dtype=torch.float16)), TypeError, "float16"),
        (lambda: ops.gelu_tanh(torch.ones(4, 6).t()), ValueError, "contiguous"),
        (lambda: ops.gelu_tanh(torch.ones(3, device="meta")), ValueError, "meta"),
    ],
)
def test_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def test_extension_checks_its_arguments():
    # the second line of defence: a direct call with mismatched buffers never touches memory
    x = torch.ones(8)
    with pytest.raises(ValueError, match=r"out has shape \(7,\)"):
        _C.gelu_forward(torch.empty(7), x)
    with pytest.raises(ValueError, match="out is float64"):
        _C.gelu_forward(torch.empty(8, dtype=torch.float64), x)
    with pytest.raises(ValueError, match="not contiguous"):
        _C.gelu_forward(torch.empty(8), torch.ones(16)[::2])


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1,), (3, 5), (5, 4 * 48 + 3), (64, 1024, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_torch(shape, dtype, gen):
    x = (3 * torch.randn(shape, generator=gen)).to(dtype).cuda().requires_grad_()
    dy = torch.randn(shape, generator=gen).to(dtype).cuda()
    y = ops.gelu_tanh(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    y_ref, dx_ref = _reference(x.detach(), dy)
    assert_close(y, y_ref, dtype, f"cuda gelu forward {shape} {dtype}")
    assert_close(dx, dx_ref, dtype, f"cuda gelu backward {shape} {dtype}")


@pytest.mark.cuda
def test_cuda_unaligned_view_takes_scalar_kernel(gen):
    base = torch.randn(1 + 4 * 257, generator=gen).cuda()
    x = base[1:]  # 4-byte offset: not 16-byte aligned
    y_ref, _ = _reference(x, torch.ones_like(x))
    assert_close(ops.gelu_tanh(x), y_ref, torch.float32, "unaligned cuda gelu")


@pytest.mark.cuda
def test_cuda_graph_capture(gen):
    x = torch.randn(33, 1031, generator=gen).cuda()
    ops.gelu_tanh(x)  # warm up outside the graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g):
        y = ops.gelu_tanh(x)
    x.copy_(torch.randn(33, 1031, generator=gen).cuda())
    g.replay()
    torch.cuda.synchronize()
    y_ref, _ = _reference(x, torch.ones_like(x))
    assert_close(y, y_ref, torch.float32, "gelu replayed from a CUDA graph")
