"""sample_tokens (temperature, top-k and the exponential race in one launch) against a Python
rebuild of its random stream and formulas (csrc/sampling.h), on the CPU and, marked cuda, on
the GPU; its distribution, its draw counter, CUDA-graph replay, opcheck, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.testing import MASK32, philox4x32_10

# rows, vocab, top_k, vocab_limit: one row; shakespeare-char's 65 with the CLI's top-k 40;
# esp32's 512; a vocabulary padded past its limit; top-k of 1 (greedy among the kept) and >= V
CASES = [(1, 1, None, None), (1, 65, 40, None), (3, 512, 200, None), (2, 700, 1, 650),
         (4, 97, None, 90), (2, 33, 33, None), (1, 5000, 7, 4999)]  # fmt: skip


def stream_uniforms(seed: int, draw: int, row: int, n: int) -> torch.Tensor:
    """u_0 .. u_{n-1} of one row (sampling.h's stream, from the Python Philox)."""
    key = (seed & MASK32, (seed >> 32) & MASK32)
    u = []
    for c in range((n + 3) // 4):
        words = philox4x32_10((c, row, draw & MASK32, (draw >> 32) & MASK32), key)
        u.extend(((w >> 8) + 0.5) * 2.0**-24 for w in words)
    return torch.tensor(u[:n], dtype=torch.float64)


def reference_scores(logits, seed, draw, temperature, top_k, vocab_limit):
    """(R, V') float64 race scores, -1 where a token cannot be drawn (sampling.h's formulas)."""
    V = vocab_limit or logits.size(1)
    z = logits.detach().float().cpu()[:, :V] / temperature  # float32, as the kernels compute z
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None and top_k < V:
        keep = z >= torch.topk(z, top_k, dim=1).values[:, -1:]
    e = torch.exp(z.double() - z.double().max(dim=1, keepdim=True).values)
    scores = torch.full(z.shape, -1.0, dtype=torch.float64)
    for r in range(z.size(0)):
        race = -torch.log(stream_uniforms(seed, draw, r, V))
        scores[r] = torch.where(keep[r] & (e[r] > 0), e[r] / race, -1.0)
    return scores


def check_against_reference(tokens, logits, seed, draw, temperature, top_k, vocab_limit):
    scores = reference_scores(logits, seed, draw, temperature, top_k, vocab_limit)
    tokens = tokens.cpu()
    assert tokens.dtype == torch.int64 and tokens.shape == (logits.size(0),)
    picked = scores.gather(1, tokens[:, None])[:, 0]
    best = scores.max(dim=1).values
    # the same token as the reference, or (exp/log rounding on a near-tie) one as good
    assert (picked > 0).all(), f"drew a filtered token: {tokens.tolist()}"
    assert torch.all(picked >= best * (1 - 1e-5)), (tokens, scores.argmax(1))
    return scores


def _logits(R, V, dtype, gen, device="cpu"):
    return (3 * torch.randn(R, V, generator=gen)).to(dtype).to(device)


def _check_cases(dtype, gen, device):
    for R, V, top_k, limit in CASES:
        logits = _logits(R, V, dtype, gen, device)
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        state = ops.sampler_state(seed, device)
        state[1] = 7  # any draw count: it is part of the counter
        tokens = ops.sample_tokens(logits, state, temperature=0.8, top_k=top_k, vocab_limit=limit)
        assert tokens.device == logits.device
        check_against_reference(tokens, logits, seed, 7, 0.8, top_k, limit)
        assert state.tolist() == [seed, 8, 0]  # one draw further, the ticket back at 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_tokens_match_the_rebuilt_stream(dtype, gen):
    _check_cases(dtype, gen, "cpu")


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 3),
    vocab=st.integers(1, 300),
    top_k=st.one_of(st.none(), st.integers(1, 320)),
    cut=st.integers(0, 20),
    temperature=st.floats(0.05, 5.0),
    scale=st.sampled_from([0.0, 0.01, 1.0, 30.0]),  # flat, nearly flat, usual, peaked rows
    seed=st.integers(0, 2**63 - 1),
    draw=st.integers(0, 2**40),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_any_setting_draws_the_rebuilt_streams_token(
    rows, vocab, top_k, cut, temperature, scale, seed, draw, dtype
):
    gen = torch.Generator().manual_seed(seed % 2**32)
    logits = (scale * torch.randn(rows, vocab, generator=gen)).to(dtype)
    limit = max(1, vocab - cut) if cut else None
    state = ops.sampler_state(seed)
    state[1] = draw
    tokens = ops.sample_tokens(
        logits, state, temperature=temperature, top_k=top_k, vocab_limit=limit
    )
    check_against_reference(tokens, logits, seed, draw, temperature, top_k, limit)
    assert state.tolist() == [seed, draw + 1, 0]


def test_top_k_keeps_ties_at_the_kth_value():
    # values 0..4 five times each: top-3 is the value 4 (five tokens) and keeps all five
    logits = torch.arange(25, dtype=torch.float32).remainder(5)[None].repeat(400, 1)
    tokens = ops.sample_tokens(logits, ops.sampler_state(3), temperature=1.0, top_k=3)
    assert set(tokens.tolist()) == {4, 9, 14, 19, 24}


def test_frequencies_follow_the_filtered_softmax(gen):
    V, top_k, temperature, n = 10, 6, 0.7, 40000
    logits = torch.randn(1, V, generator=gen)
    tokens = ops.sample_tokens(
        logits.repeat(n, 1), ops.sampler_state(11), temperature=temperature, top_k=top_k
    )
    z = logits[0] / temperature
    p = torch.softmax(torch.where(z >= z.topk(top_k).values[-1], z, -math.inf), 0).double()
    freq = torch.bincount(tokens, minlength=V).double() / n
    sigma = (p * (1 - p) / n).sqrt()
    assert torch.all((freq - p).abs() <= 5 * sigma + 1e-9), (freq, p)
    assert freq[p == 0].sum() == 0


def test_each_call_is_a_new_draw_and_a_seed_repeats(gen):
    logits = torch.zeros(64, 1000)  # uniform: 64 ids out of 1000
    state = ops.sampler_state(42)
    first = ops.sample_tokens(logits, state)
    second = ops.sample_tokens(logits, state)
    assert not torch.equal(first, second) and state[1] == 2
    assert torch.equal(ops.sample_tokens(logits, ops.sampler_state(42)), first)
    assert not torch.equal(ops.sample_tokens(logits, ops.sampler_state(43)), first)


def test_cpu_rows_in_parallel_draw_what_one_thread_draws(gen):
    logits = _logits(64, 1000, torch.float32, gen)  # above the size that wakes OpenMP
    before = torch.get_num_threads()
    try:
        draws = []
        for n in (1, 2):
            torch.set_num_threads(n)
            draws.append(ops.sample_tokens(logits, ops.sampler_state(8), top_k=100))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(*draws)
    check_against_reference(draws[0][:4], logits[:4], 8, 0, 1.0, 100, None)


def test_all_filtered_rows_give_token_zero_like_the_reference():
    logits = torch.full((2, 6), -math.inf)
    assert ops.sample_tokens(logits, ops.sampler_state(0), top_k=2).tolist() == [0, 0]


def test_opcheck(gen):
    logits = _logits(3, 40, torch.float32, gen)
    torch.library.opcheck(
        torch.ops.gptstack.sample_tokens.default, (logits, ops.sampler_state(1), 0.9, 5, 37)
    )


def test_compile_fullgraph(gen):
    logits, state = _logits(2, 50, torch.float32, gen), ops.sampler_state(9)
    expected = ops.sample_tokens(logits, ops.sampler_state(9), temperature=0.5, top_k=10)

    def pick(logits):
        return ops.sample_tokens(logits, state, temperature=0.5, top_k=10)

    tokens = torch.compile(pick, fullgraph=True, backend="aot_eager")(logits)
    assert torch.equal(tokens, expected) and state[1] == 1


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda s: ops.sample_tokens(torch.ones(4), s), ValueError, "at least 2 dimension"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4, dtype=torch.int64), s), TypeError,
         "expected one of"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s.float()), TypeError, "sampler_state"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s[:2]), TypeError, "sampler_state"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s, temperature=0), ValueError, "argmax"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s, temperature=True), TypeError,
         "temperature must be a number"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s, top_k=0), ValueError, "top_k is 0"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s, top_k=2.0), TypeError, "top_k must"),
        (lambda s: ops.sample_tokens(torch.ones(2, 4), s, vocab_limit=5), ValueError,
         r"\[1, 4\]"),
        (lambda s: ops.sampler_state(-1), ValueError, "seed is -1"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_clear_errors(call, error, words):
    with pytest.raises(error, match=words):
        call(ops.sampler_state(0))


def test_extension_checks_its_arguments():
    logits, state = torch.ones(2, 4), ops.sampler_state(0)
    with pytest.raises(ValueError, match=r"tokens has shape"):
        _C.sample_tokens(torch.empty(3, dtype=torch.int64), logits, state, 1.0, 0, 4)
    with pytest.raises(ValueError, match="vocab_limit 5 is outside"):
        _C.sample_tokens(torch.empty(2, dtype=torch.int64), logits, state, 1.0, 0, 5)
    with pytest.raises(ValueError, match="temperature must be"):
        _C.sample_tokens(torch.empty(2, dtype=torch.int64), logits, state, 0.0, 0, 4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_tokens_match_the_rebuilt_stream(dtype, gen):
    _check_cases(dtype, gen, "cuda")


@pytest.mark.cuda
def test_cuda_and_cpu_draw_the_same_tokens(gen):
    logits = _logits(300, 512, torch.float32, gen)
    cpu = ops.sample_tokens(logits, ops.sampler_state(5), temperature=0.9, top_k=50)
    cuda = ops.sample_tokens(logits.cuda(), ops.sampler_state(5, "cuda"), temperature=0.9, top_k=50)
    # exp/log differ in the last bit between the two libraries: a near-tie may flip, no more
    assert (cuda.cpu() != cpu).sum() <= 1


@pytest.mark.cuda
def test_cuda_graph_replays_advance_the_draw(gen):
    logits = _logits(8, 65, torch.bfloat16, gen, "cuda")
    state = ops.sampler_state(123, "cuda")
    ops.sample_tokens(logits, state, temperature=0.8, top_k=40)  # warm up outside the graph
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        tokens = ops.sample_tokens(logits, state, temperature=0.8, top_k=40)
    state.copy_(ops.sampler_state(123, "cuda"))
    replayed = []
    for _ in range(3):
        graph.replay()
        replayed.append(tokens.clone())
    torch.cuda.synchronize()
    assert state.tolist() == [123, 3, 0]
    for draw, got in enumerate(replayed):
        check_against_reference(got, logits, 123, draw, 0.8, 40, None)
