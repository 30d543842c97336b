"""GPT: shapes, parameter-name contract, causality, backends, loss, training, optimizer, FLOPs."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gptstack.model import GPT, Bigram, ModelConfigError, ModelError, generate

# fp32 vs fp32 through different kernels: docs/MEASURING.md rule 5 (relative error < 1e-5).
FP32_REL_TOL = 1e-5


def contract_names(n_layer: int, bias: bool) -> list[str]:
    """The parameter-name contract, written out independently of the model code."""
    names = ["wte.weight", "wpe.weight"]
    for i in range(n_layer):
        for module in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names.append(f"h.{i}.{module}.weight")
            if bias:
                names.append(f"h.{i}.{module}.bias")
    names.append("ln_f.weight")
    if bias:
        names.append("ln_f.bias")
    return names


@pytest.mark.parametrize("bias", [True, False])
def test_parameter_names_and_shapes_follow_the_contract(make_gpt, bias):
    model = make_gpt(0, n_layer=3, bias=bias)
    V, C, bs = model.config.vocab_size, model.config.n_embd, model.config.block_size
    params = dict(model.named_parameters())
    assert list(params) == contract_names(3, bias)
    assert list(model.state_dict()) == contract_names(3, bias) + ["lm_head.weight"]
    assert model.lm_head.weight is model.wte.weight
    shapes = {
        "wte.weight": (V, C),
        "wpe.weight": (bs, C),
        "h.2.attn.c_attn.weight": (3 * C, C),
        "h.2.attn.c_proj.weight": (C, C),
        "h.2.mlp.c_fc.weight": (4 * C, C),
        "h.2.mlp.c_proj.weight": (C, 4 * C),
        "h.2.ln_1.weight": (C,),
        "ln_f.weight": (C,),
    }
    if bias:
        shapes.update({"h.0.attn.c_attn.bias": (3 * C,), "h.0.mlp.c_fc.bias": (4 * C,)})
    for name, shape in shapes.items():
        assert tuple(params[name].shape) == shape, name


def test_qkv_layout_of_c_attn(make_gpt, rel_err):
    """q, k, v are c_attn's three consecutive C-row blocks; head h owns rows [h*hs, (h+1)*hs)."""
    model = make_gpt(1, scramble=0.2)
    attn = model.h[0].attn
    C, nh = model.config.n_embd, model.config.n_head
    hs = C // nh
    x = torch.randn(2, 5, C, generator=torch.Generator().manual_seed(1))
    W, b = attn.c_attn.weight.double(), attn.c_attn.bias.double()
    xd = x.double()
    heads = []
    for h in range(nh):
        rows = slice(h * hs, (h + 1) * hs)
        q = xd @ W[0 * C :][rows].T + b[0 * C :][rows]  # (B, T, hs)
        k = xd @ W[1 * C :][rows].T + b[1 * C :][rows]
        v = xd @ W[2 * C :][rows].T + b[2 * C :][rows]
        scores = q @ k.transpose(1, 2) / math.sqrt(hs)
        scores = scores.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)
    y = torch.cat(heads, dim=-1) @ attn.c_proj.weight.double().T + attn.c_proj.bias.double()
    with torch.no_grad():
        assert rel_err(attn(x), y) < FP32_REL_TOL


def test_forward_shapes_and_last_only(make_gpt, random_tokens):
    model = make_gpt(0)
    V = model.config.vocab_size
    idx = random_tokens(0, 3, 11, V)
    logits, loss = model(idx)
    assert logits.shape == (3, 11, V) and logits.dtype == torch.float32 and loss is None
    last, _ = model(idx, last_only=True)
    assert last.shape == (3, 1, V)
    assert torch.allclose(last[:, 0], logits[:, -1], rtol=1e-5, atol=1e-6)
    _, loss = model(idx, random_tokens(1, 3, 11, V))
    assert loss.shape == () and torch.isfinite(loss)


def test_input_errors(make_gpt, random_tokens):
    model = make_gpt(0)
    bs, V = model.config.block_size, model.config.vocab_size
    with pytest.raises(ModelError, match=rf"block_size is {bs}"):
        model(random_tokens(0, 1, bs + 1, V))
    with pytest.raises(ModelError, match=r"\(B, T\)"):
        model(random_tokens(0, 1, 4, V)[0])
    with pytest.raises(ModelError, match="last_only"):
        model(random_tokens(0, 1, 4, V), random_tokens(1, 1, 4, V), last_only=True)
    with pytest.raises(ModelConfigError, match="GPTConfig"):
        GPT({"vocab_size": 3})


@pytest.mark.parametrize("backend", ["manual", "sdpa"])
def test_causality(make_gpt, random_tokens, backend):
    """Changing token t changes no logits before t (and does change the logits at t)."""
    model = make_gpt(2, scramble=0.2, attention=backend)
    V, T = model.config.vocab_size, 12
    idx = random_tokens(2, 2, T, V)
    base, _ = model(idx)
    for t in (0, 5, T - 1):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % V
        out, _ = model(changed)
        assert torch.equal(out[:, :t], base[:, :t]), t
        assert not torch.allclose(out[:, t], base[:, t]), t


@pytest.mark.parametrize("bias", [True, False])
def test_manual_and_sdpa_agree(make_gpt, random_tokens, rel_err, bias):
    model = make_gpt(4, scramble=0.1, bias=bias, attention="manual")
    idx = random_tokens(4, 3, model.config.block_size, model.config.vocab_size)
    manual, _ = model(idx)
    model.set_attention_backend("sdpa")
    sdpa, _ = model(idx)
    assert rel_err(sdpa, manual) < FP32_REL_TOL


def test_bf16_residual_stream_under_autocast(make_gpt, random_tokens, rel_err):
    """residual='bf16': under bf16 autocast the blocks add into a bf16 stream; the loss and the
    gradients stay within bf16 rounding of the fp32 stream's, and without autocast nothing
    changes (x keeps the parameters' dtype, the same bits)."""
    ref = make_gpt(11, scramble=0.1).train()
    model = make_gpt(11, scramble=0.1, residual="bf16").train()
    idx = random_tokens(11, 3, ref.config.block_size, ref.config.vocab_size)
    seen = []
    model.h[0].register_forward_pre_hook(lambda _module, args: seen.append(args[0].dtype))
    losses, grads = [], []
    for m in (ref, model):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = m(idx, idx)
        loss.backward()
        losses.append(loss.detach().float())
        grads.append(m.wte.weight.grad.clone())
    assert seen == [torch.bfloat16]
    assert abs(losses[1] - losses[0]) / losses[0] < 2e-2
    assert rel_err(grads[1], grads[0]) < 5e-2
    seen.clear()
    assert torch.equal(model(idx, idx)[1], ref(idx, idx)[1]) and seen == [torch.float32]
    with torch.autocast("cpu", dtype=torch.float16):  # "bf16" means bf16, not any autocast
        model(idx, idx)
    assert seen == [torch.float32, torch.float32]
    # the autocast test traces into one graph (train.compile=full compiles the whole model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(compiled(idx, idx)[1], model(idx, idx)[1])


def test_init_statistics(make_gpt):
    """GPT-2 init: std 0.02, residual projections 0.02/sqrt(2L), zero biases, unit LN gains."""
    model = make_gpt(5, n_layer=4, n_embd=64)
    params = dict(model.named_parameters())
    resid = torch.cat([params[f"h.{i}.mlp.c_proj.weight"].flatten() for i in range(4)])
    others = torch.cat([params[f"h.{i}.mlp.c_fc.weight"].flatten() for i in range(4)])
    # ~65k samples each: the std estimate is within 1% at many sigmas; 5% is a loose bound.
    assert resid.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert others.std().item() == pytest.approx(0.02, rel=0.05)
    assert params["wte.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert all(torch.count_nonzero(p) == 0 for n, p in params.items() if n.endswith(".bias"))
    assert torch.equal(params["ln_f.weight"], torch.ones(64))


def test_initial_loss_is_about_ln_vocab(make_gpt, random_tokens):
    # Logits at init have std ~ 0.02*sqrt(C) = 0.16 (LayerNorm output x wte); the expected excess
    # over ln(V) is about var/2 = 0.013 nats, so 0.05 is a safe bound.
    model = make_gpt(6, vocab_size=256, n_embd=64)
    _, loss = model(random_tokens(6, 8, 16, 256), random_tokens(7, 8, 16, 256))
    assert loss.item() == pytest.approx(math.log(256), abs=0.05)


def test_ignore_index_targets(make_gpt, random_tokens):
    model = make_gpt(7)
    V = model.config.vocab_size
    idx, targets = random_tokens(7, 2, 10, V), random_tokens(8, 2, 10, V)
    targets[0, :4] = -1
    targets[1, 7] = -1
    logits, loss = model(idx, targets)
    keep = targets != -1
    expected = F.cross_entropy(logits[keep], targets[keep])
    assert torch.allclose(loss, expected, rtol=1e-6, atol=0)


# slow: the first optimizer of a process imports torch._dynamo, several seconds on 2 cores
# without cached bytecode; the 200 steps themselves take 1-2 s.
@pytest.mark.slow
def test_tiny_model_overfits_a_fixed_batch(make_gpt, random_tokens):
    # ln(32) = 3.47 at the start; 200 AdamW steps at lr 3e-3 memorise 64 tokens (about 0.002
    # when written); 0.05 leaves a wide margin while still requiring real learning.
    model = make_gpt(8, vocab_size=32, n_head=2).train()
    idx, targets = random_tokens(8, 4, 16, 32), random_tokens(9, 4, 16, 32)
    optimizer = model.configure_optimizer(0.0, 3e-3, (0.9, 0.95), "cpu")
    for _ in range(200):
        _, loss = model(idx, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


def test_optimizer_groups(make_gpt):
    model = make_gpt(0, n_layer=2)
    optimizer = model.configure_optimizer(0.1, 1e-3, (0.9, 0.95), "cpu")
    names = {id(p): n for n, p in model.named_parameters()}
    decay_group, plain_group = optimizer.param_groups
    assert decay_group["weight_decay"] == 0.1 and plain_group["weight_decay"] == 0.0
    decay = {names[id(p)] for p in decay_group["params"]}
    plain = {names[id(p)] for p in plain_group["params"]}
    linear = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    assert decay == {f"h.{i}.{m}.weight" for i in range(2) for m in linear}
    assert plain == set(names.values()) - decay
    assert {"wte.weight", "wpe.weight", "ln_f.weight", "h.0.attn.c_attn.bias"} <= plain
    assert optimizer.defaults["fused"]  # one multi-tensor update on a CPU too
    assert not model.configure_optimizer(0.1, 1e-3, (0.9, 0.95), "cpu", fused=False).defaults[
        "fused"
    ]
    with pytest.raises(ModelError, match="learning_rate"):
        model.configure_optimizer(0.1, 0.0, (0.9, 0.95), "cpu")


def test_fused_adamw_on_cpu_matches_the_parameter_loop(make_gpt):
    """The CPU default (fused) makes the per-parameter loop's update, to float rounding, on
    fresh random gradients over a few steps, decay and no-decay groups alike."""
    import copy

    loop_model = make_gpt(3, n_layer=2)
    fused_model = copy.deepcopy(loop_model)
    loop = loop_model.configure_optimizer(0.5, 1e-2, (0.9, 0.99), "cpu", fused=False)
    fused = fused_model.configure_optimizer(0.5, 1e-2, (0.9, 0.99), "cpu")
    g = torch.Generator().manual_seed(11)
    for _ in range(5):
        for p, q in zip(loop_model.parameters(), fused_model.parameters(), strict=True):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        loop.step()
        fused.step()
    for (name, p), q in zip(loop_model.named_parameters(), fused_model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_num_params_counts_tied_weights_once(make_gpt):
    model = make_gpt(0, n_layer=2, n_embd=32, vocab_size=37, block_size=16)
    L, C, V, bs = 2, 32, 37, 16
    layer_norms = 2 * 2 * C
    attn = (3 * C * C + 3 * C) + (C * C + C)
    mlp = (4 * C * C + 4 * C) + (4 * C * C + C)
    per_layer = layer_norms + attn + mlp
    total = V * C + bs * C + L * per_layer + 2 * C
    assert model.num_params(non_embedding=False) == total
    assert model.num_params() == total - bs * C


def test_flops_per_token_matches_an_independent_count(make_gpt, random_tokens):
    """FlopCounterMode counts every matmul of one forward + backward (manual backend: scores and
    weighted sum are plain matmuls). It sees no FLOPs for biases and LayerNorm gains, which the
    6N term includes, so counted == formula - 6 * (those parameters)."""
    model = make_gpt(9, n_layer=2, n_embd=32, block_size=16, attention="manual").train()
    T = model.config.block_size
    idx = random_tokens(9, 1, T, model.config.vocab_size)
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    non_matmul = sum(p.numel() for p in model.parameters() if p.dim() == 1)
    assert counter.get_total_flops() / T == model.flops_per_token() - 6 * non_matmul


def test_bigram_baseline(random_tokens):
    torch.manual_seed(0)
    model = Bigram(50)
    idx, targets = random_tokens(0, 3, 7, 50), random_tokens(1, 3, 7, 50)
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 7, 50)
    assert loss.item() == pytest.approx(math.log(50), abs=0.05)  # std-0.02 table, as for GPT
    last, _ = model(idx, last_only=True)
    assert torch.equal(last[:, 0], logits[:, -1])
    out = generate(model, idx, 5, temperature=0)
    assert out.shape == (3, 12)
    assert torch.equal(out[:, 7], model.table.weight[idx[:, -1]].argmax(-1))
    with pytest.raises(ModelError, match="mode 'kv' needs a GPT"):
        generate(model, idx, 5, mode="kv")
    with pytest.raises(ModelError):
        Bigram(0)
