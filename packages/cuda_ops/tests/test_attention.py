"""Causal attention: CPU and CUDA kernels against PyTorch's manual attention in float64,
the dropout stream against an independent Philox, gradcheck, opcheck, bad inputs, the model
backend, torch.compile, CUDA graphs, and the CUDA kernels' device code under the warp emulator."""

from __future__ import annotations

import contextlib
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C, OpInputError, OpTypeError
from gptstack.cuda_ops.attention import HEAD_SIZES, cuda_variant, gptstack_attention
from gptstack.cuda_ops.testing import MASK32, assert_close, philox4x32_10
from gptstack.model import GPT, GPTConfig, manual_attention, sdpa_attention

CSRC = Path(__file__).resolve().parents[1] / "csrc"
DTYPES = [torch.float32, torch.bfloat16, torch.float64]
# T = 1, odd T, T not a multiple of the 16-row tiles nor of the 64-key tiles, and one above 128
SHAPES = [(1, 1, 1, 32), (2, 3, 7, 64), (1, 2, 17, 128), (2, 1, 65, 32), (1, 2, 130, 64)]


def _qkv(shape, dtype, gen, device="cpu", packed=False):
    """q, k, v of `shape`, contiguous or as the model makes them: views of one (B, T, 3C)."""
    B, nh, T, hs = shape
    if packed:
        qkv = torch.randn(B, T, 3 * nh * hs, generator=gen).to(dtype).to(device)
        return [t.view(B, T, nh, hs).transpose(1, 2) for t in qkv.split(nh * hs, dim=2)]
    return [torch.randn(shape, generator=gen).to(dtype).to(device) for _ in range(3)]


def _reference(q, k, v, dy, mask=None, p=0.0):
    """Manual attention and its gradients in float64 on the CPU (mask: the kept weights)."""
    q, k, v = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    if mask is None:
        y = manual_attention(q, k, v)
    else:
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        T = q.size(-2)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att * mask.double() / (1 - p)) @ v
    grads = torch.autograd.grad(y, (q, k, v), dy.double().cpu())
    return y.detach(), grads


def _assert_grads_close(grads, refs, dtype, what):
    """dq, dk, dv against their references, each measured at dv's scale: over one key (T = 1)
    dq and dk are zero in exact arithmetic and rounding noise in any implementation (with
    dropout, y = v / (1 - p) rounds, so D = rowsum(dy * y) no longer cancels dP exactly)."""
    for name, g, r in zip("qkv", grads, refs):
        assert_close(g, r, dtype, f"d{name} {what}", scale=refs[2])


def _run(q, k, v, dy, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    y = ops.causal_attention(q, k, v, **kw)
    return y, torch.autograd.grad(y, (q, k, v), dy)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_matches_manual_attention(shape, dtype, cpu_path, gen):
    q, k, v = _qkv(shape, dtype, gen)
    dy = torch.randn(shape, generator=gen).to(dtype)
    y, grads = _run(q, k, v, dy)
    y_ref, grads_ref = _reference(q, k, v, dy)
    assert y.shape == shape and y.dtype == dtype
    assert_close(y, y_ref, dtype, f"attention y {shape} {dtype} {cpu_path}")
    for name, g, g_ref in zip("qkv", grads, grads_ref):
        assert g.dtype == dtype
        assert_close(g, g_ref, dtype, f"attention d{name} {shape} {dtype} {cpu_path}")


def test_strided_views_match_contiguous(gen):
    shape = (2, 4, 33, 32)
    q, k, v = _qkv(shape, torch.float32, gen, packed=True)
    assert not q.is_contiguous()
    dy = torch.randn(shape, generator=gen)
    y, grads = _run(q, k, v, dy)
    y_c, grads_c = _run(q.contiguous(), k.contiguous(), v.contiguous(), dy)
    assert torch.equal(y, y_c)
    for g, g_c in zip(grads, grads_c):
        assert torch.equal(g, g_c)
    # y is laid out (B, T, nh, hs): the model's head re-assembly is a free view
    assert y.transpose(1, 2).is_contiguous()


def test_logsumexp_output(gen):
    q, k, v = _qkv((2, 2, 19, 64), torch.float64, gen)
    _, lse = torch.ops.gptstack.causal_attention(q, k, v, 0.0, None)
    scores = (q @ k.transpose(-2, -1)) / 8.0
    scores = scores.masked_fill(~torch.ones(19, 19, dtype=torch.bool).tril(), float("-inf"))
    assert_close(lse, torch.logsumexp(scores, dim=-1), torch.float64, "attention lse")


def test_gradient_of_a_broadcast_output_gradient(gen):
    # y.sum().backward() hands the backward a stride-0 gradient: it must be taken as is
    q, k, v = (t.requires_grad_() for t in _qkv((1, 2, 9, 32), torch.float64, gen))
    ops.causal_attention(q, k, v).sum().backward()
    _, grads_ref = _reference(q, k, v, torch.ones(1, 2, 9, 32, dtype=torch.float64))
    for t, g_ref in zip((q, k, v), grads_ref):
        assert_close(t.grad, g_ref, torch.float64, "attention grad of sum")


# --- dropout: the stream of csrc/attention_philox.h, rebuilt here independently --------------


def test_python_philox_matches_random123_known_answers():
    # Random123 kat_vectors, philox4x32_10
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((MASK32,) * 4, (MASK32, MASK32)) == (
        0x408F276D,
        0x41C83B0E,
        0xA20BC7C6,
        0x6D5451FD,
    )
    assert philox4x32_10(
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)
    ) == (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def dropout_mask(seed: int, B: int, nh: int, T: int, p: float) -> torch.Tensor:
    """(B, nh, T, T) bool, True where weight (i, j) is kept (attention_philox.h's mapping)."""
    key = (seed & MASK32, (seed >> 32) & MASK32)
    threshold = min(int(p * 65536 + 0.5), 65535)
    keep = torch.zeros(B, nh, T, T, dtype=torch.bool)
    for bh in range(B * nh):
        for i in range(T):
            for j in range(i + 1):
                c = ((j >> 4) * 4 + ((j & 7) >> 1), (i >> 4) * 8 + (i & 7), bh, 0)
                word = ((j >> 3) & 1) * 2 + ((i >> 3) & 1)
                bits = (philox4x32_10(c, key)[word] >> (16 * (j & 1))) & 0xFFFF
                keep[bh // nh, bh % nh, i, j] = bits >= threshold
    return keep


def _seed(value: int, device="cpu") -> torch.Tensor:
    return torch.tensor([value], dtype=torch.int64, device=device)


def test_dropout_mask_is_the_documented_stream():
    # q = k = 0: every visible weight is 1/(i+1); v = identity: y[i, j] = kept weight (i, j)
    B, nh, T, p, seed = 2, 2, 32, 0.2, 0x0123456789ABCDEF
    q = torch.zeros(B, nh, T, 32)
    v = torch.eye(T).expand(B, nh, T, T).contiguous()
    y = ops.causal_attention(q, q, v, dropout_p=p, seed=_seed(seed))
    keep = dropout_mask(seed, B, nh, T, p)
    assert torch.equal(y != 0, keep)
    i = torch.arange(T).view(T, 1).float()
    scale = 65536 / (65536 - round(p * 65536))
    assert_close(y[keep], (scale / (i + 1)).expand(B, nh, T, T)[keep], torch.float32, "kept")


def test_dropout_rate():
    B, nh, T, p = 2, 4, 128, 0.2  # 132k weights: the rate's standard deviation is 0.0011
    q = torch.zeros(B, nh, T, 128)
    v = torch.eye(T).expand(B, nh, T, T).contiguous()
    y = ops.causal_attention(q, q, v, dropout_p=p, seed=_seed(7))
    visible = torch.ones(T, T, dtype=torch.bool).tril().expand_as(y)
    rate = 1 - (y[visible] != 0).double().mean().item()
    assert abs(rate - p) < 0.006


# (1, 2, 130, 64): queries and keys in three chunks of the AVX2 path's 64 (attention_cpu_avx2.cpp)
@pytest.mark.parametrize("shape", [(2, 2, 37, 32), (1, 2, 130, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_dropout_forward_backward_match_masked_reference(shape, dtype, cpu_path, gen):
    p, seed = 0.3, 987654321
    q, k, v = _qkv(shape, dtype, gen, packed=True)
    dy = torch.randn(shape, generator=gen).to(dtype)
    y, grads = _run(q, k, v, dy, dropout_p=p, seed=_seed(seed))
    p_eff = round(p * 65536) / 65536  # p rounded to a multiple of 2^-16
    B, nh, T, _ = shape
    y_ref, grads_ref = _reference(q, k, v, dy, dropout_mask(seed, B, nh, T, p), p_eff)
    assert_close(y, y_ref, dtype, f"dropout y {shape} {dtype}")
    for name, g, g_ref in zip("qkv", grads, grads_ref):
        assert_close(g, g_ref, dtype, f"dropout d{name} {shape} {dtype}")


def test_dropout_seed_from_torch_generator(gen):
    q, k, v = _qkv((1, 2, 20, 32), torch.float32, gen)
    torch.manual_seed(5)
    a = ops.causal_attention(q, k, v, dropout_p=0.5)
    b = ops.causal_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(5)
    assert torch.equal(a, ops.causal_attention(q, k, v, dropout_p=0.5))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_gradcheck_float64(dropout_p, gen):
    q, k, v = (t.requires_grad_() for t in _qkv((1, 2, 11, 32), torch.float64, gen))
    seed = _seed(42)
    assert torch.autograd.gradcheck(
        lambda q, k, v: ops.causal_attention(q, k, v, dropout_p=dropout_p, seed=seed), (q, k, v)
    )


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_opcheck(dropout_p, gen):
    q, k, v = _qkv((2, 2, 13, 32), torch.float32, gen)
    seed = _seed(3) if dropout_p else None
    torch.library.opcheck(torch.ops.gptstack.causal_attention.default, (q, k, v, dropout_p, seed))
    y, lse = torch.ops.gptstack.causal_attention(q, k, v, dropout_p, seed)
    dy = torch.randn(y.shape, generator=gen)
    torch.library.opcheck(
        torch.ops.gptstack.causal_attention_backward.default, (dy, q, k, v, y, lse, dropout_p, seed)
    )


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda q: {"q": q.to(torch.float16)}, OpTypeError),
        (lambda q: {"q": q.to(torch.int32)}, OpTypeError),
        (lambda q: {"q": "q"}, OpTypeError),
        (lambda q: {"q": q[0]}, OpInputError),  # 3-D
        (lambda q: {"k": q[:, :, :5]}, OpInputError),  # another T
        (lambda q: {"v": q.double()}, OpTypeError),
        (lambda q: {"q": q[..., :16], "k": q[..., :16], "v": q[..., :16]}, OpInputError),  # hs
        (lambda q: {"q": q.transpose(2, 3).contiguous().transpose(2, 3)}, OpInputError),
        (lambda q: {"dropout_p": 1.0}, OpInputError),
        (lambda q: {"dropout_p": "0.1"}, OpTypeError),
        (lambda q: {"dropout_p": 0.1, "seed": torch.zeros(2, dtype=torch.int64)}, OpInputError),
    ],
)
def test_bad_inputs_raise(change, error, gen):
    q = torch.randn(2, 2, 8, 32, generator=gen)
    args = {"q": q, "k": q.clone(), "v": q.clone(), "dropout_p": 0.0, "seed": None}
    args.update(change(q))
    with pytest.raises(error, match="causal_attention"):
        ops.causal_attention(
            args["q"], args["k"], args["v"], dropout_p=args["dropout_p"], seed=args["seed"]
        )


def test_variant_switch_rejects_unknown_settings():
    with pytest.raises(OpInputError, match="warps"), cuda_variant(forward_warps=6):
        pass
    with pytest.raises(OpInputError, match="warps"), cuda_variant(backward_warps="split"):
        pass
    with pytest.raises(OpInputError, match="backward mode"), cuda_variant(backward="fast"):
        pass
    with pytest.raises(OpInputError, match="no atomic-dQ mode"):
        with cuda_variant(backward_warps="wgmma", backward="atomic"):
            pass


def test_extension_checks_its_arguments(gen):
    q = torch.randn(1, 2, 8, 32, generator=gen)
    y, lse = torch.empty_like(q), torch.empty(1, 2, 8)
    with pytest.raises(ValueError, match="unit stride"):
        _C.attention_forward(y, lse, q.transpose(2, 3), q, q, None)
    with pytest.raises(ValueError, match="lse"):
        _C.attention_forward(y, torch.empty(1, 2, 9), q, q, q, None)
    with pytest.raises(ValueError, match="seed"):
        _C.attention_forward(y, lse, q, q, q, None, 0.5)
    with pytest.raises(ValueError, match="head size"):
        _C.attention_forward(y[..., :16], lse, q[..., :16], q[..., :16], q[..., :16], None)
    with pytest.raises(ValueError, match="scratch"):  # the atomic mode is bf16 CUDA only
        _C.attention_backward(
            y, y.clone(), y.clone(), q, q, q, q, y, lse, None, 0.0, torch.empty(1, 2, 8, 32)
        )
    with pytest.raises(ValueError, match="scratch"):  # the wgmma backward's is (B, nh, T)
        _C.attention_backward(
            y, y.clone(), y.clone(), q, q, q, q, y, lse, None, 0.0, torch.empty(1, 2, 8, 32), 2
        )


# --- the model backend ---------------------------------------------------------------------
def _gpt(attention: str, dropout: float = 0.0) -> GPT:
    torch.manual_seed(11)  # same weights for every backend
    cfg = GPTConfig(
        vocab_size=50,
        block_size=40,
        n_layer=2,
        n_head=2,
        n_embd=64,
        dropout=dropout,
        attention=attention,
    )
    return GPT(cfg)


def test_model_backend_matches_sdpa(gen):
    idx = torch.randint(0, 50, (3, 37), generator=gen)
    targets = torch.randint(0, 50, (3, 37), generator=gen)
    results = {}
    for backend in ("sdpa", "gptstack"):
        model = _gpt(backend)
        logits, loss = model(idx, targets)
        loss.backward()
        results[backend] = (logits, loss, [p.grad for p in model.parameters()])
    (l_s, loss_s, g_s), (l_g, loss_g, g_g) = results["sdpa"], results["gptstack"]
    assert_close(l_g, l_s, torch.float32, "model logits")
    assert abs(loss_g.item() - loss_s.item()) < 1e-5 * abs(loss_s.item())
    for a, b in zip(g_g, g_s):
        assert_close(a, b, torch.float32, "model gradients")


def test_model_backend_trains_with_dropout(gen):
    model = _gpt("gptstack", dropout=0.2).train()
    idx = torch.randint(0, 50, (2, 40), generator=gen)
    _, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()  # no dropout: the same function as sdpa again
    ref = _gpt("sdpa", dropout=0.2).eval()
    assert_close(model(idx)[0], ref(idx)[0], torch.float32, "eval logits after training")


def test_backend_hands_decoding_to_sdpa(gen):
    q, k, v = _qkv((2, 2, 12, 32), torch.float32, gen)
    last = q[:, :, -1:]
    for kw in ({"q_start": 11}, {"q_start": torch.tensor(11)}, {"q_start": 11, "kv_len": 12}):
        assert torch.equal(gptstack_attention(last, k, v, **kw), sdpa_attention(last, k, v, **kw))
    q16 = q[..., :16].contiguous()  # head size without a kernel
    assert torch.equal(gptstack_attention(q16, q16, q16), sdpa_attention(q16, q16, q16))


@pytest.mark.slow
def test_torch_compile_fullgraph_cpu(gen):
    q, k, v = (t.requires_grad_() for t in _qkv((2, 2, 24, 32), torch.float32, gen, packed=True))
    dy = torch.randn(2, 2, 24, 32, generator=gen)
    compiled = torch.compile(lambda q, k, v: ops.causal_attention(q, k, v) * 2, fullgraph=True)
    y = compiled(q, k, v)
    grads = torch.autograd.grad(y, (q, k, v), dy)
    y_ref, grads_ref = _reference(q, k, v, 2 * dy)
    assert_close(y, 2 * y_ref, torch.float32, "compiled y")
    for g, g_ref in zip(grads, grads_ref):
        assert_close(g, g_ref, torch.float32, "compiled grad")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """csrc/attention_emu/check.cpp built with the CPU kernels and the real CUDA launchers."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the emulator")
    exe = tmp_path_factory.mktemp("emu") / "check"
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O1",
            "-DGS_ATTN_EMULATE",
            f"-I{CSRC}",
            str(CSRC / "attention_emu" / "check.cpp"),
            str(CSRC / "attention_cpu.cpp"),
            str(CSRC / "attention_cpu_avx2.cpp"),
            "-x",
            "c++",
            str(CSRC / "attention_cuda.cu"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
    )
    return exe


@pytest.mark.slow
def test_kernels_under_emulator(emulator):
    """The CUDA kernels' own device code, run on the CPU by csrc/attention_emu (see check.cpp)
    through the launchers: fragment layouts, masking, tails, dropout, the shared-memory protocol
    and the launch checks."""
    run = subprocess.run([str(emulator)], check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(" ok") == len(run.stdout.strip().splitlines())


@pytest.mark.slow
def test_every_launch_configuration_fits(emulator):
    """Every bf16 kernel instance the dispatcher can pick (head size x warps x dropout x forward /
    two-stage / atomic backward, the split-keys forward, the wgmma forward and backward) passes
    the launch rules a GPU enforces, in one process: above 48 KiB of shared memory each
    instance must have raised its own limit (the H200's first run failed where one instance's
    opt-in stood in for another's).
    The emulated rules themselves refuse a launch that did not opt in, and a configuration
    beyond the device's maximum gets an error naming the op, the configuration and the limit
    ("limits"), and the wgmma kernels where the device runs no sm_90a code name what they need."""
    run = subprocess.run(
        [str(emulator), "limits", "all"], check=False, capture_output=True, text=True, timeout=120
    )
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0, run.stdout + run.stderr
    assert lines[0].startswith("limits:") and lines[0].endswith(" ok")
    configs = [line for line in lines if line.startswith("cfg ")]
    # x {4, 8} warps x dropout x 3 kinds, + the split-keys forward (no dropout) per head size,
    # + the wgmma forward and backward x dropout
    assert len(configs) == len(HEAD_SIZES) * (2 * 2 * 3 + 1 + 2 * 2)
    assert sum("split keys" in line for line in configs) == len(HEAD_SIZES)
    assert sum(" wgmma " in line for line in configs) == len(HEAD_SIZES) * 4
    for line in configs:
        assert line.endswith(" ok"), line
        smem = int(line.split(": ")[1].split(" bytes")[0])
        assert ("(opted in)" in line) == (smem > 48 * 1024), line
    assert any("(opted in)" in line for line in configs)  # the sweep covers the opt-in path


# --- CUDA ------------------------------------------------------------------------------------
PRESET_SHAPES = [(8, 8, 64, 32), (4, 6, 256, 64), (2, 12, 1024, 64), (2, 2, 100, 128)]


_CUDA_REFERENCES: dict = {}  # (shape, dropout_p) -> reference: the inputs are seeded alike


def _cuda_case(shape, dropout_p, gen):
    q, k, v = _qkv(shape, torch.bfloat16, gen, device="cuda", packed=True)
    dy = torch.randn(shape, generator=gen).to(torch.bfloat16).cuda()
    key, seed = (shape, dropout_p), 1234567
    if key not in _CUDA_REFERENCES:
        B, nh, T, _ = shape
        if dropout_p and T <= 256:  # the Python mask is slow beyond
            p_eff = round(dropout_p * 65536) / 65536
            ref = _reference(q, k, v, dy, dropout_mask(seed, B, nh, T, dropout_p), p_eff)
        elif dropout_p:  # the same stream on both devices: the CPU kernel is the reference
            ref = _run(
                *(t.float().cpu() for t in (q, k, v, dy)), dropout_p=dropout_p, seed=_seed(seed)
            )
        else:
            ref = _reference(q, k, v, dy)
        _CUDA_REFERENCES[key] = ref
    return (q, k, v, dy, _seed(seed, "cuda")), _CUDA_REFERENCES[key]


@pytest.mark.cuda
@pytest.mark.parametrize("shape", PRESET_SHAPES + [(1, 1, 1, 32), (3, 2, 77, 64)])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("backward", ["stages", "atomic"])
def test_cuda_bf16_matches_reference(shape, dropout_p, warps, backward, gen):
    (q, k, v, dy, seed), (y_ref, g_ref) = _cuda_case(shape, dropout_p, gen)
    with cuda_variant(warps, warps, backward):
        y, grads = _run(q, k, v, dy, dropout_p=dropout_p, seed=seed)
    what = f"{shape} warps={warps} p={dropout_p} backward={backward}"
    assert_close(y, y_ref, torch.bfloat16, f"cuda y {what}")
    _assert_grads_close(grads, g_ref, torch.bfloat16, f"cuda {what}")


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape", [(1, 6, 256, 64), (1, 8, 64, 32), (1, 2, 300, 128), (2, 3, 45, 64), (1, 1, 1, 32)]
)
def test_cuda_split_keys_forward_matches_reference(shape, gen):
    """The opt-in split-keys forward (16 queries a CTA, the keys split over 4 warps) against
    float32, its lse through the 4-warp backward."""
    (q, k, v, dy, seed), (y_ref, g_ref) = _cuda_case(shape, 0.0, gen)
    with cuda_variant("split", 4, "stages"):
        y, grads = _run(q, k, v, dy, dropout_p=0.0, seed=seed)
    assert_close(y, y_ref, torch.bfloat16, f"cuda split y {shape}")
    _assert_grads_close(grads, g_ref, torch.bfloat16, f"cuda split {shape}")


@pytest.mark.cuda
def test_cuda_split_keys_forward_refuses_dropout(gen):
    (q, k, v, _, seed), _ = _cuda_case((1, 2, 64, 64), 0.2, gen)
    with pytest.raises(ValueError, match="split-keys forward has no dropout"):
        with cuda_variant("split"):
            ops.causal_attention(q, k, v, dropout_p=0.2, seed=seed)


def _captured(step):
    """(graph, outputs) of step() captured in a CUDA graph, after warm-up calls on a side
    stream (torch.cuda.graphs' recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = step()
    return g, outs


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.cuda
@pytest.mark.parametrize("shape", PRESET_SHAPES + [(1, 1, 1, 32), (3, 2, 77, 64)])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_cuda_wgmma_matches_reference(shape, dropout_p, gen):
    """The opt-in warpgroup-MMA forward and backward (sm_90) against float32."""
    if not _sm90():
        pytest.skip("wgmma runs on sm_90 GPUs (H100, H200) only")
    (q, k, v, dy, seed), (y_ref, g_ref) = _cuda_case(shape, dropout_p, gen)
    with cuda_variant("wgmma", "wgmma"):
        y, grads = _run(q, k, v, dy, dropout_p=dropout_p, seed=seed)
    what = f"{shape} p={dropout_p}"
    assert_close(y, y_ref, torch.bfloat16, f"cuda wgmma y {what}")
    _assert_grads_close(grads, g_ref, torch.bfloat16, f"cuda wgmma {what}")


@pytest.mark.cuda
def test_cuda_wgmma_switch_routes_the_default_variant(gen):
    """_C.set_attention_wgmma(True): the default variant runs the wgmma kernels on sm_90 (the
    same results as asking for them), the mma.sync kernels elsewhere."""
    (q, k, v, dy, seed), (y_ref, g_ref) = _cuda_case((2, 3, 77, 64), 0.0, gen)
    with cuda_variant("wgmma", "wgmma") if _sm90() else contextlib.nullcontext():
        want = _run(q, k, v, dy, dropout_p=0.0, seed=seed)
    _C.set_attention_wgmma(True)
    try:
        got = _run(q, k, v, dy, dropout_p=0.0, seed=seed)
    finally:
        _C.set_attention_wgmma(False)
    for a, b in zip((got[0], *got[1]), (want[0], *want[1])):
        assert torch.equal(a, b)  # the same kernels: the same bits
    assert_close(got[0], y_ref, torch.bfloat16, "switched y")


@pytest.mark.cuda
def test_cuda_wgmma_graph_capture(gen):
    """The wgmma kernels and the backward's D pre-pass replay in a CUDA graph."""
    if not _sm90():
        pytest.skip("wgmma runs on sm_90 GPUs (H100, H200) only")
    shape = (4, 6, 256, 64)
    q, k, v = (t.detach().requires_grad_() for t in _qkv(shape, torch.bfloat16, gen, "cuda"))
    dy = torch.randn(shape, generator=gen).to(torch.bfloat16).cuda()

    def step():
        with cuda_variant("wgmma", "wgmma"):
            y = ops.causal_attention(q, k, v)
            return (y, *torch.autograd.grad(y, (q, k, v), dy))

    g, outs = _captured(step)
    for t in (q, k, v, dy):
        t.data.copy_(torch.randn(shape, generator=gen).to(torch.bfloat16))
    g.replay()
    torch.cuda.synchronize()
    y_ref, g_ref = _reference(q, k, v, dy)
    for o, r in zip(outs, (y_ref, *g_ref)):
        assert_close(o, r, torch.bfloat16, "wgmma graph replay")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1, 1, 1, 32), (2, 3, 45, 64), (1, 2, 70, 128)])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_cuda_float32_matches_cpu(shape, dropout_p, gen):
    q, k, v = _qkv(shape, torch.float32, gen)
    dy = torch.randn(shape, generator=gen)
    y_ref, g_ref = _run(q, k, v, dy, dropout_p=dropout_p, seed=_seed(99))
    y, grads = _run(
        q.cuda(), k.cuda(), v.cuda(), dy.cuda(), dropout_p=dropout_p, seed=_seed(99, "cuda")
    )
    assert_close(y, y_ref, torch.float32, f"cuda fp32 y {shape}")
    _assert_grads_close(grads, g_ref, torch.float32, f"cuda fp32 {shape}")


@pytest.mark.cuda
def test_cuda_torch_compile_fullgraph(gen):
    q, k, v = _qkv((4, 6, 256, 64), torch.bfloat16, gen, device="cuda", packed=True)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    dy = torch.randn(4, 6, 256, 64, generator=gen).to(torch.bfloat16).cuda()
    fn = torch.compile(lambda q, k, v: ops.causal_attention(q, k, v), fullgraph=True)
    y = fn(q, k, v)
    grads = torch.autograd.grad(y, (q, k, v), dy)
    y_ref, g_ref = _reference(q, k, v, dy)
    assert_close(y, y_ref, torch.bfloat16, "compiled cuda y")
    for g, r in zip(grads, g_ref):
        assert_close(g, r, torch.bfloat16, "compiled cuda grad")


@pytest.mark.cuda
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
@pytest.mark.parametrize("backward", ["stages", "atomic"])
def test_cuda_graph_capture(dropout_p, backward, gen):
    shape = (8, 8, 64, 32)
    q, k, v = (t.detach().requires_grad_() for t in _qkv(shape, torch.bfloat16, gen, "cuda"))
    dy = torch.randn(shape, generator=gen).to(torch.bfloat16).cuda()

    def step():
        with cuda_variant(backward=backward):
            y = ops.causal_attention(q, k, v, dropout_p=dropout_p)
            return (y, *torch.autograd.grad(y, (q, k, v), dy))

    g, outs = _captured(step)
    for t in (q, k, v, dy):
        t.data.copy_(torch.randn(shape, generator=gen).to(torch.bfloat16))
    g.replay()
    first = [o.clone() for o in outs]
    g.replay()
    torch.cuda.synchronize()
    if dropout_p == 0:
        y_ref, g_ref = _reference(q, k, v, dy)
        for o, r in zip(first, (y_ref, *g_ref)):
            assert_close(o, r, torch.bfloat16, "graph replay")
    else:  # each replay draws a new seed on the device: new masks
        assert not torch.equal(first[0], outs[0])


@pytest.mark.cuda
def test_cuda_rejects_unaligned_bf16_rows(gen):
    base = torch.randn(2 * 2 * 9 * 32 + 4, generator=gen).to(torch.bfloat16).cuda()
    q = base[4:].view(2, 2, 9, 32)  # storage offset 4 elements: rows 8-byte aligned only
    with pytest.raises(OpInputError, match="aligned"):
        ops.causal_attention(q, q, q)
