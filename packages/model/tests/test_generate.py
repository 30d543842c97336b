"""Decoding: KV cache and static cache (+ CUDA graph on CUDA) against the naive reference."""

import pytest
import torch

from gptstack.model import (
    KVCacheDecoder,
    ModelError,
    StaticCacheDecoder,
    generate,
    stream,
)

MODES = ["naive", "kv", "static"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("prompt_len", [1, 5, 16, 23])  # block_size is 16: fits, full, over
def test_greedy_identical_across_modes_past_block_size(make_gpt, random_tokens, prompt_len):
    model = make_gpt(10, scramble=0.3)
    V, bs = model.config.vocab_size, model.config.block_size
    idx = random_tokens(prompt_len, 3, prompt_len, V)
    new = 2 * bs + 3  # runs well past block_size: the window slides many times
    outs = {m: generate(model, idx, new, mode=m, temperature=0) for m in MODES}
    assert outs["naive"].shape == (3, prompt_len + new)
    assert torch.equal(outs["naive"][:, :prompt_len], idx)
    assert torch.equal(outs["kv"], outs["naive"])
    assert torch.equal(outs["static"], outs["naive"])


@pytest.mark.parametrize("decoder_kind", ["kv", "static"])
def test_decoder_logits_match_the_full_window_forward(
    make_gpt, random_tokens, rel_err, decoder_kind
):
    """Greedy tokens of a random model settle into short cycles, so token equality alone is a weak
    check; here every step's logits are compared with a plain forward of the window, along a
    random token path that runs past block_size (decode while it fits, re-prefill after)."""
    model = make_gpt(10, scramble=0.3)
    V, bs = model.config.vocab_size, model.config.block_size
    decoder = KVCacheDecoder(model) if decoder_kind == "kv" else StaticCacheDecoder(model, 2)
    window = random_tokens(10, 2, 5, V)
    path = random_tokens(11, 2, 2 * bs, V)  # the tokens fed back, one column per step
    logits = decoder.prefill(window)
    length = window.size(1)
    for step in range(path.size(1)):
        with torch.no_grad():
            reference, _ = model(window, last_only=True)
        assert rel_err(logits, reference[:, -1]) < 1e-5, step  # docs/MEASURING.md rule 5 (fp32)
        token = path[:, step]
        length += 1
        window = torch.cat([window, token[:, None]], dim=1)[:, -bs:]
        logits = decoder.decode(token, length - 1) if length <= bs else decoder.prefill(window)


def test_sampled_tokens_identical_across_modes_in_float64(make_gpt, random_tokens):
    # Same seed, same generator consumption per step in every mode; float64 keeps the tiny logit
    # differences between the modes' kernels far from flipping a draw.
    model = make_gpt(11, scramble=0.3).double()
    idx = random_tokens(11, 2, 4, model.config.vocab_size)
    outs = [
        generate(model, idx, 40, mode=m, seed=5, top_k=20, top_p=0.9, temperature=0.8)
        for m in MODES
    ]
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])
    assert len(set(outs[0][:, 4:].flatten().tolist())) > 10  # a varied path, not a fixed point


@pytest.mark.parametrize("mode", MODES)
def test_seed_controls_the_sample(make_gpt, random_tokens, mode):
    model = make_gpt(12, scramble=0.3)
    idx = random_tokens(12, 2, 3, model.config.vocab_size)
    a = generate(model, idx, 20, mode=mode, seed=1)
    b = generate(model, idx, 20, mode=mode, seed=1)
    c = generate(model, idx, 20, mode=mode, seed=2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("mode", MODES)
def test_stream_yields_the_generated_tokens_one_by_one(make_gpt, random_tokens, mode):
    model = make_gpt(13, scramble=0.3)
    idx = random_tokens(13, 2, 6, model.config.vocab_size)
    tokens = list(stream(model, idx, 12, mode=mode, seed=3, top_k=5))
    assert len(tokens) == 12 and all(t.shape == (2,) and t.dtype == torch.long for t in tokens)
    full = generate(model, idx, 12, mode=mode, seed=3, top_k=5)
    assert torch.equal(torch.stack(tokens, dim=1), full[:, 6:])


def test_reused_static_decoder_gives_the_same_output(make_gpt, random_tokens):
    model = make_gpt(14, scramble=0.3)
    V = model.config.vocab_size
    decoder = StaticCacheDecoder(model, batch_size=2)
    for seed in (0, 1):
        idx = random_tokens(seed, 2, 5, V)
        expected = generate(model, idx, 30, temperature=0)
        assert torch.equal(
            generate(model, idx, 30, mode="static", temperature=0, decoder=decoder), expected
        )
    kv = KVCacheDecoder(model)
    assert torch.equal(generate(model, idx, 30, mode="kv", temperature=0, decoder=kv), expected)


def test_generation_restores_training_mode_and_needs_no_grad(make_gpt, random_tokens):
    model = make_gpt(15, dropout=0.5).train()
    idx = random_tokens(15, 1, 4, model.config.vocab_size)
    a = generate(model, idx, 10, temperature=0)
    b = generate(model, idx, 10, temperature=0)
    assert torch.equal(a, b)  # dropout was off while generating
    assert model.training
    assert torch.is_grad_enabled()


def test_zero_new_tokens_returns_the_prompt(make_gpt, random_tokens):
    model = make_gpt(0)
    idx = random_tokens(0, 2, 4, model.config.vocab_size)
    for mode in MODES:
        assert torch.equal(generate(model, idx, 0, mode=mode), idx)


def test_generation_argument_errors(make_gpt, random_tokens):
    model = make_gpt(0)
    idx = random_tokens(0, 2, 4, model.config.vocab_size)
    with pytest.raises(ModelError, match="mode 'beam' is unknown"):
        stream(model, idx, 3, mode="beam")  # raised at the call, before iteration
    with pytest.raises(ModelError, match="cuda_graph=True needs mode='static'"):
        generate(model, idx, 3, mode="kv", cuda_graph=True)
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="needs the model on a CUDA device"):
            generate(model, idx, 3, mode="static", cuda_graph=True)
    with pytest.raises(ModelError, match="torch.long"):
        generate(model, idx.int(), 3)
    with pytest.raises(ModelError, match=r"\(B, T\)"):
        generate(model, idx[:, :0], 3)
    with pytest.raises(ModelError, match="max_new_tokens"):
        generate(model, idx, -1)
    with pytest.raises(ModelError, match="pass mode='kv'"):
        generate(model, idx, 3, mode="static", decoder=KVCacheDecoder(model))
    with pytest.raises(ModelError, match="another model"):
        generate(model, idx, 3, mode="kv", decoder=KVCacheDecoder(make_gpt(1)))
    with pytest.raises(ModelError, match="built with cuda_graph=False"):
        static = StaticCacheDecoder(model, 2)
        generate(model, idx, 3, mode="static", cuda_graph=True, decoder=static)
    with pytest.raises(ModelError, match="batch size 3"):
        generate(model, idx, 3, mode="static", decoder=StaticCacheDecoder(model, 3))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("prompt_len", [3, 40])
def test_cuda_graph_decoding_matches_naive(make_gpt, random_tokens, prompt_len):
    model = make_gpt(16, scramble=0.3, block_size=32).cuda()
    idx = random_tokens(16, 4, prompt_len, model.config.vocab_size).cuda()
    expected = generate(model, idx, 70, temperature=0)
    decoder = StaticCacheDecoder(model, batch_size=4, cuda_graph=True)
    got = generate(model, idx, 70, mode="static", temperature=0, decoder=decoder)
    assert torch.equal(got, expected)
    assert decoder._graph is not None or prompt_len >= 32  # past block_size nothing is decoded
    sampled = [generate(model, idx, 30, mode=m, seed=9, cuda_graph=m == "static") for m in MODES]
    assert all(s.shape == (4, prompt_len + 30) for s in sampled)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.slow
def test_compiled_cuda_graph_decoding_matches_naive(make_gpt, random_tokens):
    model = make_gpt(17, scramble=0.3, block_size=32).cuda()
    idx = random_tokens(17, 2, 5, model.config.vocab_size).cuda()
    expected = generate(model, idx, 40, temperature=0)
    decoder = StaticCacheDecoder(model, batch_size=2, cuda_graph=True, compile=True)
    assert torch.equal(
        generate(model, idx, 40, mode="static", temperature=0, decoder=decoder), expected
    )
