"""LayerNorm and residual-add + LayerNorm: values and gradients against PyTorch, gradcheck,
opcheck, torch.compile, bad inputs; CUDA kernels (both vector widths, graphs, determinism)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.testing import assert_close

EPS = 1e-5
# (shape of x): T=1, C=3 (C=2 makes dx a pure cancellation, ~eps), C not a multiple of 8, and
# (64, 768) above the OpenMP threshold
SHAPES = [(1, 3), (1, 1, 7), (2, 5, 37), (3, 257), (4, 3, 64), (64, 768)]
DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def _inputs(shape, dtype, gen, bias=True, device="cpu"):
    C = shape[-1]
    x = (2 * torch.randn(shape, generator=gen) + 0.5).to(dtype)
    w = (1 + 0.3 * torch.randn(C, generator=gen)).to(dtype)
    b = (0.3 * torch.randn(C, generator=gen)).to(dtype) if bias else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    move = [t if t is None else t.to(device) for t in (x, w, b, dy)]
    return move


def _leaves(*ts):
    return [None if t is None else t.detach().clone().requires_grad_() for t in ts]


def _grads(out, inputs, dout):
    wanted = [t for t in inputs if t is not None]
    got = iter(torch.autograd.grad(out, wanted, dout))
    return [None if t is None else next(got) for t in inputs]


def _check_ln(x, w, b, dy, dtype, what):
    xl, wl, bl = _leaves(x, w, b)
    y = ops.layernorm(xl, wl, bl, EPS)
    grads = _grads(y, (xl, wl, bl), dy)
    x64, w64, b64 = _leaves(*(None if t is None else t.double() for t in (x, w, b)))
    y64 = F.layer_norm(x64, (x.shape[-1],), w64, b64, EPS)
    ref = _grads(y64, (x64, w64, b64), dy.double())
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, y64, dtype, f"{what} y")
    for name, g, r in zip(("dx", "dweight", "dbias"), grads, ref, strict=True):
        if r is not None:
            assert_close(g, r, dtype, f"{what} {name}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(shape, dtype, bias, cpu_path, gen):
    x, w, b, dy = _inputs(shape, dtype, gen, bias)
    _check_ln(x, w, b, dy, dtype, f"layernorm {shape} {dtype} {cpu_path}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_column_normalizes_to_the_bias(dtype, cpu_path, gen):
    # C = 1: x - mean is exactly 0, so y = bias, and dx = dweight = 0, dbias = dy
    x, w, b, dy = _leaves(*_inputs((3, 4, 1), dtype, gen))
    y = ops.layernorm(x, w, b)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    assert torch.equal(y, b.detach().expand_as(y))
    assert not dx.any() and not dw.any()
    assert_close(db, dy.double().sum(dim=(0, 1)), dtype, "dbias at C = 1")


RESIDUAL_DTYPES = [
    (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16),  # float32 stream + bfloat16 branch output (autocast)
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float64, torch.float64),
]


def _check_add_ln(x, r, w, b, ds, dy, what):
    xl, rl, wl, bl = _leaves(x, r, w, b)
    s, y = ops.add_layernorm(xl, rl, wl, bl, EPS)
    grads = _grads((s, y), (xl, rl, wl, bl), (ds, dy))
    x64, r64, w64, b64 = _leaves(*(None if t is None else t.double() for t in (x, r, w, b)))
    s64 = x64 + r64
    y64 = F.layer_norm(s64, (x.shape[-1],), w64, b64, EPS)
    ref = _grads((s64, y64), (x64, r64, w64, b64), (ds.double(), dy.double()))
    assert s.dtype == y.dtype == x.dtype
    assert_close(s, s64, x.dtype, f"{what} s")
    assert_close(y, y64, x.dtype, f"{what} y")
    names = ("dx", "dresidual", "dweight", "dbias")
    for name, g, ref_g, inp in zip(names, grads, ref, (x, r, w, b), strict=True):
        if ref_g is not None:
            assert g.dtype == inp.dtype
            tol_dtype = torch.bfloat16 if torch.bfloat16 in (x.dtype, r.dtype) else x.dtype
            assert_close(g, ref_g, tol_dtype, f"{what} {name}")


@pytest.mark.parametrize("shape", [(1, 1, 5), (2, 3, 37), (64, 768)])
@pytest.mark.parametrize("dtypes", RESIDUAL_DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_add_layernorm_matches_torch(shape, dtypes, bias, cpu_path, gen):
    x, w, b, dy = _inputs(shape, dtypes[0], gen, bias)
    r = torch.randn(shape, generator=gen).to(dtypes[1])
    ds = torch.randn(shape, generator=gen).to(dtypes[0])
    _check_add_ln(x, r, w, b, ds, dy, f"add_layernorm {shape} {dtypes} {cpu_path}")


def test_gradcheck_float64(gen):
    x, w, b, _ = _inputs((2, 3, 6), torch.float64, gen)
    r = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64)
    x, w, b, r = _leaves(x, w, b, r)
    assert torch.autograd.gradcheck(lambda *a: ops.layernorm(*a, EPS), (x, w, b))
    assert torch.autograd.gradcheck(lambda *a: ops.add_layernorm(*a, EPS), (x, r, w, b))


def test_opcheck(gen):
    x, w, b, dy = _inputs((3, 4, 10), torch.float32, gen)
    r = torch.randn(3, 4, 10, generator=gen)
    x, w, b, r = _leaves(x, w, b, r)
    torch.library.opcheck(torch.ops.gptstack.layernorm.default, (x, w, b, EPS))
    torch.library.opcheck(torch.ops.gptstack.layernorm.default, (x, w, None, EPS))
    torch.library.opcheck(torch.ops.gptstack.add_layernorm.default, (x, r, w, b, EPS))
    _, mean, rstd = torch.ops.gptstack.layernorm(x.detach(), w.detach(), b.detach(), EPS)
    args = (dy, None, x.detach(), w.detach(), mean, rstd)
    torch.library.opcheck(torch.ops.gptstack.layernorm_backward.default, args)


def test_compile_fullgraph(gen):
    x, w, b, _ = _inputs((2, 5, 24), torch.float32, gen)
    r = torch.randn(2, 5, 24, generator=gen)
    x, w, b, r = _leaves(x, w, b, r)

    def f(x, r, w, b):
        s, h = ops.add_layernorm(x, r, w, b)
        return (ops.layernorm(h, w, b) * s).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x, r, w, b), (x, r, w, b))
    ref = torch.autograd.grad(f(x, r, w, b), (x, r, w, b))
    for g, e in zip(got, ref, strict=True):
        assert_close(g, e, torch.float32, "compiled layernorm gradients")


def _bad(**kw):
    args = {"x": torch.ones(2, 8), "weight": torch.ones(8), "bias": torch.ones(8), "eps": EPS}
    args.update(kw)
    return lambda: ops.layernorm(**args)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad(weight=torch.ones(7)), ValueError, r"weight has shape \(7,\); expected \(8,\)"),
        (_bad(bias=torch.ones(8, dtype=torch.float64)), TypeError, "bias is float64"),
        (_bad(eps=-1.0), ValueError, "eps is -1.0"),
        (_bad(x=torch.ones(8, 2).t()), ValueError, "contiguous"),
        (_bad(x=torch.ones(2, 8, dtype=torch.int32)), TypeError, "int32"),
        (_bad(x=torch.ones(2, 0)), ValueError, "the last dimension C is 0"),
        (_bad(weight="w"), TypeError, "weight must be a torch.Tensor"),
        (
            lambda: ops.add_layernorm(torch.ones(2, 8), torch.ones(3, 8), torch.ones(8)),
            ValueError,
            r"residual has shape \(3, 8\)",
        ),
        (
            lambda: ops.add_layernorm(
                torch.ones(2, 8, dtype=torch.float64),
                torch.ones(2, 8),
                torch.ones(8, dtype=torch.float64),
            ),
            TypeError,
            "float64 goes only with float64",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def test_extension_checks_its_arguments():
    x, w = torch.ones(4, 8), torch.ones(8)
    out, mean, rstd = torch.empty(4, 8), torch.empty(4), torch.empty(4)
    with pytest.raises(ValueError, match=r"mean has shape \(3,\)"):
        _C.layernorm_forward(out, None, torch.empty(3), rstd, x, None, w, None, EPS)
    with pytest.raises(ValueError, match="residual and sum_out come together"):
        _C.layernorm_forward(out, None, mean, rstd, x, torch.ones(4, 8), w, None, EPS)
    with pytest.raises(ValueError, match="x must be"):
        _C.layernorm_forward(out, None, mean, rstd, torch.ones(32), None, w, None, EPS)


# --- CUDA --------------------------------------------------------------------------------------
# the backward's register-sum kernel (layernorm.cu's regsum_shape): one warp a row at 64 and
# 192 (lanes left idle), 384 (bf16: 8-byte vectors), 512; two warps a row at 768 and 1024
# (many rows a warp pair: (16, 64, 768)); the shared-slice kernel at bf16 800 (7 warps a
# block: no pairs); the three-pass fallback at 7, 257 (scalar), 1536, 3000, 6144 (vectors);
# more rows than 512 blocks x 8 warps x 8 rows (33 x 1024 x 64). The forward holds rows up to
# 32 * W * 4 in registers (bf16 W = 8, float32 W = 4).
CUDA_SHAPES = [
    (1, 1, 7),
    (3, 257),
    (4, 3, 64),
    (2, 2, 192),
    (7, 384),
    (3, 5, 512),
    (16, 64, 768),
    (9, 1024),
    (2, 3, 800),
    (4, 2, 1536),
    (33, 1024, 64),
    (2, 3, 3000),
    (5, 6144),
]


@pytest.mark.cuda
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_cuda_layernorm_matches_torch(shape, dtype, bias, gen):
    x, w, b, dy = _inputs(shape, dtype, gen, bias, device="cuda")
    _check_ln(x, w, b, dy, dtype, f"cuda layernorm {shape} {dtype}")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1, 1, 5), (2, 3, 37), (5, 384), (16, 64, 768)])
@pytest.mark.parametrize("dtypes", RESIDUAL_DTYPES[:4])
def test_cuda_add_layernorm_matches_torch(shape, dtypes, gen):
    x, w, b, dy = _inputs(shape, dtypes[0], gen, device="cuda")
    r = torch.randn(shape, generator=gen).to(dtypes[1]).cuda()
    ds = torch.randn(shape, generator=gen).to(dtypes[0]).cuda()
    _check_add_ln(x, r, w, b, ds, dy, f"cuda add_layernorm {shape} {dtypes}")


@pytest.mark.cuda
def test_cuda_unaligned_rows_take_scalar_kernel(gen):
    base = torch.randn(1 + 6 * 64, generator=gen).cuda()
    x = base[1:].view(6, 64)  # 4-byte offset: the 128-bit kernel cannot run
    w, b = torch.ones(64, device="cuda"), torch.zeros(64, device="cuda")
    _check_ln(x, w, b, torch.randn(6, 64, generator=gen).cuda(), torch.float32, "unaligned")


@pytest.mark.cuda
def test_cuda_parameter_grads_are_deterministic(gen):
    x, w, b, dy = _inputs((8, 256, 384), torch.float32, gen, device="cuda")
    # dweight and dbias are reductions over all 2,048 rows: without atomics, bit-identical
    xl, wl, bl = _leaves(x, w, b)
    first = torch.autograd.grad(ops.layernorm(xl, wl, bl), (xl, wl, bl), dy)
    second = torch.autograd.grad(ops.layernorm(xl, wl, bl), (xl, wl, bl), dy)
    for name, a, c in zip(("dx", "dweight", "dbias"), first, second, strict=True):
        assert torch.equal(a, c), f"{name} differs between two identical backward calls"


@pytest.mark.cuda
def test_cuda_graph_capture_forward_backward(gen):
    x, w, b, dy = _inputs((4, 64, 256), torch.bfloat16, gen, device="cuda")
    xl, wl, bl = _leaves(x, w, b)

    def step():
        y = ops.layernorm(xl, wl, bl)
        return (y, *torch.autograd.grad(y, (xl, wl, bl), dy))

    step()  # warm up outside the graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g):
        outs = step()
    new = torch.randn(x.shape, generator=gen).to(x.dtype).cuda()
    with torch.no_grad():
        xl.copy_(new)
    g.replay()
    torch.cuda.synchronize()
    x64 = new.double().requires_grad_()
    w64, b64 = _leaves(w.double(), b.double())
    y64 = F.layer_norm(x64, (256,), w64, b64, EPS)
    ref = (y64, *torch.autograd.grad(y64, (x64, w64, b64), dy.double()))
    for got, r in zip(outs, ref, strict=True):
        assert_close(got, r, torch.bfloat16, "layernorm replayed from a CUDA graph")


@pytest.mark.cuda
def test_cuda_too_wide_rows_are_refused():
    x = torch.ones(2, 6145, device="cuda")
    with pytest.raises(ValueError, match="limit of 6144"):
        ops.layernorm(x, torch.ones(6145, device="cuda"))
