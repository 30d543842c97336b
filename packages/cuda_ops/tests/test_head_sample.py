"""head_sample (the LM head and the sampler in one launch) against the two ops it replaces,
decode_linear then sample_tokens: the same logits to the bit, the same tokens, the same sampler
and decoder state after it; on the CPU and, marked cuda, on the GPU (in a CUDA graph too);
opcheck, torch.compile, bad inputs."""

from __future__ import annotations

import pytest
import torch

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C, DecoderState, OpInputError, OpTypeError

# rows, K, N (the head's outputs), vocab_limit, top_k, LayerNorm: shakespeare-char's head
# (384 -> 65, top-k 40), esp32's (256 -> 512), a padded vocabulary, K not a multiple of the
# vector width, one output, several rows, no LayerNorm / no LayerNorm bias
CASES = [(1, 384, 65, None, 40, "wb"), (1, 256, 512, None, None, "wb"), (2, 64, 700, 650, 1, "wb"),
         (1, 37, 97, None, 5, "w"), (1, 16, 1, None, None, "wb"), (3, 128, 300, None, 300, "w"),
         (2, 96, 33, 30, 7, "")]  # fmt: skip


def _inputs(R, K, N, ln, dtype, gen, device):
    def rand(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen)).to(dtype).to(device)

    x, w = rand(R, K), rand(N, K, scale=K**-0.5 * 3)
    ln_w = rand(K, scale=0.2).add_(1) if "w" in ln else None
    ln_b = rand(K, scale=0.1) if "b" in ln else None
    return x, w, ln_w, ln_b


def _check_cases(dtype, gen, device):
    for R, K, N, limit, top_k, ln in CASES:
        x, w, ln_w, ln_b = _inputs(R, K, N, ln, dtype, gen, device)
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        mine, theirs = ops.sampler_state(seed, device), ops.sampler_state(seed, device)
        for draw in range(3):
            tokens, logits = ops.head_sample(
                x, w, mine, ln_weight=ln_w, ln_bias=ln_b, temperature=0.8, top_k=top_k,
                vocab_limit=limit,
            )  # fmt: skip
            want = ops.decode_linear(x, w, ln_weight=ln_w, ln_bias=ln_b)
            want_tokens = ops.sample_tokens(
                want, theirs, temperature=0.8, top_k=top_k, vocab_limit=limit
            )
            case = (R, K, N, limit, top_k, ln, draw)
            assert logits.shape == (R, N) and logits.dtype == dtype, case
            assert torch.equal(logits, want), case  # the same bits: the same kernel's code
            assert torch.equal(tokens, want_tokens), case
            assert mine.tolist() == theirs.tolist() == [seed, draw + 1, 0], case


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_head_sample_is_decode_linear_then_sample_tokens(dtype, gen):
    _check_cases(dtype, gen, "cpu")


def _ids(shape, V, gen, device):
    return torch.randint(0, V, shape, generator=gen).to(device)


def _check_advances(B, T, gen, device, dtype=torch.float32):
    """head_sample with advance= leaves the state sample_tokens with advance= leaves, steps and
    slides in turn."""
    K, V = 64, 70
    state = [torch.zeros(B, 4, dtype=torch.long, device=device), _ids((B, 1), V, gen, device),
             _ids((B, T), V, gen, device), torch.tensor(T // 2, device=device)]  # fmt: skip
    mine = [t.clone() for t in state]
    s1, s2 = ops.sampler_state(9, device), ops.sampler_state(9, device)
    for i, slide in enumerate((False, True, False, True)):
        x, w, ln_w, ln_b = _inputs(B, K, V, "wb", dtype, gen, device)
        advance = DecoderState(mine[0], i, *mine[1:], slide)
        got, _ = ops.head_sample(
            x, w, s1, ln_weight=ln_w, ln_bias=ln_b, temperature=0.8, top_k=20, advance=advance
        )
        logits = ops.decode_linear(x, w, ln_weight=ln_w, ln_bias=ln_b)
        want = ops.sample_tokens(logits, s2, temperature=0.8, top_k=20,
                                 advance=DecoderState(state[0], i, *state[1:], slide))  # fmt: skip
        assert torch.equal(got, want) and torch.equal(s1, s2), (i, slide)
        for name, a, b in zip(("out", "token", "window", "pos"), mine, state, strict=True):
            assert torch.equal(a, b), f"{name} after step {i} (slide={slide})"


@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 300)])
def test_head_sample_updates_the_state_as_sample_tokens(B, T, gen):
    _check_advances(B, T, gen, "cpu")


def test_opcheck(gen):
    x, w, ln_w, ln_b = _inputs(2, 24, 40, "wb", torch.float32, gen, "cpu")
    torch.library.opcheck(
        torch.ops.gptstack.head_sample.default,
        (x, w, ln_w, ln_b, 1e-5, ops.sampler_state(1), 0.9, 5, 37),
    )
    B, T = 2, 8
    window = _ids((B, T), 40, gen, "cpu")
    torch.library.opcheck(
        torch.ops.gptstack.head_sample_and_advance.default,
        (x, w, None, None, 1e-5, ops.sampler_state(1), 0.9, 0, 40,
         torch.zeros(B, 3, dtype=torch.long), 1, window[:, :1].clone(), window,
         torch.tensor(3), False),
    )  # fmt: skip


def test_compile_fullgraph(gen):
    x, w, ln_w, ln_b = _inputs(1, 32, 50, "wb", torch.float32, gen, "cpu")
    expected = ops.head_sample(x, w, ops.sampler_state(9), ln_weight=ln_w, ln_bias=ln_b, top_k=10)
    state = ops.sampler_state(9)

    def pick(x):
        return ops.head_sample(x, w, state, ln_weight=ln_w, ln_bias=ln_b, top_k=10)

    tokens, logits = torch.compile(pick, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(tokens, expected[0]) and torch.equal(logits, expected[1])
    assert state[1] == 1


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda x, w, s: ops.head_sample(x[0], w, s), ValueError, "at least 2 dimension"),
        (lambda x, w, s: ops.head_sample(x, w[:, :3].contiguous(), s), ValueError,
         r"weight must be \(N, 4\)"),
        (lambda x, w, s: ops.head_sample(x, w.double(), s), TypeError, "dtype"),
        (lambda x, w, s: ops.head_sample(x, w, s, ln_bias=torch.ones(4)), ValueError,
         "ln_bias without ln_weight"),
        (lambda x, w, s: ops.head_sample(x, w, s, ln_weight=torch.ones(5)), ValueError,
         "ln_weight"),
        (lambda x, w, s: ops.head_sample(x, w, s[:2]), TypeError, "sampler_state"),
        (lambda x, w, s: ops.head_sample(x, w, s, temperature=0), ValueError, "argmax"),
        (lambda x, w, s: ops.head_sample(x, w, s, top_k=0), ValueError, "top_k is 0"),
        (lambda x, w, s: ops.head_sample(x, w, s, vocab_limit=7), ValueError, r"\[1, 6\]"),
        (lambda x, w, s: ops.head_sample(x, w, s, advance=(1, 2)), TypeError, "DecoderState"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_clear_errors(call, error, words):
    with pytest.raises(error, match=words):
        call(torch.ones(2, 4), torch.ones(6, 4), ops.sampler_state(0))


def test_extension_checks_its_arguments():
    x, w, state = torch.ones(2, 4), torch.ones(6, 4), ops.sampler_state(0)
    tokens, logits = torch.empty(2, dtype=torch.int64), torch.empty(2, 6)
    with pytest.raises(ValueError, match="logits has shape"):
        _C.head_sample(tokens, torch.empty(2, 5), x, w, None, None, 1e-5, state, 1.0, 0, 5)
    with pytest.raises(ValueError, match="vocab_limit 7 is outside"):
        _C.head_sample(tokens, logits, x, w, None, None, 1e-5, state, 1.0, 0, 7)
    with pytest.raises(ValueError, match="ln_bias without ln_weight"):
        _C.head_sample(tokens, logits, x, w, None, torch.ones(4), 1e-5, state, 1.0, 0, 6)
    with pytest.raises(ValueError, match="come together"):
        _C.head_sample(tokens, logits, x, w, None, None, 1e-5, state, 1.0, 0, 6,
                       out=torch.zeros(2, 2, dtype=torch.long))  # fmt: skip
    with pytest.raises(OpInputError, match="the window has 3 rows, the logits 2"):
        win = torch.zeros(3, 4, dtype=torch.long)
        bad = DecoderState(torch.zeros(3, 2, dtype=torch.long), 0, win[:, :1].clone(), win,
                           torch.tensor(0), False)  # fmt: skip
        ops.head_sample(x, w, state, advance=bad)
    assert issubclass(OpTypeError, TypeError)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_head_sample_is_decode_linear_then_sample_tokens(dtype, gen):
    _check_cases(dtype, gen, "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(1, 1), (1, 64), (3, 300), (2, 1024)])
def test_cuda_head_sample_updates_the_state_as_sample_tokens(B, T, gen):
    _check_advances(B, T, gen, "cuda", torch.bfloat16)


@pytest.mark.cuda
def test_cuda_graph_replays_draw_fresh_tokens(gen):
    """Captured once, replayed: each replay's tokens are the two ops' at that draw."""
    x, w, ln_w, ln_b = _inputs(1, 384, 65, "wb", torch.bfloat16, gen, "cuda")
    state = ops.sampler_state(123, "cuda")
    ops.head_sample(x, w, state, ln_weight=ln_w, ln_bias=ln_b, top_k=40)  # warm up
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        tokens, _ = ops.head_sample(x, w, state, ln_weight=ln_w, ln_bias=ln_b, top_k=40)
    state.copy_(ops.sampler_state(123, "cuda"))
    replayed = []
    for _ in range(4):
        graph.replay()
        replayed.append(tokens.clone())
    torch.cuda.synchronize()
    assert state.tolist() == [123, 4, 0]
    logits = ops.decode_linear(x, w, ln_weight=ln_w, ln_bias=ln_b)
    reference = ops.sampler_state(123, "cuda")
    for got in replayed:
        assert torch.equal(got, ops.sample_tokens(logits, reference, top_k=40))
