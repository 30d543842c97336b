"""The fused decode-step ops against PyTorch: decode_linear (LayerNorm + matvec + bias + GELU +
residual) and decode_attention (cache write + one query's causal attention), on the CPU and,
marked cuda, on the GPU; opcheck, torch.compile, CUDA-graph replay, bad inputs."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.testing import assert_close

CSRC = Path(__file__).resolve().parents[1] / "csrc"

# rows x K x N: one row (batch-1 decoding), odd K (no 16-byte rows: the CUDA scalar version),
# K a multiple of 8 (the vector version), N not a multiple of the 8 rows a CUDA block covers
# one row: in bf16/fp32 on CUDA, rows of 16-byte multiples up to 2,048 / 1,024 wide can take the
# kernel that holds the row in registers (opt-in: the registers_max_k fixture below), the rest
# the shared-memory one
LINEAR_SHAPES = [(1, 1, 1), (1, 37, 19), (2, 64, 96), (3, 384, 1152), (1, 1536, 65),
                 (2, 2048, 33), (1, 1024, 40), (1, 2056, 9)]  # fmt: skip
# many rows (the slide window's step): in bf16 on CUDA the tensor-core kernel (csrc/decode_mma.cuh)
# from MMA_MIN_ROWS rows, K % 16 == 0 and K <= MMA_MAX_K: one tile, row and column tails, odd N,
# the shakespeare-char window's four shapes, the widest K; then K past MMA_MAX_K and K % 16 != 0
# (the one-row kernel again)
MMA_LINEAR_SHAPES = [(16, 16, 8), (40, 48, 72), (33, 1024, 257), (256, 384, 1152),
                     (256, 384, 384), (256, 384, 1536), (256, 1536, 384), (70, 1744, 65),
                     (24, 1760, 40), (20, 72, 24)]  # fmt: skip
# rows, heads, cache length, head size, position
ATTN_SHAPES = [(1, 1, 1, 1, 0), (1, 6, 256, 64, 0), (2, 3, 10, 8, 4), (1, 8, 64, 32, 63),
               (2, 2, 300, 128, 257), (1, 4, 40, 13, 21)]  # fmt: skip
# window_attention: B, T, C, n_head: esp32's window (the fused CUDA kernel's fixed-width
# instance), two sequences, a partial window, head size 64 with rows past T in both tiles, one
# row; then T past WINDOW_ATTENTION_MAX_T and head size 128 (decode_linear + causal_attention)
WINDOW_SHAPES = [(1, 64, 256, 8), (2, 64, 256, 8), (1, 40, 128, 4), (2, 17, 192, 3),
                 (1, 1, 64, 2), (1, 65, 128, 4), (1, 20, 256, 2)]  # fmt: skip
# window_mlp: R, C (N = 4C): esp32's window (the fused CUDA kernel at C = 256), row tails, the
# other compiled width with one partial row tile; then a width it is not compiled for and fewer
# rows than MMA_MIN_ROWS (the three decode_linear calls)
MLP_SHAPES = [(64, 256), (40, 256), (17, 128), (32, 192), (1, 256)]
CPU_DTYPES = [torch.float64, torch.float32, torch.bfloat16]
CUDA_DTYPES = [torch.float32, torch.bfloat16]


def _linear_inputs(R, K, N, dtype, gen, device="cpu"):
    def r(*shape, s=1.0):
        return (s * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    return r(R, K, s=2.0), r(N, K, s=1 / math.sqrt(K)), r(N), r(K), r(K), r(R, N)


def _linear_reference(x, w, b, lw, lb, res, gelu):
    """In float64 from the same rounded inputs."""
    h = x.double()
    if lw is not None:
        h = F.layer_norm(h, (h.size(-1),), lw.double(), None if lb is None else lb.double(), 1e-5)
    y = h @ w.double().t()
    if b is not None:
        y = y + b.double()
    if gelu:
        y = F.gelu(y, approximate="tanh")
    return y if res is None else y + res.double()


def _attention_reference(qkv, kc, vc, p):
    """y (float64) and the caches as they must be after the call."""
    R, nh, T, hs = kc.shape
    q, k, v = qkv.view(R, 3, nh, hs).unbind(1)  # (R, nh, hs) each
    kc, vc = kc.clone(), vc.clone()
    kc[:, :, p], vc[:, :, p] = k, v
    y = F.scaled_dot_product_attention(
        q[:, :, None].double(), kc[:, :, : p + 1].double(), vc[:, :, : p + 1].double()
    )
    return y[:, :, 0].reshape(R, nh * hs), kc, vc


def _check_linear(shape, dtype, gen, device):
    R, K, N = shape
    x, w, b, lw, lb, res = _linear_inputs(R, K, N, dtype, gen, device)
    for kw in (
        {},
        {"bias": b},
        {"bias": b, "ln_weight": lw, "ln_bias": lb, "gelu": True},
        {"ln_weight": lw},
        {"bias": b, "residual": res},
    ):
        out = ops.decode_linear(x, w, **kw)
        ref = _linear_reference(
            x, w, kw.get("bias"), kw.get("ln_weight"), kw.get("ln_bias"), kw.get("residual"),
            kw.get("gelu", False),
        )  # fmt: skip
        assert out.shape == (R, N) and out.dtype == dtype and out.device == x.device
        assert_close(out, ref, dtype, f"decode_linear {shape} {dtype} {sorted(kw)} on {device}")


def _check_attention(shape, dtype, gen, device):
    R, nh, T, hs, p = shape
    qkv = torch.randn(R, 3 * nh * hs, generator=gen).to(dtype).to(device)
    kc = torch.randn(R, nh, T, hs, generator=gen).to(dtype).to(device)
    vc = torch.randn(R, nh, T, hs, generator=gen).to(dtype).to(device)
    y_ref, kc_ref, vc_ref = _attention_reference(qkv, kc, vc, p)
    y = ops.decode_attention(qkv, kc, vc, torch.tensor(p, device=device))
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)  # written at p, nowhere else
    assert_close(y, y_ref, dtype, f"decode_attention {shape} {dtype} on {device}")


@pytest.mark.parametrize("shape", LINEAR_SHAPES)
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_linear_matches_torch(shape, dtype, gen):
    _check_linear(shape, dtype, gen, "cpu")


@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_attention_matches_torch(shape, dtype, gen):
    _check_attention(shape, dtype, gen, "cpu")


def test_attention_out_of_range_position_writes_nothing_and_gives_nan(gen):
    qkv = torch.randn(1, 24, generator=gen)
    kc, vc = torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4)
    for p in (-1, 5):
        y = ops.decode_attention(qkv, kc, vc, torch.tensor(p))
        assert torch.isnan(y).all() and not kc.any() and not vc.any()


# decode_linear(split_k=True): R, K, N: esp32's mlp.c_proj in its window, shakespeare-char's
# with row and column tails and GELU, one row tile; then K it is not compiled for (esp32's
# attn.c_proj, 768) and fewer rows than MMA_MIN_ROWS (the other kernels, split_k ignored)
SPLIT_SHAPES = [(64, 1024, 256), (40, 1536, 100), (16, 1024, 64), (64, 256, 256), (64, 768, 256),
                (8, 1024, 64)]  # fmt: skip


def test_split_k_changes_nothing_on_the_cpu(gen):
    """split_k is a CUDA kernel's choice: on the CPU the result is the unsplit one, bit for bit."""
    x, w, b, _, _, res = _linear_inputs(64, 1024, 256, torch.float32, gen)
    want = ops.decode_linear(x, w, b, residual=res)
    assert torch.equal(ops.decode_linear(x, w, b, residual=res, split_k=True), want)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SPLIT_SHAPES)
def test_cuda_split_k_linear(shape, gen):
    """On CUDA (sm_90+) in bf16, decode_linear(split_k=True) splits K over a cluster of 4 CTAs
    where it says it does (csrc/decode_split.cuh): within bf16 tolerance of the float64
    reference and of the unsplit kernel (the sums' order differs, not their terms), the same
    bits call after call and in graph replays; elsewhere the unsplit result, bit for bit."""
    R, K, N = shape
    x, w, b, _, _, res = _linear_inputs(R, K, N, torch.bfloat16, gen, "cuda")
    d = ops.decode
    splits = torch.cuda.get_device_capability()[0] >= 9 and K in d.SPLIT_WIDTHS
    splits = splits and R >= d.MMA_MIN_ROWS
    for kw in ({"bias": b, "residual": res}, {"gelu": True}, {}):
        out = ops.decode_linear(x, w, split_k=True, **kw)
        plain = ops.decode_linear(x, w, **kw)
        ref = _linear_reference(x, w, kw.get("bias"), None, None, kw.get("residual"),
                                kw.get("gelu", False))  # fmt: skip
        assert_close(out, ref, torch.bfloat16, f"split_k {shape} {sorted(kw)}")
        if splits:
            assert_close(out, plain.double(), torch.bfloat16, f"split_k {shape} vs unsplit")
        else:
            assert torch.equal(out, plain), f"{shape}: split_k changed an unsplit call"
        again = [ops.decode_linear(x, w, split_k=True, **kw) for _ in range(3)]
        assert all(torch.equal(a, out) for a in again), f"{shape}: bits differ between calls"
    # dependent calls (each one's output the next one's residual) captured in a graph
    if not splits:
        return
    h = torch.randn(R, K, generator=gen).to(torch.bfloat16).cuda()

    def chain():
        y = res
        for _ in range(3):
            y = ops.decode_linear(h, w, b, residual=y, split_k=True)
        return y

    _assert_replays_are_eager(chain)


def _window_inputs(B, T, C, dtype, gen, device="cpu"):
    def r(*shape, s=1.0):
        return (s * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    return r(B, T, C, s=2.0), r(3 * C, C, s=1 / math.sqrt(C)), r(3 * C, s=0.5), 1 + r(C), r(C)


def _window_reference(x, w, b, lw, lb, nh):
    """y (B, T, C) in float64 from the same rounded inputs: ln_1, c_attn, causal SDPA."""
    B, T, C = x.shape
    qkv = _linear_reference(x.reshape(B * T, C), w, b, lw, lb, None, False).view(B, T, 3 * C)
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C)


def _window_two_ops(x, w, b, lw, lb, nh):
    """What window_attention stands for: decode_linear, then causal_attention of its heads."""
    B, T, C = x.shape
    qkv = ops.decode_linear(x.reshape(B * T, C), w, b, ln_weight=lw, ln_bias=lb).view(B, T, -1)
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
    return ops.causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)


def _proj_inputs(C, dtype, gen, device="cpu"):
    """attn.c_proj's weight and bias for window_attention's proj_weight / proj_bias."""
    w = (torch.randn(C, C, generator=gen) / math.sqrt(C)).to(dtype).to(device)
    return w, (0.5 * torch.randn(C, generator=gen)).to(dtype).to(device)


@pytest.mark.parametrize("shape", WINDOW_SHAPES)
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_window_attention_matches_torch(shape, dtype, gen):
    B, T, C, nh = shape
    x, w, b, lw, lb = _window_inputs(B, T, C, dtype, gen)
    wp, bp = _proj_inputs(C, dtype, gen)
    for bias, ln_bias in ((b, lb), (None, None)):
        y = ops.window_attention(x, w, bias, ln_weight=lw, ln_bias=ln_bias, n_head=nh)
        assert y.shape == x.shape and y.dtype == dtype
        ref = _window_reference(x, w, bias, lw, ln_bias, nh)
        assert_close(y, ref, dtype, f"window_attention {shape} {dtype} bias={bias is not None}")
        # with c_proj: x + c_proj(y), from the y above
        proj_bias = bp if bias is not None else None
        x1 = ops.window_attention(x, w, bias, ln_weight=lw, ln_bias=ln_bias, n_head=nh,
                                  proj_weight=wp, proj_bias=proj_bias)  # fmt: skip
        assert x1.shape == x.shape and x1.dtype == dtype
        ref = _linear_reference(y.reshape(B * T, C), wp, proj_bias, None, None,
                                x.reshape(B * T, C), False)  # fmt: skip
        assert_close(x1.reshape(B * T, C), ref, dtype, f"window_attention + c_proj {shape}")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", WINDOW_SHAPES)
def test_cuda_window_attention_is_the_two_ops_bit_for_bit(shape, gen):
    """On CUDA in bf16 one launch (csrc/window_attention.cuh) where the window fits it: the bits
    of decode_linear's tensor-core kernel followed by the attention forward, and the float64
    reference to bf16 tolerance."""
    B, T, C, nh = shape
    x, w, b, lw, lb = _window_inputs(B, T, C, torch.bfloat16, gen, "cuda")
    # the fused kernel runs exactly where it promises to (elsewhere the two ops do, and the bit
    # comparison below holds trivially)
    d = ops.decode
    fits = T <= d.WINDOW_ATTENTION_MAX_T and C // nh in d.WINDOW_ATTENTION_HEAD_SIZES
    ran = _C.window_attention(torch.empty_like(x), x, w, b, lw, lb, None, None, nh, 1e-5)
    assert ran == (fits and B * T >= d.MMA_MIN_ROWS), f"{shape}: the kernel ran: {ran}"
    # with c_proj: one launch where the heads also make a thread-block cluster
    wp, bp = _proj_inputs(C, torch.bfloat16, gen, "cuda")
    ran = _C.window_attention(torch.empty_like(x), x, w, b, lw, lb, wp, bp, nh, 1e-5)
    sm90 = torch.cuda.get_device_capability()[0] >= 9
    want = fits and B * T >= d.MMA_MIN_ROWS and sm90 and nh <= d.WINDOW_ATTENTION_PROJ_MAX_HEADS
    assert ran == want, f"{shape}: the kernel with c_proj ran: {ran}"
    for bias, ln_bias in ((b, lb), (None, lb), (b, None)):
        y = ops.window_attention(x, w, bias, ln_weight=lw, ln_bias=ln_bias, n_head=nh)
        two = _window_two_ops(x, w, bias, lw, ln_bias, nh)
        assert torch.equal(y, two), f"{shape}: {(y != two).sum().item()} values differ"
        ref = _window_reference(x, w, bias, lw, ln_bias, nh)
        assert_close(y, ref, torch.bfloat16, f"window_attention {shape} on cuda")
        proj_bias = bp if bias is not None else None
        x1 = ops.window_attention(x, w, bias, ln_weight=lw, ln_bias=ln_bias, n_head=nh,
                                  proj_weight=wp, proj_bias=proj_bias)  # fmt: skip
        rows = (B * T, C)
        want = ops.decode_linear(two.reshape(rows), wp, proj_bias, residual=x.reshape(rows))
        assert torch.equal(x1.reshape(rows), want), (
            f"{shape} with c_proj: {(x1.reshape(rows) != want).sum().item()} values differ"
        )


def _embed_inputs(B, T, C, dtype, gen, device="cpu", vocab=50):
    """window (B, T), token (B,), wte (vocab, C), wpe (T + 3, C) for embedded_window_attention."""
    window = torch.randint(0, vocab, (B, T), generator=gen).to(device)
    token = torch.randint(0, vocab, (B,), generator=gen).to(device)
    wte = torch.randn(vocab, C, generator=gen).to(dtype).to(device)
    return window, token, wte, torch.randn(T + 3, C, generator=gen).to(dtype).to(device)


@pytest.mark.parametrize("shape", WINDOW_SHAPES[:3])
def test_embedded_window_attention_is_window_embed_then_window_attention(shape, gen):
    """(x, y) = window_embed's rows and window_attention's output of them, on the CPU."""
    B, T, C, nh = shape
    window, token, wte, wpe = _embed_inputs(B, T, C, torch.float32, gen)
    _, w, b, lw, lb = _window_inputs(B, T, C, torch.float32, gen)
    x, y = ops.embedded_window_attention(window, token, wte, wpe, w, b, ln_weight=lw, ln_bias=lb,
                                         n_head=nh)  # fmt: skip
    want_x = ops.window_embed(window, token, wte, wpe)
    assert torch.equal(x, want_x)
    assert torch.equal(y, ops.window_attention(want_x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh))


@pytest.mark.cuda
@pytest.mark.parametrize("shape", WINDOW_SHAPES)
def test_cuda_embedded_window_attention_is_the_two_ops_bit_for_bit(shape, gen):
    """On CUDA in bf16 one launch where window_attention is one (csrc/window_attention.cuh,
    Embed): x and y are window_embed's and window_attention's bits, an id out of range a row
    of NaN in x as window_embed gives it; in a graph, replays give eager's bits."""
    B, T, C, nh = shape
    window, token, wte, wpe = _embed_inputs(B, T, C, torch.bfloat16, gen, "cuda")
    _, w, b, lw, lb = _window_inputs(B, T, C, torch.bfloat16, gen, "cuda")
    d = ops.decode
    fits = T <= d.WINDOW_ATTENTION_MAX_T and C // nh in d.WINDOW_ATTENTION_HEAD_SIZES
    x = torch.empty(B, T, C, dtype=torch.bfloat16, device="cuda")
    ran = _C.embedded_window_attention(
        torch.empty_like(x), x, window, token, wte, wpe, w, b, lw, lb, nh, 1e-5
    )
    assert ran == (fits and B * T >= d.MMA_MIN_ROWS), f"{shape}: the kernel ran: {ran}"
    for bad_id in (None, 10_000):
        if bad_id is not None:
            window[0, T // 2] = bad_id  # row T // 2 - 1 of x
        x, y = ops.embedded_window_attention(window, token, wte, wpe, w, b, ln_weight=lw,
                                             ln_bias=lb, n_head=nh)  # fmt: skip
        want_x = ops.window_embed(window, token, wte, wpe)
        want_y = ops.window_attention(want_x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh)
        for got, want in ((x, want_x), (y, want_y)):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    window[0, T // 2] = 3

    def chain():
        x, y = ops.embedded_window_attention(window, token, wte, wpe, w, b, ln_weight=lw,
                                             ln_bias=lb, n_head=nh)  # fmt: skip
        return torch.cat([x, y])

    _assert_replays_are_eager(chain)


def _tail_inputs(B, C, V, dtype, gen, device="cpu", biases=True):
    """y, x (B, C) and decode_tail's weights (TAIL_TENSORS order)."""

    def r(*shape, s=1.0):
        return (s * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    N = 4 * C
    b = (lambda n: r(n, s=0.5)) if biases else (lambda n: None)  # noqa: E731
    weights = [r(C, C, s=C**-0.5), b(C), 1 + r(C, s=0.1), b(C), r(N, C, s=C**-0.5), b(N),
               r(C, N, s=N**-0.5), b(C), 1 + r(C, s=0.1), b(C), r(V, C, s=C**-0.5)]  # fmt: skip
    return r(B, C), r(B, C, s=2.0), weights


def _tail_four_calls(y, x, weights):
    """What decode_tail stands for: four decode_linear calls."""
    wp, bp, l2w, l2b, wf, bf, wm, bm, lfw, lfb, wh = weights
    x2 = _mlp_three_calls(y, x, wp, bp, l2w, l2b, wf, bf, wm, bm)
    return ops.decode_linear(x2, wh, None, ln_weight=lfw, ln_bias=lfb)


def _tail_reference(y, x, weights):
    """The logits in float64 from the same rounded inputs, x1, h and x2 rounded to the inputs'
    dtype in between as each decode_linear call rounds its output."""
    wp, bp, l2w, l2b, wf, bf, wm, bm, lfw, lfb, wh = weights
    x2 = _mlp_reference(y, x, wp, bp, l2w, l2b, wf, bf, wm, bm).to(y.dtype)
    return _linear_reference(x2, wh, None, lfw, lfb, None, False)


# decode_tail: B, C, V: esp32's step (the fused CUDA kernel at C = 256), two rows at the other
# compiled width with a ragged vocabulary; then a width it is not compiled for and as many rows
# as decode_linear's tensor-core kernel takes (the four calls)
TAIL_SHAPES = [(1, 256, 512), (2, 128, 101), (1, 192, 64), (16, 128, 64)]


@pytest.mark.parametrize("shape", TAIL_SHAPES)
@pytest.mark.parametrize("biases", [True, False])
def test_decode_tail_matches_torch(shape, biases, gen):
    y, x, weights = _tail_inputs(*shape, torch.float32, gen, biases=biases)
    logits = ops.decode_tail(y, x, weights)
    assert logits.shape == (shape[0], shape[2])
    assert torch.equal(logits, _tail_four_calls(y, x, weights))  # on the CPU: those calls
    assert_close(logits, _tail_reference(y, x, weights), torch.float32, f"decode_tail {shape}")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", TAIL_SHAPES)
def test_cuda_decode_tail_is_the_four_calls_bit_for_bit(shape, gen):
    """On CUDA (sm_90+) in bf16 one launch at the compiled widths (csrc/decode_tail.cuh): the bits
    of decode_linear's four one-row launches, and the float64 reference to bf16 tolerance; in a
    graph, replays give eager's bits."""
    B, C, V = shape
    d = ops.decode
    sm90 = torch.cuda.get_device_capability()[0] >= 9
    for biases in (True, False):
        y, x, weights = _tail_inputs(B, C, V, torch.bfloat16, gen, "cuda", biases)
        ran = _C.decode_tail(torch.empty(B, V, dtype=y.dtype, device="cuda"), y, x, weights, 1e-5)
        want = sm90 and C in d.TAIL_WIDTHS and B < d.MMA_MIN_ROWS
        assert ran == want, f"{shape}: the kernel ran: {ran}"
        logits = ops.decode_tail(y, x, weights)
        four = _tail_four_calls(y, x, weights)
        assert torch.equal(logits, four), f"{shape}: {(logits != four).sum().item()} differ"
        ref = _tail_reference(y, x, weights)
        assert_close(logits, ref, torch.bfloat16, f"decode_tail {shape} on cuda")
    _assert_replays_are_eager(lambda: ops.decode_tail(y, x, weights))


def _mlp_inputs(R, C, dtype, gen, device="cpu"):
    """y, x, proj_weight, proj_bias, ln_weight, ln_bias, fc_weight, fc_bias, mlp_proj_weight,
    mlp_proj_bias: the order of _C.window_mlp and the custom op, N = 4C."""
    N = 4 * C

    def r(*shape, s=1.0):
        return (s * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    return (r(R, C), r(R, C, s=2.0), r(C, C, s=C**-0.5), r(C, s=0.5), 1 + r(C), r(C),
            r(N, C, s=C**-0.5), r(N, s=0.5), r(C, N, s=N**-0.5), r(C, s=0.5))  # fmt: skip


def _mlp_three_calls(y, x, wp, bp, lw, lb, wf, bf, wm, bm):
    """What window_mlp stands for: c_proj + residual, ln_2 + c_fc + GELU, mlp.c_proj + residual."""
    x1 = ops.decode_linear(y, wp, bp, residual=x)
    h = ops.decode_linear(x1, wf, bf, ln_weight=lw, ln_bias=lb, gelu=True)
    return ops.decode_linear(h, wm, bm, residual=x1)


def _mlp_reference(y, x, wp, bp, lw, lb, wf, bf, wm, bm):
    """out in float64 from the same rounded inputs, x1 and h rounded to the inputs' dtype in
    between as the op rounds them (each decode_linear rounds once)."""
    dtype = y.dtype
    x1 = _linear_reference(y, wp, bp, None, None, x, False).to(dtype)
    h = _linear_reference(x1, wf, bf, lw, lb, None, True).to(dtype)
    return _linear_reference(h, wm, bm, None, None, x1, False)


@pytest.mark.parametrize("shape", MLP_SHAPES)
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_window_mlp_matches_torch(shape, dtype, gen):
    y, x, wp, bp, lw, lb, wf, bf, wm, bm = _mlp_inputs(*shape, dtype, gen)
    for biases in (True, False):
        b1, b2, b3, lnb = (bp, bf, bm, lb) if biases else (None, None, None, None)
        out = ops.window_mlp(y, x, wp, b1, wf, b2, wm, b3, ln_weight=lw, ln_bias=lnb)
        assert out.shape == x.shape and out.dtype == dtype
        ref = _mlp_reference(y, x, wp, b1, lw, lnb, wf, b2, wm, b3)
        assert_close(out, ref, dtype, f"window_mlp {shape} {dtype} biases={biases}")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", MLP_SHAPES)
def test_cuda_window_mlp_is_the_three_calls_bit_for_bit(shape, gen):
    """On CUDA (sm_90+) in bf16 one launch at the compiled widths (csrc/window_mlp.cuh): the bits
    of decode_linear's three tensor-core launches (c_proj + residual, ln_2 + c_fc + GELU,
    mlp.c_proj + residual), and the float64 reference to bf16 tolerance."""
    inputs = _mlp_inputs(*shape, torch.bfloat16, gen, "cuda")
    y, x, wp, bp, lw, lb, wf, bf, wm, bm = inputs
    R, C = shape
    # the fused kernel runs exactly where it promises to (elsewhere the three calls do, and the
    # bit comparison below holds trivially)
    d = ops.decode
    sm90 = torch.cuda.get_device_capability()[0] >= 9
    ran = _C.window_mlp(torch.empty_like(x), *inputs, 1e-5)
    want = sm90 and C in d.WINDOW_MLP_WIDTHS and R >= d.MMA_MIN_ROWS
    assert ran == want, f"{shape}: the kernel ran: {ran}"
    for b1, b2, b3, lnb in ((bp, bf, bm, lb), (None, None, None, lb), (bp, bf, None, None)):
        out = ops.window_mlp(y, x, wp, b1, wf, b2, wm, b3, ln_weight=lw, ln_bias=lnb)
        three = _mlp_three_calls(y, x, wp, b1, lw, lnb, wf, b2, wm, b3)
        assert torch.equal(out, three), f"{shape}: {(out != three).sum().item()} values differ"
        ref = _mlp_reference(y, x, wp, b1, lw, lnb, wf, b2, wm, b3)
        assert_close(out, ref, torch.bfloat16, f"window_mlp {shape} on cuda")


@pytest.mark.cuda
def test_cuda_window_block_chain_in_a_graph_gives_the_same_bits(gen):
    """The slide window's block as dependent launches (window_attention, then window_mlp), twice
    over, captured and replayed with and without programmatic dependent launch: eager's bits
    each time (each kernel requests its weights before waiting for the kernel before, and reads
    what that one wrote only after)."""
    B, T, C, nh = 1, 64, 256, 8
    x, w, b, lw, lb = _window_inputs(B, T, C, torch.bfloat16, gen, "cuda")
    r = lambda *s: (torch.randn(*s, generator=gen) / 16).to(torch.bfloat16).cuda()  # noqa: E731
    w_proj, w_fc, w_out = r(C, C), r(4 * C, C), r(C, 4 * C)

    def block(x):
        y = ops.window_attention(x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh).view(B * T, C)
        out = ops.window_mlp(y, x.view(B * T, C), w_proj, None, w_fc, None, w_out, ln_weight=lw)
        return out.view(B, T, C)

    _assert_replays_are_eager(lambda: block(block(x)))


@pytest.mark.cuda
def test_cuda_window_attention_with_c_proj_chain_in_a_graph_gives_the_same_bits(gen):
    """window_attention with c_proj (a thread-block cluster of the heads exchanging their
    outputs by st.async) as dependent launches, three deep, captured and replayed with and
    without programmatic dependent launch: eager's bits each time."""
    B, T, C, nh = 1, 64, 256, 8
    x, w, b, lw, lb = _window_inputs(B, T, C, torch.bfloat16, gen, "cuda")
    wp, bp = _proj_inputs(C, torch.bfloat16, gen, "cuda")

    def block(x):
        return ops.window_attention(x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh,
                                    proj_weight=wp, proj_bias=bp)  # fmt: skip

    _assert_replays_are_eager(lambda: block(block(block(x))))


def test_opcheck(gen):
    x, w, b, lw, lb, res = _linear_inputs(2, 16, 24, torch.float32, gen)
    torch.library.opcheck(
        torch.ops.gptstack.decode_linear.default, (x, w, b, lw, lb, res, 1e-5, True)
    )
    torch.library.opcheck(
        torch.ops.gptstack.decode_linear.default, (x, w, None, None, None, None, 1e-5, False)
    )
    torch.library.opcheck(
        torch.ops.gptstack.decode_linear.default, (x, w, b, None, None, res, 1e-5, False, True)
    )
    qkv = torch.randn(2, 36, generator=gen)
    kc, vc = torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 4)
    torch.library.opcheck(
        torch.ops.gptstack.decode_attention.default, (qkv, kc, vc, torch.tensor(3))
    )
    x, w, b, lw, lb = _window_inputs(2, 5, 64, torch.float32, gen)
    wp, bp = _proj_inputs(64, torch.float32, gen)
    for args in ((b, lw, lb, None, None), (None, lw, None, None, None), (b, lw, lb, wp, bp),
                 (None, lw, None, wp, None)):  # fmt: skip
        torch.library.opcheck(torch.ops.gptstack.window_attention.default, (x, w, *args, 2, 1e-5))
    window, token, wte, wpe = _embed_inputs(2, 5, 64, torch.float32, gen)
    torch.library.opcheck(
        torch.ops.gptstack.embedded_window_attention.default,
        (window, token, wte, wpe, w, b, lw, lb, 2, 1e-5),
    )
    y, x, weights = _tail_inputs(2, 16, 10, torch.float32, gen)
    torch.library.opcheck(torch.ops.gptstack.decode_tail.default, (y, x, weights, 1e-5))
    y, x, wp, bp, lw, lb, wf, bf, wm, bm = _mlp_inputs(6, 32, torch.float32, gen)
    torch.library.opcheck(
        torch.ops.gptstack.window_mlp.default, (y, x, wp, bp, lw, lb, wf, bf, wm, bm, 1e-5)
    )
    torch.library.opcheck(
        torch.ops.gptstack.window_mlp.default, (y, x, wp, None, lw, None, wf, None, wm, None, 1e-5)
    )


def test_compile_fullgraph(gen):
    x, w, b, lw, lb, res = _linear_inputs(1, 32, 96, torch.float32, gen)
    kc, vc = torch.zeros(1, 4, 12, 8), torch.zeros(1, 4, 12, 8)
    pos = torch.tensor(5)

    def block(x):
        qkv = ops.decode_linear(x, w, b, ln_weight=lw, ln_bias=lb)
        return ops.decode_attention(qkv, kc, vc, pos)

    y_ref = block(x)
    kc.zero_(), vc.zero_()
    y = torch.compile(block, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(y, y_ref) and kc[:, :, 5].any() and not kc[:, :, 6:].any()


def _bad(**changes):
    """decode_linear with one argument changed from a valid call."""
    args = {"x": torch.ones(1, 8), "weight": torch.ones(4, 8), "bias": torch.ones(4)}
    args.update(changes)
    x, w = args.pop("x"), args.pop("weight")
    return lambda: ops.decode_linear(x, w, **args)


def _bad_window(**changes):
    """window_attention with one argument changed from a valid call."""
    args = {"x": torch.ones(1, 4, 64), "weight": torch.ones(192, 64), "bias": torch.ones(192),
            "ln_weight": torch.ones(64), "n_head": 2}  # fmt: skip
    args.update(changes)
    x, w = args.pop("x"), args.pop("weight")
    return lambda: ops.window_attention(x, w, **args)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad_window(x=torch.ones(4, 64)), ValueError, "at least 3 dimension"),
        (_bad_window(x=torch.ones(1, 1, 4, 64)), ValueError, r"x must be \(B, T, C\)"),
        (_bad_window(n_head=3), ValueError, "n_head = 3 must be a positive divisor of C = 64"),
        (_bad_window(n_head=2.0), ValueError, "n_head = 2.0"),
        (_bad_window(weight=torch.ones(64, 64)), ValueError, r"weight has shape \(64, 64\)"),
        (_bad_window(bias=torch.ones(64)), ValueError, r"bias has shape \(64,\)"),
        (_bad_window(ln_weight=None), TypeError, "ln_weight"),
        (_bad_window(ln_bias=torch.ones(64, dtype=torch.float64)), TypeError, "use one dtype"),
        (_bad_window(proj_weight=torch.ones(64, 32)), ValueError, r"proj_weight has shape"),
        (_bad_window(proj_bias=torch.ones(64)), ValueError, "proj_bias was given without"),
        (
            _bad_window(proj_weight=torch.ones(64, 64), proj_bias=torch.ones(32)),
            ValueError,
            r"proj_bias has shape \(32,\)",
        ),
    ],
)
def test_window_attention_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def _bad_embedded(**changes):
    """embedded_window_attention with one argument changed from a valid call."""
    ids = torch.zeros(1, 4, dtype=torch.long)
    args = {"window": ids, "token": ids[:, 0], "wte": torch.ones(10, 64),
            "wpe": torch.ones(8, 64), "weight": torch.ones(192, 64), "ln_weight": torch.ones(64),
            "n_head": 2}  # fmt: skip
    args.update(changes)
    return lambda: ops.embedded_window_attention(**args)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad_embedded(window=torch.zeros(1, 4)), TypeError, "window must be an int64"),
        (_bad_embedded(window=torch.zeros(1, 9, dtype=torch.long)), ValueError, "only 8 positions"),
        (_bad_embedded(token=torch.zeros(2, dtype=torch.long)), ValueError, "token has 2 rows"),
        (_bad_embedded(wpe=torch.ones(8, 32)), ValueError, r"wpe has shape \(8, 32\)"),
        (_bad_embedded(n_head=3), ValueError, "n_head = 3 must be a positive divisor"),
        (_bad_embedded(weight=torch.ones(64, 64)), ValueError, r"weight has shape \(64, 64\)"),
    ],
)
def test_embedded_window_attention_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def _bad_tail(**changes):
    """decode_tail with one argument changed from a valid call."""
    C, N = 8, 32
    weights = [torch.ones(C, C), None, torch.ones(C), None, torch.ones(N, C), None,
               torch.ones(C, N), None, torch.ones(C), None, torch.ones(5, C)]  # fmt: skip
    args = {"y": torch.ones(1, C), "x": torch.ones(1, C), "weights": weights}
    for name, value in changes.items():
        if name in ("y", "x"):
            args[name] = value
        else:
            weights[ops.decode.TAIL_TENSORS.index(name)] = value
    return lambda: ops.decode_tail(**args)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad_tail(y=torch.ones(8)), ValueError, "at least 2 dimension"),
        (_bad_tail(x=torch.ones(2, 8)), ValueError, r"x has shape \(2, 8\)"),
        (_bad_tail(fc_weight=torch.ones(16, 8)), ValueError, r"fc_weight has shape \(16, 8\)"),
        (_bad_tail(ln2_weight=None), TypeError, "ln2_weight"),
        (_bad_tail(head_weight=torch.ones(5, 4)), ValueError, r"head_weight has shape \(5, 4\)"),
        (_bad_tail(proj_bias=torch.ones(8, dtype=torch.float64)), TypeError, "use one dtype"),
    ],
)
def test_decode_tail_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def test_decode_tail_weights_count_is_checked():
    with pytest.raises(ValueError, match="weights must hold 11 tensors"):
        ops.decode_tail(torch.ones(1, 8), torch.ones(1, 8), [torch.ones(8, 8)])


def _bad_mlp(**changes):
    """window_mlp with one argument changed from a valid call."""
    args = {"y": torch.ones(3, 8), "x": torch.ones(3, 8), "proj_weight": torch.ones(8, 8),
            "proj_bias": None, "fc_weight": torch.ones(32, 8), "fc_bias": None,
            "mlp_proj_weight": torch.ones(8, 32), "ln_weight": torch.ones(8)}  # fmt: skip
    args.update(changes)
    return lambda: ops.window_mlp(**args)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad_mlp(y=torch.ones(8)), ValueError, "at least 2 dimension"),
        (_bad_mlp(y=torch.ones(1, 3, 8)), ValueError, r"y must be \(R, C\)"),
        (_bad_mlp(x=torch.ones(3, 9)), ValueError, r"x has shape \(3, 9\)"),
        (_bad_mlp(proj_weight=torch.ones(8, 9)), ValueError, "proj_weight has shape"),
        (_bad_mlp(fc_weight=torch.ones(32, 7)), ValueError, r"expected \(32, 8\)"),
        (_bad_mlp(fc_bias=torch.ones(31)), ValueError, "fc_bias has shape"),
        (
            _bad_mlp(mlp_proj_weight=torch.ones(32, 8)),
            ValueError,
            r"mlp_proj_weight has shape \(32, 8\); expected \(8, 32\)",
        ),
        (_bad_mlp(mlp_proj_weight=None), TypeError, "mlp_proj_weight"),
        (_bad_mlp(mlp_proj_bias=torch.ones(32)), ValueError, "mlp_proj_bias has shape"),
        (_bad_mlp(ln_weight=None), TypeError, "ln_weight"),
        (_bad_mlp(x=torch.ones(3, 8, dtype=torch.float64)), TypeError, "use one dtype"),
    ],
)
def test_window_mlp_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (_bad(x=[1.0]), TypeError, "torch.Tensor"),
        (_bad(x=torch.ones(8)), ValueError, "at least 2 dimension"),
        (_bad(x=torch.ones(1, 1, 8)), ValueError, r"x must be \(rows, K\)"),
        (_bad(weight=torch.ones(4, 7)), ValueError, r"weight must be \(N, 8\)"),
        (_bad(weight=torch.ones(4, 8, dtype=torch.float64)), TypeError, "use one dtype"),
        (_bad(bias=torch.ones(5)), ValueError, r"bias has shape \(5,\); expected \(4,\)"),
        (_bad(ln_bias=torch.ones(8)), ValueError, "ln_bias without ln_weight"),
        (_bad(residual=torch.ones(2, 4)), ValueError, "residual has shape"),
        (_bad(weight=torch.ones(8, 4).t()), ValueError, "contiguous"),
        (_bad(gelu=1), TypeError, "gelu must be True or False"),
        (_bad(split_k=4), TypeError, "split_k must be True or False"),
        (
            lambda: ops.decode_attention(
                torch.ones(1, 12), torch.ones(1, 2, 3, 2), torch.ones(1, 2, 3, 2), 1
            ),
            TypeError,
            "pos must be an int64 tensor",
        ),  # fmt: skip
        (
            lambda: ops.decode_attention(
                torch.ones(1, 11), torch.ones(1, 2, 3, 2), torch.ones(1, 2, 3, 2), torch.tensor(1)
            ),
            ValueError,
            r"qkv must be \(1, 12\)",
        ),  # fmt: skip
        (
            lambda: ops.decode_attention(
                torch.ones(1, 12), torch.ones(1, 2, 3, 2), torch.ones(1, 2, 4, 2), torch.tensor(1)
            ),
            ValueError,
            "v_cache has shape",
        ),  # fmt: skip
    ],
)
def test_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def test_extension_checks_its_arguments():
    # the second line of defence: a direct call with mismatched buffers never touches memory
    x, w = torch.ones(1, 8), torch.ones(4, 8)
    with pytest.raises(ValueError, match=r"out has shape \(1, 3\)"):
        _C.decode_linear(torch.empty(1, 3), x, w, None, None, None, None, 1e-5, False)
    with pytest.raises(ValueError, match="ln_bias without ln_weight"):
        _C.decode_linear(torch.empty(1, 4), x, w, None, None, torch.ones(8), None, 1e-5, False)
    with pytest.raises(ValueError, match="pos must hold one position"):
        _C.decode_attention(torch.empty(1, 4), torch.ones(1, 12), torch.ones(1, 2, 3, 2),
                            torch.ones(1, 2, 3, 2), torch.tensor([1, 2]))  # fmt: skip
    # window_mlp: no CPU kernel (False: the caller makes the three calls), after its checks
    y, x, wp, bp, lw, lb, wf, bf, wm, bm = _mlp_inputs(3, 8, torch.float32, torch.Generator())
    assert _C.window_mlp(torch.empty_like(x), y, x, wp, bp, lw, lb, wf, bf, wm, bm, 1e-5) is False
    with pytest.raises(ValueError, match="mlp_proj_weight"):
        _C.window_mlp(
            torch.empty_like(x), y, x, wp, bp, lw, lb, wf, bf, torch.ones(32, 8), bm, 1e-5
        )


@pytest.fixture
def registers_max_k():
    """Set decode_linear's one-row CUDA kernel's register rows (set_linear_registers_max_k:
    opt-in, csrc/decode.h's kLinearRegistersMaxK) for a test; the build's default after it."""
    default = _C.linear_registers_max_k()
    yield _C.set_linear_registers_max_k
    _C.set_linear_registers_max_k(default)


def test_linear_registers_max_k_is_a_switch_with_checked_input(registers_max_k):
    registers_max_k(384)
    assert _C.linear_registers_max_k() == 384
    with pytest.raises(ValueError, match="max_k must be >= 0"):
        registers_max_k(-1)
    assert _C.linear_registers_max_k() == 384


@pytest.mark.cuda
@pytest.mark.parametrize("shape", LINEAR_SHAPES)
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("max_k", [0, 2048])
def test_cuda_linear_matches_torch(shape, dtype, gen, max_k, registers_max_k):
    """Both one-row kernels: the row in shared memory (max_k 0, the default) and, where it
    fits, in registers (max_k 2048)."""
    registers_max_k(max_k)
    _check_linear(shape, dtype, gen, "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", MMA_LINEAR_SHAPES)
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
def test_cuda_many_row_linear_matches_torch(shape, dtype, gen):
    _check_linear(shape, dtype, gen, "cuda")


def test_many_row_linear_matches_torch_on_the_cpu(gen):
    """The CPU reference at a window's row count (what the CUDA many-row results are held to)."""
    _check_linear((40, 48, 72), torch.bfloat16, gen, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
def test_cuda_attention_matches_torch(shape, dtype, gen):
    _check_attention(shape, dtype, gen, "cuda")


@pytest.mark.cuda
def test_cuda_linear_unaligned_weight_takes_scalar_kernel(gen):
    base = torch.randn(1 + 24 * 64, generator=gen).cuda()
    w = base[1:].view(24, 64)  # 4-byte offset: rows not 16-byte aligned
    x = torch.randn(1, 64, generator=gen).cuda()
    assert_close(ops.decode_linear(x, w), x.double() @ w.double().t(), torch.float32, "unaligned")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
def test_cuda_linear_unaligned_input_with_aligned_weights(gen, dtype):
    """x not 16-byte aligned, the weights aligned: the kernel reads the weights in 16-byte loads
    and x one element at a time (the 16-byte reads of x need an aligned row), with the
    LayerNorm and the residual as the decode step uses them."""
    R, K, N = 2, 64, 24
    base = torch.randn(1 + R * K, generator=gen).to(dtype).cuda()
    x = base[1:].view(R, K)  # 2 or 4 bytes past an aligned address
    w, b, lw, lb, res = (t.cuda() for t in _linear_inputs(R, K, N, dtype, gen)[1:])
    got = ops.decode_linear(x, w, b, ln_weight=lw, ln_bias=lb, residual=res)
    want = _linear_reference(x, w, b, lw, lb, res, gelu=False)
    assert_close(got, want, dtype, "unaligned x")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("K", [256, 384, 1024])
def test_cuda_linear_registers_without_layernorm_give_the_shared_rows_bits(
    gen, dtype, K, registers_max_k
):
    """Without a LayerNorm the kernel that holds x in registers (16-byte aligned x, opt-in)
    makes the shared-memory kernel's products and sums in its order (x one element at a time,
    not aligned): the same bits, with a bias, the GELU and a residual."""
    registers_max_k(2048)
    R, N = 3, 40
    x, w, b, _, _, res = (t.cuda() for t in _linear_inputs(R, K, N, dtype, gen))
    base = torch.empty(1 + R * K, dtype=dtype, device="cuda")
    unaligned = base[1:].view(R, K)
    unaligned.copy_(x)
    for kw in ({}, {"bias": b, "gelu": True, "residual": res}):
        assert torch.equal(ops.decode_linear(x, w, **kw), ops.decode_linear(unaligned, w, **kw))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
def test_cuda_linear_folded_layernorm_holds_for_rows_far_from_zero(gen, dtype, registers_max_k):
    """The register-row kernel (opt-in) folds the LayerNorm onto the weight row
    (r sum (w g)(x - m) + sum w b): rows whose mean is 100x their spread, and constant rows
    (the LayerNorm's output is its bias), still meet the float64 reference to the dtype's
    tolerance."""
    registers_max_k(2048)
    R, K, N = 4, 384, 96
    x, w, b, lw, lb, _ = _linear_inputs(R, K, N, dtype, gen)
    x = (100.0 + x.float() / 2).to(dtype)
    x[-1] = 3.0  # constant
    x, w, b, lw, lb = (t.cuda() for t in (x, w, b, lw, lb))
    for kw in ({"ln_weight": lw, "ln_bias": lb}, {"bias": b, "ln_weight": lw, "gelu": True}):
        out = ops.decode_linear(x, w, **kw)
        ref = _linear_reference(
            x, w, kw.get("bias"), lw, kw.get("ln_bias"), None, kw.get("gelu", False)
        )
        assert_close(out, ref, dtype, f"offset rows {dtype} {sorted(kw)}")


@pytest.mark.cuda
def test_cuda_graph_replay_reads_the_position_each_time(gen):
    qkv = torch.randn(1, 3 * 4 * 16, generator=gen).cuda()
    kc, vc = torch.zeros(1, 4, 32, 16).cuda(), torch.zeros(1, 4, 32, 16).cuda()
    pos = torch.tensor(0).cuda()
    ops.decode_attention(qkv, kc, vc, pos)  # warm up outside the graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g):
        y = ops.decode_attention(qkv, kc, vc, pos)
    kc.zero_(), vc.zero_()
    for p in range(3):
        pos.fill_(p)
        g.replay()
    torch.cuda.synchronize()
    assert kc[:, :, :3].abs().sum(-1).gt(0).all() and not kc[:, :, 3:].any()
    y_ref, _, _ = _attention_reference(qkv, kc, vc, 2)
    assert_close(y, y_ref, torch.float32, "decode_attention replayed at position 2")


@pytest.mark.cuda
@pytest.mark.parametrize("R", [1, 256])
def test_cuda_programmatic_launch_chain_in_a_graph_gives_the_same_bits(gen, R):
    """A decode block as a chain of dependent kernels (each reads the one before's output),
    captured and replayed, with programmatic dependent launch (the default) and without: the
    kernels wait for their inputs, so both give eager's bits. R = 256 rows: the linears are the
    tensor-core kernel, which requests its weights before waiting."""
    C, nh, T = 384, 6, 64
    r = lambda *s: (torch.randn(*s, generator=gen) / 8).to(torch.bfloat16).cuda()  # noqa: E731
    x, w_attn, w_proj, w_fc, w_out = r(R, C), r(3 * C, C), r(C, C), r(4 * C, C), r(C, 4 * C)
    ln_w, ln_b = 1 + r(C), r(C)
    kc, vc = r(R, nh, T, C // nh), r(R, nh, T, C // nh)
    pos = torch.tensor(40, device="cuda")

    def block():
        qkv = ops.decode_linear(x, w_attn, ln_weight=ln_w, ln_bias=ln_b)
        h = ops.decode_linear(ops.decode_attention(qkv, kc, vc, pos), w_proj, residual=x)
        f = ops.decode_linear(h, w_fc, ln_weight=ln_w, ln_bias=ln_b, gelu=True)
        return ops.decode_linear(f, w_out, residual=h)

    _assert_replays_are_eager(block)


def _assert_replays_are_eager(chain) -> None:
    """chain() (CUDA launches returning a tensor) run eagerly, then captured in a CUDA graph and
    replayed three times, with programmatic dependent launch off and on: every replay gives
    eager's bits, and eager's bits are the same either way."""
    results = {}
    try:
        for pdl in (False, True):
            _C.set_programmatic_launch(pdl)
            eager = chain().clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side), torch.cuda.graph(graph):
                out = chain()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, eager), f"programmatic launch {pdl}: replay != eager"
            results[pdl] = eager
    finally:
        _C.set_programmatic_launch(True)
    assert torch.equal(results[False], results[True])


def _emulator_check(tmp_path, name: str) -> str:
    """Build csrc/attention_emu/<name>.cpp with the warp emulator, run its default cases, and
    return what it printed (one "ok  " or "FAIL" line a case); fails the test if it exits
    non-zero."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the emulator")
    exe = tmp_path / name
    subprocess.run(
        [cxx, "-std=c++17", "-O1", "-DGS_ATTN_EMULATE", f"-I{CSRC}",
         str(CSRC / "attention_emu" / f"{name}.cpp"), "-o", str(exe)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    run = subprocess.run([str(exe)], check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_window_attention_under_the_emulator(tmp_path):
    """The slide window's one-launch c_attn + attention (csrc/window_attention.cuh), its device
    code run on the CPU by the warp emulator, against the two kernels it replaces run the same
    way, bit for bit, and a float64 reference; its instance that embeds its input against
    window_embed's rows through the plain one; then its instance with c_proj (a cluster of the
    heads) against decode_linear's kernel on that output
    (attention_emu/window_attention_check.cpp)."""
    out = _emulator_check(tmp_path, "window_attention_check")
    assert out.count("ok  ") == 18, out
    assert out.count("with c_proj") == 6 and out.count("embedded") == 6, out


def test_window_mlp_under_the_emulator(tmp_path):
    """The slide window's one-launch rest of a block, c_proj + residual, ln_2, c_fc + GELU and
    mlp.c_proj + residual (csrc/window_mlp.cuh: a thread-block cluster passing x1 and h through
    distributed shared memory), its device code run on the CPU by the warp emulator, against
    decode_linear's three tensor-core launches run the same way, bit for bit, and a float64
    reference (attention_emu/window_mlp_check.cpp)."""
    out = _emulator_check(tmp_path, "window_mlp_check")
    assert out.count("ok  ") == 3, out


def test_emulator_reports_wrong_cluster_exchanges(tmp_path):
    """The warp emulator's thread-block clusters, on which window_mlp's check relies
    (attention_emu/cluster_check.cpp): a push by st.async onto mbarriers gives the right words,
    and each broken variant is reported as what it is: a store before the mbarrier exists, a
    read before the mbarrier wait, more bytes than the mbarrier expects."""
    out = _emulator_check(tmp_path, "cluster_check")
    assert out.count("ok  ") == 4 and "FAIL" not in out, out
    for words in ("before it was initialized", "before waiting", "more bytes than"):
        assert words in out, out


def test_tensor_core_linear_under_the_emulator(tmp_path):
    """decode_linear's tensor-core kernel (csrc/decode_mma.cuh), its own device code run on the
    CPU by the warp emulator against a float64 reference (attention_emu/decode_mma_check.cpp):
    fragment layouts, row and column tails, the in-place LayerNorm, the epilogue, and races on
    shared memory."""
    out = _emulator_check(tmp_path, "decode_mma_check")
    assert out.count("ok  ") == 10, out


def test_decode_tail_under_the_emulator(tmp_path):
    """The end of a decode step in one launch (csrc/decode_tail.cuh: a thread-block cluster
    passing x1, h and x2 by st.async), its device code run on the CPU by the warp emulator with
    its CTAs drifting apart, against a float64 reference of the four decode_linear calls
    (attention_emu/decode_tail_check.cpp)."""
    out = _emulator_check(tmp_path, "decode_tail_check")
    assert out.count("ok  ") == 2, out


def test_split_k_linear_under_the_emulator(tmp_path):
    """decode_linear's split-K kernel (csrc/decode_split.cuh: K over a thread-block cluster of 4
    CTAs, the partials pushed to each warp tile's owner by st.async), its device code run on the
    CPU by the warp emulator with its CTAs drifting apart: within bf16 tolerance of a float64
    reference and of the unsplit kernel, the same bits run twice
    (attention_emu/decode_split_check.cpp)."""
    out = _emulator_check(tmp_path, "decode_split_check")
    assert out.count("ok  ") == 3, out
