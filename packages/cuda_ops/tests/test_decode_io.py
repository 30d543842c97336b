"""The graph decoder's embedding and state-update ops against the PyTorch code they replace:
decode_embed (index_select + add), window_embed (cat + embedding + add) and decode_advance
(index_copy / cat, copies, pos += 1), on the CPU and, marked cuda, on the GPU; opcheck,
CUDA-graph replay, bad inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C, DecoderState
from gptstack.cuda_ops.errors import OpInputError, OpTypeError

CPU_DTYPES = [torch.float64, torch.float32, torch.bfloat16]
CUDA_DTYPES = [torch.float32, torch.bfloat16]
# (B, T, C, vocab): one row, odd widths, a window of one id, shakespeare-char's and esp32's sizes
SHAPES = [(1, 1, 1, 1), (2, 5, 7, 11), (3, 9, 16, 40), (1, 256, 384, 65), (1, 64, 256, 512)]


def _tables(vocab, positions, C, dtype, gen, device):
    wte = torch.randn(vocab, C, generator=gen).to(dtype).to(device)
    wpe = torch.randn(positions, C, generator=gen).to(dtype).to(device)
    return wte, wpe


def _ids(shape, high, gen, device):
    return torch.randint(0, high, shape, generator=gen).to(device)


def _check_embeds(B, T, C, vocab, dtype, gen, device):
    wte, wpe = _tables(vocab, T + 3, C, dtype, gen, device)
    token, window = _ids((B, 1), vocab, gen, device), _ids((B, T), vocab, gen, device)
    for p in (0, T - 1, T + 2):
        pos = torch.tensor(p, device=device)
        want = wte.index_select(0, token[:, 0]) + wpe.index_select(0, pos.view(1))
        assert torch.equal(ops.decode_embed(token, pos, wte, wpe), want), (B, C, p, dtype)
        assert torch.equal(ops.decode_embed(token[:, 0], pos, wte, wpe), want)
    want = F.embedding(torch.cat([window[:, 1:], token], dim=1), wte) + wpe[:T]
    assert torch.equal(ops.window_embed(window, token, wte, wpe), want), (B, T, C, dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_embeds_are_pytorchs_bits(shape, dtype, gen):
    _check_embeds(*shape, dtype, gen, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
def test_cuda_embeds_are_pytorchs_bits(shape, dtype, gen):
    _check_embeds(*shape, dtype, gen, "cuda")


def _out_of_range(device):
    wte, wpe = torch.ones(5, 3, device=device), torch.ones(4, 3, device=device)
    ok = torch.tensor(1, device=device)
    for token, pos in (([[5]], 1), ([[-1]], 1), ([[2]], 4), ([[2]], -1)):
        x = ops.decode_embed(torch.tensor(token, device=device), torch.tensor(pos, device=device),
                             wte, wpe)  # fmt: skip
        assert x.isnan().all(), (token, pos)
    window, token = torch.tensor([[0, 7, 1]], device=device), torch.tensor([[2]], device=device)
    x = ops.window_embed(window, token, wte, wpe)
    assert x[0, 0].isnan().all() and not x[0, 1:].isnan().any()  # only the row of id 7
    assert not ops.decode_embed(torch.tensor([[4]], device=device), ok, wte, wpe).isnan().any()


def test_ids_out_of_range_give_nan_rows():
    _out_of_range("cpu")


@pytest.mark.cuda
def test_cuda_ids_out_of_range_give_nan_rows():
    _out_of_range("cuda")


def _reference_advance(new, out, column, token, window, pos, slide):
    """What the graph decoder did with PyTorch's ops before decode_advance."""
    if slide:
        window.copy_(torch.cat([window[:, 1:], token], dim=1))
    else:
        if 0 <= int(pos) < window.size(1):
            window.index_copy_(1, pos.view(1), token)
        pos.add_(1)
    out[:, column] = new
    token.copy_(new[:, None])


def _check_advance(B, T, gen, device, steps=12):
    """Random sequences of steps and slides from random states, two copies of the state side
    by side: decode_advance on one, the PyTorch ops on the other."""
    for start in (0, T // 2, T - 1, T):  # T: a position past the window (no id written)
        state = [_ids((B, 8), 99, gen, device), _ids((B, 1), 99, gen, device),
                 _ids((B, T), 99, gen, device), torch.tensor(start, device=device)]  # fmt: skip
        mine = [t.clone() for t in state]
        for i in range(steps):
            new = _ids((B,), 99, gen, device)
            slide = bool(torch.randint(0, 2, (), generator=gen))
            out, token, window, pos = mine
            ops.decode_advance(new, DecoderState(out, i % 8, token, window, pos, slide))
            _reference_advance(new, state[0], i % 8, state[1], state[2], state[3], slide)
            for name, a, b in zip(("out", "token", "window", "pos"), mine, state, strict=True):
                assert torch.equal(a, b), f"{name} after step {i} (slide={slide}, start={start})"


@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 7), (2, 300)])
def test_advance_is_the_pytorch_state_update(B, T, gen):
    _check_advance(B, T, gen, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 7), (2, 300), (1, 1024), (2, 6144)])
def test_cuda_advance_is_the_pytorch_state_update(B, T, gen):
    _check_advance(B, T, gen, "cuda", steps=6)


@pytest.mark.cuda
def test_cuda_graph_replays_embed_and_advance(gen):
    """A captured step (embed, a stand-in for the model and sampler, advance) replayed from the
    current state on the device gives the eager sequence."""
    B, T, C, V = 2, 16, 32, 50
    wte, wpe = _tables(V, T, C, torch.bfloat16, gen, "cuda")
    out, token = torch.zeros(B, 4, dtype=torch.long, device="cuda"), _ids((B, 1), V, gen, "cuda")
    window, pos = _ids((B, T), V, gen, "cuda"), torch.tensor(3, device="cuda")

    def step(i, slide):
        x = ops.window_embed(window, token, wte, wpe) if slide else ops.decode_embed(
            token, pos, wte, wpe)[:, None]  # fmt: skip
        new = x.float().sum(dim=(1, 2)).abs().long() % V  # depends on the embedded ids
        ops.decode_advance(new, DecoderState(out, i, token, window, pos, slide))

    def four():
        for i, slide in enumerate((False, False, True, True)):
            step(i, slide)

    start = [t.clone() for t in (out, token, window, pos)]
    four()  # warm-up, eagerly: the expected state after four steps
    torch.cuda.synchronize()
    want = [t.clone() for t in (out, token, window, pos)]
    for t, s in zip((out, token, window, pos), start, strict=True):
        t.copy_(s)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        four()
    for t, s in zip((out, token, window, pos), start, strict=True):
        t.copy_(s)  # capture ran nothing
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(("out", "token", "window", "pos"), (out, token, window, pos), want,
                          strict=True):  # fmt: skip
        assert torch.equal(a, b), name


def _check_sampler_advances(B, T, gen, device):
    """sample_tokens with advance= draws the tokens sample_tokens draws and leaves the state
    decode_advance leaves, steps and slides in turn."""
    V = 70
    state = [torch.zeros(B, 4, dtype=torch.long, device=device), _ids((B, 1), V, gen, device),
             _ids((B, T), V, gen, device), torch.tensor(T // 2, device=device)]  # fmt: skip
    mine = [t.clone() for t in state]
    s1, s2 = ops.sampler_state(9, device), ops.sampler_state(9, device)
    for i, slide in enumerate((False, True, False, True)):
        logits = torch.randn(B, V, generator=gen).to(device)
        got = ops.sample_tokens(logits, s1, temperature=0.8, top_k=20,
                                advance=DecoderState(mine[0], i, *mine[1:], slide))  # fmt: skip
        want = ops.sample_tokens(logits, s2, temperature=0.8, top_k=20)
        ops.decode_advance(want, DecoderState(state[0], i, *state[1:], slide))
        assert torch.equal(got, want) and torch.equal(s1, s2), (i, slide)
        for name, a, b in zip(("out", "token", "window", "pos"), mine, state, strict=True):
            assert torch.equal(a, b), f"{name} after step {i} (slide={slide})"


@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 300)])
def test_sampler_updates_the_state_as_decode_advance(B, T, gen):
    _check_sampler_advances(B, T, gen, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 300), (2, 1024)])
def test_cuda_sampler_updates_the_state_as_decode_advance(B, T, gen):
    _check_sampler_advances(B, T, gen, "cuda")


def test_sampler_takes_the_whole_state_or_none(gen):
    logits, state = torch.randn(2, 10, generator=gen), ops.sampler_state(1)
    win = torch.zeros(3, 4, dtype=torch.long)
    bad = DecoderState(torch.zeros(3, 2, dtype=torch.long), 0, win[:, :1].clone(), win,
                       torch.tensor(0), False)  # fmt: skip
    with pytest.raises(OpInputError, match="the window has 3 rows, the logits 2"):
        ops.sample_tokens(logits, state, advance=bad)
    with pytest.raises(ValueError, match="come together"):
        _C.sample_tokens(torch.empty(2, dtype=torch.long), logits, state, 1.0, 0, 10,
                         out=torch.zeros(2, 2, dtype=torch.long))  # fmt: skip


def test_opcheck(gen):
    wte, wpe = _tables(11, 9, 6, torch.float32, gen, "cpu")
    token, window, pos = _ids((2, 1), 11, gen, "cpu"), _ids((2, 9), 11, gen, "cpu"), torch.tensor(4)
    torch.library.opcheck(torch.ops.gptstack.decode_embed.default, (token, pos, wte, wpe))
    torch.library.opcheck(torch.ops.gptstack.window_embed.default, (window, token, wte, wpe))
    out, new = torch.zeros(2, 3, dtype=torch.long), _ids((2,), 11, gen, "cpu")
    logits, sampler = torch.randn(2, 11, generator=gen), ops.sampler_state(3)
    for slide in (False, True):
        torch.library.opcheck(
            torch.ops.gptstack.decode_advance.default, (new, out, 1, token, window, pos, slide)
        )
        torch.library.opcheck(
            torch.ops.gptstack.sample_and_advance.default,
            (logits, sampler, 0.8, 5, 11, out, 1, token, window, pos, slide),
        )


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda w, p, t, win, pos: ops.decode_embed(t.float(), pos, w, p), OpTypeError, "token"),
        (lambda w, p, t, win, pos: ops.decode_embed(t[:, None], pos, w, p), OpInputError, "(B, 1)"),
        (lambda w, p, t, win, pos: ops.decode_embed(t, pos[None].expand(2), w, p), OpInputError,
         "pos"),
        (lambda w, p, t, win, pos: ops.decode_embed(t, pos, w, p[:, :2]), OpInputError, "wpe"),
        (lambda w, p, t, win, pos: ops.decode_embed(t, pos, w.long(), p), OpTypeError, "wte"),
        (lambda w, p, t, win, pos: ops.window_embed(win, t[:1], w, p), OpInputError, "rows"),
        (lambda w, p, t, win, pos: ops.window_embed(win.repeat(1, 3), t, w, p), OpInputError,
         "positions"),
        (lambda w, p, t, win, pos: ops.decode_advance(t[:, 0], DecoderState(win, 9, t, win, pos,
         True)), OpInputError, "column"),
        (lambda w, p, t, win, pos: ops.decode_advance(t[:, 0], DecoderState(win, 0, t, win.t(),
         pos, True)), OpInputError, "contiguous"),
        (lambda w, p, t, win, pos: ops.decode_advance(t[:, 0], DecoderState(win, 0, t, win, pos,
         1)), OpTypeError, "slide"),
        (lambda w, p, t, win, pos: ops.decode_advance(t[:, 0], (win, 0, t, win, pos, True)),
         OpTypeError, "DecoderState"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_clear_errors(call, error, words, gen):
    wte, wpe = _tables(11, 4, 6, torch.float32, gen, "cpu")
    token, window = _ids((2, 1), 11, gen, "cpu"), _ids((2, 4), 11, gen, "cpu")
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        call(wte, wpe, token, window, torch.tensor(0))


def test_extension_checks_its_arguments():
    wte, wpe, x = torch.ones(5, 3), torch.ones(4, 3), torch.empty(2, 3)
    with pytest.raises(ValueError, match="token must hold 2 element"):
        _C.decode_embed(x, torch.zeros(3, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                        wte, wpe)  # fmt: skip
    with pytest.raises(ValueError, match="wpe only 4 positions"):
        _C.window_embed(torch.empty(1, 5, 3), torch.zeros(1, 5, dtype=torch.long),
                        torch.zeros(1, dtype=torch.long), wte, wpe)  # fmt: skip
    with pytest.raises(ValueError, match="column 3 is outside"):
        _C.decode_advance(torch.zeros(1, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long),
                          3, torch.zeros(1, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long),
                          torch.zeros(1, dtype=torch.long), False)  # fmt: skip
