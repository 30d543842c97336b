"""GPTConfig(ops="gptstack"): the same model through gptstack.cuda_ops's LayerNorm, fused
residual-add + LayerNorm, GELU and chunked LM-head loss, against ops="torch"; and the model
without cuda_ops installed."""

from __future__ import annotations

import copy
import re
import sys
from collections import Counter

import pytest
import torch

from gptstack.model import GPT, GPTConfig, ModelConfigError, generate

pytest.importorskip("gptstack.cuda_ops")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _pair(make_gpt, bias=True, ops="gptstack", **overrides):
    """The same weights twice: ops="torch" (the reference) and `ops` (default all native)."""
    ref = make_gpt(3, scramble=0.3, bias=bias, **overrides)
    native = GPT(GPTConfig(**{**ref.config.to_dict(), "ops": ops})).eval()
    native.load_state_dict(ref.state_dict())
    return ref, native


def test_ops_is_validated_and_round_trips(tiny_config):
    assert tiny_config().ops == "torch"
    cfg = tiny_config(ops="gptstack")
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.native_op_names == {"layernorm", "gelu", "mlp", "loss", "qkv"}
    assert tiny_config().native_op_names == set()
    cfg = tiny_config(ops="gptstack:loss,gelu")
    assert cfg.native_op_names == {"loss", "gelu"}
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    for bad, why in [
        ("triton", ""),
        ("gptstack:", " ('' not an op)"),
        ("gptstack:softmax", " ('softmax' not an op)"),
        ("gptstack:loss,loss", ""),
        ("torch:loss", ""),
        (3, ""),
    ]:
        start = f"GPTConfig.ops is {bad!r}{why}; choose 'torch', 'gptstack' or 'gptstack:' + some"
        with pytest.raises(ModelConfigError, match=re.escape(start)):
            tiny_config(ops=bad)


def test_without_cuda_ops_the_model_still_works_and_gptstack_says_why(
    monkeypatch, tiny_config, make_gpt, random_tokens
):
    monkeypatch.setitem(sys.modules, "gptstack.cuda_ops", None)  # import now raises ImportError
    with pytest.raises(ModelConfigError, match=r"gptstack.cuda_ops cannot be imported.*\[cuda\]"):
        tiny_config(ops="gptstack")
    model = make_gpt(0)
    idx = random_tokens(0, 2, 8, model.config.vocab_size)
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 8, model.config.vocab_size) and torch.isfinite(loss)


def test_attention_gptstack_in_a_fresh_process_imports_cuda_ops_and_builds():
    """A config naming the native attention backend before anything imported gptstack.cuda_ops
    (`gptstack bench train --rungs native` did): the check imports it, which registers it."""
    import subprocess

    code = (
        "import sys; from gptstack.model import GPTConfig\n"
        "assert 'gptstack.cuda_ops' not in sys.modules\n"
        "c = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8,"
        " attention='gptstack', ops='gptstack')\n"
        "print(c.attention, 'gptstack.cuda_ops' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["gptstack", "True"]


# the gptstack.cuda_ops functions behind each op name of GPTConfig.ops
NATIVE_FUNCTIONS = {
    "layernorm": ("layernorm", "add_layernorm"),
    "gelu": ("gelu_tanh",),
    "mlp": ("gelu_tanh",),  # on a CPU; on a GPU mlp_gelu (the CUDA test below)
    "loss": ("linear_cross_entropy",),
    "qkv": ("qkv_heads",),  # in training (with autograd); evaluation and decoding split plainly
}


def _functions_called(names) -> set[str]:
    """What a model whose ops name `names` calls on a CPU."""
    return {fn for n in names for fn in NATIVE_FUNCTIONS[n]}


@pytest.fixture(name="native_calls")
def native_calls_fixture(monkeypatch) -> Counter:
    """Counts the calls of each gptstack.cuda_ops function a model built afterwards makes."""
    import gptstack.cuda_ops as cuda_ops

    calls: Counter = Counter()

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    for name in (fn for fns in NATIVE_FUNCTIONS.values() for fn in fns):
        monkeypatch.setattr(cuda_ops, name, counted(name, getattr(cuda_ops, name)))
    return calls


@pytest.mark.parametrize(
    "ops",
    [
        "gptstack",
        "gptstack:loss",
        "gptstack:gelu",
        "gptstack:mlp",
        "gptstack:layernorm",
        "gptstack:layernorm,loss",
        "gptstack:qkv",
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_loss_logits_and_gradients_match_torch_ops(
    make_gpt, random_tokens, rel_err, native_calls, bias, ops
):
    """ops="gptstack" or "gptstack:<names>": logits, loss and every gradient are torch's to
    tolerance, and the model calls the cuda_ops functions of the ops it names, no others."""
    ref, native = _pair(make_gpt, bias=bias, ops=ops, dropout=0.0)
    V = ref.config.vocab_size
    idx, targets = random_tokens(1, 3, 16, V), random_tokens(2, 3, 16, V)
    targets[0, :4] = -1  # ignored positions
    assert rel_err(native(idx)[0], ref(idx)[0]) < 1e-5
    logits, loss = native(idx, targets)
    ref_logits, ref_loss = ref(idx, targets)
    names = native.config.native_op_names
    assert (logits is None) == ("loss" in names)  # the fused loss never forms the logits
    if logits is not None:
        assert rel_err(logits, ref_logits) < 1e-5
    assert abs(loss.item() - ref_loss.item()) < 1e-5 * abs(ref_loss.item())
    loss.backward()
    ref_loss.backward()
    for (name, p), (_, q) in zip(native.named_parameters(), ref.named_parameters(), strict=True):
        assert rel_err(p.grad, q.grad) < 1e-5, name
    assert set(native_calls) == _functions_called(names), native_calls


def test_bf16_residual_stream_with_every_native_op_under_cpu_autocast(
    make_gpt, random_tokens, rel_err, native_calls
):
    """residual="bf16": x is bf16 while the LayerNorm gains stay fp32, so the native LayerNorm
    gets them cast to x's dtype (gpt.norm_params). Loss and every gradient match PyTorch's ops
    on the same stream to bf16 tolerance, every native op runs, and the gradients stay fp32."""
    ref, native = _pair(make_gpt, residual="bf16", dropout=0.0)
    V = ref.config.vocab_size
    idx, targets = random_tokens(8, 3, 16, V), random_tokens(9, 3, 16, V)
    losses = []
    for m in (ref, native):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(idx, targets)[1]
        loss.backward()
        losses.append(loss.float().item())
    assert abs(losses[1] - losses[0]) < 2e-3 * abs(losses[0])
    for (name, p), (_, q) in zip(native.named_parameters(), ref.named_parameters(), strict=True):
        assert p.grad.dtype == torch.float32 and rel_err(p.grad, q.grad) < 5e-2, name
    assert set(native_calls) == _functions_called(native.config.native_op_names), native_calls


def test_qkv_op_leaves_fp8_linears_and_no_grad_passes_alone(make_gpt, random_tokens, native_calls):
    """ops naming qkv: c_attn's bias gradient comes from qkv_heads only for an nn.Linear c_attn
    (an Fp8Linear keeps its own backward), and forwards without autograd split plainly."""
    native = make_gpt(3, ops="gptstack:qkv", dropout=0.0)
    idx = random_tokens(12, 2, 8, native.config.vocab_size)
    with torch.no_grad():
        native(idx, idx)
    assert native_calls["qkv_heads"] == 0
    native(idx, idx)[1].backward()
    assert native_calls["qkv_heads"] == native.config.n_layer
    fp8 = make_gpt(3, ops="gptstack:qkv", fp8="all", vocab_size=48, dropout=0.0)
    assert all(block.attn.qkv_heads is None for block in fp8.h)


@pytest.mark.parametrize("mode", ["naive", "kv", "static"])
def test_decoders_give_the_same_tokens(make_gpt, random_tokens, mode):
    ref, native = _pair(make_gpt)
    idx = random_tokens(4, 2, 5, ref.config.vocab_size)
    new = 2 * ref.config.block_size  # past block_size: the window slides
    expected = generate(ref, idx, new, mode=mode, temperature=0)
    assert torch.equal(generate(native, idx, new, mode=mode, temperature=0), expected)


def test_compile_fullgraph_and_deepcopy(make_gpt, random_tokens, rel_err):
    _, native = _pair(make_gpt)
    idx = random_tokens(5, 2, 16, native.config.vocab_size)
    clone = copy.deepcopy(native)  # the bench copies models; the ops must not stop it
    compiled = torch.compile(clone, fullgraph=True, backend="aot_eager")
    loss = compiled(idx, idx)[1]
    loss.backward()
    native(idx, idx)[1].backward()
    assert rel_err(clone.wte.weight.grad, native.wte.weight.grad) < 1e-5


def _bf16_training_losses(models, idx, targets) -> list[float]:
    """Each model's loss under bf16 autocast, its gradients accumulated by backward."""
    losses = []
    for m in models:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(idx, targets)[1]
        loss.backward()
        losses.append(loss.float().item())
    return losses


@pytest.mark.cuda
@needs_cuda
def test_cuda_bf16_autocast_training_step_and_graph_decoding(make_gpt, random_tokens, rel_err):
    ref, native = _pair(make_gpt, block_size=32)
    ref, native = ref.cuda(), native.cuda()
    V = ref.config.vocab_size
    idx, targets = random_tokens(6, 4, 32, V).cuda(), random_tokens(7, 4, 32, V).cuda()
    losses = _bf16_training_losses((ref, native), idx, targets)
    assert abs(losses[0] - losses[1]) < 1e-2 * abs(losses[0])
    assert rel_err(native.wte.weight.grad, ref.wte.weight.grad) < 1e-2
    from gptstack.model import StaticCacheDecoder

    expected = generate(ref, idx[:, :3], 40, temperature=0)
    decoder = StaticCacheDecoder(native, batch_size=4, cuda_graph=True)
    got = generate(native, idx[:, :3], 40, mode="static", temperature=0, decoder=decoder)
    assert torch.equal(got, expected)


@pytest.mark.cuda
@needs_cuda
def test_cuda_mlp_op_runs_the_fused_mlp_and_matches_torch(
    make_gpt, random_tokens, rel_err, native_calls, monkeypatch
):
    """ops "gptstack:mlp" on a GPU: every block's MLP is one mlp_gelu call (not the GELU
    between PyTorch's matmuls, as on a CPU), with torch's loss and gradients to bf16 tolerance."""
    import gptstack.cuda_ops as cuda_ops

    calls = []
    real = cuda_ops.mlp_gelu
    monkeypatch.setattr(cuda_ops, "mlp_gelu", lambda *a, **k: calls.append(k) or real(*a, **k))
    ref, native = _pair(make_gpt, ops="gptstack:mlp", block_size=32)
    ref, native = ref.cuda(), native.cuda()
    V = ref.config.vocab_size
    idx, targets = random_tokens(8, 4, 32, V).cuda(), random_tokens(9, 4, 32, V).cuda()
    losses = _bf16_training_losses((ref, native), idx, targets)
    assert len(calls) == native.config.n_layer and "gelu_tanh" not in native_calls
    assert not any(calls)  # an fp32 stream under bf16 autocast: the residual is added apart
    assert abs(losses[0] - losses[1]) < 1e-2 * abs(losses[0])
    for (name, p), (_, q) in zip(native.named_parameters(), ref.named_parameters(), strict=True):
        assert rel_err(p.grad, q.grad) < 2e-2, name


@pytest.mark.cuda
@needs_cuda
def test_cuda_mlp_op_on_a_bf16_stream_adds_the_residual_in_c_proj(
    make_gpt, random_tokens, rel_err, monkeypatch
):
    """ops "gptstack:mlp" with residual="bf16": each block's second residual add is c_proj's
    epilogue (mlp_gelu's residual), with torch's loss and gradients to bf16 tolerance; with
    dropout in training the add stays apart (dropout applies before it)."""
    import gptstack.cuda_ops as cuda_ops

    calls = []
    real = cuda_ops.mlp_gelu
    monkeypatch.setattr(cuda_ops, "mlp_gelu", lambda *a, **k: calls.append(k) or real(*a, **k))
    ref, native = _pair(make_gpt, ops="gptstack:mlp", block_size=32, residual="bf16")
    ref, native = ref.cuda(), native.cuda()
    V = ref.config.vocab_size
    idx, targets = random_tokens(12, 4, 32, V).cuda(), random_tokens(13, 4, 32, V).cuda()
    losses = _bf16_training_losses((ref, native), idx, targets)
    assert len(calls) == native.config.n_layer and all("residual" in k for k in calls)
    assert abs(losses[0] - losses[1]) < 1e-2 * abs(losses[0])
    for (name, p), (_, q) in zip(native.named_parameters(), ref.named_parameters(), strict=True):
        assert rel_err(p.grad, q.grad) < 2e-2, name
    calls.clear()
    dropped = GPT(GPTConfig(**{**native.config.to_dict(), "dropout": 0.1})).cuda().train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        dropped(idx, targets)
    assert len(calls) == native.config.n_layer and not any(calls)


@pytest.mark.cuda
@needs_cuda
def test_cuda_qkv_op_joins_the_attention_gradients_and_matches_torch(
    make_gpt, random_tokens, rel_err, native_calls
):
    """ops "gptstack:qkv" on a GPU under bf16 autocast: one qkv_heads call a block, the
    attention's input gradients joined by the CUDA kernel, torch's loss and every gradient
    (c_attn's bias from the kernel's column sums) to bf16 tolerance."""
    ref, native = _pair(make_gpt, ops="gptstack:qkv", block_size=32)
    ref, native = ref.cuda(), native.cuda()
    V = ref.config.vocab_size
    idx, targets = random_tokens(10, 4, 32, V).cuda(), random_tokens(11, 4, 32, V).cuda()
    losses = _bf16_training_losses((ref, native), idx, targets)
    assert native_calls["qkv_heads"] == native.config.n_layer
    assert abs(losses[0] - losses[1]) < 1e-2 * abs(losses[0])
    for (name, p), (_, q) in zip(native.named_parameters(), ref.named_parameters(), strict=True):
        assert p.grad.dtype == torch.float32 and rel_err(p.grad, q.grad) < 2e-2, name
