"""decode_blocks (the embedding and every transformer block of a one-token step in one call)
against a float64 PyTorch reference on the CPU and, marked cuda, against the op-by-op CUDA
kernels bit for bit (the cluster kernel promises their bits); caches, out-of-range ids and
positions, CUDA-graph replay, opcheck and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops.testing import assert_close

# rows B, layers, heads, head size, cache length T, position, biases: one row of a small model;
# heads more than two per CTA of a 16-CTA cluster (each half-CTA loops over heads); the first and
# the last position; two rows; no biases (nanoGPT's bias=False)
SHAPES = [
    (1, 2, 6, 64, 256, 100, True),
    (1, 1, 40, 8, 16, 0, True),
    (2, 3, 2, 32, 64, 63, False),
    (1, 2, 4, 16, 33, 7, True),
]


def _model(B, L, nh, hs, T, bias, dtype, gen, device="cpu", vocab=50):
    C = nh * hs

    def r(*shape, s=1.0):
        return (s * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    layers = []
    for _ in range(L):
        b = (lambda n: r(n, s=0.1)) if bias else (lambda n: None)  # noqa: E731
        layers += [
            1 + r(C, s=0.1), b(C), r(3 * C, C, s=1 / math.sqrt(C)), b(3 * C),
            r(C, C, s=1 / math.sqrt(C)), b(C), 1 + r(C, s=0.1), b(C),
            r(4 * C, C, s=1 / math.sqrt(C)), b(4 * C), r(C, 4 * C, s=0.5 / math.sqrt(C)), b(C),
        ]  # fmt: skip
    wte, wpe = r(vocab, C), r(T, C, s=0.5)
    kc, vc = r(L, B, nh, T, hs), r(L, B, nh, T, hs)
    return wte, wpe, layers, kc, vc


def _reference(token, p, wte, wpe, layers, kc, vc, nh):
    """Float64 from the same rounded inputs; returns x and the caches as they must end up."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    kc, vc = kc.clone(), vc.clone()
    B, C = token.numel(), wte.size(1)
    hs = C // nh
    x = wte[token.view(-1)].double() + wpe[p].double()  # (B, C)
    for l in range(kc.size(0)):  # noqa: E741
        w = [d(t) for t in layers[12 * l : 12 * l + 12]]
        h = F.layer_norm(x, (C,), w[0], w[1], 1e-5)
        qkv = F.linear(h, w[2], w[3])
        q, k, v = qkv.view(B, 3, nh, hs).unbind(1)
        kc[l, :, :, p], vc[l, :, :, p] = k.to(kc.dtype), v.to(vc.dtype)
        y = F.scaled_dot_product_attention(
            q[:, :, None], kc[l, :, :, : p + 1].double(), vc[l, :, :, : p + 1].double()
        )[:, :, 0].reshape(B, C)
        x = x + F.linear(y, w[4], w[5])
        h = F.gelu(
            F.linear(F.layer_norm(x, (C,), w[6], w[7], 1e-5), w[8], w[9]), approximate="tanh"
        )
        x = x + F.linear(h, w[10], w[11])
    return x, kc, vc


def _check_against_reference(shape, dtype, gen):
    B, L, nh, hs, T, p, bias = shape
    wte, wpe, layers, kc, vc = _model(B, L, nh, hs, T, bias, dtype, gen)
    token = torch.randint(0, wte.size(0), (B, 1), generator=gen)
    x_ref, kc_ref, vc_ref = _reference(token, p, wte, wpe, layers, kc, vc, nh)
    x = ops.decode_blocks(token, torch.tensor(p), wte, wpe, layers, kc, vc)
    assert x.shape == (B, nh * hs) and x.dtype == dtype
    # the cache entries at p are computed (rounded) values: compare them with tolerance, and
    # every other entry exactly
    others = torch.ones(T, dtype=torch.bool)
    others[p] = False
    assert torch.equal(kc[:, :, :, others], kc_ref[:, :, :, others])
    assert torch.equal(vc[:, :, :, others], vc_ref[:, :, :, others])
    assert_close(kc[:, :, :, p], kc_ref[:, :, :, p].double(), dtype, f"k at {p} {shape} {dtype}")
    assert_close(x, x_ref, dtype, f"decode_blocks {shape} {dtype}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_matches_torch(shape, dtype, gen):
    _check_against_reference(shape, dtype, gen)


def test_out_of_range_position_or_token_gives_nan_and_writes_nothing(gen):
    wte, wpe, layers, kc, vc = _model(2, 2, 2, 8, 10, True, torch.float32, gen)
    before = kc.clone(), vc.clone()
    x = ops.decode_blocks(torch.tensor([1, 2]), torch.tensor(10), wte, wpe, layers, kc, vc)
    assert x.isnan().all() and torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    x = ops.decode_blocks(torch.tensor([1, 50]), torch.tensor(3), wte, wpe, layers, kc, vc)
    assert not x[0].isnan().any() and x[1].isnan().all()  # token 50 is outside wte's 50 rows
    assert torch.equal(kc[:, 1], before[0][:, 1]) and not torch.equal(kc[:, 0], before[0][:, 0])


def test_opcheck(gen):
    wte, wpe, layers, kc, vc = _model(1, 1, 2, 8, 8, True, torch.float32, gen)
    torch.library.opcheck(
        torch.ops.gptstack.decode_blocks.default,
        (torch.tensor([[3]]), torch.tensor(2), wte, wpe, layers, kc, vc, 1e-5),
    )


def _bad_inputs(gen):
    wte, wpe, layers, kc, vc = _model(1, 1, 2, 8, 8, True, torch.float32, gen)
    tok, pos = torch.tensor([[1]]), torch.tensor(0)
    missing = list(layers)
    missing[2] = None  # c_attn.weight
    wrong = list(layers)
    wrong[8] = wrong[8][:-1]  # c_fc.weight one row short
    return [
        ((tok, pos, wte, wpe, layers[:-1], kc, vc), ValueError, "12 tensors per layer"),
        ((tok, pos, wte, wpe, layers, kc[0], vc), ValueError, "n_layer, B, nh, T, hs"),
        ((tok.float(), pos, wte, wpe, layers, kc, vc), TypeError, "token must be an int64"),
        ((tok, pos, wte, wpe.double(), layers, kc, vc), TypeError, "wpe is float64"),
        ((tok, pos, wte, wpe, missing, kc, vc), ValueError, "c_attn.weight is missing"),
        ((tok, pos, wte, wpe, wrong, kc, vc), ValueError, "mlp.c_fc.weight has shape"),
        ((torch.tensor([1, 2]), pos, wte, wpe, layers, kc, vc), ValueError, "one id per row"),
    ]


def test_bad_inputs_raise_clear_errors(gen):
    for args, error, words in _bad_inputs(gen):
        with pytest.raises(error, match=words):
            ops.decode_blocks(*args)


def _op_by_op(token, pos, wte, wpe, layers, kc, vc, nh):
    """decode.h's definition: the embedding, then the five decode ops per layer."""
    x = wte.index_select(0, token.view(-1)) + wpe.index_select(0, pos.view(1))
    for l in range(kc.size(0)):  # noqa: E741
        w = layers[12 * l : 12 * l + 12]
        qkv = ops.decode_linear(x, w[2], w[3], ln_weight=w[0], ln_bias=w[1])
        y = ops.decode_attention(qkv, kc[l], vc[l], pos)
        x = ops.decode_linear(y, w[4], w[5], residual=x)
        h = ops.decode_linear(x, w[8], w[9], ln_weight=w[6], ln_bias=w[7], gelu=True)
        x = ops.decode_linear(h, w[10], w[11], residual=x)
    return x


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_the_op_by_op_kernels_bit_for_bit(shape, dtype, gen):
    B, L, nh, hs, T, p, bias = shape
    wte, wpe, layers, kc, vc = _model(B, L, nh, hs, T, bias, dtype, gen, device="cuda")
    token = torch.randint(0, wte.size(0), (B, 1), generator=gen).cuda()
    pos = torch.tensor(p, device="cuda")
    kc2, vc2 = kc.clone(), vc.clone()
    x = ops.decode_blocks(token, pos, wte, wpe, layers, kc, vc)
    x_ref = _op_by_op(token, pos, wte, wpe, layers, kc2, vc2, nh)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)
    assert torch.equal(x, x_ref), (x - x_ref).abs().max()


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_cuda_matches_torch(shape, gen):
    _check_against_reference_cuda(shape, gen)


def _check_against_reference_cuda(shape, gen):
    B, L, nh, hs, T, p, bias = shape
    wte, wpe, layers, kc, vc = _model(B, L, nh, hs, T, bias, torch.bfloat16, gen, device="cuda")
    token = torch.randint(0, wte.size(0), (B, 1), generator=gen).cuda()
    x_ref, _, _ = _reference(token, p, wte, wpe, layers, kc, vc, nh)
    x = ops.decode_blocks(token, torch.tensor(p, device="cuda"), wte, wpe, layers, kc, vc)
    assert_close(x, x_ref, torch.bfloat16, f"decode_blocks cuda {shape}")


@pytest.mark.cuda
def test_cuda_graph_replay_reads_token_and_position_each_time(gen):
    wte, wpe, layers, kc, vc = _model(1, 2, 4, 16, 32, True, torch.bfloat16, gen, device="cuda")
    token, pos = torch.tensor([[1]], device="cuda"), torch.tensor(0, device="cuda")
    ops.decode_blocks(token, pos, wte, wpe, layers, kc, vc)  # warm up outside the graph
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        x = ops.decode_blocks(token, pos, wte, wpe, layers, kc, vc)
    kc2, vc2 = kc.clone(), vc.clone()
    for p, t in ((0, 5), (1, 7), (2, 9)):
        token.fill_(t), pos.fill_(p)
        graph.replay()
        ref = _op_by_op(token, pos, wte, wpe, layers, kc2, vc2, 4)
        torch.cuda.synchronize()
        assert torch.equal(x, ref), f"replay at position {p}"
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)
