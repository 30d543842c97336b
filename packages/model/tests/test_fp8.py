"""FP8 training matmuls (gptstack.model.fp8): the scaling, the three products against the exact
products of their rounded operands, closeness to nn.Linear, and the model's fp8 choice."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

from gptstack.model import GPT, GPTConfig, ModelConfigError, ModelError
from gptstack.model import fp8 as fp8_module
from gptstack.model.fp8 import FORWARD, GRADIENT, Fp8Linear, fp8_linear, to_fp8

fp8_gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not fp8_gpu, reason="needs a GPU of compute capability >= 8.9"),
        ],
    ),
]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double().cpu() - ref.double().cpu()).norm() / ref.double().cpu().norm()).item()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _dequantized(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    t8, inv = to_fp8(t, dtype)
    return t8.double() * inv.double()


@pytest.mark.parametrize("dtype", [FORWARD, GRADIENT])
@pytest.mark.parametrize("seed", range(4))
def test_to_fp8_uses_the_whole_range_and_rounds_each_value_to_its_precision(dtype, seed):
    g = _gen(seed)
    scale = 10.0 ** torch.empty(1).uniform_(-6, 4, generator=g).item()  # any magnitude
    t = torch.randn(64, 48, generator=g) * scale
    t8, inv = to_fp8(t, dtype)
    assert t8.dtype == dtype and inv.dtype == torch.float32 and inv.dim() == 0
    assert t8.float().abs().max().item() == torch.finfo(dtype).max  # amax lands on the top
    mantissa_bits = {FORWARD: 3, GRADIENT: 2}[dtype]
    back = t8.double() * inv.double()
    amax = t.abs().max().double()
    # normal values: half an ulp of relative error; subnormal ones (after scaling): half the
    # smallest subnormal, taken back to t's scale
    info = torch.finfo(dtype)
    subnormal_step = info.tiny * 2.0**-mantissa_bits * amax / info.max
    bound = t.double().abs() * 2.0 ** -(mantissa_bits + 1) + subnormal_step / 2
    assert ((back - t.double()).abs() <= bound).all()


def test_to_fp8_of_zeros_is_zeros():
    t8, inv = to_fp8(torch.zeros(16, 16), FORWARD)
    assert (t8.float() == 0).all() and torch.isfinite(inv)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(32, 16, 48), (2, 48, 64, 32), (16, 128, 16)])
def test_fp8_linear_is_the_exact_product_of_its_rounded_operands(device, shape):
    """Forward and both gradients against float64 products of the same FP8-rounded operands:
    what is left is the output rounding (bf16 or fp32) and accumulation order."""
    *lead, K, N = shape
    g = _gen(sum(shape))
    x = torch.randn(*lead, K, generator=g).to(device).requires_grad_()
    w = torch.randn(N, K, generator=g).mul_(0.05).to(device).requires_grad_()
    dy = torch.randn(*lead, N, generator=g).mul_(1e-3).to(device)
    y = fp8_linear(x, w)
    y.backward(dy)
    xq, wq = _dequantized(x.detach(), FORWARD), _dequantized(w.detach(), FORWARD)
    dyq = _dequantized(dy, GRADIENT)
    assert y.dtype == torch.float32 and y.shape == (*lead, N)
    # the H100 accumulates FP8 products in less than fp32 (3e-5 seen), its forward in fast mode
    tol = 1e-5 if device == "cpu" else 2e-3
    assert rel_err(y.detach(), xq @ wq.t()) < tol
    assert rel_err(x.grad, dyq @ wq) < tol
    assert rel_err(w.grad, dyq.reshape(-1, N).t() @ xq.reshape(-1, K)) < tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(3))
def test_fp8_linear_is_close_to_linear(device, seed):
    g = _gen(seed)
    x = torch.randn(4, 32, 64, generator=g).to(device).requires_grad_()
    w = (torch.randn(96, 64, generator=g) * 0.02).to(device).requires_grad_()
    b = torch.randn(96, generator=g).to(device).requires_grad_()
    dy = torch.randn(4, 32, 96, generator=g).to(device)
    grads = []
    for f in (F.linear, fp8_linear):
        y = f(x, w, b)
        y.backward(dy)
        grads.append((y.detach(), x.grad, w.grad, b.grad))
        x.grad = w.grad = b.grad = None
    (y_ref, dx_ref, dw_ref, db_ref), (y, dx, dw, db) = grads
    assert rel_err(y, y_ref) < 0.05  # e4m3: 3 mantissa bits
    assert rel_err(dx, dx_ref) < 0.12  # e5m2 gradients: 2
    assert rel_err(dw, dw_ref) < 0.12
    assert rel_err(db, db_ref) < 1e-6  # the bias' gradient sums dy itself, not in FP8


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_linear_follows_autocast_and_gives_each_input_its_dtype_of_gradient(device):
    x = torch.randn(16, 32, device=device, requires_grad=True)
    w = torch.randn(48, 32, device=device, requires_grad=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = fp8_linear(x, w, torch.zeros(48, device=device))
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_linear_takes_inputs_and_gradients_of_any_layout(device):
    """A transposed input and a transposed (or broadcast) output gradient: each operand is
    made row-major before _scaled_mm (the GPU's rejects others; the CPU's takes any layout, so
    there the first assertion is the check), the results those of contiguous copies."""
    g = _gen(3)
    x_t = torch.randn(32, 48, generator=g).to(device).t().requires_grad_()  # (48, 32), strided
    assert to_fp8(x_t.detach(), FORWARD)[0].is_contiguous()
    w = torch.randn(64, 32, generator=g).to(device).requires_grad_()
    dy_t = torch.randn(64, 48, generator=g).to(device).t()
    y = fp8_linear(x_t, w)
    y.backward(dy_t)
    x = x_t.detach().contiguous().requires_grad_()
    w2 = w.detach().clone().requires_grad_()
    y2 = fp8_linear(x, w2)
    y2.backward(dy_t.contiguous())
    assert torch.equal(y, y2) and torch.equal(x_t.grad, x.grad) and torch.equal(w.grad, w2.grad)
    w.grad = None
    fp8_linear(x_t, w).sum().backward()  # a broadcast gradient (all strides 0)
    assert torch.isfinite(w.grad).all()


@pytest.mark.parametrize("shape", [(10, 32, 48), (16, 24, 48), (16, 32, 40)])
def test_fp8_linear_names_a_size_that_is_not_a_multiple_of_16(shape):
    M, K, N = shape
    with pytest.raises(ModelError, match="multiple of 16"):
        fp8_linear(torch.randn(M, K), torch.randn(N, K))


def test_fp8_linear_compiles_to_what_eager_computes():
    g = _gen(7)
    x = torch.randn(64, 32, generator=g, requires_grad=True)
    w = torch.randn(48, 32, generator=g, requires_grad=True)
    compiled = torch.compile(fp8_linear, fullgraph=True)
    y_eager = fp8_linear(x, w)
    y_eager.square().sum().backward()
    eager = (y_eager.detach(), x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    y = compiled(x, w)
    y.square().sum().backward()
    for a, b in zip((y.detach(), x.grad, w.grad), eager, strict=True):
        assert rel_err(a, b) < 1e-6


# --- the model's choice --------------------------------------------------------------------


def _fp8_model(make_gpt, fp8: str, seed: int = 0) -> GPT:
    return make_gpt(seed, vocab_size=64, n_embd=32, fp8=fp8)


@pytest.fixture
def fp8_products(monkeypatch):
    """Counts fp8_linear's forward products by their (K, N)."""
    calls = collections.Counter()
    real = fp8_module._Fp8Matmul.apply

    def counting(x, weight, out_dtype):
        calls[(x.size(1), weight.size(0))] += 1
        return real(x, weight, out_dtype)

    monkeypatch.setattr(fp8_module._Fp8Matmul, "apply", counting)
    return calls


@pytest.mark.parametrize("fp8", ["head", "all"])
def test_an_fp8_model_trains_in_fp8_and_evaluates_as_the_same_model_without(
    fp8, fp8_products, make_gpt, random_tokens
):
    reference, model = _fp8_model(make_gpt, "none"), _fp8_model(make_gpt, fp8, seed=1)
    assert list(model.state_dict()) == list(reference.state_dict())  # the checkpoint contract
    model.load_state_dict(reference.state_dict())
    idx = random_tokens(1, 2, 16, 64)
    targets = random_tokens(2, 2, 16, 64)
    logits_ref, loss_ref = reference(idx, targets)
    logits, loss = model(idx, targets)  # eval mode: no FP8
    assert torch.equal(logits, logits_ref) and torch.equal(loss, loss_ref)
    assert not fp8_products
    reference.train(), model.train()
    _, loss_ref = reference(idx, targets)
    _, loss = model(idx, targets)
    loss.backward()
    C, L = 32, model.config.n_layer
    head = {(C, 64): 1}
    blocks = {(C, 3 * C): L, (C, C): L, (C, 4 * C): L, (4 * C, C): L}
    assert dict(fp8_products) == (head if fp8 == "head" else {**head, **blocks})
    assert 0 < abs(loss.item() - loss_ref.item()) < 0.02 * loss_ref.item()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("fp8", ["head", "all"])
def test_the_fp8_choice_names_sizes_that_are_not_multiples_of_16(fp8, tiny_config):
    with pytest.raises(ModelConfigError, match="vocab_size=37.*pad_vocab_to"):
        tiny_config(fp8=fp8)  # vocab 37
    with pytest.raises(ModelConfigError, match="n_embd=40"):
        tiny_config(vocab_size=64, n_embd=40, n_head=4, fp8=fp8)


def test_the_fp8_choice_is_checked_and_survives_a_round_trip(tiny_config):
    with pytest.raises(ModelConfigError, match="choose one of"):
        tiny_config(vocab_size=64, fp8="fp8")
    config = tiny_config(vocab_size=64, fp8="head")
    assert GPTConfig.from_dict(config.to_dict()) == config
    assert GPTConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "fp8"}).fp8 == (
        "none"
    )  # configs written before the field load as they were


def test_the_fp8_choice_excludes_the_native_loss(tiny_config):
    pytest.importorskip("gptstack.cuda_ops")
    with pytest.raises(ModelConfigError, match="choose one"):
        tiny_config(vocab_size=64, fp8="head", ops="gptstack:loss")


def test_fp8_all_excludes_the_native_mlp_and_fp8_head_keeps_it(tiny_config):
    pytest.importorskip("gptstack.cuda_ops")
    with pytest.raises(ModelConfigError, match="fp8='all' runs the MLP's matmuls in FP8"):
        tiny_config(vocab_size=64, fp8="all", ops="gptstack:mlp")
    assert "mlp" in tiny_config(vocab_size=64, fp8="head", ops="gptstack:mlp").native_op_names


@pytest.mark.parametrize("fp8", ["head", "all"])
def test_an_fp8_model_starts_from_the_weights_of_the_model_without(fp8, make_gpt):
    """Fp8Linear is an nn.Linear: GPT-2's init (N(0, 0.02), scaled residual projections) reaches
    it as it reaches the model without FP8, draw for draw."""
    reference, model = _fp8_model(make_gpt, "none"), _fp8_model(make_gpt, fp8)
    assert isinstance(model.lm_head, Fp8Linear)
    for (name, p), q in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(p, q), name
