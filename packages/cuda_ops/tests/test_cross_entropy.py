"""Cross-entropy on logits and fused with the LM head: values and gradients against PyTorch,
ignore_index, chunking, autocast, gradcheck, opcheck, torch.compile, bad inputs, peak memory;
CUDA kernels with bf16 tolerances."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.cross_entropy import CHUNK_BYTES, ROW_ALIGN, default_chunk_rows
from gptstack.cuda_ops.testing import assert_close

DTYPES = [torch.float32, torch.bfloat16, torch.float64]
# (rows, V): one row, V = 1, V odd or not a multiple of 8, the char and esp32 vocabularies, and
# (64, 1031) above the OpenMP threshold
CE_SHAPES = [(1, 1), (1, 7), (5, 65), (37, 101), (8, 515), (64, 1031)]


def _targets(n, V, gen, device="cpu", ignored=0.2):
    t = torch.randint(0, V, (n,), generator=gen)
    t[torch.rand(n, generator=gen) < ignored] = -1
    if (t == -1).all():
        t[0] = 0
    return t.to(device)


def _ref_ce(z, t):
    z64 = z.detach().double().requires_grad_()
    loss = F.cross_entropy(z64.view(-1, z.shape[-1]), t.view(-1), ignore_index=-1)
    (dz,) = torch.autograd.grad(loss, z64)
    return loss.detach(), dz


@pytest.mark.parametrize("shape", CE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_matches_torch(shape, dtype, cpu_path, gen):
    z = (3 * torch.randn(shape, generator=gen)).to(dtype).requires_grad_()
    t = _targets(shape[0], shape[1], gen)
    loss = ops.cross_entropy(z, t)
    (dz,) = torch.autograd.grad(3.0 * loss, z)  # a dloss that is not 1
    ref, ref_dz = _ref_ce(z, t)
    assert loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert_close(loss, ref, dtype, f"ce loss {shape} {dtype} {cpu_path}")
    assert_close(dz, 3.0 * ref_dz, dtype, f"ce dlogits {shape} {dtype} {cpu_path}")


def test_confident_target_keeps_its_gradient_in_bf16(cpu_path, gen):
    # p_t = 0.9999: rounding p_t to bfloat16 first would turn p_t - 1 into 0
    z = torch.randn(16, 512, generator=gen)
    t = torch.randint(0, 512, (16,), generator=gen)
    z[torch.arange(16), t] = 16.0
    z = z.bfloat16().requires_grad_()
    (dz,) = torch.autograd.grad(ops.cross_entropy(z, t), z)
    _, ref_dz = _ref_ce(z, t)
    rows = torch.arange(16)
    assert_close(dz[rows, t], ref_dz[rows, t], torch.bfloat16, "target-element gradients")


def test_extreme_logits_stay_finite(cpu_path):
    z = torch.tensor([[1e4, -1e4, 0.0, 5.0], [-float("inf"), 2.0, 1.0, 0.0]])
    t = torch.tensor([1, 2])
    loss = ops.cross_entropy(z.clone().requires_grad_(), t)
    ref, _ = _ref_ce(z, t)
    assert torch.isfinite(loss)
    assert_close(loss, ref, torch.float32, "extreme logits")


def test_all_targets_ignored_gives_nan_like_torch():
    z, t = torch.randn(3, 5), torch.full((3,), -1)
    assert torch.isnan(ops.cross_entropy(z, t))
    assert torch.isnan(F.cross_entropy(z, t, ignore_index=-1))


def _ref_linear(h, w, t):
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = F.cross_entropy((h64 @ w64.t()).view(-1, w.shape[0]), t.view(-1), ignore_index=-1)
    return (loss.detach(), *torch.autograd.grad(loss, (h64, w64)))


LINEAR_SHAPES = [((1, 1, 8), 7), ((2, 19, 24), 53), ((4, 33, 40), 515)]


@pytest.mark.parametrize("shape, V", LINEAR_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk_rows", [1, 7, None])
def test_linear_cross_entropy_matches_torch(shape, V, dtype, chunk_rows, cpu_path, gen):
    h = torch.randn(shape, generator=gen).to(dtype).requires_grad_()
    w = (0.5 * torch.randn(V, shape[-1], generator=gen)).to(dtype).requires_grad_()
    t = _targets(h.numel() // shape[-1], V, gen).view(shape[:-1])
    loss = ops.linear_cross_entropy(h, w, t, chunk_rows=chunk_rows)
    dh, dw = torch.autograd.grad(0.5 * loss, (h, w))
    ref, ref_dh, ref_dw = _ref_linear(h, w, t)
    what = f"linear ce {shape} V={V} {dtype} chunk={chunk_rows} {cpu_path}"
    assert_close(loss, ref, dtype, what + " loss")
    assert_close(dh, 0.5 * ref_dh, dtype, what + " dh")
    assert_close(dw, 0.5 * ref_dw, dtype, what + " dweight")
    assert dh.dtype == dtype and dw.dtype == dtype


def test_linear_cross_entropy_under_autocast(gen):
    h = torch.randn(3, 10, 32, generator=gen, requires_grad=True)
    w = (0.5 * torch.randn(77, 32, generator=gen)).requires_grad_()
    t = _targets(30, 77, gen).view(3, 10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ops.linear_cross_entropy(h, w, t, chunk_rows=8)
    dh, dw = torch.autograd.grad(loss, (h, w))
    ref, ref_dh, ref_dw = _ref_linear(h, w, t)
    assert loss.dtype == dh.dtype == dw.dtype == torch.float32
    for got, r, name in ((loss, ref, "loss"), (dh, ref_dh, "dh"), (dw, ref_dw, "dweight")):
        assert_close(got, r, torch.bfloat16, f"autocast linear ce {name}")


def test_linear_cross_entropy_without_grad(gen):
    h, w = torch.randn(9, 16, generator=gen), torch.randn(40, 16, generator=gen)
    t = _targets(9, 40, gen)
    ref, _, _ = _ref_linear(h, w, t)
    with torch.no_grad():
        loss = ops.linear_cross_entropy(h.requires_grad_(), w, t, chunk_rows=4)
    assert not loss.requires_grad
    assert_close(loss, ref, torch.float32, "no-grad linear ce")


def test_default_chunk_rows():
    assert default_chunk_rows(100, 50304, 2) == 100  # fewer rows than one chunk: one chunk
    rows = default_chunk_rows(16 * 1024, 50304, 2)
    assert rows % ROW_ALIGN == 0 and rows * 50304 * 2 <= CHUNK_BYTES < (rows + 128) * 50304 * 2
    assert default_chunk_rows(10_000, 10**9, 4) == ROW_ALIGN  # never below one aligned block


def test_gradcheck_float64(gen):
    z = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, -1, 5, 0])
    assert torch.autograd.gradcheck(lambda z: ops.cross_entropy(z, t), (z,))
    h = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor([[1, 2, -1], [6, 0, 3]])
    assert torch.autograd.gradcheck(
        lambda h, w: ops.linear_cross_entropy(h, w, tt, chunk_rows=4), (h, w)
    )


def test_opcheck(gen):
    z = torch.randn(6, 11, generator=gen, requires_grad=True)
    t = _targets(6, 11, gen)
    torch.library.opcheck(torch.ops.gptstack.cross_entropy.default, (z, t, -1))
    dloss = torch.tensor(0.7)
    torch.library.opcheck(
        torch.ops.gptstack.cross_entropy_backward.default, (dloss, z.detach(), t, -1)
    )
    h = torch.randn(6, 8, generator=gen, requires_grad=True)
    w = torch.randn(11, 8, generator=gen, requires_grad=True)
    lce = torch.ops.gptstack.linear_cross_entropy.default
    torch.library.opcheck(lce, (h, w, t, -1, 4, True, torch.float32))
    torch.library.opcheck(lce, (h.detach(), w.detach(), t, -1, 4, False, torch.float32))


def test_compile_fullgraph(gen):
    h = torch.randn(2, 7, 16, generator=gen, requires_grad=True)
    w = torch.randn(30, 16, generator=gen, requires_grad=True)
    t = _targets(14, 30, gen).view(2, 7)

    def f(h, w):
        return ops.linear_cross_entropy(ops.gelu_tanh(h), w, t, chunk_rows=5)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(h, w), (h, w))
    ref = torch.autograd.grad(f(h, w), (h, w))
    for g, r in zip(got, ref, strict=True):
        assert_close(g, r, torch.float32, "compiled linear ce gradients")


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (
            lambda: ops.cross_entropy(torch.randn(3, 5), torch.zeros(3, dtype=torch.int32)),
            TypeError,
            "targets is int32",
        ),
        (
            lambda: ops.cross_entropy(torch.randn(3, 5), torch.zeros(4, dtype=torch.int64)),
            ValueError,
            "targets has 4 elements",
        ),
        (
            lambda: ops.cross_entropy(torch.randn(2, 5), torch.tensor([0, 5])),
            ValueError,
            "target 5 at row 1 is outside",
        ),
        (
            lambda: ops.cross_entropy(torch.randn(2, 5), torch.tensor([0, -2])),
            ValueError,
            "target -2 at row 1",
        ),
        (
            lambda: ops.linear_cross_entropy(
                torch.randn(2, 4), torch.randn(5, 3), torch.zeros(2, dtype=torch.int64)
            ),
            ValueError,
            r"weight has shape \(5, 3\); expected \(V, 4\)",
        ),
        (
            lambda: ops.linear_cross_entropy(
                torch.randn(2, 4), torch.randn(5, 4).double(), torch.zeros(2, dtype=torch.int64)
            ),
            TypeError,
            "weight is float64 but h is float32",
        ),
        (
            lambda: ops.linear_cross_entropy(
                torch.randn(2, 4),
                torch.randn(5, 4),
                torch.zeros(2, dtype=torch.int64),
                chunk_rows=0,
            ),
            ValueError,
            "chunk_rows is 0",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(bad, error, words):
    with pytest.raises(error, match=words):
        bad()


def test_extension_checks_its_arguments():
    z, t = torch.randn(4, 9), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="dlogits and grad_scale come together"):
        _C.cross_entropy(torch.empty(4), z, z, t, None, -1)
    with pytest.raises(ValueError, match=r"losses has shape \(3,\)"):
        _C.cross_entropy(torch.empty(3), None, z, t, None, -1)


# Peak memory, CPU: N x V = 4096 x 8192 float32 logits are 128 MiB; the fused op in 256-row
# chunks must stay far below one such tensor while the torch loss needs at least one. Each loss
# runs in a process of its own (argv[1]), so neither reuses pages the other freed. The peak is
# Linux's VmHWM, reset to the current RSS just before the loss ("5" > /proc/self/clear_refs):
# a delta of ru_maxrss once read 118 MB for the torch loss on CI, because the peak left by the
# imports sat above the RSS the loss started from.
_PEAK_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.nn.functional as F
    import gptstack.cuda_ops as ops
    def status_bytes(field):  # a line of /proc/self/status reads "VmHWM:   123456 kB"
        line = next(l for l in open("/proc/self/status") if l.startswith(field + ":"))
        return int(line.split()[1]) * 1024
    torch.manual_seed(0)
    N, C, V = 4096, 64, 8192
    h = torch.randn(N, C, requires_grad=True); w = torch.randn(V, C, requires_grad=True)
    t = torch.randint(0, V, (N,))
    small = h[:8].detach().requires_grad_()  # load every kernel before the baseline
    ops.linear_cross_entropy(small, w, t[:8]).backward()
    F.cross_entropy(small @ w.t(), t[:8]).backward()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    base = status_bytes("VmRSS")
    if sys.argv[1] == "fused":
        ops.linear_cross_entropy(h, w, t, chunk_rows=256).backward()
    else:
        F.cross_entropy(h @ w.t(), t, ignore_index=-1).backward()
    print(status_bytes("VmHWM") - base)
""")


def _peak_bytes(which: str) -> int:
    cmd = [sys.executable, "-c", _PEAK_SCRIPT, which]
    return int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()[-1])


@pytest.mark.slow
def test_fused_loss_never_holds_full_logits():
    fused, reference = _peak_bytes("fused"), _peak_bytes("torch")
    logits_bytes = 4096 * 8192 * 4
    assert fused < logits_bytes / 2, (fused, reference)
    # the measurement sees the torch loss's full logits (its pages are all written)
    assert reference > 0.9 * logits_bytes, (fused, reference)


# --- CUDA --------------------------------------------------------------------------------------
@pytest.mark.cuda
# a warp per row up to V = 2048 (odd V, the char vocabulary with a part-filled last block, the
# esp32 one vectorised, the limit), a block per row above it (2056: vectorised; 50304: gpt2)
@pytest.mark.parametrize(
    "shape",
    [(1, 7), (37, 101), (4099, 65), (1000, 512), (9, 2048), (64, 1031), (5, 2056), (512, 50304)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_cross_entropy_matches_torch(shape, dtype, gen):
    z = (3 * torch.randn(shape, generator=gen)).to(dtype).cuda().requires_grad_()
    t = _targets(shape[0], shape[1], gen, "cuda")
    loss = ops.cross_entropy(z, t)
    (dz,) = torch.autograd.grad(2.0 * loss, z)
    ref, ref_dz = _ref_ce(z, t)
    assert_close(loss, ref, dtype, f"cuda ce loss {shape} {dtype}")
    assert_close(dz, 2.0 * ref_dz, dtype, f"cuda ce dlogits {shape} {dtype}")


@pytest.fixture(params=[True, False], ids=["staged", "online"])
def staged(request):
    """Rows that fit twice in shared memory through the staged kernel (sm_90+, the default) and
    through the online kernel, then the default again."""
    _C.set_cross_entropy_staged(request.param)
    yield request.param
    _C.set_cross_entropy_staged(True)


@pytest.mark.cuda
# rows the staged kernel takes on sm_90+ (both fit twice in shared memory): one row of the
# smallest vectorised width above the warp kernel's, first (its launch needs no more than the
# default 48 KiB of shared memory: the launcher once raised the limit only to the first call's
# rows, and the wider launches after it failed); fewer rows than SMs; more, so each CTA walks
# several rows through both buffers (and a tenth ignored ones); float32 rows of 80 KB
@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1, 2056), torch.bfloat16),
        ((97, 50304), torch.bfloat16),
        ((1000, 50304), torch.bfloat16),
        ((700, 20000), torch.float32),
    ],
)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
def test_cuda_cross_entropy_staged_and_online_rows(shape, dtype, in_place, staged, gen):
    z = (3 * torch.randn(shape, generator=gen)).to(dtype).cuda()
    t = _targets(shape[0], shape[1], gen, "cuda", ignored=0.1)
    ref, ref_dz = _ref_ce(z, t)
    n = shape[0]
    losses = torch.empty(n, device="cuda")
    scale = torch.full((1,), 1.0 / int((t != -1).sum()), device="cuda")
    logits = z.clone()
    dz = logits if in_place else torch.empty_like(z)  # in place: as the fused LM-head loss runs
    _C.cross_entropy(losses, dz, logits, t, scale, -1, torch.cuda.current_stream().cuda_stream, 0)
    torch.cuda.synchronize()
    what = f"cuda ce {shape} {dtype} staged={staged} in_place={in_place}"
    assert_close(losses.sum() * scale[0], ref, dtype, f"{what} loss")
    assert_close(dz, ref_dz, dtype, f"{what} dlogits")
    assert (losses[t == -1] == 0).all(), what


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_linear_cross_entropy_matches_torch(dtype, gen):
    h = torch.randn(4, 256, 768, generator=gen).to(dtype).cuda().requires_grad_()
    w = (0.05 * torch.randn(50304, 768, generator=gen)).to(dtype).cuda().requires_grad_()
    t = _targets(1024, 50304, gen, "cuda").view(4, 256)
    loss = ops.linear_cross_entropy(h, w, t, chunk_rows=384)
    dh, dw = torch.autograd.grad(loss, (h, w))
    ref, ref_dh, ref_dw = _ref_linear(h, w, t)
    for got, r, name in ((loss, ref, "loss"), (dh, ref_dh, "dh"), (dw, ref_dw, "dweight")):
        assert_close(got, r, dtype, f"cuda linear ce {name} {dtype}")


@pytest.mark.cuda
def test_cuda_linear_cross_entropy_autocast_peak_memory(gen):
    # gpt2-124m's head on 4 x 1024 rows: the torch loss holds bf16 logits and float32 copies
    # of them (>= 3 x 400 MiB); the fused op holds one 256 MiB chunk and dweight
    h = torch.randn(4096, 768, generator=gen).cuda().requires_grad_()
    w = (0.05 * torch.randn(50304, 768, generator=gen)).cuda().requires_grad_()
    t = _targets(4096, 50304, gen, "cuda")
    peaks = {}
    for name in ("fused", "torch"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if name == "fused":
                loss = ops.linear_cross_entropy(h, w, t)
            else:
                loss = F.cross_entropy(h @ w.t(), t, ignore_index=-1)
        grads = torch.autograd.grad(loss, (h, w))
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() - base
        del loss, grads
    full_fp32_logits = 4096 * 50304 * 4
    assert peaks["fused"] < full_fp32_logits < peaks["torch"], peaks


@pytest.mark.cuda
def test_cuda_graph_capture_linear_cross_entropy(gen):
    h = torch.randn(512, 256, generator=gen).cuda().requires_grad_()
    w = (0.1 * torch.randn(4099, 256, generator=gen)).cuda().requires_grad_()
    t = _targets(512, 4099, gen, "cuda")

    def step():
        loss = ops.linear_cross_entropy(h, w, t, chunk_rows=128)
        return (loss, *torch.autograd.grad(loss, (h, w)))

    step()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g):
        outs = step()
    new = torch.randn(512, 256, generator=gen).cuda()
    with torch.no_grad():
        h.copy_(new)
    g.replay()
    torch.cuda.synchronize()
    ref = _ref_linear(new, w, t)
    for got, r in zip(outs, ref, strict=True):
        assert_close(got, r, torch.float32, "linear ce replayed from a CUDA graph")
