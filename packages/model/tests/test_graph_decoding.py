"""The graph decoder and the window policies against the naive reference.

On a CPU the graph decoder runs its steps eagerly (the same code the CUDA graphs capture); the
CUDA tests check the captured replays against the same reference on the lent GPU.
"""

from __future__ import annotations

import gc
import importlib.util
import weakref

import pytest
import torch
import torch.nn.functional as F

from gptstack.model import GraphDecoder, ModelError, generate, window_length
from gptstack.model.decoding import MODES
from gptstack.model.graphs import capture

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
HAVE_CUDA_OPS = importlib.util.find_spec("gptstack.cuda_ops") is not None
needs_cuda_ops = pytest.mark.skipif(not HAVE_CUDA_OPS, reason="needs gptstack.cuda_ops")


def simulate_halve(n_tokens: int, T: int) -> int:
    """FORMAT.md section 8 spelled out: feed ids one by one, halving the window when full."""
    window = 0
    for _ in range(n_tokens):
        if window == T:
            window = T // 2
        window += 1
    return window


@pytest.mark.parametrize("T", [2, 5, 16, 64])
def test_window_length_follows_the_chip_rule(T):
    for n in range(1, 5 * T):
        assert window_length(n, T, "halve") == simulate_halve(n, T)
        assert window_length(n, T, "slide") == min(n, T)


@pytest.mark.parametrize("window", ["slide", "halve"])
@pytest.mark.parametrize("prompt_len", [1, 7, 16, 37])
def test_every_mode_writes_naives_greedy_text(make_gpt, random_tokens, window, prompt_len):
    """Greedy decoding past block_size (16) several times, prompts shorter and longer than it."""
    model = make_gpt(21, scramble=0.3)
    idx = random_tokens(21, 2, prompt_len, model.config.vocab_size)
    expected = generate(model, idx, 45, temperature=0, window=window)
    for mode in MODES[1:]:
        got = generate(model, idx, 45, mode=mode, temperature=0, window=window)
        assert torch.equal(got, expected), mode


def test_the_window_policies_differ_past_the_context(make_gpt, random_tokens):
    model = make_gpt(22, scramble=0.5)
    idx = random_tokens(22, 1, 3, model.config.vocab_size)
    slide = generate(model, idx, 40, temperature=0, window="slide")
    halve = generate(model, idx, 40, temperature=0, window="halve")
    T = model.config.block_size
    assert torch.equal(slide[:, : T + 1], halve[:, : T + 1])  # same until the window is full
    assert not torch.equal(slide, halve)


def test_sampled_text_is_seeded_and_halve_agrees_across_cached_modes(make_gpt, random_tokens):
    model = make_gpt(23, scramble=0.3)
    idx = random_tokens(23, 3, 5, model.config.vocab_size)
    ref = generate(model, idx, 40, seed=4, top_k=6, window="halve")
    for mode in ("kv", "static"):
        assert torch.equal(
            generate(model, idx, 40, mode=mode, seed=4, top_k=6, window="halve"), ref
        )
    a = generate(model, idx, 40, mode="graph", seed=4, top_k=6, top_p=0.9)
    b = generate(model, idx, 40, mode="graph", seed=4, top_k=6, top_p=0.9)
    c = generate(model, idx, 40, mode="graph", seed=5, top_k=6, top_p=0.9)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("mode", MODES)
def test_padded_ids_are_never_drawn(make_gpt, random_tokens, mode):
    """A padded vocabulary's extra rows have logits too; make them the likeliest and check that
    vocab_limit keeps every draw below the limit (and that without it they are drawn)."""
    model = make_gpt(24, vocab_size=40)
    limit = 33
    with torch.no_grad():
        model.wte.weight[limit:] = 3.0 * model.wte.weight[:limit].abs().max()
    idx = random_tokens(24, 2, 4, limit)
    free = generate(model, idx, 30, mode=mode, seed=1, temperature=1.0)
    assert (free[:, 4:] >= limit).any()
    for temperature in (0.0, 1.0):
        out = generate(
            model, idx, 30, mode=mode, seed=1, temperature=temperature, vocab_limit=limit
        )
        assert (out[:, 4:] < limit).all()


def test_graph_decoder_chunks_and_argument_errors(make_gpt, random_tokens):
    model = make_gpt(25, scramble=0.3)
    decoder = GraphDecoder(model, batch_size=2, chunk=8)
    idx = random_tokens(25, 2, 3, model.config.vocab_size)
    chunks = list(decoder.generate(idx, 50, temperature=0))
    assert sum(c.size(1) for c in chunks) == 50
    assert all(c.shape[0] == 2 and 1 <= c.size(1) <= 8 and c.device.type == "cpu" for c in chunks)
    expected = generate(model, idx, 50, temperature=0)
    assert torch.equal(torch.cat(chunks, dim=1), expected[:, 3:])
    assert list(decoder.generate(idx, 0)) == []
    with pytest.raises(ModelError, match="chunk"):
        GraphDecoder(model, 2, chunk=0)
    with pytest.raises(ModelError, match=r"\(2, T >= 1\)"):
        decoder.generate(idx[:1], 5)
    with pytest.raises(ModelError, match="window 'wrap' is unknown"):
        decoder.generate(idx, 5, window="wrap")
    with pytest.raises(ModelError, match="vocab_limit"):
        generate(model, idx, 5, vocab_limit=model.config.vocab_size + 1)
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="needs the model on a CUDA device"):
            GraphDecoder(model, 2, cuda_graph=True)


def test_eager_graph_decoder_yields_each_chunk_before_running_the_next(
    make_gpt, random_tokens, monkeypatch
):
    """Without CUDA graphs nothing runs in the background: each chunk (the prompt's token first)
    reaches the caller before the next one is computed, so text streams as it is made and
    `gptstack sample` times its first token apart from the first chunk's decoding."""
    model = make_gpt(26, scramble=0.3)
    decoder = GraphDecoder(model, batch_size=1, chunk=8)
    idx = random_tokens(26, 1, 3, model.config.vocab_size)
    runs = []
    real_run = decoder._run

    def counting_run(kind, k, *args):
        runs.append(k)
        real_run(kind, k, *args)

    monkeypatch.setattr(decoder, "_run", counting_run)
    seen = []  # (tokens in the chunk, chunks computed when it arrived)
    for chunk in decoder.generate(idx, 40, temperature=0):
        seen.append((chunk.size(1), len(runs)))
    assert seen[0] == (1, 0)  # the prompt's token, before any decode step
    assert [n for _, n in seen] == list(range(len(seen)))  # one chunk computed per chunk read
    assert [k for k, _ in seen[1:]] == runs
    assert sum(k for k, _ in seen) == 40


def _greedy_and_drawn(decoder, idx, n: int, window: str) -> tuple[torch.Tensor, torch.Tensor]:
    """decoder's n new tokens after idx, greedy and drawn (seed 5, top-k 5), each as one tensor:
    what the switch tests compare with the switch on and off."""
    greedy = decoder.generate(idx, n, temperature=0, window=window)
    drawn = decoder.generate(idx, n, seed=5, top_k=5, window=window)
    return torch.cat(list(greedy), dim=1), torch.cat(list(drawn), dim=1)


def _fused_step(model, batch: int):
    """A FusedDecodeStep of model over a fresh static cache of `batch` rows, on the model's
    device and in its dtype."""
    from gptstack.model.fused_step import FusedDecodeStep
    from gptstack.model.kv_cache import StaticKVCache

    cfg, w = model.config, model.wte.weight
    cache = StaticKVCache(
        cfg.n_layer, batch, cfg.n_head, cfg.block_size, cfg.head_size, device=w.device,
        dtype=w.dtype,
    )  # fmt: skip
    return FusedDecodeStep(model, cache)


def _record_calls(monkeypatch, step, op: str) -> list:
    """Spy on step.ops.<op> for the test: each call appends its first argument's shape to the
    returned list, then runs the op."""
    calls, fused = [], getattr(step.ops, op)

    def spy(first, *args, **kwargs):
        calls.append(first.shape)
        return fused(first, *args, **kwargs)

    monkeypatch.setattr(step.ops, op, spy)
    return calls


@needs_cuda_ops
@pytest.mark.parametrize("bias", [True, False])
def test_fused_step_matches_the_models_one_token_forward(make_gpt, random_tokens, rel_err, bias):
    from gptstack.model.fused_step import FusedDecodeStep
    from gptstack.model.kv_cache import StaticKVCache

    model = make_gpt(27, scramble=0.3, bias=bias)
    cfg = model.config
    caches = [
        StaticKVCache(cfg.n_layer, 2, cfg.n_head, cfg.block_size, cfg.head_size,
                      device="cpu", dtype=torch.float32)
        for _ in range(2)
    ]  # fmt: skip
    idx = random_tokens(27, 2, 6, cfg.vocab_size)
    with torch.no_grad():
        for cache in caches:
            model(idx[:, :5], kv_cache=cache, pos=0)
        pos = torch.tensor(5)
        ref, _ = model(idx[:, 5:], last_only=True, kv_cache=caches[0], pos=pos)
        got = FusedDecodeStep(model, caches[1])(idx[:, 5:], pos)
    assert got.shape == (2, cfg.vocab_size)
    assert rel_err(got, ref[:, -1]) < 1e-5
    assert rel_err(caches[1].k, caches[0].k) < 1e-6 and rel_err(caches[1].v, caches[0].v) < 1e-6


@needs_cuda_ops
@pytest.mark.parametrize(
    "shape",
    [
        {"n_layer": 1, "n_head": 2, "n_embd": 64, "bias": True},  # head size 32: fused kernel
        {"n_layer": 3, "n_head": 1, "n_embd": 64, "bias": False},  # head size 64, no biases
        {"n_layer": 2, "n_head": 4, "n_embd": 32, "bias": True},  # head size 8: SDPA
    ],
)
@pytest.mark.parametrize("T", [1, 9, 16])
def test_fused_window_matches_the_models_forward(make_gpt, random_tokens, rel_err, shape, T):
    model = make_gpt(29, scramble=0.3, **shape)
    cfg = model.config
    idx = random_tokens(29 + T, 2, T, cfg.vocab_size)
    with torch.no_grad():
        ref, _ = model(idx, last_only=True)
        got = _fused_step(model, 2).window(idx)
    assert got.shape == (2, cfg.vocab_size)
    assert rel_err(got, ref[:, -1]) < 1e-5


@needs_cuda_ops
@pytest.mark.parametrize("bias", [True, False])
def test_fused_window_on_rows_matches_the_models_forward(make_gpt, random_tokens, rel_err, bias):
    """window() with every block's matrices through decode_linear (its CUDA bf16 path, here
    forced onto the CPU reference: window_rows) against the model."""
    model = make_gpt(31, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=bias)
    cfg = model.config
    idx = random_tokens(31, 2, 16, cfg.vocab_size)
    step = _fused_step(model, 2)
    assert not step.rows_kernel_runs() and not step.window_rows  # on a CPU: PyTorch's matmuls
    step.window_rows = idx.numel()
    with torch.no_grad():
        ref, _ = model(idx, last_only=True)
        got = step.window(idx)
    assert got.shape == (2, cfg.vocab_size)
    assert rel_err(got, ref[:, -1]) < 1e-5


@needs_cuda_ops
def test_window_rows_limit_picks_the_path(make_gpt, random_tokens, rel_err):
    """A window of at most step.window_rows rows (B * T) runs its matrices through decode_linear,
    a wider one through the matmuls; both give the model's logits."""
    model = make_gpt(37, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=True)
    idx = random_tokens(37, 2, 16, model.config.vocab_size)
    step = _fused_step(model, 2)
    calls = []
    matmuls = step._window_matmuls
    step._window_matmuls = lambda x: calls.append(x.shape) or matmuls(x)
    with torch.no_grad():
        ref = model(idx, last_only=True)[0][:, -1]
        for limit, want_matmuls in ((idx.numel(), False), (idx.numel() - 1, True)):
            calls.clear()
            step.window_rows = limit
            got = step.window(idx)
            assert bool(calls) == want_matmuls, f"window_rows={limit}: matmuls ran {calls}"
            assert rel_err(got, ref) < 1e-5


@needs_cuda_ops
@pytest.mark.parametrize("proj", [True, False])
def test_window_attention_launch_is_chosen_by_the_window(make_gpt, random_tokens, rel_err, proj):
    """window() on rows runs each block's ln_1, c_attn and attention as one window_attention
    call where the window is short (T <= WINDOW_ATTENTION_MAX_T, head size 32 or 64) and
    fused_step.WINDOW_ATTENTION is on, with attn.c_proj in it where WINDOW_ATTENTION_PROJ is on,
    else decode_linear and the attention; every path gives the model's logits (on a CPU
    window_attention runs the ops it stands for)."""
    model = make_gpt(35, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=True, block_size=80)
    step = _fused_step(model, 1)
    step.window_attention_proj = proj
    max_t = step.ops.decode.WINDOW_ATTENTION_MAX_T
    calls = []
    one = step._window_attention
    step._window_attention = lambda block, x, proj=False: (
        calls.append((x.shape, proj)) or one(block, x, proj)
    )
    with torch.no_grad():
        for T, on, want in ((max_t, True, True), (max_t + 1, True, False), (16, False, False)):
            idx = random_tokens(35, 1, T, model.config.vocab_size)
            ref = model(idx, last_only=True)[0][:, -1]
            calls.clear()
            step.window_rows, step.window_attention = idx.numel(), on
            got = step.window(idx)
            assert bool(calls) == want, f"T={T}, window_attention={on}: calls {calls}"
            if want:  # the last block's too
                assert [p for _, p in calls] == [proj] * model.config.n_layer, calls
            assert rel_err(got, ref) < 1e-5


@needs_cuda_ops
@pytest.mark.parametrize("n_embd, want", [(128, True), (64, False)])
def test_window_mlp_launch_is_chosen_by_the_width(
    make_gpt, random_tokens, rel_err, monkeypatch, n_embd, want
):
    """window() on rows runs the rest of each block after its attention, c_proj, ln_2, c_fc and
    mlp.c_proj (all but the last block's, whose one row takes the one-row path), as one
    window_mlp call where n_embd is one of its WINDOW_MLP_WIDTHS, fused_step.WINDOW_MLP is on
    and WINDOW_ATTENTION_PROJ is off (on, c_proj is done in window_attention's launch), else
    three decode_linear calls; every path gives the model's logits."""
    model = make_gpt(38, scramble=0.3, n_layer=3, n_head=4, n_embd=n_embd, bias=True)
    step = _fused_step(model, 1)
    calls = _record_calls(monkeypatch, step, "window_mlp")
    idx = random_tokens(38, 1, 16, model.config.vocab_size)
    with torch.no_grad():
        ref = model(idx, last_only=True)[0][:, -1]
        for on, proj in ((True, False), (False, False), (True, True)):
            calls.clear()
            step.window_rows, step.window_mlp = idx.numel(), on
            step.window_attention_proj = proj
            got = step.window(idx)
            runs = want and on and not proj
            assert len(calls) == (model.config.n_layer - 1 if runs else 0), calls
            assert rel_err(got, ref) < 1e-5


@needs_cuda_ops
@pytest.mark.parametrize("tail", [True, False])
def test_tail_launch_ends_both_steps(make_gpt, random_tokens, rel_err, monkeypatch, tail):
    """window() and the cached step end with one decode_tail call (the last block after its
    attention and the LM head) where fused_step.TAIL is on, else four decode_linear calls;
    both give the model's logits."""
    model = make_gpt(40, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=True)
    step = _fused_step(model, 1)
    step.tail = tail
    calls = _record_calls(monkeypatch, step, "decode_tail")
    idx = random_tokens(40, 1, 16, model.config.vocab_size)
    with torch.no_grad():
        step.window_rows = idx.numel()
        got = step.window(idx)
        assert rel_err(got, model(idx, last_only=True)[0][:, -1]) < 1e-5
        calls.append("cached")
        x = idx[:, :1]
        pos = torch.tensor(0)
        assert rel_err(step(x, pos), model(x)[0][:, -1]) < 1e-5
    assert calls == ([(1, 64), "cached", (1, 64)] if tail else ["cached"]), calls


@needs_cuda_ops
@pytest.mark.parametrize("n_layer", [1, 2])
def test_slide_embeds_in_the_first_attention_launch(
    make_gpt, random_tokens, rel_err, monkeypatch, n_layer
):
    """slide() on rows with WINDOW_EMBED_IN_ATTENTION embeds the window's ids inside the first
    block's attention call (embedded_window_attention), else by window_embed; both give
    window()'s logits of the slid ids."""
    model = make_gpt(34, scramble=0.3, n_layer=n_layer, n_head=2, n_embd=64, bias=True)
    step = _fused_step(model, 1)
    calls = _record_calls(monkeypatch, step, "embedded_window_attention")
    window = random_tokens(34, 1, 16, model.config.vocab_size)
    token = random_tokens(35, 1, 1, model.config.vocab_size)
    with torch.no_grad():
        want = step.window(torch.cat([window[:, 1:], token], dim=1))
        for on in (True, False):
            calls.clear()
            step.window_rows, step.window_embed_in_attention = window.numel(), on
            got = step.slide(window, token)
            assert len(calls) == on, f"embedded_window_attention calls: {calls}"
            assert rel_err(got, want) < 1e-6


@needs_cuda_ops
@pytest.mark.parametrize("split", [True, False])
def test_window_mlp_c_proj_asks_for_split_k(make_gpt, random_tokens, rel_err, monkeypatch, split):
    """window() on rows calls mlp.c_proj's decode_linear with split_k as
    fused_step.WINDOW_SPLIT_K says (the window's blocks, not the last block's one row; never
    attn.c_proj's), and gives the model's logits either way."""
    model = make_gpt(39, scramble=0.3, n_layer=3, n_head=4, n_embd=64, bias=True)
    step = _fused_step(model, 1)
    step.tail = False  # the last row's calls as decode_linear calls too
    asked = []
    linear = step.ops.decode_linear

    def spy(x, w, *a, split_k=False, **k):
        if w.size(0) == model.config.n_embd:  # attn.c_proj, mlp.c_proj (not c_attn, c_fc)
            asked.append((w.size(1), x.size(0), split_k))
        return linear(x, w, *a, split_k=split_k, **k)

    monkeypatch.setattr(step.ops, "decode_linear", spy)
    idx = random_tokens(39, 1, 16, model.config.vocab_size)
    with torch.no_grad():
        step.window_rows, step.window_split_k = idx.numel(), split
        got = step.window(idx)
        assert rel_err(got, model(idx, last_only=True)[0][:, -1]) < 1e-5
    C = model.config.n_embd
    window_block = [(C, 16, False), (4 * C, 16, split)]  # attn.c_proj, mlp.c_proj
    assert asked == window_block * (model.config.n_layer - 1) + [(C, 1, False), (4 * C, 1, False)]


@pytest.mark.cuda
@needs_cuda
@needs_cuda_ops
@pytest.mark.parametrize("window", ["slide", "halve"])
@pytest.mark.parametrize(
    "switch",
    [
        "WINDOW_ATTENTION",
        "WINDOW_ATTENTION_PROJ",
        "WINDOW_MLP",
        "WINDOW_EMBED_IN_ATTENTION",
        "TAIL",
    ],
)
def test_window_launches_write_the_two_launches_text(
    make_gpt, random_tokens, monkeypatch, window, switch
):
    """In bf16 on CUDA the slide window's one-launch c_attn + attention (window_attention,
    fused_step.WINDOW_ATTENTION), with c_proj (WINDOW_ATTENTION_PROJ), and the rest of the
    block, c_proj + ln_2 + MLP (window_mlp, WINDOW_MLP), give the tokens of the launches they
    replace, greedy and drawn, in graphs."""
    from gptstack.model import fused_step

    model = make_gpt(36, scramble=0.3, block_size=32, n_head=4, n_embd=128, bias=True)
    model = model.cuda().to(torch.bfloat16)
    idx = random_tokens(36, 2, 5, model.config.vocab_size).cuda()
    texts = {}
    for on in (True, False):
        monkeypatch.setattr(fused_step, switch, on)
        decoder = GraphDecoder(model, batch_size=2, chunk=16, fused=True)
        step = decoder.step
        assert getattr(step, switch.lower()) == on
        assert step._attention_in_one_launch(32) == (on or switch != "WINDOW_ATTENTION")
        assert 2 * 32 <= step.window_rows  # the window runs on rows
        texts[on] = _greedy_and_drawn(decoder, idx, 90, window)
        assert decoder._graphs
    assert torch.equal(texts[True][0], texts[False][0])
    assert torch.equal(texts[True][1], texts[False][1])


@pytest.mark.cuda
@needs_cuda
@needs_cuda_ops
def test_cuda_bf16_window_runs_on_rows_and_matches_the_model(make_gpt, random_tokens, rel_err):
    """On CUDA in bfloat16 window() can take the tensor-core decode_linear path (up to
    fused_step.WINDOW_ROWS rows) and agrees with the model's bf16 forward and with the cuBLAS-matmul
    window to bf16 tolerance."""
    from gptstack.model import fused_step

    model = make_gpt(33, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=True)
    model = model.to("cuda", torch.bfloat16)
    cfg = model.config
    idx = random_tokens(33, 1, cfg.block_size, cfg.vocab_size).cuda()
    step = _fused_step(model, 1)
    assert step.rows_kernel_runs() and step.window_rows == fused_step.WINDOW_ROWS
    step.window_rows = idx.numel()
    with torch.no_grad():
        ref = model.float()(idx, last_only=True)[0][:, -1]
        model.to(torch.bfloat16)
        got = step.window(idx).float()
        step.window_rows = 0
        matmuls = step.window(idx).float()
    assert rel_err(got, ref) < 3e-2 and rel_err(matmuls, ref) < 3e-2


@pytest.mark.cuda
@needs_cuda
@needs_cuda_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_cuda_window_gelu_in_the_matmul_is_the_tanh_gelu(
    make_gpt, rel_err, monkeypatch, dtype, bias
):
    """The slide window's MLP matmul with the bias (zeros for a model without) and GELU in
    cuBLASLt's epilogue (torch._addmm_activation) computes the model's tanh GELU, not the erf
    form, and the whole window with it and the last-row attention agrees with the window
    without them."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # fp32 is fp32 here
    model = make_gpt(35, scramble=0.3, n_layer=2, n_head=2, n_embd=64, bias=bias)
    model = model.to("cuda", dtype)
    cfg = model.config
    step = _fused_step(model, 1)
    fc = model.h[0].mlp.c_fc
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(1 << 30, ())))
    h = torch.randn(cfg.block_size, cfg.n_embd, device="cuda", generator=gen).to(dtype)
    idx = torch.randint(cfg.vocab_size, (1, cfg.block_size), device="cuda", generator=gen)
    with torch.no_grad():
        got = step._fc_gelu(h, fc).float()
        pre = h.float() @ fc.weight.float().t() + (0 if fc.bias is None else fc.bias.float())
        tanh_ref = F.gelu(pre, approximate="tanh")
        erf_ref = F.gelu(pre)
        both = step.window(idx).float()
        step.window_epilogues = False
        plain = step.window(idx).float()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(got, tanh_ref) < tol
    if dtype == torch.float32:  # erf and tanh GELU differ by ~1e-4: only fp32 tells them apart
        assert rel_err(got, erf_ref) > 10 * rel_err(got, tanh_ref)
    assert rel_err(both, plain) < tol


@needs_cuda_ops
@pytest.mark.parametrize("window", ["slide", "halve"])
@pytest.mark.parametrize("io_kernels", [True, False])
def test_fused_graph_decoder_writes_naives_greedy_text(
    make_gpt, random_tokens, monkeypatch, window, io_kernels
):
    from gptstack.model import fused_step

    monkeypatch.setattr(fused_step, "IO_KERNELS", io_kernels)
    model = make_gpt(21, scramble=0.3)
    idx = random_tokens(21, 2, 7, model.config.vocab_size)
    expected = generate(model, idx, 45, temperature=0, window=window)
    decoder = GraphDecoder(model, batch_size=2, chunk=8, fused=True)
    got = torch.cat(list(decoder.generate(idx, 45, temperature=0, window=window)), dim=1)
    assert decoder.fused and decoder.io_kernels == io_kernels
    assert torch.equal(got, expected[:, 7:])
    assert not GraphDecoder(model, 2).fused  # on a CPU the default stays PyTorch's modules


def _draws_by_the_fused_sampler(model, idx, n, seed, **sampling):
    """The naive loop (slide window) with every token drawn by cuda_ops.sample_tokens from one
    state: what the fused graph decoder must write."""
    import gptstack.cuda_ops as ops

    state, T = ops.sampler_state(seed, idx.device), model.config.block_size
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(idx[:, -T:], last_only=True)
            idx = torch.cat([idx, ops.sample_tokens(logits[:, -1], state, **sampling)[:, None]], 1)
    return idx


@needs_cuda_ops
def test_fused_graph_decoder_samples_with_the_fused_sampler(make_gpt, random_tokens):
    model = make_gpt(27, scramble=0.3)
    T, V = model.config.block_size, model.config.vocab_size
    idx = random_tokens(27, 2, 5, V)
    decoder = GraphDecoder(model, batch_size=2, chunk=8, fused=True)

    def run(seed, **sampling):
        return torch.cat(list(decoder.generate(idx, 2 * T, seed=seed, **sampling)), dim=1)

    sampling = {"temperature": 0.9, "top_k": 6, "vocab_limit": V - 3}
    got = run(3, **sampling)
    expected = _draws_by_the_fused_sampler(model, idx, 2 * T, 3, **sampling)
    assert torch.equal(got, expected[:, 5:]) and (got < V - 3).all()
    assert torch.equal(run(3, **sampling), got) and not torch.equal(run(4, **sampling), got)
    assert decoder.sampler[1] == 2 * T  # one draw per token: the prompt's and 2T - 1 steps
    # top-p is not fused: those draws come from the generator, as in the unfused decoder
    unfused = GraphDecoder(model, batch_size=2, chunk=8, fused=False)
    top_p = {"temperature": 0.9, "top_p": 0.8}
    assert torch.equal(
        run(5, **top_p), torch.cat(list(unfused.generate(idx, 2 * T, seed=5, **top_p)), dim=1)
    )


@needs_cuda_ops
def test_fused_step_refuses_what_it_cannot_run(make_gpt):
    model = make_gpt(28)
    model.lm_head.weight = torch.nn.Parameter(model.wte.weight.detach().double())  # untied
    with pytest.raises(ModelError, match="fused decode step cannot run: the weights mix dtypes"):
        GraphDecoder(model, 1, fused=True)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("window", ["slide", "halve"])
@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_captured_graph_decoder_matches_naive_on_cuda(
    make_gpt, random_tokens, window, compile, fused
):
    if fused and not HAVE_CUDA_OPS:
        pytest.skip("needs gptstack.cuda_ops")
    model = make_gpt(26, scramble=0.3, block_size=32).cuda()
    idx = random_tokens(26, 2, 5, model.config.vocab_size).cuda()
    expected = generate(model, idx, 100, temperature=0, window=window)
    decoder = GraphDecoder(model, batch_size=2, chunk=16, compile=compile, fused=fused)
    got = torch.cat(list(decoder.generate(idx, 100, temperature=0, window=window)), dim=1)
    assert decoder.fused == fused
    assert torch.equal(got, expected[:, 5:].cpu())
    assert decoder._graphs  # it really replayed graphs
    a = torch.cat(list(decoder.generate(idx, 60, seed=3, top_k=5, window=window)), dim=1)
    b = torch.cat(list(decoder.generate(idx, 60, seed=3, top_k=5, window=window)), dim=1)
    assert torch.equal(a, b)
    if fused and window == "slide" and not compile:  # the replayed draws are the eager loop's
        expected = _draws_by_the_fused_sampler(model, idx, 60, 3, temperature=1.0, top_k=5)
        assert torch.equal(a, expected[:, 5:].cpu())


@pytest.mark.cuda
@needs_cuda
def test_capturing_pauses_the_collector_and_restores_it():
    seen = []

    def step():
        seen.append(gc.isenabled())
        return torch.ones(4, device="cuda") * 2

    graph, out = capture(step, torch.device("cuda"), warmup=1)
    graph.replay()
    torch.cuda.synchronize()
    assert seen == [True, False]  # the warm-up call with the collector on, the capture off
    assert gc.isenabled()
    assert out.tolist() == [2.0] * 4
    gc.disable()  # a caller that had it off keeps it off
    try:
        capture(step, torch.device("cuda"), warmup=0)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _drop_into_a_cycle(obj: object) -> None:
    """Leave obj referenced only by a list that holds itself: cyclic garbage, freed when the
    collector next runs (and not before: reference counting cannot free a cycle)."""
    cycle = [obj]
    cycle.append(cycle)


def _collection_bait() -> list:
    """Allocations that stay alive: with gc.set_threshold(1, ...) each one starts a collection
    of the youngest generation when the collector is on. (Allocate-and-free loops do not: the
    threshold counts allocations minus deallocations.)"""
    return [[] for _ in range(8)]


@pytest.mark.parametrize("collector_on", [True, False])
def test_garbage_dropped_before_allocations_is_freed_by_them_only_with_the_collector_on(
    collector_on,
):
    """The premise of the CUDA test below, on this Python: a cycle made just before a few
    live allocations is freed by them while the collector runs, and not while it is paused."""

    class Thing:
        pass

    freed: list[bool] = []
    thing = Thing()
    weakref.finalize(thing, freed.append, True)
    thresholds, was_on = gc.get_threshold(), gc.isenabled()
    gc.collect()
    gc.set_threshold(1, 1, 1)
    if not collector_on:
        gc.disable()
    try:
        _drop_into_a_cycle(thing)
        del thing
        _collection_bait()
        freed_by_allocations = bool(freed)
    finally:
        gc.set_threshold(*thresholds)
        if was_on:
            gc.enable()
    assert freed_by_allocations == collector_on
    gc.collect()
    assert freed == [True]


@pytest.mark.cuda
@needs_cuda
def test_a_graph_made_garbage_inside_a_capture_is_freed_after_it():
    """A CUDA graph freed inside another capture invalidates it ("operation failed due to a
    previous error during capture"; measured on the H100). Decoders and benches hold their
    graphs in reference cycles, freed whenever the collector next runs: here the only reference
    to a replayed graph becomes cyclic garbage inside a capture, followed by allocations that
    would each start a collection (the test above shows they free it when the collector is on).
    capture() must succeed and replay, and the old graph go once it is over."""
    device = torch.device("cuda")
    x = torch.ones(8, device=device)
    old, _ = capture(lambda: x * 3, device, warmup=1)
    old.replay()
    freed, freed_in_capture = [], []
    weakref.finalize(old, freed.append, True)
    holder = [old]
    del old

    def step():
        if holder:  # only in the capture (warmup=0)
            _drop_into_a_cycle(holder.pop())
            _collection_bait()
            freed_in_capture.append(bool(freed))
        return x + 1

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)
    try:
        graph, out = capture(step, device, warmup=0)
    finally:
        gc.set_threshold(*thresholds)
    assert freed_in_capture == [False]
    graph.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [2.0] * 8
    gc.collect()
    assert freed == [True]  # after it


@pytest.mark.cuda
@needs_cuda
@needs_cuda_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", ["slide", "halve"])
@pytest.mark.parametrize("switch", ["IO_KERNELS", "ADVANCE_IN_SAMPLER"])
def test_captured_io_kernels_write_the_pytorch_ops_text(
    make_gpt, random_tokens, monkeypatch, dtype, window, switch
):
    """The embedding and state update by decode_embed / window_embed / decode_advance
    (fused_step.IO_KERNELS), and the state updated by the sampler's last block instead of a
    decode_advance launch (ADVANCE_IN_SAMPLER), give the tokens of the ops they replace, greedy
    and drawn, in graphs."""
    from gptstack.model import fused_step

    model = make_gpt(34, scramble=0.3, block_size=32).cuda().to(dtype)
    idx = random_tokens(34, 2, 5, model.config.vocab_size).cuda()
    texts = {}
    for on in (True, False):
        monkeypatch.setattr(fused_step, switch, on)
        decoder = GraphDecoder(model, batch_size=2, chunk=16, fused=True)
        assert (decoder.io_kernels, decoder.advance_in_sampler)[switch != "IO_KERNELS"] == on
        texts[on] = _greedy_and_drawn(decoder, idx, 90, window)
        assert decoder._graphs
    assert torch.equal(texts[True][0], texts[False][0])
    assert torch.equal(texts[True][1], texts[False][1])


@pytest.mark.cuda
@needs_cuda
@needs_cuda_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_launch_step_writes_the_op_by_op_steps_text(
    make_gpt, random_tokens, monkeypatch, dtype
):
    """The opt-in decode_blocks step (fused_step.ONE_LAUNCH) gives the op-by-op step's tokens."""
    from gptstack.model import fused_step

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("decode_blocks needs thread-block clusters (sm_90)")
    model = make_gpt(33, scramble=0.3, block_size=32, n_head=2, n_embd=64).cuda().to(dtype)
    idx = random_tokens(33, 2, 5, model.config.vocab_size).cuda()
    texts = {}
    for one_launch in (False, True):
        monkeypatch.setattr(fused_step, "ONE_LAUNCH", one_launch)
        decoder = GraphDecoder(model, batch_size=2, chunk=8, fused=True)
        assert decoder.step.blocks_in_one_launch == one_launch
        texts[one_launch] = _greedy_and_drawn(decoder, idx, 40, "slide")
    assert torch.equal(texts[True][0], texts[False][0])
    assert torch.equal(texts[True][1], texts[False][1])
